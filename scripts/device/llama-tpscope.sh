#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/llama-tpscope.sh - integrations/llama.cpp on one GPU: the llama-server patched for
# GGML_CUDA_ALLREDUCE=tpscope and built against an installed tpscope serves as the unpatched one does.
#
#   TPSCOPE_PREFIX=/path/to/install MODEL=model.gguf scripts/device/llama-tpscope.sh
#
# TPSCOPE_PREFIX: tpscope installed for this box (cmake --install build --prefix P, sm_90). The pinned
# source travels as LLAMA_SRC_TAR (as for scripts/device/llama.sh). Everything is built in a private
# cache ($WORK), so the patch is applied there in place. Steps, each with a time limit:
#   1. the unpatched CUDA llama-server (scripts/llama/build-llama-server --flavour cuda);
#   2. serve MODEL with -sm none: /completion of fixed prompt ids, seed 42, temperature 0, 64 tokens;
#   3. apply integrations/llama.cpp/ggml-cuda-tpscope.patch to that source and rebuild the same build
#      folder with -DGGML_CUDA_TPSCOPE=ON against TPSCOPE_PREFIX (ggml-cuda.cu and the new file compile);
#   4. the patched server, without GGML_CUDA_ALLREDUCE and with GGML_CUDA_ALLREDUCE=tpscope: the same
#      token ids as step 2, and the log line saying what tpscope does with one GPU;
#   5. two virtual devices on the one GPU (GGML_CUDA_DEVICES=2, -sm tensor): llama.cpp's internal
#      AllReduce against tpscope's. At 0c1e570 llama.cpp aborts there with its own AllReduce as well
#      (docs/data/h200-2026-12-01-regression/llama/), and the patch creates its communicator without
#      tpsConfig_t.shared_devices (tpscope then falls back, as it says in the log), so this step only
#      shows whether a later source serves on virtual devices at all.
# Writes summary.txt, tokens.json and the servers' logs into $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-llama-tpscope-out}
WORK=${WORK:-/tmp/llama-tpscope}
LLAMA_SRC_TAR=${LLAMA_SRC_TAR:-.llama-src/src.tar.gz}
MODEL=${MODEL:?MODEL=FILE.gguf}
PREFIX=${TPSCOPE_PREFIX:?TPSCOPE_PREFIX=an install of tpscope}
PREFIX=$(cd "$PREFIX" && pwd -P)
JOBS=${JOBS:-$(nproc)}
export TPSCOPE_CACHE_DIR=$WORK/cache MODEL WORK
export ROOT=$TPSCOPE_CACHE_DIR/llama.cpp-0c1e570
mkdir -p "$OUT" "$ROOT"
S=$OUT/summary.txt
say() { echo "$*" | tee -a "$S"; }
step() {  # step NAME LIMIT_S CMD...: output to $WORK/NAME.log, its tail to the summary on failure
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  # through bash -c, so that a step may be one of the functions below (exported with export -f)
  timeout "$limit" bash -c '"$@"' "$name" "$@" >"$WORK/$name.log" 2>&1
  rc=$?
  say "$name: exit $rc after $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || tail -n 20 "$WORK/$name.log" | tee -a "$S"
  return $rc
}

nvidia-smi -L >>"$S" 2>&1
[ -f "$ROOT/src/.tpscope-extracted" ] || tar xzf "$LLAMA_SRC_TAR" -C "$ROOT" || { say "no source in $LLAMA_SRC_TAR"; exit 1; }
step build-unpatched 420 scripts/llama/build-llama-server --flavour cuda --cuda-arch 90 --jobs "$JOBS" || exit 1
BUILD=$ROOT/cuda-sm90/build
cp "$BUILD/bin/llama-server" "$WORK/llama-server-unpatched"

# serve NAME SERVER [ENV=VALUE...] [-- EXTRA SERVER ARGS]: one /completion, token ids into $WORK/NAME.json.
serve() {
  local name=$1 server=$2
  shift 2
  python3 - "$name" "$server" "$MODEL" "$WORK" "$@" <<'PY'
import json, os, subprocess, sys, time, urllib.request
name, server, model, work = sys.argv[1:5]
rest = sys.argv[5:]
env = dict(os.environ)
env.pop("GGML_CUDA_ALLREDUCE", None)
extra = []
if "--" in rest:
    i = rest.index("--"); extra = rest[i + 1:]; rest = rest[:i]
for kv in rest:
    k, v = kv.split("=", 1); env[k] = v
port = 18080 + sum(name.encode()) % 1000
args = [server, "-m", model, "-ngl", "99", "-c", "2048", "-np", "1", "--host", "127.0.0.1", "--port", str(port)]
args += extra or ["-sm", "none"]
log = open(f"{work}/{name}.server.log", "w")
p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
result = {"name": name, "args": args[1:], "env": {kv.split("=", 1)[0]: kv.split("=", 1)[1] for kv in rest}}
try:
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        if p.poll() is not None:
            raise RuntimeError(f"server exited with {p.returncode}")
        try:
            if urllib.request.urlopen(url + "/health", timeout=1).status == 200:
                break
        except Exception:
            time.sleep(0.25)
    else:
        raise RuntimeError("no /health within 60 s")
    body = {"prompt": [1] + list(range(100, 164)), "n_predict": 64, "temperature": 0, "seed": 42,
            "return_tokens": True, "cache_prompt": False}
    req = urllib.request.Request(url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=120))
    result["tokens"] = r.get("tokens")
    result["timings"] = r.get("timings")
except Exception as e:
    result["error"] = repr(e)
finally:
    p.terminate()
    try:
        p.wait(10)
    except Exception:
        p.kill()
json.dump(result, open(f"{work}/{name}.json", "w"))
print(name, "tokens:", (result.get("tokens") or [])[:8], "...", result.get("error", ""))
sys.exit(0 if result.get("tokens") else 1)
PY
}

# The unpatched server runs while the patched one builds (the rebuild is one large file, mostly serial).
export -f serve
step serve-unpatched 90 serve unpatched "$WORK/llama-server-unpatched" &
serving=$!

# The patch in place (this cache is private to the script) and the same build folder reconfigured.
# git apply where git is installed, else patch(1), else PATCHED_TREE: the files the patch writes, applied
# elsewhere (a machine without either tool).
apply_patch() {
  local p=$PWD/integrations/llama.cpp/ggml-cuda-tpscope.patch
  if command -v git >/dev/null; then git -C "$ROOT/src" apply --whitespace=nowarn "$p"
  elif command -v patch >/dev/null; then patch -d "$ROOT/src" -p1 <"$p"
  elif [ -n "${PATCHED_TREE:-}" ]; then cp -r "$PATCHED_TREE/." "$ROOT/src/"
  else echo "no git, no patch and no PATCHED_TREE" >&2; return 1
  fi
}
export -f apply_patch
export PATCHED_TREE
step apply-patch 30 apply_patch || exit 1
say "patch applied with $(command -v git >/dev/null && echo git || (command -v patch >/dev/null && echo patch) || echo PATCHED_TREE)"
step configure-patched 120 cmake -S "$ROOT/src" -B "$BUILD" -DGGML_CUDA_TPSCOPE=ON -Dtpscope_DIR="$PREFIX/lib/cmake/tpscope"
grep -h "ggml-cuda: tpscope" "$WORK/configure-patched.log" | tee -a "$S"
step build-patched 300 cmake --build "$BUILD" --parallel "$JOBS" --target llama-server || exit 1
grep -cE "Building (CUDA|CXX) object" "$WORK/build-patched.log" | sed 's/^/objects rebuilt: /' | tee -a "$S"
cp "$BUILD/bin/llama-server" "$WORK/llama-server-patched"
wait "$serving"
ldd "$WORK/llama-server-patched" | grep -E "tpscope|nccl" | tee -a "$S"

step serve-patched-default 90 serve patched-default "$WORK/llama-server-patched"
step serve-patched-tpscope 90 serve patched-tpscope "$WORK/llama-server-patched" GGML_CUDA_ALLREDUCE=tpscope
grep -h "tpscope" "$WORK/patched-tpscope.server.log" | tee -a "$S"
# Only while the call has time left (SECONDS_BUDGET: the caller's limit, default 600 s).
if [ $SECONDS -lt $(( ${SECONDS_BUDGET:-600} - 90 )) ]; then
step serve-virtual-internal 90 serve virtual-internal "$WORK/llama-server-patched" GGML_CUDA_DEVICES=2 \
  GGML_CUDA_ALLREDUCE=internal -- -sm tensor
step serve-virtual-tpscope-host 90 serve virtual-tpscope-host "$WORK/llama-server-patched" GGML_CUDA_DEVICES=2 \
  GGML_CUDA_ALLREDUCE=tpscope TPSCOPE_ALLREDUCE=host -- -sm tensor
grep -hE "tpscope|AllReduce|falling back|Meta" "$WORK/virtual-tpscope-host.server.log" | head -n 12 | tee -a "$S"
else
  say "two virtual devices: skipped, $SECONDS s of ${SECONDS_BUDGET:-600} s used"
fi

python3 - "$WORK" "$OUT" <<'PY' | tee -a "$S"
import json, os, sys
work, out = sys.argv[1:3]
runs = {}
for n in ("unpatched", "patched-default", "patched-tpscope", "virtual-internal", "virtual-tpscope-host"):
    try:
        runs[n] = json.load(open(f"{work}/{n}.json"))
    except Exception as e:
        runs[n] = {"error": repr(e)}
ref = runs["unpatched"].get("tokens")
for n, r in runs.items():
    t = r.get("tokens")
    same = "n/a" if not (t and ref) else ("identical" if t == ref else f"differs at {next(i for i, (a, b) in enumerate(zip(t + [None] * 64, ref + [None] * 64)) if a != b)}")
    tim = r.get("timings") or {}
    print(f"{n:22s} tokens {len(t) if t else 0:3d} vs unpatched -sm none: {same:14s} decode {tim.get('predicted_per_second', 0):8.1f} tok/s {r.get('error', '')}")
json.dump(runs, open(os.path.join(out, "tokens.json"), "w"), indent=1)
PY
for f in unpatched patched-default patched-tpscope virtual-tpscope-host; do cp "$WORK/$f.server.log" "$OUT/" 2>/dev/null; done
cp "$WORK/build-patched.log" "$OUT/" 2>/dev/null

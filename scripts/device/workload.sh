#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/workload.sh - issue 6's checks of `tpscope tp` on a 2-GPU machine, in one go.
#
# Run from the repository root with build/ built for the box (-DCMAKE_CUDA_ARCHITECTURES=90); writes
# JSON and logs into $OUT (default ./workload-out) and prints a summary last. About 4-5 minutes on
# 2xH200; every step has a time limit, so a hung GPU costs one step, not the run.
#   1. the workload GPU tests: host reference, graph == eager, split equivalence (tiny, 8b x 2 layers);
#   2. 8b decode: none vs tensor with p2p, nccl and host (ctx 4096, 128 tokens, k = 1), plus tensor
#      p2p with k = 4 at acceptance 0.7 (the multi-token step);
#   3. 32b decode: none vs tensor (p2p, nccl, host);
#   4. 32b prefill T = 4096, U = 512: none vs layer (pipelined);
#   5. summary: tokens/s, speedups against the issue's targets, share of the memory roofline
#      (weight bytes per GPU / measured device copy rate), AllReduce count per step and, for tensor,
#      the AllReduces' share of a step (the same steps timed again with the AllReduces skipped).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${TPSCOPE_BUILD_DIR:-build}
OUT=${OUT:-workload-out}
BIN="$BUILD/bin/tpscope"
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "workload.sh: $BIN not found: build $BUILD first" >&2; exit 2; }
failed=()

# step NAME LIMIT_S -- ARGS...: tpscope tp with a time limit, JSON to NAME.json, stderr to NAME.log.
step() {
  local name=$1 limit=$2
  shift 3
  echo "== $name: tpscope tp $*" | tee "$OUT/$name.log"
  local t0=$SECONDS
  timeout "$limit" "$BIN" tp "$@" --format json >"$OUT/$name.json" 2>>"$OUT/$name.log"
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"
  [ $rc -eq 0 ] || failed+=("$name(exit $rc)")
}

nvidia-smi -L >"$OUT/gpus.txt" 2>&1
"$BIN" topo >"$OUT/topo.txt" 2>&1

for t in tpscope_gpu_tests tpscope_multigpu_tests; do
  echo "== gtest $t Workload*"
  timeout 150 "$BUILD/bin/$t" --gtest_filter='Workload*' >"$OUT/$t.txt" 2>&1
  rc=$?
  tail -n 3 "$OUT/$t.txt"
  [ $rc -eq 0 ] || failed+=("$t(exit $rc)")
done
grep -h 'relative RMS' "$OUT"/tpscope_*tests.txt >"$OUT/equivalence.txt" 2>/dev/null

DEC8=(--preset 8b --phase decode --ctx 4096 --tokens 128)
step 8b-decode-none 60 -- "${DEC8[@]}" --split none --devices 0
for b in p2p nccl host; do
  step "8b-decode-tensor-$b" 60 -- "${DEC8[@]}" --split tensor --devices 0,1 --backend "$b"
done
step 8b-decode-tensor-p2p-k4 60 -- "${DEC8[@]}" --split tensor --devices 0,1 --backend p2p --tokens-per-step 4 --accept 0.7

DEC32=(--preset 32b --phase decode --ctx 4096 --tokens 64)
step 32b-decode-none 90 -- "${DEC32[@]}" --split none --devices 0
for b in p2p nccl host; do
  step "32b-decode-tensor-$b" 90 -- "${DEC32[@]}" --split tensor --devices 0,1 --backend "$b"
done

PRE32=(--preset 32b --phase prefill --prompt 4096 --ubatch 512)
step 32b-prefill-none 120 -- "${PRE32[@]}" --split none --devices 0
step 32b-prefill-layer 120 -- "${PRE32[@]}" --split layer --devices 0,1

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            return json.load(f)["results"][0]
    except Exception as e:  # a failed step: its log says why
        return None
def line(name, r, base=None, target=None):
    if r is None:
        print(f"{name:<28} FAILED (see {name}.log)"); return
    s = f"{name:<28} {r['tokens_per_s']:>10.1f} tok/s {r['ms_per_step']:>9.3f} ms/step graph={str(r['graph']).lower():<5}"
    s += f" allreduces/step={r['allreduce_calls'] / max(r['steps'], 1):.0f}"
    if r.get("allreduce_share") is not None: s += f" allreduce_share={100 * r['allreduce_share']:.1f}%"
    if r.get("share_of_roofline"): s += f" roofline={100 * r['share_of_roofline']:.1f}%"
    if base:
        x = r["tokens_per_s"] / base["tokens_per_s"]
        s += f" speedup={x:.3f}x" + (f" (target {target}x: {'OK' if x >= target else 'MISSED'})" if target else "")
    print(s)
print("# tpscope tp on", open(os.path.join(out, "gpus.txt")).read().strip().replace("\n", "; "))
for model in ("8b", "32b"):
    none = load(f"{model}-decode-none")
    line(f"{model}-decode-none", none)
    if none and none.get("share_of_roofline") and model == "8b":
        print(f"{'':<28} single-GPU roofline target 70%: {'OK' if none['share_of_roofline'] >= 0.7 else 'MISSED'}")
    for b in ("p2p", "nccl", "host"):
        line(f"{model}-decode-tensor-{b}", load(f"{model}-decode-tensor-{b}"), none, 1.7 if b != "host" else None)
    if model == "8b":
        line("8b-decode-tensor-p2p-k4", load("8b-decode-tensor-p2p-k4"), none)
pn = load("32b-prefill-none")
line("32b-prefill-none", pn)
line("32b-prefill-layer", load("32b-prefill-layer"), pn, 1.6)
PY

echo "== equivalence (GPU tests):"
cat "$OUT/equivalence.txt" 2>/dev/null
if [ ${#failed[@]} -gt 0 ]; then
  echo "workload.sh: failed steps: ${failed[*]}"
  exit 1
fi
echo "workload.sh: all steps passed"

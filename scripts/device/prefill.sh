#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/prefill.sh - tpscope tp prefill beside llama.cpp's llama-bench on one GPU, in one go.
#
# Run from the repository root with build/ built for the box (-DCMAKE_CUDA_ARCHITECTURES=90) and the
# pinned llama.cpp source carried as LLAMA_SRC_TAR (see scripts/device/llama.sh). Writes into $OUT
# (default ./prefill-out) and prints a summary last:
#   1. the gpu test label (the prefill attention equivalence test among them);
#   2. llama-bench -p 4096 -n 0 -d 0,4096 -fa 1 on F16 GGUFs of the 8b preset and of the 32b preset cut to
#      LAYERS32 layers (a 64-layer 32b F16 file does not fit a 64 GB disk);
#   3. tpscope tp prefill of 4096 and 8192 tokens (cuDNN attention, twice; the kernel once), same shapes:
#      the rate at depth 4096 is the second 4096 tokens' (t(8192) - t(4096)).
# cuDNN: TPSCOPE_CUDNN_LIBRARY, else the libcudnn.so.9 of python3's nvidia.cudnn package (PyTorch's).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${TPSCOPE_BUILD_DIR:-build}
OUT=${OUT:-prefill-out}
LAYERS32=${LAYERS32:-24}
export TPSCOPE_CACHE_DIR=${TPSCOPE_CACHE_DIR:-/root/.cache/tpscope}
LLAMA_SRC_TAR=${LLAMA_SRC_TAR:-.llama-src/src.tar.gz}
B="$BUILD/bin/tpscope"
mkdir -p "$OUT" models
: "${TPSCOPE_CUDNN_LIBRARY:=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib', 'libcudnn.so.9'))" 2>/dev/null)}"
export TPSCOPE_CUDNN_LIBRARY
echo "cudnn: $TPSCOPE_CUDNN_LIBRARY" | tee "$OUT/summary.txt"
t() {  # t NAME LIMIT CMD...: stdout to NAME.txt, stderr to NAME.log, a line in summary.txt
  local n=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$n.txt" 2>"$OUT/$n.log"
  echo "$n rc=$? $((SECONDS - t0)) s $(grep -o '"tokens_per_s": *[0-9.]*' "$OUT/$n.txt" | head -1)" | tee -a "$OUT/summary.txt"
}
t ctest 200 ctest --test-dir "$BUILD" -L gpu --timeout 180
grep -h "tests passed\|tests failed\|(Failed)" "$OUT/ctest.txt" | tee -a "$OUT/summary.txt"
ROOT=$TPSCOPE_CACHE_DIR/llama.cpp-0c1e570
[ -f "$ROOT/src/.tpscope-extracted" ] || { mkdir -p "$ROOT" && tar xzf "$LLAMA_SRC_TAR" -C "$ROOT"; }
t llama-build 420 scripts/llama/build-llama-server --flavour cuda --cuda-arch 90
BENCH=$(dirname "$(scripts/llama/build-llama-server --flavour cuda --cuda-arch 90 --print-path 2>/dev/null)")/llama-bench
[ -f models/8b-f16.gguf ] || t make-8b 120 scripts/llama/make-gguf --preset 8b --type f16 -o models/8b-f16.gguf
[ -f models/32b-${LAYERS32}l-f16.gguf ] ||
  t make-32b 180 scripts/llama/make-gguf --preset 32b --layers "$LAYERS32" --type f16 -o models/32b-${LAYERS32}l-f16.gguf
t bench-8b 240 "$BENCH" -m models/8b-f16.gguf -p 4096 -n 0 -d 0,4096 -fa 1 -ngl 99 -r 3 -o md
t bench-32b 240 "$BENCH" -m models/32b-${LAYERS32}l-f16.gguf -p 4096 -n 0 -d 0,4096 -fa 1 -ngl 99 -r 3 -o md
for rep in 1 2; do
  for p in 4096 8192; do
    t tp-8b-$p-$rep 120 "$B" tp --preset 8b --phase prefill --prompt $p --prefill-attention cudnn --format json
    t tp-32b-$p-$rep 120 "$B" tp --preset 32b --dims layers=$LAYERS32 --phase prefill --prompt $p --prefill-attention cudnn --format json
  done
done
t tp-8b-4096-kernel 120 "$B" tp --preset 8b --phase prefill --prompt 4096 --prefill-attention kernel --format json
t tp-8b-profile 120 "$B" tp --preset 8b --phase prefill --prompt 4096 --profile
cat "$OUT/bench-8b.txt" "$OUT/bench-32b.txt" | tee -a "$OUT/summary.txt"
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys, glob
out = sys.argv[1]
def rate(name):
    t = open(f"{out}/{name}.txt").read()
    return json.loads(t[t.index("{"):t.rindex("}") + 1])["results"][0]["tokens_per_s"]
for m in ("8b", "32b"):
    for rep in (1, 2):
        a, b = rate(f"tp-{m}-4096-{rep}"), rate(f"tp-{m}-8192-{rep}")
        depth = 4096 / (8192 / b - 4096 / a)
        print(f"tpscope tp {m}: pp4096 {a:.0f} tok/s, pp4096 @ d4096 {depth:.0f} tok/s (rep {rep})")
PY

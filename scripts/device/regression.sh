#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/regression.sh - one H200, one call: is main still what it was?
#
# Run from the repository root with build/ built for the box (sm_90; bin/, lib/ and the CTest files).
# Steps, each time-limited (a hang costs one step), logs into $OUT (default ./regression-out):
#   1. the gpu-labelled CTest suite (one GPU: the AllReduce matrix with ranks and processes sharing it,
#      the workload, the meter);
#   2. `tpscope tp --preset 8b --phase decode`, twice (against the figures in docs/PERFORMANCE.md);
#   3. `tpscope bench allreduce --procs 2` with shared ranks, when the option exists;
#   4. the PyTorch example with 2 processes on the one GPU, when torch imports;
#   5. with TPSCOPE_PREFIX and MODEL set: scripts/device/llama-tpscope.sh (the patched llama-server).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${TPSCOPE_BUILD_DIR:-build}
OUT=${OUT:-regression-out}
mkdir -p "$OUT"
source scripts/device/lib.sh
nvidia-smi -L >"$OUT/gpus.txt" 2>&1
run ctest-gpu 300 ctest --test-dir "$BUILD" -L '^gpu$' --output-on-failure
for i in 1 2; do run "tp-8b-decode-$i" 120 "$BUILD/bin/tpscope" tp --preset 8b --phase decode; done
if "$BUILD/bin/tpscope" bench allreduce --help 2>&1 | grep -q -- --procs; then
  run bench-procs 120 "$BUILD/bin/tpscope" bench allreduce --procs 2 --backend p2p,host -b 8K -e 16M -f 4 -n 20 -w 5
fi
if python3 -c 'import torch' 2>/dev/null && [ -f python/examples/torch_allreduce.py ]; then
  run torch-example 120 env TPSCOPE_LIBRARY="$BUILD/lib/libtpscope.so" PYTHONPATH=python \
    python3 python/examples/torch_allreduce.py --nranks 2
fi
if [ -n "${TPSCOPE_PREFIX:-}" ] && [ -n "${MODEL:-}" ]; then
  run llama-tpscope 420 env OUT="$OUT/llama" bash scripts/device/llama-tpscope.sh
fi
echo "== summary"
grep -E "tests passed|tests failed|\(Failed\)|Not Run" "$OUT/ctest-gpu.log" | head -20
grep -hE "ms per step|tok/s|step_ms" "$OUT"/tp-8b-decode-*.log | head -6
[ -f "$OUT/llama/summary.txt" ] && cat "$OUT/llama/summary.txt"
[ ${#failed[@]} -eq 0 ] && echo "regression.sh: all steps passed" || { echo "regression.sh: FAILED: ${failed[*]}"; exit 1; }

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/allreduce.sh - the AllReduce measurements of issue 4 on a GPU machine, in one go.
#
# Run from the repository root with build-gpu/ built for the box (-DCMAKE_CUDA_ARCHITECTURES=90);
# writes JSON and logs into $OUT (default ./allreduce-out) and prints a short summary last:
#   1. tpscope topo, for the record;
#   2. the sweep host,nccl -b 8K -e 256M -f 2 -d bf16 -c 1, eager and --graph (NCCL's default path);
#   3. the same with NCCL_P2P_DISABLE=1: NCCL forced onto host memory, the baseline host must beat;
#   4. correctness of every available backend over every dtype and odd counts (-b 6 -f 3: counts 3, 9,
#      27, ...), eager and graph, on 2 GPUs and, where the box has them, on 4;
#   5. the GPU tests of `tpscope bench allreduce`.
# Every step has a time limit, so a hung GPU costs one step, not the run; about 2-3 minutes on 2xH200.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${TPSCOPE_BUILD_DIR:-build-gpu}
OUT=${OUT:-allreduce-out}
BIN="$BUILD/bin/tpscope"
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "allreduce.sh: $BIN not found: build $BUILD first" >&2; exit 2; }
failed=()

# step NAME LIMIT_S [ENV=V ...] -- ARGS...: runs tpscope with a time limit, table to NAME.txt, stderr to NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "== $name: ${envs[*]} tpscope $*" | tee "$OUT/$name.log"
  local t0=$SECONDS
  env "${envs[@]}" timeout "$limit" "$BIN" "$@" >"$OUT/$name.txt" 2>>"$OUT/$name.log"
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"
  [ $rc -eq 0 ] || failed+=("$name(exit $rc)")
}

nvidia-smi -L >"$OUT/gpus.txt" 2>&1
ngpu=$(grep -c '^GPU ' "$OUT/gpus.txt" || true)
step topo 60 -- topo

SWEEP=(bench allreduce --backend host,nccl -b 8K -e 256M -f 2 -d bf16 -c 1)
step eager 120 -- "${SWEEP[@]}" -J "$OUT/eager.json"
step graph 150 -- "${SWEEP[@]}" --graph -J "$OUT/graph.json"
step p2p-off-eager 120 NCCL_P2P_DISABLE=1 -- "${SWEEP[@]}" -J "$OUT/p2p-off-eager.json"
step p2p-off-graph 150 NCCL_P2P_DISABLE=1 -- "${SWEEP[@]}" --graph -J "$OUT/p2p-off-graph.json"

# --backend all: every backend this build and box can run (p2p too, once it is there).
CHECK=(bench allreduce --backend all -d all -b 6 -e 64M -f 3 -n 2 -w 1 -c 1)
step check-2gpu-eager 90 -- "${CHECK[@]}" --devices 0,1 -J "$OUT/check-2gpu-eager.json"
step check-2gpu-graph 90 -- "${CHECK[@]}" --devices 0,1 --graph --graph-replays 1 -J "$OUT/check-2gpu-graph.json"
if [ "${ngpu:-0}" -ge 4 ]; then
  step check-4gpu-eager 90 -- "${CHECK[@]}" --devices 0,1,2,3 -J "$OUT/check-4gpu-eager.json"
  step check-4gpu-graph 90 -- "${CHECK[@]}" --devices 0,1,2,3 --graph --graph-replays 1 -J "$OUT/check-4gpu-graph.json"
else
  echo "== 4-GPU correctness skipped: $ngpu GPU(s) here" | tee "$OUT/check-4gpu.log"
fi

if [ -x "$BUILD/bin/tpscope_multigpu_tests" ]; then
  echo "== gtest BenchAllReduceMultiGpu.*"
  timeout 120 "$BUILD/bin/tpscope_multigpu_tests" --gtest_filter='BenchAllReduceMultiGpu.*' >"$OUT/gtest.log" 2>&1 ||
    failed+=("gtest")
  tail -n 3 "$OUT/gtest.log"
fi

echo
if command -v python3 >/dev/null; then
  python3 scripts/device/allreduce_summary.py "$OUT" || failed+=("correctness")
else  # no Python on the box: the verdict lines of every table
  grep -H -e "Out of bounds" -e "Avg bus bandwidth" "$OUT"/*.txt
fi
echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "allreduce.sh: all steps passed; JSON, tables and logs in $OUT"
else
  echo "allreduce.sh: FAILED: ${failed[*]} (logs in $OUT)"
  exit 1
fi

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/meter.sh - the interconnect meter's measurements of issue 3 on a GPU machine, in one go.
#
# Run from the repository root with build-gpu/ built for the box (-DCMAKE_CUDA_ARCHITECTURES=90);
# writes tables, JSON and logs into $OUT (default ./meter-out) and prints a summary last:
#   1. tpscope topo, for the record;
#   2. the meter GPU tests (1 GiB D2H/H2D on PCIe, GPU0->GPU1 on NVLink);
#   3. benchmarks/meter_accuracy: bytes / payload over 5 repetitions with the dmon figure beside,
#      cadence and read cost per counter group (PCIe, NVLink: a thread each; whether NVLink reads
#      stall PCIe), overhead on a launch-bound kernel loop;
#   4. `tpscope meter` live (-d 100 -c 30 -o T --method both) while a D2H test moves data;
#   5. `tpscope meter` wrapped around that test, with window marks, quiescing and --out JSONL;
#   6. SIGINT to a wrapped `sleep`: exit code 130 and the summary still written.
# Every step has a time limit and a failed step does not stop the others; about 1-2 minutes on 2xH200.
set -uo pipefail
set -x
cd "$(dirname "$0")/../.."
BUILD=${TPSCOPE_BUILD_DIR:-build-gpu}
OUT=${OUT:-meter-out}
BIN="$BUILD/bin"
mkdir -p "$OUT"
[ -x "$BIN/tpscope" ] || { echo "meter.sh: $BIN/tpscope not found: build $BUILD first" >&2; exit 2; }
failed=()
note() { [ "$1" -eq 0 ] || failed+=("$2(exit $1)"); }

nvidia-smi -L >"$OUT/gpus.txt" 2>&1
nvidia-smi topo -m >>"$OUT/gpus.txt" 2>&1
timeout 60 "$BIN/tpscope" topo >"$OUT/topo.txt" 2>&1; note $? topo

# 2. GPU tests.
timeout 120 "$BIN/tpscope_gpu_tests" --gtest_filter='MeterGpu.*' >"$OUT/gtest_gpu.log" 2>&1; note $? gtest-gpu
timeout 120 "$BIN/tpscope_multigpu_tests" --gtest_filter='MeterMultiGpu.*' >"$OUT/gtest_multigpu.log" 2>&1
note $? gtest-multigpu

# 3. The accuracy benchmark (dmon method back to back, its best chance to see the copies).
timeout 180 "$BIN/meter_accuracy" --reps 5 --json "$OUT/meter_accuracy.json" >"$OUT/meter_accuracy.txt" \
  2>"$OUT/meter_accuracy.log"
note $? meter_accuracy

# 4. Live mode while a 1 GiB D2H test runs three times (3 s of rows at 100 ms).
LOAD=("$BIN/tpscope_gpu_tests" --gtest_filter='MeterGpu.OneGiBDeviceToHostIsPcieTx' --gtest_repeat=3)
timeout 30 "$BIN/tpscope" meter -d 100 -c 30 -o T --method both >"$OUT/live.txt" 2>"$OUT/live.log" &
live=$!
sleep 0.5
timeout 60 "${LOAD[@]}" >"$OUT/live_load.log" 2>&1
wait $live; note $? live
timeout 10 "$BIN/tpscope" meter -c 3 -d 200 --format csv >"$OUT/live.csv" 2>>"$OUT/live.log"; note $? live-csv

# 5. Wrapped mode: 2 s quiescing, windows marked by the script, every sample to JSONL.
cat >"$OUT/wrapped_cmd.sh" <<EOF
#!/usr/bin/env bash
echo "begin d2h-test" > "\$TPSCOPE_METER_PIPE"
${LOAD[*]} > "$OUT/wrapped_load.log" 2>&1
echo "end d2h-test" > "\$TPSCOPE_METER_PIPE"
echo "this line is malformed" > "\$TPSCOPE_METER_PIPE"
echo "begin idle" > "\$TPSCOPE_METER_PIPE"; sleep 0.5; echo "end idle" > "\$TPSCOPE_METER_PIPE"
exit 7
EOF
chmod +x "$OUT/wrapped_cmd.sh"
timeout 90 "$BIN/tpscope" meter --method both --quiesce 2000 --out "$OUT/wrapped.jsonl" -- "$OUT/wrapped_cmd.sh" \
  >"$OUT/wrapped.txt" 2>"$OUT/wrapped.log"
rc=$?
[ $rc -eq 7 ] || failed+=("wrapped(exit $rc, expected 7)")
timeout 60 "$BIN/tpscope" meter --format json -- "$OUT/wrapped_cmd.sh" >"$OUT/wrapped.json" 2>>"$OUT/wrapped.log"
rc=$?
[ $rc -eq 7 ] || failed+=("wrapped-json(exit $rc, expected 7)")

# 6. SIGINT sent to tpscope alone is forwarded; the summary is still written.
"$BIN/tpscope" meter -- sleep 30 >"$OUT/sigint.txt" 2>"$OUT/sigint.log" &
pid=$!
sleep 1
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || failed+=("sigint(exit $rc, expected 130)")
grep -q "(interrupted)" "$OUT/sigint.txt" || failed+=("sigint(no summary)")

set +x
echo
echo "================ meter.sh summary ================"
grep -hE '^\[  (PASSED|FAILED|SKIPPED) |^\[ INFO \]' "$OUT/gtest_gpu.log" "$OUT/gtest_multigpu.log"
grep -h -A3 'Failure$' "$OUT/gtest_gpu.log" "$OUT/gtest_multigpu.log" | head -n 40
echo "---- meter_accuracy"
cat "$OUT/meter_accuracy.txt"
echo "---- live (first and busiest rows)"
head -n 6 "$OUT/live.txt"
grep -v '^#' "$OUT/live.txt" | sort -k4 -n -r | head -n 4
echo "---- wrapped (exit 7 expected; one warning for the malformed line)"
head -n 60 "$OUT/wrapped.txt"
cat "$OUT/wrapped.log"
echo "---- --out: $(wc -l <"$OUT/wrapped.jsonl") JSONL lines"
echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "meter.sh: all steps passed; outputs in $OUT"
else
  echo "meter.sh: FAILED: ${failed[*]} (logs in $OUT)"
  exit 1
fi

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/meter-own.sh - the meter's own traffic on one GPU machine, in one go.
#
# Run from the repository root with build/ built for the box. Writes logs and JSON into $OUT (default
# ./meter-out). Each step has a time limit so a hang costs one step:
#   1. idle GPUs, live rows: the default meter (period adapting, calibrated), the old default (fixed
#      2 ms, not calibrated) and a fixed 50 ms meter, 6 rows each;
#   2. meter_accuracy's accuracy, own-traffic and wrap sections (known-size copies; a 30 s stream);
#   3. `tpscope tp --preset 8b --phase decode` under the default meter, a 50 ms meter and the old default.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${TPSCOPE_BUILD_DIR:-build}
OUT=${OUT:-meter-out}
BIN="$BUILD/bin/tpscope"
mkdir -p "$OUT"
source scripts/device/lib.sh
nvidia-smi -L >"$OUT/gpus.txt" 2>&1
run idle-default 30 "$BIN" meter -d 1000 -c 6
run idle-fixed-2ms-gross 30 "$BIN" meter -d 1000 -c 6 --period-us 2000 --no-calibrate
run idle-fixed-2ms-net 30 "$BIN" meter -d 1000 -c 6 --period-us 2000
run idle-fixed-50ms-gross 30 "$BIN" meter -d 1000 -c 6 --period-us 50000 --no-calibrate
run accuracy 200 "$BUILD/bin/meter_accuracy" --reps 3 --sections accuracy,own,wrap --stream-s 30 \
  --json "$OUT/meter_accuracy.json"
TP=("$BIN" tp --preset 8b --phase decode)
run tp-default 120 "$BIN" meter --format json -- "${TP[@]}"
run tp-fixed-50ms-gross 120 "$BIN" meter --format json --period-us 50000 --no-calibrate -- "${TP[@]}"
run tp-fixed-2ms-gross 120 "$BIN" meter --format json --period-us 2000 --no-calibrate -- "${TP[@]}"
echo "== summary"
for f in idle-default idle-fixed-2ms-gross idle-fixed-2ms-net idle-fixed-50ms-gross; do
  echo "-- $f"; grep -v '^==\|exit' "$OUT/$f.log" | tail -8
done
grep -A40 '# 5\.' "$OUT/accuracy.log" | head -30
grep -A3 '# 6\.' "$OUT/accuracy.log"
grep -B2 -A16 '# 1\. Accuracy' "$OUT/accuracy.log" | head -24
for f in tp-default tp-fixed-50ms-gross tp-fixed-2ms-gross; do
  python3 - "$OUT/$f.log" "$f" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
doc = json.loads(text[text.index('{\n'):text.rindex('}') + 1])
for w in doc["windows"]:
    if w["name"] != "command": continue
    for g in w["gpus"]:
        c = g["counters"]
        print(f'{sys.argv[2]:24} GPU {g["gpu"]} {w["duration_ms"]/1e3:.1f} s: rx net {c["pcie_rx"]["mean_mbps"]:.2f} MB/s '
              f'(counted {c["pcie_rx"]["counted_bytes"]/w["duration_ms"]/1e3:.2f}, own {(c["pcie_rx"]["own_bytes"] or 0)/w["duration_ms"]/1e3:.2f}), '
              f'tx net {c["pcie_tx"]["mean_mbps"]:.2f} (counted {c["pcie_tx"]["counted_bytes"]/w["duration_ms"]/1e3:.2f}, '
              f'own {(c["pcie_tx"]["own_bytes"] or 0)/w["duration_ms"]/1e3:.2f})')
PY
done
[ ${#failed[@]} -eq 0 ] && echo "meter-own.sh: all steps passed" || { echo "meter-own.sh: FAILED: ${failed[*]}"; exit 1; }

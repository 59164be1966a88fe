# SPDX-License-Identifier: Apache-2.0
# scripts/device/lib.sh - what the device scripts share; sourced, not run.
#
# run NAME LIMIT_S CMD...: runs CMD with a time limit, its stdout and stderr into $OUT/NAME.log, one
# line with its exit status and time; a failure is added to the array `failed` and its log's tail
# printed, so a hang or a crash costs one step, not the call.
failed=()
run() {
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*" | tee "$OUT/$name.log"
  local t0=$SECONDS
  timeout "$limit" "$@" >>"$OUT/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"
  [ $rc -eq 0 ] || { failed+=("$name(exit $rc)"); tail -n 15 "$OUT/$name.log"; }
  return $rc
}

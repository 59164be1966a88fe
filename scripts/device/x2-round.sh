#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/device/x2-round.sh - the measurements a machine with two (or four) GPUs is lent for, in as few
# device calls as the limits allow (docs/RUNBOOK-x2.md gives the exact calls and where results go).
#
#   scripts/device/x2-round.sh PART...        e.g.  scripts/device/x2-round.sh bench build ctest
#
# Runs from the repository root with the carried build (scripts/device/x2-pack.sh made .x2/ on the CPU
# machine: the build folder, an install prefix, the pinned llama.cpp source). Each step has a time limit
# and the call a budget (BUDGET_S, default 570 s of the 600 s a call may run): a step that would pass it
# is skipped and says so. Raw files go to $OUT/raw and are packed into $OUT/PARTS.tar.gz at the end
# (a call brings back at most 8 files); $OUT/summary.txt, printed last, says what ran and what it gave.
#
# Parts, in the order given:
#   bench   a short nccl-symm run alone (eager, graph: where it fails, the sweeps leave it out), then
#           `tpscope bench allreduce` 8K-1G bf16, -c 1, every backend interleaved (host, p2p, nccl and
#           nccl-symm: NCCL on symmetric windows), eager then --graph, with NCCL_DEBUG=INFO (INIT, REG)
#           in its own file; then one call per size (-f 4) of nccl and nccl-symm with NCCL's TUNING lines
#           (the algorithm, protocol and kernel it picked), eager and graph.
#   build   starts in the background (its own session, so it outlives the call while the machine stays
#           warm): the 8b and 32b-24-layer Q4_K GGUFs, then llama-server patched for tpscope's AllReduce
#           against the carried prefix; pinned to the CPUs above the first four. The GGUFs take seconds, the build 5-7 min. A later
#           call finds it done only if the machine stayed warm (30 s after a call); else llama starts it.
#   ctest   the gpu and multigpu test labels of the carried build.
#   llama   waits for `build` (starting it on a fresh machine; up to LLAMA_WAIT_S, and only while 300 s
#           of the budget remain), then examples/llama-x2-arms.toml on the 8b model.
#   llama32 the same arms on the 32b shape cut to 24 layers (a copy of the spec with the model replaced).
#   procs   `tpscope bench allreduce --procs N` beside one process, and python/examples/torch_allreduce.py
#           on N GPUs; each skipped with a message where this build has no such option or file.
#   tp      `tpscope tp` 8b and 32b decode, tensor over the GPUs against one GPU.
#   arms    `tpscope arms examples/four-arms.toml --quick` (the synthetic arms, as the recording in
#           examples/recorded/h200x2-quick was made) and its report.
#   meter   meter_accuracy (peer copies, own traffic) and idle `tpscope meter` rows per GPU, with and
#           without the NVLink thread, at 2 ms and 50 ms.
#   tune    `tpscope bench allreduce --tune`: the `auto` table for the box (tune.json in the tarball).
#
# Variables: NGPU (GPUs to use; default every visible one, at most 4), BUILD (default build-x2), PREFIX
# (default .x2/prefix), OUT (default ./x2-out), BUDGET_S, LLAMA_WAIT_S (default 360), JOBS (build jobs).
# With NGPU=4 (the four-GPU issue): the sweep, the correctness tests, procs, tp and the meter use all
# four; the llama arms stay on two GPUs (the spec's arms name devices 0 and 1) unless LLAMA_ALL_GPUS=1,
# which runs the tensor arms on every GPU instead (B, C and C-* on 0..N-1).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
BUILD=${BUILD:-build-x2}
PREFIX=${PREFIX:-.x2/prefix}
OUT=${OUT:-x2-out}
BUDGET_S=${BUDGET_S:-570}
LLAMA_WAIT_S=${LLAMA_WAIT_S:-360}
export TPSCOPE_CACHE_DIR=${TPSCOPE_CACHE_DIR:-/root/.cache/tpscope}
STATE=$TPSCOPE_CACHE_DIR/x2-round  # what the background build leaves for later calls
# NVLink multicast is off on these machines and must stay off for every program started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PARTS=("$@")
[ ${#PARTS[@]} -gt 0 ] || { echo "usage: scripts/device/x2-round.sh bench|build|ctest|llama|llama32|procs|tp|arms|meter|tune ..." >&2; exit 2; }
FINAL=$OUT
R=$OUT/raw
mkdir -p "$R" "$STATE" models
OUT=$R  # lib.sh's run() writes NAME.log under $OUT
source scripts/device/lib.sh
S=$FINAL/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
# fits LIMIT_S: whether a step of LIMIT_S seconds still ends inside the call's budget.
skipped=()
fits() {
  [ $((SECONDS + $1)) -le "$BUDGET_S" ] && return 0
  skipped+=("$2")
  say "skipped $2: ${1} s would pass the budget ($SECONDS of $BUDGET_S s used)"
  return 1
}
# step NAME LIMIT_S CMD...: run() when it fits the budget.
step() { fits "$2" "$1" && run "$@"; }
pack() {
  local name
  name=$(IFS=-; echo "${PARTS[*]}")
  tar czf "$FINAL/$name.tar.gz" -C "$R" . && rm -rf "$R"
}
trap pack EXIT

# ---- the carried build, at the path it was configured at --------------------------------------------
for t in .x2/build.tar.gz .x2/prefix.tar.gz; do
  stamp=$STATE/$(basename "$t").sha
  [ -f "$t" ] || continue
  sum=$(sha256sum "$t" | cut -c1-64)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    case $t in
      *build*) rm -rf "$BUILD" && tar xzf "$t" ;;
      *prefix*) rm -rf "$PREFIX" && mkdir -p "$PREFIX" && tar xzf "$t" -C "$PREFIX" ;;
    esac
    echo "$sum" >"$stamp"
  fi
done
BIN=$BUILD/bin/tpscope
[ -x "$BIN" ] || { say "x2-round.sh: $BIN not found: carry .x2 (scripts/device/x2-pack.sh) or set BUILD"; exit 2; }
# CTest files and the tests name the source and build folders by the paths they were configured at.
SRC_AT=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
if [ -n "$SRC_AT" ] && [ "$SRC_AT" != "$REPO" ] && [ ! -e "$SRC_AT" ]; then
  mkdir -p "$(dirname "$SRC_AT")" && ln -s "$REPO" "$SRC_AT"
fi

nvidia-smi -L >"$R/gpus.txt" 2>&1
nvidia-smi topo -m >"$R/topo-m.txt" 2>&1
visible=$(grep -c '^GPU ' "$R/gpus.txt" || true)
NGPU=${NGPU:-$((visible > 4 ? 4 : visible))}
DEVS=$(seq -s, 0 $((NGPU - 1)))
say "x2-round.sh ${PARTS[*]}: $visible GPU(s) visible, using $NGPU ($DEVS); $("$BIN" --version 2>&1 | head -n 1)"
[ "$NGPU" -ge 2 ] || say "fewer than 2 GPUs: every two-GPU step below fails or skips"
"$BIN" topo >"$R/topo.txt" 2>&1

# ---- parts -------------------------------------------------------------------------------------------
part_bench() {
  # nccl-symm has not run on GPUs before this round: a short run of it alone, eager and graph, first, so a
  # crash or refusal there costs its column, not the sweep (the smoke logs say why).
  local backends=host,p2p,nccl,nccl-symm
  local smoke=(bench allreduce --devices "$DEVS" --backend nccl-symm -b 8K -e 4M -f 8 -d all -n 2 -w 1 -c 1 --no-meter)
  if ! step nccl-symm-smoke-eager 45 "$BIN" "${smoke[@]}" || ! step nccl-symm-smoke-graph 45 "$BIN" "${smoke[@]}" --graph; then
    backends=host,p2p,nccl
    say "bench: nccl-symm failed its smoke run (nccl-symm-smoke-*.log): the sweeps run without it"
  fi
  local sweep=(bench allreduce --devices "$DEVS" --backend "$backends" -b 8K -e 1G -f 2 -d bf16 -c 1)
  local debug=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,REG,ENV)
  step bench-eager 200 env "${debug[@]}" NCCL_DEBUG_FILE="$R/nccl-bench-eager.txt" \
    "$BIN" "${sweep[@]}" -J "$R/bench-eager.json"
  step bench-graph 170 env "${debug[@]}" NCCL_DEBUG_FILE="$R/nccl-bench-graph.txt" \
    "$BIN" "${sweep[@]}" --graph -J "$R/bench-graph.json"
  # What NCCL picked per size: one timed call per size, its TUNING lines (no meter, no check).
  local choice=(bench allreduce --devices "$DEVS" --backend "nccl${backends#host,p2p,nccl}" -b 8K -e 1G -f 4 -d bf16
    -n 1 -w 0 -c 0 --no-meter)
  local tune=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,REG,TUNING)
  step nccl-choice-eager 45 env "${tune[@]}" NCCL_DEBUG_FILE="$R/nccl-choice-eager.txt" "$BIN" "${choice[@]}"
  step nccl-choice-graph 45 env "${tune[@]}" NCCL_DEBUG_FILE="$R/nccl-choice-graph.txt" "$BIN" "${choice[@]}" \
    --graph --graph-replays 1
}

# The background build: llama-server with the patch, the GGUFs. Leaves STATE/build.rc and STATE/NAME.gguf.rc.
part_build() {
  if [ -f "$STATE/build.rc" ] && [ "$(cat "$STATE/build.rc")" = 0 ]; then say "build: done in an earlier call"; return; fi
  if [ -f "$STATE/build.pid" ] && kill -0 "$(cat "$STATE/build.pid")" 2>/dev/null; then say "build: still running"; return; fi
  [ -f .x2/llama-src.tar.gz ] || { say "build: no .x2/llama-src.tar.gz carried"; return; }
  local root=$TPSCOPE_CACHE_DIR/llama.cpp-0c1e570 cpus jobs
  mkdir -p "$root"
  [ -f "$root/src/.tpscope-extracted" ] || tar xzf .x2/llama-src.tar.gz -C "$root"
  cpus=$(nproc)
  jobs=${JOBS:-$((cpus > 8 ? cpus - 4 : cpus))}
  rm -f "$STATE/build.rc" "$STATE"/*.gguf.rc
  # Its own session: the call's end does not stop it; CPUs 0-3 stay free for the GPU steps beside it.
  setsid nohup bash -c '
    cd "$1"; state=$2; prefix=$3; jobs=$4; cpus=$5
    pin=(); [ "$cpus" -gt 8 ] && command -v taskset >/dev/null && pin=(taskset -c 4-$((cpus - 1)))
    "${pin[@]}" scripts/llama/make-gguf --preset 8b --type q4_k --seed 0 -o models/tpscope-8b-q4_k.gguf \
      >"$state/gguf-8b.log" 2>&1; echo $? >"$state/8b.gguf.rc"
    "${pin[@]}" scripts/llama/make-gguf --preset 32b --layers 24 --type q4_k --seed 0 \
      -o models/tpscope-32b-l24-q4_k.gguf >"$state/gguf-32b.log" 2>&1; echo $? >"$state/32b.gguf.rc"
    t0=$(date +%s)
    "${pin[@]}" scripts/llama/build-llama-server --flavour cuda --cuda-arch 90 --jobs "$jobs" \
      --with-tpscope "$prefix" >"$state/build.log" 2>&1
    echo $? >"$state/build.rc"; echo "$(( $(date +%s) - t0 )) s" >"$state/build.seconds"
  ' x2-build "$REPO" "$STATE" "$(cd "$PREFIX" && pwd -P)" "$jobs" "$cpus" </dev/null >/dev/null 2>&1 &
  echo $! >"$STATE/build.pid"
  say "build: started in the background ($jobs jobs); llama waits for it"
}

part_ctest() {
  step ctest 240 ctest --test-dir "$BUILD" -L '^(gpu|multigpu)$' --timeout 150 --output-on-failure
  grep -h "tests passed\|tests failed\|Total Test time\|\*\*\*Failed\|Not Run\|Skipped" "$R/ctest.log" | tee -a "$S"
}

# waits for the background build; the server's path on stdout (messages go to the summary and stderr).
server_ready() {
  local waited=0
  # A fresh machine (the last one went back): start the build here and wait for it.
  [ -f "$STATE/build.rc" ] || { [ -f "$STATE/build.pid" ] && kill -0 "$(cat "$STATE/build.pid")" 2>/dev/null; } ||
    part_build >&2
  while [ ! -f "$STATE/build.rc" ] && [ $waited -lt "$LLAMA_WAIT_S" ] && fits 300 "waiting for the build" >&2; do
    sleep 5; waited=$((waited + 5))
  done
  cp -f "$STATE"/*.log "$STATE"/*.seconds "$R/" 2>/dev/null
  [ "$(cat "$STATE/build.rc" 2>/dev/null)" = 0 ] || { say "llama: the build has not succeeded (see build.log)" >&2; return 1; }
  say "llama: server built in $(cat "$STATE/build.seconds" 2>/dev/null), waited $waited s here" >&2
  scripts/llama/build-llama-server --flavour cuda --cuda-arch 90 --with-tpscope "$(cd "$PREFIX" && pwd -P)" --print-path
}

# arms NAME MODEL: the spec's arms on MODEL, the run folder in $R/NAME.
arms() {
  local name=$1 model=$2 spec=$REPO/examples/llama-x2-arms.toml server
  server=$(server_ready) || return
  [ "$(cat "$STATE/$3.gguf.rc" 2>/dev/null)" = 0 ] && [ -f "$model" ] || { say "$name: no model $model (gguf-$3.log)"; return; }
  local copy=$R/$name.toml
  sed -e "s|^model = .*|model = \"$REPO/$model\"|" -e "s|^name = .*|name = \"$name\"|" "$spec" >"$copy"
  if [ "${LLAMA_ALL_GPUS:-0}" = 1 ] && [ "$NGPU" -gt 2 ]; then
    sed -i "s|^devices = \[0, 1\]|devices = [$(seq -s ', ' 0 $((NGPU - 1)))]|" "$copy"
  fi
  # The rest of the call's budget, at least 240 s (7 arms of 3 repetitions take ~5 min on the 8b model).
  local limit=$((BUDGET_S - SECONDS - 15))
  [ $limit -ge 240 ] || { say "$name: skipped: $limit s left in the call's budget"; return; }
  step "$name" "$limit" env TPSCOPE_LLAMA_SERVER="$server" "$BIN" arms "$copy" --out "$R/$name"
  ls "$R/$name"/server-*.log >/dev/null 2>&1 && grep -h "tpscope\|AllReduce\|falling back" "$R/$name"/server-*.log |
    sort | uniq -c | head -n 12 >>"$S"
  "$BIN" report "$R/$name" >"$R/$name-report.md" 2>&1 && sed -n '/^## /,$p' "$R/$name-report.md" | head -n 40 >>"$S"
}
part_llama() { arms llama-x2-8b models/tpscope-8b-q4_k.gguf 8b; }
part_llama32() { arms llama-x2-32b-l24 models/tpscope-32b-l24-q4_k.gguf 32b; }

part_procs() {
  if "$BIN" bench allreduce --help 2>&1 | grep -q -- '--procs'; then
    local b=(bench allreduce --backend host,p2p,nccl -b 8K -e 256M -f 4 -d bf16 -c 1 --no-meter)
    step bench-1proc-graph 90 "$BIN" "${b[@]}" --devices "$DEVS" --graph -J "$R/bench-1proc-graph.json"
    step bench-procs-graph 120 "$BIN" "${b[@]}" --procs "$NGPU" --graph -J "$R/bench-procs-graph.json"
    step bench-procs-eager 120 "$BIN" "${b[@]}" --procs "$NGPU" -J "$R/bench-procs-eager.json"
  else
    say "procs: skipped: this tpscope has no 'bench allreduce --procs' (it comes with one rank per process)"
  fi
  local lib=$PREFIX/lib/libtpscope.so
  if [ -f python/examples/torch_allreduce.py ] && [ -f "$lib" ]; then
    for b in p2p host nccl; do
      step "torch-$b" 90 env PYTHONUNBUFFERED=1 TPSCOPE_LIBRARY="$(cd "$(dirname "$lib")" && pwd -P)/libtpscope.so" \
        python3 python/examples/torch_allreduce.py --nranks "$NGPU" --backend "$b"
      tail -n 4 "$R/torch-$b.log" >>"$S"
    done
  else
    say "procs: python/examples/torch_allreduce.py or $lib missing: the Python example skipped"
  fi
}

# The host backend's tunables and the fastest backend per size on these GPUs (the `auto` table).
part_tune() {
  step tune 300 env TPSCOPE_TUNE_FILE="$R/tune.json" "$BIN" bench allreduce --tune --devices "$DEVS"
}

part_tp() {
  local p
  for p in 8b 32b; do
    local d=(tp --preset "$p" --phase decode --ctx 4096 --tokens 256 --format json)
    step "tp-$p-none" 90 "$BIN" "${d[@]}" --split none --devices 0
    step "tp-$p-tensor" 90 "$BIN" "${d[@]}" --split tensor --devices "$DEVS"
  done
}

# The synthetic four-arm run, quick, as examples/recorded/h200x2-quick was recorded (the prefill issue
# re-makes it with cuDNN's prefill attention), and its report.
part_arms() {
  step four-arms-quick 240 "$BIN" arms examples/four-arms.toml --quick --out "$R/four-arms-quick"
  "$BIN" report "$R/four-arms-quick" >"$R/four-arms-quick-report.md" 2>&1 &&
    sed -n '/^## /,$p' "$R/four-arms-quick-report.md" | head -n 40 >>"$S"
}

part_meter() {
  step meter-accuracy 240 "$BUILD/bin/meter_accuracy" --reps 3 --sections accuracy,own --json "$R/meter_accuracy.json"
  local period
  for period in 2000 50000; do
    step "idle-$period-nvlink" 30 "$BIN" meter -i "$DEVS" -d 1000 -c 5 --period-us "$period"
    step "idle-$period-pcie-only" 30 "$BIN" meter -i "$DEVS" -d 1000 -c 5 --period-us "$period" --no-nvlink
  done
}

for p in "${PARTS[@]}"; do
  case $p in
    bench | build | ctest | llama | llama32 | procs | tp | arms | meter | tune) "part_$p" ;;
    *) say "unknown part '$p'" ;;
  esac
done

# ---- summary -----------------------------------------------------------------------------------------
python3 scripts/device/x2_summary.py "$R" "$NGPU" >>"$S" 2>&1 || say "x2_summary.py failed"
echo
cat "$S"
[ ${#skipped[@]} -eq 0 ] || say "x2-round.sh: skipped for time: ${skipped[*]}"
[ ${#failed[@]} -eq 0 ] && say "x2-round.sh: every step that ran passed" || say "x2-round.sh: FAILED: ${failed[*]}"

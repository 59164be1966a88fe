#!/usr/bin/env bash
# Session 6, run 8: final checks of e7bd5bf (review refactor: NormCall, HostGate, Unwrapper): the whole
# GPU suite, the small-message bench and scripts/device/workload.sh.
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O
B=build/bin/tpscope
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t ctest timeout 280 ctest --test-dir build -L 'gpu|multigpu' --timeout 150
grep -h "tests passed\|tests failed\|\*\*\*Failed\|Not Run" $O/ctest.txt >> $O/summary.txt
t small timeout 60 $B bench allreduce --backend p2p,nccl,host -b 8K -e 256K -f 2 -d bf16 --graph -n 200
OUT=$O/workload t workload timeout 200 scripts/device/workload.sh
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt; grep -v "^\[ info" $O/workload.txt | grep "tok/s\|passed" | head -30; grep -h "^ *[0-9]" $O/small.txt | awk '{print $1,$5,$9,$10}'

#!/usr/bin/env bash
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O
B=build/bin/tpscope
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t small timeout 60 $B bench allreduce --backend p2p,nccl,host -b 8K -e 256K -f 2 -d bf16 --graph -n 200 --json $O/small.json
t small-fixed128 timeout 60 env TPSCOPE_P2P_LL_THREADS_MAX=128 $B bench allreduce --backend p2p,nccl -b 8K -e 256K -f 2 -d bf16 --graph -n 200
t small-rep timeout 60 $B bench allreduce --backend p2p,nccl -b 8K -e 256K -f 2 -d bf16 --graph -n 200
t eager timeout 60 $B bench allreduce --backend p2p,nccl -b 8K -e 256K -f 2 -d bf16 -n 200
t ctest timeout 280 ctest --test-dir build -L 'gpu|multigpu' --timeout 150
grep -h "tests passed\|tests failed\|\*\*\*Failed\|Not Run" $O/ctest.txt >> $O/summary.txt
OUT=$O/workload t workload timeout 150 scripts/device/workload.sh
t metered-p2p timeout 60 env TPSCOPE_ALLREDUCE=p2p $B bench allreduce --backend p2p -b 8K -e 1G -f 8 -n 20 -c 1 --json $O/metered-p2p.json
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt; grep -v "^\[ info" $O/workload.txt | grep "tok/s\|passed" | head -14
for f in small small-fixed128 small-rep eager; do echo "== $f"; grep -h "^ *[0-9]" $O/$f.txt | awk '{print $1,$5,$9,$10,$8}'; done

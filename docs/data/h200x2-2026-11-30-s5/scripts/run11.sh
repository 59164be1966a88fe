#!/usr/bin/env bash
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O
B=build/bin/tpscope
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t ctest timeout 280 ctest --test-dir build -L 'gpu|multigpu' --timeout 150
grep -h "tests passed\|tests failed\|\*\*\*Failed\|Not Run" $O/ctest.txt >> $O/summary.txt
t small timeout 60 $B bench allreduce --backend p2p,nccl,host -b 8K -e 256K -f 2 -d bf16 --graph -n 200
t metered-p2p timeout 60 env TPSCOPE_ALLREDUCE=p2p $B bench allreduce --backend p2p -b 8K -e 1G -f 8 -n 20 -c 1 --json $O/metered-p2p.json
run() { local name=$1 sp=$2; shift 2; local dev=0 be=""; [ $sp = tensor ] && dev=0,1 && be="--backend p2p"
  env "$@" timeout 90 $B tp --preset 8b --phase decode --ctx 4096 --tokens 64 --format json --split $sp --devices $dev $be > $O/8b-$name-$sp.json 2> $O/8b-$name-$sp.log
  echo "8b $name $sp $(grep -o '"ms_per_step": *[0-9.]*' $O/8b-$name-$sp.json | head -1 | grep -o '[0-9.]*$')" >> $O/summary.txt; }
run def none; run def tensor; run fused tensor TPSCOPE_TP_FUSED=1
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt; grep -h "^ *[0-9]" $O/small.txt | awk '{print $1,$5,$9,$8}'; grep -h "^ *[0-9]" $O/metered-p2p.txt | awk '{print $1,$10,$(NF-1),$NF,$13,$14}'; grep -h "WARN" $O/metered-p2p.log | head -3

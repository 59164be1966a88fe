#!/usr/bin/env bash
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O/ab
B=build/bin/tpscope
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t ctest timeout 260 ctest --test-dir build -L 'gpu|multigpu' --timeout 150
grep -h "tests passed\|tests failed\|\*\*\*Failed\|Not Run" $O/ctest.txt >> $O/summary.txt
t small timeout 60 $B bench allreduce --backend p2p,nccl,host -b 8K -e 256K -f 2 -d bf16 --graph -n 200
t metered-p2p timeout 60 env TPSCOPE_ALLREDUCE=p2p $B bench allreduce --backend p2p -b 8K -e 1G -f 8 -n 20 -c 1 --json $O/metered-p2p.json
OUT=$O/workload t workload timeout 150 scripts/device/workload.sh
run() { local name=$1 sp=$2 preset=$3; shift 3; local dev=0 be=""; [ $sp = tensor ] && dev=0,1 && be="--backend p2p"
  env "$@" timeout 90 $B tp --preset $preset --phase decode --ctx 4096 --tokens 64 --format json --split $sp --devices $dev $be > $O/ab/$preset-$name-$sp.json 2> $O/ab/$preset-$name-$sp.log
  echo "$preset $name $sp $(grep -o '"ms_per_step": *[0-9.]*' $O/ab/$preset-$name-$sp.json | head -1 | grep -o '[0-9.]*$')" >> $O/summary.txt; }
for rep in 1 2; do
  run def-$rep none 8b; run def-$rep tensor 8b
  run rope0-$rep none 8b TPSCOPE_TP_ATTN_ROPE=0; run rope0-$rep tensor 8b TPSCOPE_TP_ATTN_ROPE=0
  run ll16-$rep tensor 8b TPSCOPE_P2P_LL_BLOCKS=16
done
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt; grep -v "^\[ info" $O/workload.txt | grep "tok/s\|passed\|x \|speedup" | head -30; grep -h "^ *[0-9]" $O/small.txt | awk '{print $1,$5,$9,$10}'; grep -h "^ *[0-9]" $O/metered-p2p.txt | awk '{print $1,$5,$10,$(NF-1),$NF}'

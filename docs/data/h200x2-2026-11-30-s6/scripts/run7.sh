#!/usr/bin/env bash
# Session 6, run 7: final checks of c73eb0d (pushed reductions): the whole GPU suite, the small-message
# bench, the metered p2p sweep, scripts/device/workload.sh, and 8b / 32b decode pushed against not
# (TPSCOPE_TP_PUSH=0) and not pushed but fused (TPSCOPE_TP_FUSED=1), in one process each, twice.
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O/ab
B=build/bin/tpscope
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t ctest timeout 280 ctest --test-dir build -L 'gpu|multigpu' --timeout 150
grep -h "tests passed\|tests failed\|\*\*\*Failed\|Not Run" $O/ctest.txt >> $O/summary.txt
t small timeout 60 $B bench allreduce --backend p2p,nccl,host -b 8K -e 256K -f 2 -d bf16 --graph -n 200
t metered-p2p timeout 60 env TPSCOPE_ALLREDUCE=p2p $B bench allreduce --backend p2p -b 8K -e 1G -f 8 -n 20 -c 1 --json $O/metered-p2p.json
OUT=$O/workload t workload timeout 200 scripts/device/workload.sh
run() { local name=$1 sp=$2 preset=$3; shift 3; local dev=0 be=""; [ $sp = tensor ] && dev=0,1 && be="--backend p2p"
  env "$@" timeout 120 $B tp --preset $preset --phase decode --ctx 4096 --tokens 64 --format json --split $sp --devices $dev $be > $O/ab/$preset-$name-$sp.json 2> $O/ab/$preset-$name-$sp.log
  echo "$preset $name $sp $(grep -o '"ms_per_step": *[0-9.]*' $O/ab/$preset-$name-$sp.json | head -1 | grep -o '[0-9.]*$')" >> $O/summary.txt; }
for rep in 1 2; do
  run def-$rep none 8b; run push-$rep tensor 8b; run nopush-$rep tensor 8b TPSCOPE_TP_PUSH=0
  run fused-$rep tensor 8b TPSCOPE_TP_PUSH=0 TPSCOPE_TP_FUSED=1
done
run def none 32b; run push tensor 32b; run nopush tensor 32b TPSCOPE_TP_PUSH=0
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt; grep -v "^\[ info" $O/workload.txt | grep "tok/s\|passed\|x \|speedup" | head -30; grep -h "^ *[0-9]" $O/small.txt | awk '{print $1,$5,$9,$10}'; grep -h "^ *[0-9]" $O/metered-p2p.txt | awk '{print $1,$5,$10,$(NF-1),$NF}'

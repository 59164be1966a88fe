#!/usr/bin/env bash
# Session 6, run 1: the pushed reductions (GEMV epilogue sends LL lines) - tests, then A/B on 8b and 32b.
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O
B=build/bin/tpscope
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t ctest timeout 200 ctest --test-dir build -R 'AllReducePush|AllReduceFused|WorkloadSplits' --timeout 120
grep -h "tests passed\|tests failed\|\*\*\*Failed\|Not Run\|Exception" $O/ctest.txt >> $O/summary.txt
run() { local p=$1 name=$2 sp=$3; shift 3; local dev=0 be=""; [ $sp = tensor ] && dev=0,1 && be="--backend p2p"
  env "$@" timeout 120 $B tp --preset $p --phase decode --ctx 4096 --tokens 64 --format json --split $sp --devices $dev $be > $O/$p-$name-$sp.json 2> $O/$p-$name-$sp.log
  echo "$p $name $sp $(grep -o '"ms_per_step": *[0-9.]*' $O/$p-$name-$sp.json | head -1 | grep -o '[0-9.]*$') noAR $(grep -o '"ms_per_step_without_allreduce": *[0-9.]*' $O/$p-$name-$sp.json | head -1 | grep -o '[0-9.]*$')" >> $O/summary.txt; }
for i in 1 2; do run 8b def none; run 8b push tensor; run 8b nopush tensor TPSCOPE_TP_PUSH=0; done
run 8b push16 tensor TPSCOPE_P2P_LL_BLOCKS=16
run 32b def none; run 32b push tensor; run 32b nopush tensor TPSCOPE_TP_PUSH=0
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt

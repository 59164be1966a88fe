#!/usr/bin/env bash
# Session 6, run 3: by-row kernel 512 threads x 4 words, grid = rows (tpscope) against run 2's binary
# (256 x 8, grid = the LL blocks; tpscope-prev), 8b and 32b decode, interleaved; LL bench twice.
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t ctest timeout 200 ctest --test-dir build -R 'AllReducePush|AllReduceFused|WorkloadSplits' --timeout 120
grep -h "tests passed\|tests failed\|\*\*\*Failed\|Not Run\|Exception" $O/ctest.txt >> $O/summary.txt
run() { local bin=$1 p=$2 name=$3 sp=$4; shift 4; local dev=0 be=""; [ $sp = tensor ] && dev=0,1 && be="--backend p2p"
  env "$@" timeout 120 build/bin/$bin tp --preset $p --phase decode --ctx 4096 --tokens 64 --format json --split $sp --devices $dev $be > $O/$p-$name-$sp.json 2> $O/$p-$name-$sp.log
  echo "$p $name $sp $(grep -o '"ms_per_step": *[0-9.]*' $O/$p-$name-$sp.json | head -1 | grep -o '[0-9.]*$') noAR $(grep -o '"ms_per_step_without_allreduce": *[0-9.]*' $O/$p-$name-$sp.json | head -1 | grep -o '[0-9.]*$')" >> $O/summary.txt; }
for i in 1 2; do run tpscope 8b def none; run tpscope 8b push$i tensor; run tpscope-prev 8b prev$i tensor; run tpscope 8b fused$i tensor TPSCOPE_TP_PUSH=0 TPSCOPE_TP_FUSED=1; done
run tpscope 32b def none; run tpscope 32b push tensor; run tpscope-prev 32b prev tensor
for i in 1 2; do t small$i timeout 60 build/bin/tpscope bench allreduce --backend p2p,nccl -b 8K -e 256K -f 2 -d bf16 --graph -n 200; done
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt; for i in 1 2; do grep -h "^ *[0-9]" $O/small$i.txt | awk '{printf "%s %s %s | ", $1,$5,$9} END {print ""}'; done

#!/usr/bin/env bash
# Session 6, run 10: final checks of ea6672a (review: shared checks and launch of the fused and pushed
# reductions, the by-row kernel's indexing): the whole GPU suite (four ranks on two GPUs included), the
# small-message bench beside NCCL, and 8b / 32b decode one GPU against tensor (pushed), in one call.
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O/ab
B=build/bin/tpscope
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t ctest timeout 300 ctest --test-dir build -L 'gpu|multigpu' --timeout 180
grep -h "tests passed\|tests failed\|\*\*\*Failed" $O/ctest.txt >> $O/summary.txt
grep -h "AllReduceSharedGpus \.\.\.\|AllReducePush" $O/ctest.txt >> $O/summary.txt
t small timeout 60 $B bench allreduce --backend p2p,nccl,host -b 8K -e 256K -f 2 -d bf16 --graph -n 200
run() { local name=$1 sp=$2 preset=$3; shift 3; local dev=0 be=""; [ $sp = tensor ] && dev=0,1 && be="--backend p2p"
  env "$@" timeout 120 $B tp --preset $preset --phase decode --ctx 4096 --tokens 64 --format json --split $sp --devices $dev $be > $O/ab/$preset-$name-$sp.json 2> $O/ab/$preset-$name-$sp.log
  echo "$preset $name $sp $(grep -o '"ms_per_step": *[0-9.]*' $O/ab/$preset-$name-$sp.json | head -1 | grep -o '[0-9.]*$')" >> $O/summary.txt; }
for rep in 1 2; do run def-$rep none 8b; run push-$rep tensor 8b; done
run def none 32b; run push tensor 32b
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt; grep -h "^ *[0-9]" $O/small.txt | awk '{print $1,$5,$9}'

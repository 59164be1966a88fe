#!/usr/bin/env bash
# Session 6, run 9: the GPU suite on the last code commit (four ranks on two GPUs added).
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
t() { local n=$1; shift; local t0=$SECONDS; "$@" > $O/$n.txt 2> $O/$n.log; echo "$n rc=$? $((SECONDS-t0)) s" >> $O/summary.txt; }
t shared timeout 200 ctest --test-dir build -R 'AllReduceSharedGpus$' --timeout 180 -V
t ctest timeout 300 ctest --test-dir build -L 'gpu|multigpu' --timeout 180
grep -h "tests passed\|tests failed\|\*\*\*Failed\|Not Run\|Disabled" $O/ctest.txt >> $O/summary.txt
grep -h "OK \]\|FAILED\|SKIPPED\|Failure\|wrong" $O/shared.txt | head -20 >> $O/summary.txt
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt

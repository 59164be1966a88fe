#!/usr/bin/env bash
# Session 6, run 4: the by-row kernel's shape: tpscope = 512 x 4 words, grid rows; tpscope-v1 = 256 x 8,
# grid rows; tpscope-prev = 256 x 8, grid = the 64 LL blocks (run 2's binary). Interleaved, 8b twice, 32b once.
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
run() { local bin=$1 p=$2 name=$3 sp=$4; shift 4; local dev=0 be=""; [ $sp = tensor ] && dev=0,1 && be="--backend p2p"
  env "$@" timeout 120 build/bin/$bin tp --preset $p --phase decode --ctx 4096 --tokens 64 --format json --split $sp --devices $dev $be > $O/$p-$name-$sp.json 2> $O/$p-$name-$sp.log
  echo "$p $name $sp $(grep -o '"ms_per_step": *[0-9.]*' $O/$p-$name-$sp.json | head -1 | grep -o '[0-9.]*$')" >> $O/summary.txt; }
for i in 1 2; do run tpscope 8b one$i none; for b in tpscope tpscope-v1 tpscope-prev; do run $b 8b $b-$i tensor; done; done
run tpscope 32b one none; for b in tpscope tpscope-v1 tpscope-prev; do run $b 32b $b tensor; done
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt

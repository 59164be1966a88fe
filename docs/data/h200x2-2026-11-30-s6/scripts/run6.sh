#!/usr/bin/env bash
# Session 6, run 6: the poll loop: a missing line asked for again at once (-r) or after the whole check (run 5), 512 x 4 and 1024 x 2.
# Interleaved, with run 2's binary (tpscope-prev).
[ -e /work/main ] || { mkdir -p /work; ln -s "$PWD" /work/main; }
cd /work/main; [ -e build ] || ln -s build-dev build
O=/tmp/o; mkdir -p $O
echo "binary git $(grep -o '[0-9a-f]\{12\}' build/generated/tpscope/version.h)" > $O/summary.txt
run() { local bin=$1 p=$2 name=$3 sp=$4; shift 4; local dev=0 be=""; [ $sp = tensor ] && dev=0,1 && be="--backend p2p"
  env "$@" timeout 120 build/bin/$bin tp --preset $p --phase decode --ctx 4096 --tokens 64 --format json --split $sp --devices $dev $be > $O/$p-$name-$sp.json 2> $O/$p-$name-$sp.log
  echo "$p $name $sp $(grep -o '"ms_per_step": *[0-9.]*' $O/$p-$name-$sp.json | head -1 | grep -o '[0-9.]*$')" >> $O/summary.txt; }
V="tpscope-g64-512x4-r tpscope-g64-512x4 tpscope-g64-1024x2-r tpscope-prev"
for i in 1 2; do run tpscope-prev 8b one$i none; for b in $V; do run $b 8b $b-$i tensor; done; done
run tpscope-prev 32b one none; for b in $V; do run $b 32b $b tensor; done
tar czf $OUT/all.tgz -C $O .
cat $O/summary.txt

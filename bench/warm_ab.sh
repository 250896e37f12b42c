#!/usr/bin/env bash
# The warm-cache sweeps of bench/arbiter_overhead.py (`--warm N`: the exhaustive sweep fills a
# fresh build cache, then N sampled sweeps on it, each into a new database), on an older tree
# and on this one, alternating, each tree in a fresh process:
#   OUT=/tmp/ab bash bench/warm_ab.sh REV [PAIRS] [N]
set -uo pipefail
cd "$(dirname "$0")/.."
rev=$1 pairs=${2:-2} n=${3:-3} out=$(realpath -m "${OUT:-/tmp/ab}")
bash bench/old_tree.sh "$rev" "$out/old"
python3 -m compileall -q arbiter lanes bench >/dev/null 2>&1
export PYTHONUNBUFFERED=1
for i in $(seq 1 "$pairs"); do
  for tree in old new; do
    root=$PWD; [ $tree = old ] && root=$out/old
    (cd "$root" && PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} python3 bench/arbiter_overhead.py \
       --warm "$n") | sed "s/^/$tree /"
  done
done

#!/usr/bin/env bash
# A re-run of a tuned spec (bench/arbiter_overhead.py's second `arbiter tune`, which measures
# nothing) on an older tree and on this one, alternating, each in a fresh process, on one
# database and build cache tuned once by this tree; prints each run's wall in seconds:
#   OUT=/tmp/rr bash bench/rerun_ab.sh REV [PAIRS]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1 pairs=${2:-8} out=$(realpath -m "${OUT:-/tmp/rerun-ab}")
bash bench/old_tree.sh "$rev" "$out/old"
python3 -m compileall -q arbiter lanes >/dev/null 2>&1
rm -rf "$out/cache" "$out/rerun.db"*
export ARBITER_CACHE_DIR=$out/cache ARBITER_DB=sqlite:///$out/rerun.db
args=(tune "$PWD/examples/regions.toml" --lanes x86_c,numpy --trials 6 --seed 0 --json)
python3 -m arbiter "${args[@]}" >/dev/null
for i in $(seq 1 "$pairs"); do
  for tree in old new; do
    root=$PWD; [ $tree = old ] && root=$out/old
    t0=$(date +%s%N)
    (cd "$root" && PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} python3 -m arbiter "${args[@]}" \
       >/dev/null)
    echo "$tree $(( ($(date +%s%N) - t0) / 1000000 ))e-3"
  done
done | tee "$out/walls.txt"
for tree in old new; do
  grep "^$tree " "$out/walls.txt" | sort -g -k2 | awk -v t=$tree '{w[NR] = $2 + 0}
    END {printf "%s: median %.3f s, min %.3f s over %d runs\n", t, w[int((NR + 1) / 2)], w[1], NR}'
done

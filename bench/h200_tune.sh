#!/usr/bin/env bash
# The arbiter itself on a GPU machine: every lane competing on examples/regions.toml, then the
# arbiter's pick at benchmark scale (bench/h200_picks.toml, GPU lanes only: the CPU lanes take
# seconds per call there). Records land in $OUT/*.db; tables in $OUT/*.txt.
#   OUT=/tmp/arbiter-gpu bash bench/h200_tune.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/arbiter-gpu}
mkdir -p "$out"
export ARBITER_CACHE_DIR=${ARBITER_CACHE_DIR:-/tmp/arbcache} PYTHONUNBUFFERED=1
arb() { python3 -m arbiter "$@"; }

arb lanes | tee "$out/lanes.txt"
t0=$SECONDS
timeout 150 python3 -m arbiter tune examples/regions.toml --db "sqlite:///$out/examples.db" \
  --trials 8 --timeout 120 >"$out/tune_examples.txt" 2>&1
echo "tune examples: rc=$? in $((SECONDS - t0)) s"
arb best examples/regions.toml --db "sqlite:///$out/examples.db" | tee "$out/best_examples.txt"

t0=$SECONDS
timeout 330 python3 -m arbiter tune bench/h200_picks.toml --lanes hip_scalar,torch,wmma_gemm,fa2 \
  --db "sqlite:///$out/picks.db" --trials 6 --timeout 120 >"$out/tune_picks.txt" 2>&1
echo "tune picks: rc=$? in $((SECONDS - t0)) s"
for b in 1e-3 5e-3; do
  echo "== budget $b"
  arb best bench/h200_picks.toml --db "sqlite:///$out/picks.db" --budget "$b" \
    | tee "$out/best_picks_$b.txt"
done

#!/usr/bin/env bash
# The whole-spec sweep of bench/arbiter_overhead.py and bench/startup_trace.py, on an older
# tree and on this one, alternating, each in fresh processes with a fresh cache:
#   OUT=/tmp/ab bash bench/spec_ab.sh REV [PAIRS]
# REV's tree goes to $OUT/old (bench/old_tree.sh) and runs by PYTHONPATH from its own directory.
set -uo pipefail
cd "$(dirname "$0")/.."
rev=$1 pairs=${2:-2} out=$(realpath -m "${OUT:-/tmp/ab}")
old=$out/old
bash bench/old_tree.sh "$rev" "$old"
python3 -m compileall -q arbiter lanes bench >/dev/null 2>&1
export PYTHONUNBUFFERED=1
for i in $(seq 1 "$pairs"); do
  for tree in old new; do
    root=$PWD; [ $tree = old ] && root=$old
    (cd "$root" && PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} python3 "$OLDPWD/bench/startup_trace.py") | sed "s/^/$tree /"
    tmp=$(mktemp -d)
    (cd "$root" && PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH} ARBITER_CACHE_DIR=$tmp/cache \
       python3 bench/arbiter_overhead.py --spec-sweep "$tmp" "$(date +%s.%N)") >"$out/spec_${tree}_$i.json"
    python3 - "$out/spec_${tree}_$i.json" $tree <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(sys.argv[2], "spec: literal %.2f all-in from process start %.2f start-up %.3f s "
      "verification %.2f kernel %.2f" % tuple(d[k] for k in (
          "total_minus_build_and_kernel_ms_per_trial", "all_in_from_process_start_ms_per_trial",
          "startup_s", "verification_runs_ms_per_trial", "kernel_timing_ms_per_trial")))
PY
    rm -rf "$tmp"
  done
done

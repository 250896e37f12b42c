#!/usr/bin/env bash
# The final-code checks on a GPU machine, in steps that each fit one device command:
#   OUT=/tmp/h200 bash bench/h200_suite.sh tests     # the whole test suite, GPU tests included
#   OUT=/tmp/h200 bash bench/h200_suite.sh tune      # every lane on examples/regions.toml, then
#                                                    # records vs database-study trials
#   OUT=/tmp/h200 bash bench/h200_suite.sh overhead  # bench/arbiter_overhead.py --only-overhead
#   OUT=/tmp/h200 bash bench/h200_suite.sh parts     # bench/oracle_parts.py: compare/poison threads
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/h200}
mkdir -p "$out"
export ARBITER_CACHE_DIR=${ARBITER_CACHE_DIR:-/tmp/arbcache} PYTHONUNBUFFERED=1
for step in "$@"; do
  t0=$SECONDS
  case $step in
    tests)
      timeout 540 python3 -m pytest -q -n 8 -p no:cacheprovider -rf >"$out/tests.txt" 2>&1
      echo "tests: rc=$? in $((SECONDS - t0)) s: $(tail -1 "$out/tests.txt")" ;;
    tune)
      timeout 300 python3 -m arbiter tune examples/regions.toml --db "sqlite:///$out/ex.db" \
        --trials 12 --timeout 120 --json >"$out/tune.json" 2>"$out/tune.err"
      echo "tune: rc=$? in $((SECONDS - t0)) s"
      python3 - "$out/ex.db" "$out/tune.json" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
one = lambda q: db.execute(q).fetchone()[0]
print("candidates", one("select count(*) from candidates"),
      "| invalid", one("select count(*) from measurements where kind='sweep' and status='invalid'"),
      "| study trials complete", one("select count(*) from trials where state='COMPLETE'"),
      "| distinct candidates in studies", one(
          "select count(distinct value_json) from trial_user_attributes where key='arbiter'"))
for r in json.load(open(sys.argv[2])):
    print(f"{r['region']:>22} {r['lane'] or '-':>10} {r['latency_ms'] or 0:10.4f} ms {r['status']}")
PY
      ;;
    overhead)
      # the image sets PYTHONDONTWRITEBYTECODE and its numpy's .pyc files go unused (numpy
      # imported in 0.30 s on a fresh host, 0.10 s once compiled): every process start (the
      # sweep's, each worker's) would compile numpy, SQLAlchemy, Optuna and Alembic from
      # source; compiled once here, as pip does at install
      numpy_dir=$(python3 -c 'import importlib.util as u; print(u.find_spec("numpy").submodule_search_locations[0])')
      python3 -m compileall -q -j 8 arbiter lanes ${PYTHONPATH//:/ } "$numpy_dir" >/dev/null 2>&1
      timeout 560 python3 bench/arbiter_overhead.py --only-overhead \
        --out "$out/arbiter_overhead_h200.json" >"$out/overhead.txt" 2>&1
      echo "overhead: rc=$? in $((SECONDS - t0)) s" ;;
    parts)
      timeout 300 python3 bench/oracle_parts.py --out "$out/oracle_parts.json" \
        >"$out/parts.txt" 2>&1
      echo "parts: rc=$? in $((SECONDS - t0)) s" ;;
    *) echo "unknown step $step (tests, tune, overhead, parts)"; exit 2 ;;
  esac
done

#!/usr/bin/env bash
# The checks and sweeps on a GPU machine, in steps that each fit one device command:
#   OUT=/tmp/gpu bash bench/gpu_suite.sh tests   # the whole test suite, GPU tests included
#   OUT=/tmp/gpu bash bench/gpu_suite.sh tune    # every lane on examples/regions.toml
#   OUT=/tmp/gpu bash bench/gpu_suite.sh picks   # GPU lanes at benchmark scale (h200_picks.toml)
#   OUT=/tmp/gpu bash bench/gpu_suite.sh workers # `tune --workers`: one worker per GPU
#   OUT=/tmp/gpu bash bench/gpu_suite.sh dtypes  # bf16 storage, decode and GEMV (bench/dtypes.py)
#   OUT=/tmp/gpu bash bench/gpu_suite.sh gfx11   # the GPU tests on the lanes' gfx11 code paths,
#                                                # emulated (ARBITER_GFX11_EMULATION=1; slow)
#   OUT=/tmp/gpu bash bench/gpu_suite.sh triton  # the triton lane: its tests on the GPU, then a
#                                                # short tune beside the torch lanes
#   OUT=/tmp/gpu bash bench/gpu_suite.sh vs_inductor:PART:DTYPE  # issue 39's numbers, one part
#       (bench/vs_inductor.py: tune, then each region re-timed against torch.compile and eager);
#       PART: one of its PARTS (two regions each, estimated 4-8 min: rows-a, rows-b, mm-a, mm-b,
#       mm-c, attn-d64, attn-d128), a group or region names; DTYPE: f32 or bf16. The part's JSON
#       is written after every region, so a part cut short keeps what it finished. DB_DIR=/tmp
#       keeps the tune's database out of $OUT (fewer files to bring back from a device).
#   OUT=/tmp/gpu bash bench/gpu_suite.sh vs_inductor  # one table from the parts' JSON in $OUT
# Records land in $OUT/*.db, the tables in $OUT/*.txt and *.json.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu}
mkdir -p "$out"
export ARBITER_CACHE_DIR=${ARBITER_CACHE_DIR:-/tmp/arbcache} PYTHONUNBUFFERED=1
for step in "$@"; do
  t0=$SECONDS
  case $step in
    tests)
      timeout 560 python3 -m pytest -q -n 8 -p no:cacheprovider -rfs >"$out/tests.txt" 2>&1
      echo "tests: rc=$? in $((SECONDS - t0)) s: $(tail -1 "$out/tests.txt")" ;;
    tune)
      python3 -m arbiter lanes | tee "$out/lanes.txt"
      timeout 400 python3 -m arbiter tune examples/regions.toml --db "sqlite:///$out/ex.db" \
        --trials 12 --timeout 120 --json >"$out/tune.json" 2>"$out/tune.err"
      echo "tune: rc=$? in $((SECONDS - t0)) s"
      python3 -m arbiter best examples/regions.toml --db "sqlite:///$out/ex.db" \
        | tee "$out/best_examples.txt" ;;
    picks)
      timeout 480 python3 -m arbiter tune bench/h200_picks.toml \
        --lanes hip_scalar,torch,wmma_gemm,fa2 --db "sqlite:///$out/picks.db" --trials 6 \
        --timeout 120 >"$out/tune_picks.txt" 2>&1
      echo "picks: rc=$? in $((SECONDS - t0)) s"
      for b in 1e-3 5e-3; do
        echo "== budget $b"
        python3 -m arbiter best bench/h200_picks.toml --db "sqlite:///$out/picks.db" \
          --budget "$b" | tee "$out/best_picks_$b.txt"
      done ;;
    workers)
      gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
      timeout 400 python3 -m arbiter tune examples/regions.toml --workers "$gpus" \
        --db "sqlite:///$out/workers.db" --trials 8 --timeout 120 --json \
        >"$out/workers.json" 2>"$out/workers.err"
      echo "workers ($gpus GPU): rc=$? in $((SECONDS - t0)) s"
      python3 -m arbiter jobs 1 --db "sqlite:///$out/workers.db" | tee "$out/workers_job.txt"
      python3 -m arbiter tune examples/regions.toml --workers $((gpus + 1)) \
        --db "sqlite:///$out/workers.db" 2>&1 | tee "$out/workers_refused.txt" ;;
    dtypes)
      timeout 560 python3 bench/dtypes.py --out "$out" >"$out/dtypes.txt" 2>&1
      echo "dtypes: rc=$? in $((SECONDS - t0)) s"; tail -40 "$out/dtypes.md" ;;
    gfx11)
      ARBITER_GFX11_EMULATION=1 timeout 560 python3 -m pytest -q -n 8 -p no:cacheprovider -rfs \
        -m gpu tests/lanes >"$out/gfx11.txt" 2>&1
      echo "gfx11 (emulated): rc=$? in $((SECONDS - t0)) s: $(tail -1 "$out/gfx11.txt")" ;;
    triton)
      python3 -c "import triton" 2>/dev/null || pip install -q "triton>=3.4"
      timeout 400 python3 -m pytest -q -n 8 -p no:cacheprovider -rf tests/lanes/test_triton.py \
        >"$out/triton_tests.txt" 2>&1
      echo "triton tests: rc=$? in $((SECONDS - t0)) s: $(tail -1 "$out/triton_tests.txt")"
      timeout 180 python3 -m arbiter tune examples/regions.toml --lanes triton,torch \
        --db "sqlite:///$out/triton.db" --trials 8 --timeout 120 >"$out/triton_tune.txt" 2>&1
      echo "triton tune: rc=$? in $((SECONDS - t0)) s"
      python3 -m arbiter best examples/regions.toml --db "sqlite:///$out/triton.db" \
        | tee "$out/best_triton.txt" ;;
    vs_inductor:*)
      IFS=: read -r _ part dtype <<<"$step"
      name=vs_inductor.${part//,/-}.${dtype:-f32}
      db=${DB_DIR:-$out}/$name.db
      rm -f "$db"
      timeout 540 python3 bench/vs_inductor.py --regions "$part" --dtypes "${dtype:-f32}" \
        --db "$db" --out "$out/$name.json" >"$out/$name.md" 2>"$out/$name.err"
      echo "$step: rc=$? in $((SECONDS - t0)) s"; grep "^vs_inductor: " "$out/$name.err" ;;
    vs_inductor)
      python3 bench/vs_inductor.py --merge "$out"/vs_inductor.*.json \
        --out "$out/vs_inductor.json" | tee "$out/vs_inductor.md" ;;
    *) echo "unknown step $step (tests, tune, picks, workers, dtypes, gfx11, triton,"
       echo "vs_inductor:PART:DTYPE, vs_inductor)"; exit 2 ;;
  esac
done

"""Does every GPU candidate the rocm spaces admit for the example specs fit gfx1151?

    python3 bench/gfx1151_fit.py [--sample N] [--seed S] [--jobs J] [--json OUT.json]

For each example region (examples/*.toml) and GPU lane (wmma_gemm, fa2, hip_scalar, decode,
gemv) that applies, every config its space admits here (the rocm space: run it where no
NVIDIA GPU is found, or under ARBITER_GFX11_EMULATION) is compiled device-only for gfx1151
with the flags of the shared object a ROCm machine loads (cached), and its code object's
metadata read: a candidate fits when no kernel has scratch, spills or a dynamic stack, and
each stays within 64 KiB of LDS (static plus what it is launched with) and 1024 threads.
Prints the counts, the misfits with their reasons, the spread of waves per SIMD, and the time.
--sample N takes N configs per (region, lane) (all when fewer), chosen with --seed.
No GPU needed: clang++-19 with Debian's HIP headers.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from arbiter.lanes._gpu.detect import gpu_platform
from arbiter.lanes._gpu.resources import candidate_resources, launch_problems

from arbiter.lane import Platform, get_lane, refusal
from arbiter.region import load_spec

GPU_LANES = ("wmma_gemm", "fa2", "hip_scalar", "decode", "gemv")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def candidates(sample: int | None, seed: int) -> list[tuple]:
    """(spec stem, region, lane, config) of every admitted config, or `sample` per pair."""
    rng = random.Random(seed)
    out = []
    for spec in sorted(EXAMPLES.glob("*.toml")):
        for region in load_spec(spec).regions:
            for name in GPU_LANES:
                lane = get_lane(name)
                if refusal(lane, region) is not None:
                    continue
                configs = list(lane.space(region).configs())
                if sample is not None and len(configs) > sample:
                    configs = rng.sample(configs, sample)
                out += [(spec.stem, region, lane, c) for c in configs]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=None, help="configs per (region, lane)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", default=None, help="write every candidate's result here")
    args = ap.parse_args()
    if gpu_platform() is not Platform.ROCM and not os.environ.get("ARBITER_GFX11_EMULATION"):
        print("the lanes take their CUDA spaces here: run where no NVIDIA GPU is found, or "
              "with ARBITER_GFX11_EMULATION=1", file=sys.stderr)
        return 2
    todo = candidates(args.sample, args.seed)
    t0 = time.perf_counter()

    def one(item):
        spec, region, lane, config = item
        try:
            res = candidate_resources(lane, region, config, "gfx1151")
            problems = launch_problems(res)
        except Exception as e:  # a compile failure is a result here
            res, problems = None, [f"build failed: {str(e).splitlines()[0]}"]
        return {"spec": spec, "region": region.name, "lane": lane.name,
                "config": config.as_dict(), "problems": problems,
                "waves_per_simd": None if res is None else res["waves_per_simd"],
                "vgprs": None if res is None else res["vgprs"],
                "lds": None if res is None else res["lds"]}

    rows = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for i, row in enumerate(pool.map(one, todo), 1):
            rows.append(row)
            if row["problems"]:
                print(f"MISFIT {row['lane']} {row['spec']}:{row['region']} {row['config']}: "
                      f"{'; '.join(row['problems'])}", flush=True)
            if i % 50 == 0:
                print(f"... {i}/{len(todo)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    seconds = time.perf_counter() - t0
    bad = [r for r in rows if r["problems"]]
    print(f"{len(rows)} admitted candidates built for gfx1151 in {seconds:.0f} s "
          f"({args.jobs} jobs): {len(rows) - len(bad)} fit, {len(bad)} do not")
    by_lane = collections.defaultdict(collections.Counter)
    for r in rows:
        by_lane[r["lane"]][r["waves_per_simd"]] += 1
    for lane, waves in sorted(by_lane.items()):
        spread = ", ".join(f"{w}: {n}" for w, n in sorted(waves.items(), key=str))
        print(f"  {lane}: waves per SIMD -> candidates {{{spread}}}")
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": seconds, "rows": rows}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

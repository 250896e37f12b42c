"""Does every GPU candidate the rocm spaces admit for the example specs fit gfx1151?

    python3 bench/gfx1151_fit.py [--sample N] [--seed S] [--jobs J] [--lanes a,b]
                                 [--json OUT.json]

For each example region (examples/*.toml) and GPU lane (wmma_gemm, fa2, hip_scalar, decode,
gemv, triton) that applies, every config its space admits here (the rocm space: run it where
no NVIDIA GPU is found, or under ARBITER_GFX11_EMULATION; the triton lane's rocm space
anywhere) is compiled for gfx1151 and its code object's metadata read: the HIP lanes
device-only with the flags of the shared object a ROCm machine loads (cached), the triton
lane ahead of time by Triton itself (`lanes.triton.aot.compile_candidate`, one process per
job). A candidate fits when no kernel has scratch, spills (VGPR or SGPR) or a dynamic stack,
and each stays within 64 KiB of LDS (static plus what it is launched with) and 1024 threads.
Prints the counts, the misfits with their reasons, the spread of waves per SIMD, and the time.
--sample N takes N configs per (region, lane) (all when fewer), chosen with --seed; --lanes
picks lanes. No GPU needed: clang++-19 with Debian's HIP headers, and triton for its lane.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from arbiter.lanes._gpu.detect import gpu_platform
from arbiter.lanes._gpu.resources import candidate_resources, launch_problems

from arbiter.lane import Platform, get_lane, refusal
from arbiter.region import load_spec

GPU_LANES = ("wmma_gemm", "fa2", "hip_scalar", "decode", "gemv", "triton")
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def rocm_space(name: str, region):
    """The lane's space for `region` as a gfx1151 build takes it (the triton lane's rocm space
    whatever GPU is here)."""
    if name == "triton":
        from arbiter.lanes.triton.space import space

        return space(region, Platform.ROCM)
    return get_lane(name).space(region)


def candidates(sample: int | None, seed: int, lanes: tuple[str, ...]) -> list[tuple]:
    """(spec stem, region, lane name, config) of every admitted config, or `sample` per pair."""
    rng = random.Random(seed)
    out = []
    for spec in sorted(EXAMPLES.glob("*.toml")):
        for region in load_spec(spec).regions:
            for name in lanes:
                if refusal(get_lane(name), region) is not None:
                    continue
                configs = list(rocm_space(name, region).configs())
                if sample is not None and len(configs) > sample:
                    configs = rng.sample(configs, sample)
                out += [(spec.stem, region, name, c) for c in configs]
    return out


def _row(item: tuple, res: dict | None, problems: list[str]) -> dict:
    spec, region, lane, config = item
    return {"spec": spec, "region": region.name, "lane": lane, "config": config.as_dict(),
            "problems": problems,
            **{k: None if res is None else res[k] for k in ("waves_per_simd", "vgprs", "lds")}}


def hip_one(item: tuple) -> dict:
    """A HIP lane's candidate compiled device-only (threads: clang runs as a process)."""
    _, region, lane, config = item
    try:
        res = candidate_resources(get_lane(lane), region, config, "gfx1151")
        return _row(item, res, launch_problems(res))
    except Exception as e:  # a compile failure is a result here
        return _row(item, None, [f"build failed: {str(e).splitlines()[0]}"])


def triton_one(item: tuple) -> dict:
    """A triton candidate compiled by Triton in this (worker) process."""
    from arbiter.lanes.triton.aot import compile_candidate

    _, region, _, config = item
    try:
        got = compile_candidate(region, config, "gfx1151")
        return _row(item, got["resources"], got["problems"])
    except Exception as e:
        return _row(item, None, [f"build failed: {(str(e).splitlines() or [repr(e)])[0]}"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=None, help="configs per (region, lane)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", default=None, help="write every candidate's result here")
    ap.add_argument("--lanes", default=",".join(GPU_LANES),
                    help=f"comma-separated, of {', '.join(GPU_LANES)}")
    args = ap.parse_args()
    lanes = tuple(n for n in args.lanes.split(",") if n)
    unknown = set(lanes) - set(GPU_LANES)
    if unknown:
        ap.error(f"unknown lane(s) {', '.join(sorted(unknown))}: pick of {', '.join(GPU_LANES)}")
    hip_here = gpu_platform() is Platform.ROCM or os.environ.get("ARBITER_GFX11_EMULATION")
    if not hip_here and set(lanes) - {"triton"}:
        print("the HIP lanes take their CUDA spaces here: run where no NVIDIA GPU is found, or "
              "with ARBITER_GFX11_EMULATION=1 (or --lanes triton)", file=sys.stderr)
        return 2
    if "triton" in lanes and importlib.util.find_spec("triton") is None:
        print("triton is not installed: leaving out the triton lane", file=sys.stderr)
        lanes = tuple(n for n in lanes if n != "triton")
    todo = candidates(args.sample, args.seed, lanes)
    t0 = time.perf_counter()
    rows: list[dict] = []

    def report(found) -> None:
        for row in found:
            rows.append(row)
            if row["problems"]:
                print(f"MISFIT {row['lane']} {row['spec']}:{row['region']} {row['config']}: "
                      f"{'; '.join(row['problems'])}", flush=True)
            if len(rows) % 50 == 0:
                print(f"... {len(rows)}/{len(todo)} ({time.perf_counter() - t0:.0f} s)",
                      flush=True)

    with ThreadPoolExecutor(args.jobs) as threads:
        report(threads.map(hip_one, [c for c in todo if c[2] != "triton"]))
    triton = [c for c in todo if c[2] == "triton"]
    if triton:
        os.environ.pop("TRITON_INTERPRET", None)  # (workers import triton in compile mode)
        with ProcessPoolExecutor(args.jobs) as procs:
            report(procs.map(triton_one, triton))
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

"""16-bit tensors and inference shapes on one NVIDIA GPU, in one run (issue 37's numbers).

    python3 bench/dtypes.py [--quick] [--only gemm,attention,head_dims,decode,gemv] [--out DIR]

Every candidate here is a lane's real artifact on a region stored in bf16 (inputs and output),
built and loaded the way a sweep does, checked against the float64 oracle within the region's
default budget before it is timed, and timed by its runner (device events around back-to-back
launches after warm-up, two input sets rotated; the median of the samples). The baselines are
torch on the same bf16 tensors in the same run, timed the same way (on one input set: a warmer
cache than the lanes' two, so the ratios lean towards the baseline):
  gemm       wmma_gemm, bf16 4096^3 + bias + gelu (a few tilings, prepass = direct async copies)
             against cuBLAS bf16 matmul alone (torch.matmul, no bias, no gelu)
  attention  fa2, bf16 b4 h16 s4096 d128, causal and not, against SDPA's flash backend
  head_dims  fa2's default at d80, d96, d256 (b2 h16 s2048), against SDPA's flash backend
  decode     the decode lane (split-KV) and fa2, bf16 seq_q 1 over 4k..32k keys, against SDPA
             (its default backend choice), with GB/s of Q/K/V/O traffic
  gemv       the gemv lane, bf16 M = 1, 4, 16 x N = K = 4096, 8192 + bias + gelu, against torch
             (matmul + bias + gelu eager), with GB/s of A/B/bias/out traffic: its default and
             the fastest of a few tilings and K splits of each path (fma, mma)
Copy bandwidth is measured in the same run (a 1 GiB device-to-device torch copy, read +
write bytes over the median time), so "x of copy" is a ratio measured beside the result.
Writes dtypes.json and dtypes.md under --out (default $OUT, else .) and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from arbiter.check import budget_of, random_inputs, verify
from arbiter.lane import get_lane, input_shapes, numpy_dtype, output_shape
from arbiter.measure import Measurement, build_candidate
from arbiter.region import AttentionRegion, FusedRegion, Region

WARMUP, REPEATS = 5, 30


def median(xs) -> float:
    return float(statistics.median(xs))


def torch_seconds(fn: Callable[[], object]) -> float:
    import torch

    for _ in range(WARMUP):
        fn()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(REPEATS + 1)]
    ev[0].record()
    for i in range(REPEATS):
        fn()
        ev[i + 1].record()
    ev[-1].synchronize()
    return median([ev[i].elapsed_time(ev[i + 1]) * 1e-3 for i in range(REPEATS)])


def copy_bandwidth() -> float:
    """Bytes read + written per second by a device-to-device copy of 1 GiB."""
    import torch

    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / torch_seconds(lambda: dst.copy_(src))


def tensors(region: Region, inputs: dict) -> dict:
    import torch

    return {n: torch.from_numpy(np.array(a).view(np.int16)).cuda().view(torch.bfloat16)
            for n, a in inputs.items()}


def _config(lane_name: str, region: Region, config: dict | None):
    """The lane's default with `config`'s values over it, or why there is none."""
    lane = get_lane(lane_name)
    why = lane.applies_to(region)
    if why is not None:
        return None, why
    space = lane.space(region)
    cfg = space.default if config is None else space.complete({**space.default.as_dict(),
                                                               **config})
    bad = space.violation(cfg)
    return (None, bad) if bad is not None else (cfg, None)


def prebuild(jobs: list[tuple[str, Region, dict | None]]) -> None:
    """Every candidate through the build cache at once (the compilers run in parallel)."""
    def one(job):
        cfg, _ = _config(*job)
        if cfg is not None:
            build_candidate(get_lane(job[0]), job[1], cfg)

    with ThreadPoolExecutor(min(16, os.cpu_count() or 2)) as pool:
        list(pool.map(one, jobs))


def candidate(lane_name: str, region: Region, config: dict | None, sets) -> dict:
    """Build (from the cache), check against the oracle on a fresh seed, time: one row."""
    lane = get_lane(lane_name)
    cfg, why = _config(lane_name, region, config)
    if cfg is None:
        return {"lane": lane_name, "why": why}
    art = build_candidate(lane, region, cfg)
    if isinstance(art, Measurement):
        return {"lane": lane_name, "config": str(cfg), "why": f"{art.status.value}: "
                f"{art.log.strip()[:300]}"}
    runner = lane.runner(art, region)
    try:
        verdict, _ = verify(runner, region, budget_of(region), [101])
        row = {"lane": lane_name, "config": str(cfg), "status": verdict.status.value,
               "rel_error": verdict.rel_error}
        if verdict.status.value == "ok":
            row["s"] = median(runner.time(sets, warmup=WARMUP, repeats=REPEATS))
        return row
    finally:
        runner.close()


def fastest_per_path(rows: list[dict]) -> list[dict]:
    """The rows, with a lane's configs of one path (gemv's fma and mma tilings) after its
    first row (its default) as one: the fastest timed one, noting how many were tried and
    why any was not timed."""
    out: list[dict] = []
    groups: dict[str, list[dict]] = {}
    seen: set[str] = set()
    for r in rows:
        config = r.get("config", "")
        path = next((p for p in ("fma", "mma") if f"path={p}" in config), None)
        if path is None or r["lane"] not in seen:
            seen.add(r["lane"])
            out.append(r)
            continue
        name = f"{r['lane']} ({path})"
        if name not in groups:
            groups[name] = []
            out.append({"group": name})
        groups[name].append(r)
    for i, r in enumerate(out):
        if "group" not in r:
            continue
        group = groups[r["group"]]
        timed = [g for g in group if "s" in g]
        best = dict(min(timed, key=lambda g: g["s"]) if timed else group[0])
        failed = [g for g in group if "s" not in g]
        best["lane"] = f"{r['group']}, fastest of {len(group)}" + (
            f" ({len(failed)} not timed: {failed[0].get('status', '')} "
            f"{failed[0].get('why', '')[:80]})" if failed else "")
        out[i] = best
    return out


def traffic(region: Region) -> int:
    size = numpy_dtype(region.dtype).itemsize
    elems = sum(int(np.prod(s)) for s in input_shapes(region).values())
    return (elems + int(np.prod(output_shape(region)))) * size


# A plan: (region, [(lane, config overrides or None for the default)], baseline name,
# baseline(t) timed on the region's tensors t, and "flops" or "bytes" for the rate column).
GEMM_TILES = [{}, {"staging": "prepass", "block_m": 128, "block_n": 128, "block_k": 32,
                   "warp_m": 64, "warp_n": 32, "threads": 256, "stages": 4},
              {"staging": "prepass", "block_m": 128, "block_n": 256, "block_k": 32,
               "warp_m": 64, "warp_n": 64, "threads": 256, "stages": 3},
              {"staging": "prepass", "block_m": 128, "block_n": 128, "block_k": 64,
               "warp_m": 64, "warp_n": 32, "threads": 256, "stages": 3}]
FA2_CONFIGS = [{}, {"staging": "prepass", "warps": 4, "block_q": 64, "block_k": 64, "stages": 2},
               {"staging": "prepass", "warps": 8, "block_q": 128, "block_k": 64, "stages": 2},
               {"staging": "prepass", "warps": 4, "block_q": 64, "block_k": 64, "stages": 3},
               {"staging": "inline", "warps": 8, "block_q": 128, "block_k": 64, "stages": 2}]
# gemv's two paths beside its default: the fma path's former default tiling and the tensor-core
# path's (16-column tiles per warp, threads, stages), each at a few K splits (the mma path's
# down to none); the table shows the fastest of each path
GEMV_FMA = [{"path": "fma", "cols": 8, "threads": 256, "unroll": 8, "split_k": s}
            for s in (4, 8, 16, 32)]
GEMV_MMA = [{"path": "mma", "cols": c, "threads": t, "unroll": u, "split_k": s}
            for c, t, u in ((8, 128, 2), (8, 64, 4), (4, 128, 4), (4, 64, 4), (4, 256, 2))
            for s in (1, 2, 4, 8)]


def _sdpa(causal: bool, flash: bool):
    def call(t):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        f = torch.nn.functional.scaled_dot_product_attention
        if not flash:  # the backend SDPA picks itself, as a user calling it gets
            return f(t["q"], t["k"], t["v"], is_causal=causal)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return f(t["q"], t["k"], t["v"], is_causal=causal)
    return call


def _matmul(t):
    import torch

    return torch.matmul(t["A"], t["B"])


def _matmul_bias_gelu(t):
    import torch

    return torch.nn.functional.gelu(torch.matmul(t["A"], t["B"]) + t["bias"],
                                    approximate="tanh")


def plans(parts: set[str], quick: bool) -> list[dict]:
    out = []
    if "gemm" in parts:
        n = 1024 if quick else 4096
        r = FusedRegion(n, n, n, epilogue=("bias", "gelu"), dtype="bf16")
        out.append({"region": r, "jobs": [("wmma_gemm", c) for c in GEMM_TILES]
                    + [("torch", None)], "baseline": "cuBLAS bf16 matmul alone",
                    "call": _matmul, "flops": 2.0 * n ** 3})
    if "attention" in parts:
        b, h, s = (1, 4, 1024) if quick else (4, 16, 4096)
        for causal in (False, True):
            r = AttentionRegion(b, h, s, 128, causal=causal, dtype="bf16")
            out.append({"region": r, "jobs": [("fa2", c) for c in FA2_CONFIGS],
                        "baseline": "SDPA flash bf16", "call": _sdpa(causal, True),
                        "flops": 4.0 * b * h * s * s * 128 / (2 if causal else 1)})
    if "head_dims" in parts:  # fa2 beyond the powers of two (its default config)
        b, h, s = (1, 4, 512) if quick else (2, 16, 2048)
        for d in (80, 96, 256):
            r = AttentionRegion(b, h, s, d, dtype="bf16")
            out.append({"region": r, "jobs": [("fa2", None)], "baseline": "SDPA flash bf16",
                        "call": _sdpa(False, True), "flops": 4.0 * b * h * s * s * d})
    if "decode" in parts:
        shapes = [(2, 8, 4096), (8, 32, 4096)] if quick else [
            (2, 8, 4096), (4, 16, 16384), (8, 32, 8192), (2, 8, 32768), (8, 32, 32768)]
        for b, h, sk in shapes:
            # seq_q 1: bottom-right, the one query sees every key, so SDPA needs no mask
            r = AttentionRegion(b, h, 1, 128, seq_k=sk, causal=True, dtype="bf16")
            out.append({"region": r, "jobs": [("decode", None), ("fa2", None)],
                        "baseline": "SDPA bf16", "call": _sdpa(False, False),
                        "bytes": traffic(r)})
    if "gemv" in parts:
        for n in (4096,) if quick else (4096, 8192):
            for m in (1, 4, 16):
                r = FusedRegion(m, n, n, epilogue=("bias", "gelu"), dtype="bf16")
                out.append({"region": r, "jobs": [("gemv", None)] + [("gemv", c) for c in
                                                                      GEMV_FMA + GEMV_MMA]
                            + [("wmma_gemm", None)],
                            "baseline": "torch matmul+bias+gelu bf16",
                            "call": _matmul_bias_gelu, "bytes": traffic(r)})
    return out


def run_plan(plan: dict) -> dict:
    r = plan["region"]
    sets = [random_inputs(r, x) for x in (1, 2)]
    t = tensors(r, sets[0])
    case = {"case": r.describe(), "baseline": plan["baseline"],
            "baseline_s": torch_seconds(lambda: plan["call"](t)),
            "rows": fastest_per_path([candidate(lane, r, c, sets) for lane, c in plan["jobs"]])}
    case.update({k: plan[k] for k in ("flops", "bytes") if k in plan})
    return case


def table(cases: list[dict], copy_bps: float) -> str:
    lines = ["| case | lane | config | rel error | time | vs baseline | rate |",
             "|---|---|---|---|---|---|---|"]
    for c in cases:
        base = c["baseline_s"]
        rate = (f"{c['flops'] / base / 1e12:.0f} TFLOP/s" if "flops" in c
                else f"{c['bytes'] / base / 1e9:.0f} GB/s ({c['bytes'] / base / copy_bps:.2f} "
                     "of copy)")
        lines.append(f"| {c['case']} | {c['baseline']} | | | {base * 1e6:.1f} us | 1.00 | "
                     f"{rate} |")
        for r in c["rows"]:
            if "s" not in r:
                lines.append(f"| | {r['lane']} | {r.get('config', '')} | "
                             f"{r.get('rel_error') or ''} | - | - | "
                             f"{r.get('status', '')} {r.get('why', '')[:120]} |")
                continue
            s = r["s"]
            rate = (f"{c['flops'] / s / 1e12:.0f} TFLOP/s" if "flops" in c
                    else f"{c['bytes'] / s / 1e9:.0f} GB/s ({c['bytes'] / s / copy_bps:.2f} "
                         "of copy)")
            lines.append(f"| | {r['lane']} | {r['config']} | {r['rel_error']:.2e} | "
                         f"{s * 1e6:.1f} us | {base / s:.2f} | {rate} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke test)")
    ap.add_argument("--only", default="gemm,attention,head_dims,decode,gemv")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs one", file=sys.stderr)
        return 1
    t0 = time.time()
    copy_bps = copy_bandwidth()
    print(f"{torch.cuda.get_device_name(0)}: copy {copy_bps / 1e9:.0f} GB/s", flush=True)
    todo = plans(set(args.only.split(",")), args.quick)
    prebuild([(lane, p["region"], c) for p in todo for lane, c in p["jobs"]])
    print(f"built in {time.time() - t0:.0f} s", flush=True)
    cases = []
    for p in todo:
        cases.append(run_plan(p))
        print(table(cases[-1:], copy_bps), flush=True)
    md = (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, copy "
          f"{copy_bps / 1e9:.0f} GB/s, {time.time() - t0:.0f} s\n\n" + table(cases, copy_bps))
    print(md, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dtypes.md").write_text(md + "\n")
    (out / "dtypes.json").write_text(json.dumps({"copy_bps": copy_bps, "cases": cases},
                                                indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

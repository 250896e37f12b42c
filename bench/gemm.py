"""wmma_gemm proof on an NVIDIA GPU, in one run: conformance, sweep, baselines, SASS, resources.

    python3 bench/gemm.py [--out DIR] [--skip-tests] [--quick]

1. Runs tests/lanes/test_wmma_gemm.py (the shared conformance suite + precision tests) on the
   GPU with pytest -n 8, while the sweep's kernels build in parallel beside it.
2. For matmul+bias+gelu at 1024^3, 4096^3 and 8192x8192x1024 (f32 in and out): times a focused
   set of wmma_gemm configs (bf16; the fastest again in f16) and torch baselines: cuBLAS bf16 and
   f16 matmul alone (16-bit tensors in and out), torch's unfused bf16 matmul + bias + gelu, the
   same computation from f32 tensors (convert, matmul, bias, gelu, back to f32), and plain f32.
   Timing: CUDA events around every call, back to back, after warm-up, input sets rotated,
   median of the samples (the runner ABI's arbiter_time for wmma_gemm; the same loop for torch).
   Errors: ||out - ref|| / ||ref|| against a float64 reference computed by torch on the GPU.
3. For each shape's winner: SASS instruction counts (cuobjdump --dump-sass) and the ptxas
   resource report (-Xptxas -v).
Writes gemm.json, gemm.md, pytest.log, sass.txt under --out (default $OUT); prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

SHAPES = {"1024^3": (1024, 1024, 1024), "4096^3": (4096, 4096, 4096),
          "8192x8192x1024": (8192, 8192, 1024)}


def _c(staging, bm, bn, bk, wm, wn, stages, group_m=8):
    threads = 32 * (bm // wm) * (bn // wn)
    return dict(staging=staging, block_m=bm, block_n=bn, block_k=bk, warp_m=wm, warp_n=wn,
                threads=threads, stages=stages, group_m=group_m, precision="bf16")


BIG = [
    _c("prepass", 128, 128, 32, 64, 32, 4),
    _c("prepass", 128, 128, 32, 64, 32, 3),
    _c("prepass", 128, 128, 64, 64, 32, 3),
    _c("prepass", 128, 128, 32, 32, 64, 4),
    _c("prepass", 128, 128, 32, 64, 64, 4),
    _c("prepass", 256, 128, 32, 64, 32, 3),
    _c("prepass", 128, 256, 32, 64, 64, 4),
    _c("prepass", 128, 128, 32, 64, 32, 4, group_m=1),
    _c("inline", 128, 128, 32, 64, 32, 2),
]
SWEEP = {
    "1024^3": [
        _c("prepass", 128, 128, 32, 64, 32, 4),
        _c("prepass", 64, 128, 32, 32, 64, 4),
        _c("prepass", 128, 64, 32, 64, 32, 4),
        _c("prepass", 64, 64, 64, 32, 32, 3),
        _c("inline", 64, 64, 32, 32, 32, 2),
        _c("inline", 128, 128, 32, 64, 32, 2),
    ],
    "4096^3": BIG,
    "8192x8192x1024": BIG[:6],
}


def _region(shape):
    from arbiter import FusedRegion

    m, n, k = SHAPES[shape]
    return FusedRegion(m, n, k, name=f"gemm_{shape}", epilogue=("bias", "gelu"))


def _inputs(shape, seed):
    from arbiter.check import random_inputs

    return random_inputs(_region(shape), seed)


def _torch_time(torch, fn, sets, warmup, repeats):
    for i in range(warmup):
        fn(sets[i % len(sets)])
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
    ev[0].record()
    for r in range(repeats):
        fn(sets[r % len(sets)])
        ev[r + 1].record()
    torch.cuda.synchronize()
    return [ev[r].elapsed_time(ev[r + 1]) * 1e-3 for r in range(repeats)]


def _torch_graph_time(torch, fn, sets, warmup, repeats, calls=10):
    """Per-call seconds from CUDA-graph replays of `calls` calls (sets rotated): no Python
    dispatch gaps between kernels, which dominate event timing of small torch calls."""
    for i in range(3):
        fn(sets[i % len(sets)])
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(sets[i % len(sets)])
    for _ in range(warmup):
        g.replay()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
    ev[0].record()
    for r in range(repeats):
        g.replay()
        ev[r + 1].record()
    torch.cuda.synchronize()
    return [ev[r].elapsed_time(ev[r + 1]) * 1e-3 / calls for r in range(repeats)]


def _gelu64(torch, x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _rel(torch, out, ref):
    out = torch.as_tensor(out, device="cuda", dtype=torch.float64)
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def baselines(torch, shape, host_sets, warmup, repeats):
    F = torch.nn.functional
    dev = [{k: torch.from_numpy(v).cuda() for k, v in s.items()} for s in host_sets]
    a64, b64, c64 = (dev[0][k].double() for k in ("A", "B", "bias"))
    ref = _gelu64(torch, a64 @ b64 + c64)
    lo = {dt: [{k: v.to(dt) for k, v in s.items()} for s in dev]
          for dt in (torch.bfloat16, torch.float16)}
    cases = {
        "cublas_bf16_matmul_only": (lo[torch.bfloat16], lambda s: s["A"] @ s["B"]),
        "cublas_f16_matmul_only": (lo[torch.float16], lambda s: s["A"] @ s["B"]),
        "torch_unfused_bf16": (lo[torch.bfloat16],
                               lambda s: F.gelu(s["A"] @ s["B"] + s["bias"], approximate="tanh")),
        "torch_unfused_f32_io_bf16": (
            dev, lambda s: F.gelu((s["A"].bfloat16() @ s["B"].bfloat16()).float() + s["bias"],
                                  approximate="tanh")),
        "torch_unfused_f32": (dev, lambda s: F.gelu(s["A"] @ s["B"] + s["bias"],
                                                    approximate="tanh")),
    }
    out = {}
    for name, (sets, fn) in cases.items():
        samples = _torch_time(torch, fn, sets, warmup, repeats)
        graph = _torch_graph_time(torch, fn, sets, warmup, max(10, repeats // 5))
        err = None
        if "matmul_only" not in name:
            err = _rel(torch, fn(sets[0]).float(), ref)
        # the baseline's time is the faster of the two methods: never flatter wmma_gemm
        med = min(statistics.median(samples), statistics.median(graph))
        out[name] = {"median_s": med, "events_median_s": statistics.median(samples),
                     "graph_median_s": statistics.median(graph), "rel_error": err}
    del dev, lo
    return out, ref


def _build_all(items):
    from arbiter.lane import Config, get_lane
    from arbiter.measure import build_candidate

    lane = get_lane("wmma_gemm")

    def one(item):
        shape, cfg = item
        t0 = time.perf_counter()
        region = _region(shape)
        config = Config.of(cfg)
        why = lane.space(region).violation(config)
        if why:
            return item, None, f"invalid: {why}", 0.0
        built = build_candidate(lane, region, config)
        return item, built, "", time.perf_counter() - t0

    with ThreadPoolExecutor(12) as pool:
        return list(pool.map(one, items))


def time_wmma(torch, shape, cfg, built, host_sets, ref, warmup, repeats):
    from arbiter.check import poison
    from arbiter.lane import get_lane
    from arbiter.measure import Measurement
    from arbiter.region import output_shape

    if isinstance(built, Measurement):
        return {"status": built.status.value, "log": built.log[-2000:]}
    lane = get_lane("wmma_gemm")
    region = _region(shape)
    runner = lane.runner(built, region)
    try:
        out = np.empty(output_shape(region), np.float32)
        poison(out)
        runner.run(host_sets[0], out)
        err = _rel(torch, out, ref)
        samples = runner.time(host_sets, warmup=warmup, repeats=repeats)
    finally:
        runner.close()
    q = statistics.quantiles(samples, n=4)
    return {"status": "ok", "median_s": statistics.median(samples), "rel_error": err,
            "spread_s": q[2] - q[0],
            "artifact": built.path, "source": built.source.text}


def _time_skip_convert(torch, shape, row, host_sets, warmup, repeats):
    """The winner with its prepass (f32 -> 16-bit conversion) run on the first launch only:
    what the GEMM itself takes. Timing only; the output is stale after the first set."""
    import dataclasses

    from arbiter.lane import Config, KernelSource, get_lane

    lane = get_lane("wmma_gemm")
    region = _region(shape)
    config = Config.of(row["config"])
    if row["config"]["staging"] != "prepass":
        return {"status": "invalid", "log": "winner has no prepass", "config": row["config"]}
    src: KernelSource = lane.emit(region, config)
    src = dataclasses.replace(src, text="#define GEMM_BENCH_SKIP_CONVERT 1\n" + src.text)
    runner = lane.runner(lane.build(src), region)
    try:
        samples = runner.time(host_sets, warmup=warmup, repeats=repeats)
    finally:
        runner.close()
    return {"status": "ok", "median_s": statistics.median(samples), "rel_error": float("nan"),
            "config": row["config"]}


def sass_report(path, source_text):
    rc = subprocess.run(["cuobjdump", "--dump-sass", path], capture_output=True, text=True)
    sass = rc.stdout
    kernels = re.split(r"\n\s*Function : ", sass)
    counts = {}
    for block in kernels[1:]:
        name = block.split("\n", 1)[0].strip()
        if "gemm_kernel" not in name:
            continue
        for op in ("HMMA", "HGMMA", "LDSM", "LDGSTS", "LDG", "STS", "LDS", "STG", "LDL", "STL",
                   "BAR", "F2F", "F2FP"):
            counts[op] = len(re.findall(rf"\b{op}\b", block))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.cu"
        src.write_text(source_text)
        from arbiter.lanes._gpu.build import INCLUDE_DIR

        p = subprocess.run(["nvcc", "-x", "cu", "-arch=sm_90", "-O3", "-cubin", "-Xptxas", "-v",
                            f"-I{INCLUDE_DIR}", "-o", str(Path(tmp) / "k.cubin"), str(src)],
                           capture_output=True, text=True)
    ptxas = "\n".join(ln for ln in p.stderr.splitlines() if "ptxas info" in ln)
    return counts, ptxas, sass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1024^3 only, fewer repeats")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("ARBITER_CACHE_DIR", str(Path(tempfile.gettempdir()) / "arbcache"))
    import torch

    shapes = ["1024^3"] if args.quick else list(SHAPES)
    warmup, repeats = (5, 20) if args.quick else (10, 50)
    t_start = time.time()

    tests = None
    if not args.skip_tests:
        log = open(out / "pytest.log", "w")
        tests = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-n", "8", "-p", "no:cacheprovider",
             "tests/lanes/test_wmma_gemm.py", "-rs", "-s"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    items = [(s, c) for s in shapes for c in SWEEP[s]]
    builds = {(s, json.dumps(c, sort_keys=True)): (b, why, sec)
              for (s, c), b, why, sec in _build_all(items)}
    print(f"built {len(builds)} sweep kernels in {time.time() - t_start:.0f}s", flush=True)
    if tests is not None:
        rc = tests.wait()
        tail = (out / "pytest.log").read_text().strip().splitlines()[-3:]
        print(f"conformance pytest exit {rc}: {' | '.join(tail)}", flush=True)

    results = {"device": torch.cuda.get_device_name(0), "timing":
               "CUDA events around each call, back to back, median; "
               f"{warmup} warm-up calls, {repeats} timed, 2 input sets rotated", "shapes": {}}
    sass_text = []
    for shape in shapes:
        m, n, k = SHAPES[shape]
        flops = 2.0 * m * n * k
        host_sets = [_inputs(shape, s) for s in (11, 12)]
        base, ref = baselines(torch, shape, host_sets, warmup, repeats)
        rows = {}
        for cfg in SWEEP[shape]:
            built, why, _ = builds[(shape, json.dumps(cfg, sort_keys=True))]
            key = " ".join(f"{a}={cfg[a]}" for a in sorted(cfg))
            rows[key] = ({"status": "invalid", "log": why} if built is None else
                         time_wmma(torch, shape, cfg, built, host_sets, ref, warmup, repeats))
            rows[key]["config"] = cfg
        ok = {k: v for k, v in rows.items() if v["status"] == "ok"}
        best_key = min(ok, key=lambda k: ok[k]["median_s"]) if ok else None
        if best_key:
            f16 = dict(ok[best_key]["config"], precision="f16")
            (_, b16, why16, _), = _build_all([(shape, f16)])
            rows["winner_in_f16"] = (time_wmma(torch, shape, f16, b16, host_sets, ref, warmup,
                                               repeats) if b16 is not None
                                     else {"status": "invalid", "log": why16})
            rows["winner_in_f16"]["config"] = f16
            rows["winner_gemm_only_no_prepass"] = _time_skip_convert(
                torch, shape, ok[best_key], host_sets, warmup, repeats)
            counts, ptxas, sass = sass_report(ok[best_key]["artifact"], ok[best_key]["source"])
            sass_text.append(f"==== {shape} winner {best_key}\n{ptxas}\n{counts}\n{sass}")
        else:
            counts, ptxas = {}, ""
        for v in rows.values():
            v.pop("source", None)
            if "median_s" in v:
                v["tflops"] = flops / v["median_s"] * 1e-12
        for v in base.values():
            v["tflops"] = flops / v["median_s"] * 1e-12
        results["shapes"][shape] = {"baselines": base, "wmma": rows, "winner": best_key,
                                    "sass_counts": counts, "ptxas": ptxas}
        del ref
        torch.cuda.empty_cache()

    (out / "gemm.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "sass.txt").write_text("\n\n".join(sass_text)[:15_000_000])
    md = _table(results)
    (out / "gemm.md").write_text(md)
    print(md)
    print(f"total {time.time() - t_start:.0f}s")
    return 0


def _table(results) -> str:
    lines = [f"device: {results['device']}; timing: {results['timing']}", ""]
    for shape, r in results["shapes"].items():
        cub = r["baselines"]["cublas_bf16_matmul_only"]["median_s"]
        lines.append(f"### {shape} matmul+bias+gelu")
        lines.append("| candidate | ms | TFLOP/s | x cuBLAS bf16 mm | rel error |")
        lines.append("|---|---|---|---|---|")
        for name, v in r["baselines"].items():
            err = "" if v["rel_error"] is None else f"{v['rel_error']:.2e}"
            lines.append(f"| {name} | {v['median_s'] * 1e3:.3f} | {v['tflops']:.1f} | "
                         f"{cub / v['median_s']:.2f} | {err} |")
        for name, v in sorted(r["wmma"].items(), key=lambda kv: kv[1].get("median_s", 1e9)):
            if v["status"] != "ok":
                lines.append(f"| wmma {name} | {v['status']} | | | {v.get('log', '')[:80]} |")
                continue
            star = " **winner**" if name == r["winner"] else ""
            lines.append(f"| wmma {name}{star} | {v['median_s'] * 1e3:.3f} | {v['tflops']:.1f} | "
                         f"{cub / v['median_s']:.2f} | {v['rel_error']:.2e} |")
        lines.append(f"winner SASS counts: {r['sass_counts']}")
        lines.append(f"ptxas: {r['ptxas'].replace(chr(10), ' / ')}")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

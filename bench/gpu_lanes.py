"""GPU lanes on one device, one run: hip_scalar's best config vs a device copy and torch eager.

    python3 bench/gpu_lanes.py [--quick] [--json OUT.json]

Rowwise chains (16384x4096 f32): every config of hip_scalar's space is built (in parallel) and
timed; the best is checked against the float64 oracle and reported in GB/s (bytes of inputs +
output per call / median time) next to a device-to-device copy (torch `dst.copy_(src)`, bytes
read + written) and torch eager (the torch lane). The 4096^3 matmul+bias+gelu: the best
hip_scalar GEMM config against torch f32 (allow_tf32=False; TF32 shown for reference).
Timing: device events between back-to-back launches (arb_runner.h / torch.cuda.Event),
warm-up 3, 20 repeats, 2 input sets rotated; medians.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from arbiter import FusedRegion, RowwiseRegion, random_inputs
from arbiter.check import compare, poison, reference
from arbiter.lane import get_lane
from arbiter.measure import Measurement, build_candidate
from arbiter.region import input_shapes, output_shape

WARMUP, REPEATS = 3, 20


def median(xs):
    return float(np.median(np.asarray(xs)))


def copy_seconds(n_floats: int) -> float:
    import torch

    src = torch.randn(n_floats, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(WARMUP):
        dst.copy_(src)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(REPEATS + 1)]
    ev[0].record()
    for r in range(REPEATS):
        dst.copy_(src)
        ev[r + 1].record()
    ev[-1].synchronize()
    return median([ev[r].elapsed_time(ev[r + 1]) * 1e-3 for r in range(REPEATS)])


def sweep(lane, region, sets, configs):
    with ThreadPoolExecutor(min(14, os.cpu_count() or 2)) as pool:
        built = list(pool.map(lambda c: build_candidate(lane, region, c), configs))
    rows = []
    for config, art in zip(configs, built):
        if isinstance(art, Measurement):
            rows.append((config, None, f"{art.status.value}: {art.log[:300]}"))
            continue
        runner = lane.runner(art, region)
        try:
            rows.append((config, median(runner.time(sets, warmup=WARMUP, repeats=REPEATS)), ""))
        except RuntimeError as e:
            rows.append((config, None, str(e)))
        finally:
            runner.close()
    return rows


def checked_time(lane, region, config, sets, ref):
    art = build_candidate(lane, region, config)
    assert not isinstance(art, Measurement), art.log
    runner = lane.runner(art, region)
    try:
        out = np.empty(output_shape(region), np.float32)
        poison(out)
        runner.run(sets[0], out)
        verdict = compare(out, ref, 1e-3)
        t = median(runner.time(sets, warmup=WARMUP, repeats=REPEATS))
    finally:
        runner.close()
    return t, verdict


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke test)")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()
    m, n, g = (1024, 4096, 1024) if args.quick else (16384, 4096, 4096)
    hip, torch_lane = get_lane("hip_scalar"), get_lane("torch")
    for ln in (hip, torch_lane):
        av = ln.available()
        print(f"{ln.name}: {'ok' if av else 'UNAVAILABLE'}: {av.reason}", flush=True)
        if not av:
            return 1
    import torch

    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "rowwise": [], "gemm": {}}
    bytes_copy = copy_seconds(m * n)
    copy_gbs = 2 * m * n * 4 / bytes_copy / 1e9
    results["copy_gbs"] = copy_gbs
    print(f"device copy {m}x{n} f32: {copy_gbs:.0f} GB/s (read+write)", flush=True)
    chains = {
        "bias+softmax": RowwiseRegion(m, n, epilogue=("bias",), reduction="softmax"),
        "rmsnorm": RowwiseRegion(m, n, reduction="rmsnorm"),
        "layer_norm": RowwiseRegion(m, n, reduction="layer_norm"),
        "bias+gelu+residual": RowwiseRegion(m, n, epilogue=("bias", "gelu"), residual=True),
    }
    for label, region in chains.items():
        t0 = time.time()
        sets = [random_inputs(region, s) for s in (11, 12)]
        ref = reference(region, sets[0])
        bytes_ = sum(int(np.prod(s)) for s in input_shapes(region).values()) * 4
        bytes_ += int(np.prod(output_shape(region))) * 4
        rows = sweep(hip, region, sets, list(hip.space(region).configs()))
        ok = sorted((r for r in rows if r[1] is not None), key=lambda r: r[1])
        best_cfg = ok[0][0]
        t_hip, v_hip = checked_time(hip, region, best_cfg, sets, ref)
        t_torch, v_torch = checked_time(torch_lane, region, torch_lane.space(region).default,
                                        sets, ref)
        row = {
            "chain": label, "configs": len(rows), "failed": [str(r[0]) + " " + r[2]
                                                             for r in rows if r[1] is None],
            "best": str(best_cfg), "hip_ms": t_hip * 1e3, "torch_ms": t_torch * 1e3,
            "hip_gbs": bytes_ / t_hip / 1e9, "torch_gbs": bytes_ / t_torch / 1e9,
            "hip_vs_copy": bytes_ / t_hip / 1e9 / copy_gbs,
            "speedup_vs_torch": t_torch / t_hip,
            "hip_rel_error": v_hip.rel_error, "hip_status": v_hip.status.value,
            "torch_rel_error": v_torch.rel_error,
            "top5": [(str(c), t * 1e3) for c, t, _ in ok[:5]],
        }
        results["rowwise"].append(row)
        print(json.dumps(row), f"({time.time() - t0:.0f}s)", flush=True)

    region = FusedRegion(g, g, g, epilogue=("bias", "gelu"))
    t0 = time.time()
    sets = [random_inputs(region, s) for s in (21, 22)]
    ref = reference(region, sets[0])
    rows = sweep(hip, region, sets, list(hip.space(region).configs()))
    ok = sorted((r for r in rows if r[1] is not None), key=lambda r: r[1])
    t_hip, v_hip = checked_time(hip, region, ok[0][0], sets, ref)
    from arbiter.lane import Config

    t_f32, v_f32 = checked_time(torch_lane, region, Config.of(tf32=False), sets, ref)
    t_tf32, v_tf32 = checked_time(torch_lane, region, Config.of(tf32=True), sets, ref)
    flops = 2.0 * g ** 3
    results["gemm"] = {
        "region": region.describe(), "best": str(ok[0][0]), "configs": len(rows),
        "failed": [str(r[0]) + " " + r[2] for r in rows if r[1] is None],
        "hip_ms": t_hip * 1e3, "hip_tflops": flops / t_hip / 1e12,
        "torch_f32_ms": t_f32 * 1e3, "torch_f32_tflops": flops / t_f32 / 1e12,
        "torch_tf32_ms": t_tf32 * 1e3, "torch_tf32_tflops": flops / t_tf32 / 1e12,
        "hip_vs_torch_f32": t_f32 / t_hip,
        "hip_rel_error": v_hip.rel_error, "hip_status": v_hip.status.value,
        "torch_f32_rel_error": v_f32.rel_error, "torch_tf32_rel_error": v_tf32.rel_error,
        "top5": [(str(c), t * 1e3) for c, t, _ in ok[:5]],
    }
    print(json.dumps(results["gemm"]), f"({time.time() - t0:.0f}s)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    print("\n| chain | best hip_scalar config | hip GB/s | % of copy | torch GB/s | "
          "hip vs torch |")
    print("|---|---|---|---|---|---|")
    for r in results["rowwise"]:
        print(f"| {r['chain']} | {r['best']} | {r['hip_gbs']:.0f} | "
              f"{100 * r['hip_vs_copy']:.0f}% | {r['torch_gbs']:.0f} | "
              f"{r['speedup_vs_torch']:.2f}x |")
    gm = results["gemm"]
    print(f"\nGEMM {gm['region']}: hip_scalar {gm['hip_tflops']:.1f} TFLOP/s ({gm['best']}), "
          f"torch f32 {gm['torch_f32_tflops']:.1f}, tf32 {gm['torch_tf32_tflops']:.1f}; "
          f"hip/torch_f32 = {gm['hip_vs_torch_f32']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

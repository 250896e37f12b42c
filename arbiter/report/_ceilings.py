"""Measure this machine's ceilings once per environment and record them.

CPU: numpy copy of a buffer far larger than cache (bytes read + written) and a numpy float32
matmul. GPU (torch with a device present): a device-to-device copy and torch matmuls, timed
with device events. The best of a few repeats is the ceiling: it is what the machine *can* do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from sqlalchemy import select

from ..records import CeilingModel, EnvironmentModel, session_scope
from ._work import BANDWIDTH, MATMUL

__all__ = ["ensure_ceilings", "measure_cpu", "measure_gpu", "record_ceilings"]

COPY_BYTES = 256 * 2**20  # per buffer; far beyond any last-level cache
MATMUL_N = 1024
REPEATS = 10

Ceiling = tuple[str, float, str, str]  # name, value, unit, method


def _best_seconds(call: Callable[[], Any], repeats: int = REPEATS) -> float:
    call()  # warm-up: page faults, BLAS thread start
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_cpu() -> list[Ceiling]:
    src = np.ones(COPY_BYTES // 4, dtype=np.float32)
    dst = np.empty_like(src)
    t = _best_seconds(lambda: np.copyto(dst, src))
    copy = (
        BANDWIDTH,
        2 * COPY_BYTES / t,
        "B/s",
        f"numpy copyto {COPY_BYTES >> 20} MiB f32 (read+write counted), best of {REPEATS}",
    )
    rng = np.random.default_rng(0)
    a = rng.standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    b = rng.standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    t = _best_seconds(lambda: a @ b)
    mm = (
        MATMUL,
        2.0 * MATMUL_N**3 / t,
        "FLOP/s",
        f"numpy f32 matmul {MATMUL_N}^3 ({np.__version__}), best of {REPEATS}",
    )
    return [copy, mm]


def measure_gpu() -> list[Ceiling]:
    """Device ceilings through torch; empty when torch or a GPU is missing."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    dev = torch.device("cuda")

    def device_seconds(call: Callable[[], Any]) -> float:
        call()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(REPEATS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) * 1e-3)
        return best

    nbytes = 1 << 30
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    copy_s = device_seconds(partial(dst.copy_, src))
    del src, dst  # free 2 GiB before the matmuls
    out = [
        (
            "gpu_copy_bandwidth",
            2 * nbytes / copy_s,
            "B/s",
            f"torch {torch.__version__} device copy 1 GiB f32 (read+write), events, "
            f"best of {REPEATS}",
        )
    ]
    n = 8192
    for name, dtype in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        t = device_seconds(partial(torch.matmul, a, b))
        out.append(
            (
                f"gpu_matmul_{name}",
                2.0 * n**3 / t,
                "FLOP/s",
                f"torch {torch.__version__} matmul {name} {n}^3, events, best of {REPEATS}",
            )
        )
    torch.cuda.empty_cache()
    return out


def record_ceilings(url: str, fingerprint: str, values: list[Ceiling]) -> int:
    """Store measured ceilings for an environment already in the records; returns rows put."""
    with session_scope(url) as s:
        env = EnvironmentModel.find(s, fingerprint)
        if env is None:
            return 0
        for name, value, unit, method in values:
            CeilingModel.put(s, env.id, name, value, unit, method)
        return len(values)


def ensure_ceilings(url: str, *, gpu: bool = True) -> list[str]:
    """Measure and record this machine's ceilings if its environment has none yet.

    Only this machine can be measured, so only the environment whose fingerprint matches the
    running one is filled in; returns the names recorded (empty when nothing was needed).
    """
    from ..records import fingerprint

    fp = fingerprint().hash
    with session_scope(url) as s:
        env = EnvironmentModel.find(s, fp)
        if env is None:
            return []
        have = set(
            s.scalars(select(CeilingModel.name).where(CeilingModel.environment_id == env.id))
        )
    if BANDWIDTH in have:
        return []
    values = measure_cpu() + (measure_gpu() if gpu else [])
    record_ceilings(url, fp, values)
    return [v[0] for v in values]

"""HIP-dialect source for the gemv lane: constants + generated prologue/epilogue +
gemv_kernel.hip + runner ABI.

The kernel text lives beside this module (`gemv_kernel.hip`). emit writes the header comment,
the storage-type define, the compile-time constants of one (region, config), including the
shared-memory plan that `plan` computes (the lane's rules read the same numbers), and the
per-region device functions: the prologue is `lanes._scalar_body.prologue_function` and the
epilogue its `epilogue_function`, so the math is the one definition every lane renders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arbiter.lane import Config, EmitError, FusedRegion, KernelSource, Platform, Region

from .._gpu.abi import REBUILD, runner_table, store_defines
from .._scalar_body import epilogue_function, prologue_function

__all__ = ["A_CHUNK_FLOATS", "ELEM_BYTES", "LANE", "MAX_M", "PATHS", "Plan", "block_n", "emit",
           "load_bytes", "mma_fits", "plan"]

LANE = "gemv"
MAX_M = 16
ELEM_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
A_CHUNK_FLOATS = 4096  # 16 KiB of prologue(A) staged per chunk of K
PATHS = ("fma", "mma")  # f32 FMAs on the CUDA/SIMD cores, or the tensor cores (16-bit storage)
_KERNEL = Path(__file__).with_name("gemv_kernel.hip")


def _dtype(region: Region) -> str:
    return getattr(region, "dtype", "f32")


@dataclass(frozen=True)
class Plan:
    """Shared-memory use of one block; mirrors the static_asserts of gemv_kernel.hip."""

    kc: int  # rows of K whose prologue(A) is staged at once
    rm: int  # rows of M whose warp partials are added per round
    smem_floats: int

    @property
    def smem_bytes(self) -> int:
        return 4 * self.smem_floats


def block_n(config: Config | Mapping[str, Any]) -> int:
    """Columns of B a block owns: 32 lanes x cols on the fma path, cols tiles of 16 on the
    mma path (gemv_kernel.hip's BLOCK_N)."""
    return (16 if config.get("path", "fma") == "mma" else 32) * int(config["cols"])


def plan(m: int, config: Config | Mapping[str, Any]) -> Plan:
    threads, cols, unroll = (int(config[k]) for k in ("threads", "cols", "unroll"))
    warps = threads // 32
    if config.get("path", "fma") == "mma":
        # unroll stages of 16 rows per warp: A's 16 x KT tile and B's KT x 16*cols, each row
        # padded by 8 elements of 2 bytes
        kt = 16 * warps
        stage_bytes = 2 * (16 * (kt + 8) + kt * (block_n(config) + 8))
        row = warps * block_n(config)
        rm = max(1, min(m, A_CHUNK_FLOATS // row))
        return Plan(0, rm, max(-(-unroll * stage_bytes // 4), rm * row))
    mp = (m + 3) // 4 * 4
    step = warps * unroll
    kc = max(step, A_CHUNK_FLOATS // mp // step * step)
    row = warps * block_n(config)  # one row of M of every warp's partial sums
    rm = max(1, min(m, A_CHUNK_FLOATS // row))
    return Plan(kc, rm, max(kc * mp, rm * row))


def mma_fits(region: FusedRegion) -> str | None:
    """Why the tensor-core path cannot compute `region`, or None."""
    if ELEM_BYTES[_dtype(region)] != 2:
        return "path mma multiplies 16-bit storage (f16, bf16) only"
    if region.N % 8 or region.K % 8:
        return "path mma needs N and K multiples of 8 (rows of A and B in whole 16-byte copies)"
    return None


def load_bytes(cols: int, dtype: str) -> int | None:
    """Bytes of one vector load of B: 16, or 8 for 4 columns of 16-bit storage; None if the
    columns are no whole number of either."""
    row = cols * ELEM_BYTES[dtype]
    return 16 if row % 16 == 0 else 8 if row == 8 else None


def _check(region: Region, config: Config) -> FusedRegion:
    if not isinstance(region, FusedRegion):
        raise EmitError(f"{LANE}: only matmul-rooted (fused) regions, got {region.kind}")
    if region.M > MAX_M:
        raise EmitError(f"{LANE}: M = {region.M} > {MAX_M}")
    if region.reduction is not None:
        raise EmitError(f"{LANE}: no terminal row reduction ({region.reduction.value})")
    dtype = _dtype(region)
    if dtype not in ELEM_BYTES:
        raise EmitError(f"{LANE}: storage dtype {dtype!r} not among {list(ELEM_BYTES)}")
    cols, threads = int(config["cols"]), int(config["threads"])
    path = config.get("path", "fma")
    if path not in PATHS:
        raise EmitError(f"{LANE}: path {path!r} not among {list(PATHS)}")
    if path == "mma":
        why = mma_fits(region)
        if why is not None or threads % 32:
            raise EmitError(f"{LANE}: {why or f'threads={threads}: whole warps'}")
        return region
    if load_bytes(cols, dtype) is None or threads % 32:
        raise EmitError(f"{LANE}: cols * element bytes must be 8 or a multiple of 16 and threads "
                        f"whole warps (cols={cols}, threads={threads}, {dtype})")
    return region


def emit(region: Region, config: Config, platform: Platform) -> KernelSource:
    r = _check(region, config)
    p = plan(r.M, config)
    mma = config.get("path", "fma") == "mma"
    consts = {
        "GEMV_MMA": int(mma),
        "GEMV_M": r.M,
        "GEMV_N": r.N,
        "GEMV_K": r.K,
        "GEMV_COLS": int(config["cols"]),
        "GEMV_THREADS": int(config["threads"]),
        "GEMV_SPLIT_K": int(config["split_k"]),
        "GEMV_UNROLL": int(config["unroll"]),
        "GEMV_LOAD_BYTES": 16 if mma else load_bytes(int(config["cols"]), _dtype(r)),
        "GEMV_KC": p.kc,
        "GEMV_RM": p.rm,
        "GEMV_SMEM_FLOATS": p.smem_floats,
        "HAS_PROLOGUE": int(bool(r.prologue)),
        "HAS_BIAS": int(r.has_bias),
        "HAS_RES": int(r.residual),
    }
    lines = [
        f"/* arbiter lane {LANE}: generated, do not edit.",
        f" * region key: {r.key}",
        f" * region:     {r.describe()} dtype={_dtype(r)}",
        f" * config:     {config}",
        f" * emitted on: {platform.value} (the text is the same for rocm and cuda); "
        f"shared memory {p.smem_bytes} bytes per block",
        *REBUILD,
        " */",
    ]
    if mma and _dtype(r) == "bf16":
        lines.append("#define ARB_FRAG_BF16 1")
    lines += store_defines(r).splitlines()
    lines.append('#include "arb_frag.h"' if mma else '#include "arb_gpu.h"')
    lines += [f"#define {k} {v}" for k, v in consts.items()]
    lines.append("")
    lines += runner_table(r).splitlines()
    lines.append("")
    lines += prologue_function(r.prologue, "__device__ __forceinline__").splitlines()
    lines.append("")
    lines += epilogue_function(r.epilogue, r.residual, "GEMV_N").splitlines()
    text = "\n".join(lines) + "\n\n" + _KERNEL.read_text()
    return KernelSource(LANE, r.key, config, "hip", text)

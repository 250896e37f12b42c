"""The gemv lane: skinny GEMM / GEMV (M <= 16) that streams B[K,N] once, accumulates in f32,
splits K across blocks when the columns alone give too few blocks, and fuses the epilogue chain
and residual. Two paths: f32 FMAs over 16-byte coalesced loads of B with prologue(A) in shared
memory (`fma`, any storage), or the tensor cores over asynchronous copies of B into shared
memory, A padded to 16 rows (`mma`, 16-bit storage)."""

from __future__ import annotations

from typing import Any

from arbiter.lane import (
    Config,
    FusedRegion,
    KernelSource,
    Platform,
    Region,
    Rule,
    Space,
    Tunable,
)

from .._gpu.lane import GpuLane
from .emit import ELEM_BYTES, LANE, MAX_M, PATHS, block_n, load_bytes, mma_fits, plan
from .emit import emit as _emit

__all__ = ["GemvLane", "lane"]

COLS = (4, 8, 16)
THREADS = (64, 128, 256, 512)
UNROLLS = (1, 2, 4, 8)
SPLITS = (1, 2, 4, 8, 16, 32, 64)
PARTIALS_LIMIT = 8192  # floats: one row of M of every warp's partial sums (32 KiB)
FMA_SMEM = 32 * 1024
MMA_SMEM = 48 * 1024  # the stages: a block's static shared memory on CUDA (gfx11 has 64 KiB)
MMA_TILES = 8  # 16-column tiles per warp: 8 accumulators of 8 floats each
MIN_SPLIT_ROWS = 16  # rows of K a split walks at least
# Registers one thread may use by the estimate below: sm_90 allows 255 (ptxas used 210 at the
# M = 16 bf16 default; a few smaller configs spill a few words below the limit). gfx11
# (clang-19) holds about twice the estimate's accumulators live: past 64 accumulators or 128
# bytes of B in flight per thread it spilled.
CUDA_REGS = 240
ROCM_ACCUMULATORS = 64
ROCM_BYTES_IN_FLIGHT = 128
# The mma path by default from this M on: faster than the fma path at M = 4 and 16 on the H200,
# not at M = 1 (BENCHMARKS.md, "16-bit tensors and inference shapes").
MMA_FROM_M = 4
# Blocks worth having in flight: two per SM on the H200 (132 SMs), several per WGP on gfx1151.
TARGET_BLOCKS = 256


def _regs(m: int, esize: int, v) -> int:
    """Estimate: accumulators + rows of B in flight + the unpacked row + an A float4 + 40."""
    cols = v["cols"]
    return m * cols + v["unroll"] * cols * esize // 4 + cols + 4 + 40


def _fma(v) -> bool:
    return v["path"] == "fma"


def _register_rule(m: int, esize: int, platform: Platform) -> Rule:
    if platform is Platform.CUDA:
        return Rule(f"path fma: registers per thread (M*cols accumulators + unroll rows of B + "
                    f"48) at most {CUDA_REGS}: more spills",
                    lambda v: not _fma(v) or _regs(m, esize, v) <= CUDA_REGS)
    return Rule(f"path fma: M*cols at most {ROCM_ACCUMULATORS} accumulators and "
                f"unroll*cols*{esize} at most {ROCM_BYTES_IN_FLIGHT} bytes of B in flight per "
                f"thread: more spills on gfx11",
                lambda v: not _fma(v) or (m * v["cols"] <= ROCM_ACCUMULATORS
                                          and v["unroll"] * v["cols"] * esize
                                          <= ROCM_BYTES_IN_FLIGHT))


def _split(n: int, k: int, config: dict[str, Any]) -> int:
    """K split until the column tiles times the splits reach TARGET_BLOCKS."""
    tiles = -(-n // block_n(config))
    split = 1
    while split < SPLITS[-1] and tiles * split < TARGET_BLOCKS and 2 * split * MIN_SPLIT_ROWS <= k:
        split *= 2
    return split


def _default(m: int, n: int, k: int, dtype: str, fits) -> dict:
    """From M = MMA_FROM_M on, where it computes the region: the mma path, 4 column tiles of
    16 per warp, 128 threads, 4 stages (the fastest of the tilings bench/dtypes.py times, at
    M = 4 and 16). Otherwise the fma path: one 16-byte load per row and thread (4 columns of
    16-bit storage when the accumulators would not fit), 256 threads, the deepest unroll that
    fits. K split until the blocks reach TARGET_BLOCKS."""
    mma: dict[str, Any] = {"path": "mma", "cols": 4, "threads": 128, "unroll": 4}
    if m >= MMA_FROM_M and fits(mma):
        return {**mma, "split_k": _split(n, k, mma)}
    wide = 16 // ELEM_BYTES[dtype]
    for cols, unroll in [(wide, u) for u in (8, 4, 2, 1)] + [(4, u) for u in (8, 4, 2, 1)]:
        if fits({"path": "fma", "cols": cols, "unroll": unroll, "threads": 256}):
            break
    fma: dict[str, Any] = {"path": "fma", "cols": cols, "threads": 256, "unroll": unroll}
    return {**fma, "split_k": _split(n, k, fma)}


class GemvLane(GpuLane):
    name = LANE
    precisions = ("f32",)  # products and sums in f32 whatever the storage
    dtypes = ("f32", "f16", "bf16")
    version = "2"

    def applies_to(self, region: Region) -> str | None:
        if not isinstance(region, FusedRegion):
            return "gemv computes matmul-rooted (fused) regions only"
        if region.M > MAX_M:
            return f"gemv is for skinny products: M = {region.M} > {MAX_M}"
        if region.reduction is not None:
            return f"gemv fuses no terminal row reduction ({region.reduction.value})"
        return None

    def space(self, region: Region) -> Space:
        platform = self.platform
        m, n, k = ((region.M, region.N, region.K) if isinstance(region, FusedRegion)
                   else (1, 4096, 4096))
        dtype = region.dtype
        esize = ELEM_BYTES[dtype]
        no_mma = (mma_fits(region) if isinstance(region, FusedRegion)
                  else "path mma: matmul regions only")
        rules = (
            Rule(no_mma or "path mma: 16-bit storage, N and K multiples of 8",
                 lambda v: _fma(v) or no_mma is None),
            Rule(f"path fma: cols * {esize} bytes must be whole 16-byte loads of B (or one "
                 f"8-byte load)",
                 lambda v: not _fma(v) or load_bytes(v["cols"], dtype) is not None),
            Rule(f"path fma: threads * cols (one row of the warps' partial sums) at most "
                 f"{PARTIALS_LIMIT} floats of shared memory",
                 lambda v: not _fma(v) or v["threads"] * v["cols"] <= PARTIALS_LIMIT),
            _register_rule(m, esize, platform),
            Rule(f"path mma: cols (16-column tiles per warp, 8 accumulators each) at most "
                 f"{MMA_TILES}",
                 lambda v: _fma(v) or v["cols"] <= MMA_TILES),
            Rule(f"split_k is 1 or leaves every split at least {MIN_SPLIT_ROWS} rows of K",
                 lambda v: v["split_k"] == 1 or v["split_k"] * MIN_SPLIT_ROWS <= k),
            Rule(f"shared memory at most {FMA_SMEM // 1024} KiB on path fma (A chunk or partial "
                 f"sums), {MMA_SMEM // 1024} KiB on path mma (unroll stages of 16 * threads/32 "
                 f"rows, or partial sums)",
                 lambda v: plan(m, v).smem_bytes <= (FMA_SMEM if _fma(v) else MMA_SMEM)),
        )
        d = _default(m, n, k, dtype, lambda v: all(r.check({**v, "split_k": 1})
                                                    for r in rules))
        tunables = (
            Tunable("path", PATHS, d["path"]),
            Tunable("cols", COLS, d["cols"]),
            Tunable("threads", THREADS, d["threads"]),
            Tunable("unroll", UNROLLS, d["unroll"]),
            Tunable("split_k", SPLITS, d["split_k"]),
        )
        return Space(tunables, rules)

    def emit(self, region: Region, config: Config) -> KernelSource:
        return _emit(region, config, self.platform)


lane = GemvLane()

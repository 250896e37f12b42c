"""The gemv lane: skinny GEMM / GEMV (M <= 16) that streams B[K,N] once with 16-byte coalesced
loads, keeps prologue(A) in shared memory, accumulates in f32, splits K across blocks when the
columns alone give too few blocks, and fuses the epilogue chain and residual."""

from __future__ import annotations

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
from .emit import ELEM_BYTES, LANE, MAX_M, load_bytes, plan
from .emit import emit as _emit

__all__ = ["GemvLane", "lane"]

COLS = (4, 8, 16)
THREADS = (64, 128, 256, 512)
UNROLLS = (1, 2, 4, 8)
SPLITS = (1, 2, 4, 8, 16, 32, 64)
PARTIALS_LIMIT = 8192  # floats: one row of M of every warp's partial sums (32 KiB)
MIN_SPLIT_ROWS = 16  # rows of K a split walks at least
# Registers one thread may use by the estimate below: sm_90 allows 255 (ptxas used 210 at the
# M = 16 bf16 default; a few smaller configs spill a few words below the limit). gfx11
# (clang-19) holds about twice the estimate's accumulators live: past 64 accumulators or 128
# bytes of B in flight per thread it spilled.
CUDA_REGS = 240
ROCM_ACCUMULATORS = 64
ROCM_BYTES_IN_FLIGHT = 128
# Blocks worth having in flight: two per SM on the H200 (132 SMs), several per WGP on gfx1151.
TARGET_BLOCKS = 256


def _regs(m: int, esize: int, v) -> int:
    """Estimate: accumulators + rows of B in flight + the unpacked row + an A float4 + 40."""
    cols = v["cols"]
    return m * cols + v["unroll"] * cols * esize // 4 + cols + 4 + 40


def _register_rule(m: int, esize: int, platform: Platform) -> Rule:
    if platform is Platform.CUDA:
        return Rule(f"registers per thread (M*cols accumulators + unroll rows of B + 48) at "
                    f"most {CUDA_REGS}: more spills",
                    lambda v: _regs(m, esize, v) <= CUDA_REGS)
    return Rule(f"M*cols at most {ROCM_ACCUMULATORS} accumulators and unroll*cols*{esize} at "
                f"most {ROCM_BYTES_IN_FLIGHT} bytes of B in flight per thread: more spills on "
                f"gfx11",
                lambda v: m * v["cols"] <= ROCM_ACCUMULATORS
                and v["unroll"] * v["cols"] * esize <= ROCM_BYTES_IN_FLIGHT)


def _default(m: int, n: int, k: int, dtype: str, fits) -> dict:
    """One 16-byte load per row and thread (4 columns of 16-bit storage when the accumulators
    would not fit), 256 threads, the deepest unroll that fits, and K split until the column
    tiles times the splits reach TARGET_BLOCKS."""
    wide = 16 // ELEM_BYTES[dtype]
    for cols, unroll in [(wide, u) for u in (8, 4, 2, 1)] + [(4, u) for u in (8, 4, 2, 1)]:
        if fits({"cols": cols, "unroll": unroll, "threads": 256}):
            break
    tiles = -(-n // (32 * cols))
    split = 1
    while split < SPLITS[-1] and tiles * split < TARGET_BLOCKS and 2 * split * MIN_SPLIT_ROWS <= k:
        split *= 2
    return {"cols": cols, "threads": 256, "unroll": unroll, "split_k": split}


class GemvLane(GpuLane):
    name = LANE
    precisions = ("f32",)  # products and sums in f32 whatever the storage
    dtypes = ("f32", "f16", "bf16")
    version = "1"

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
        rules = (
            Rule(f"cols * {esize} bytes must be whole 16-byte loads of B (or one 8-byte load)",
                 lambda v: load_bytes(v["cols"], dtype) is not None),
            Rule(f"threads * cols (one row of the warps' partial sums) at most {PARTIALS_LIMIT} "
                 f"floats of shared memory",
                 lambda v: v["threads"] * v["cols"] <= PARTIALS_LIMIT),
            _register_rule(m, esize, platform),
            Rule(f"split_k is 1 or leaves every split at least {MIN_SPLIT_ROWS} rows of K",
                 lambda v: v["split_k"] == 1 or v["split_k"] * MIN_SPLIT_ROWS <= k),
            Rule("shared memory (A chunk or partial sums) at most 32 KiB",
                 lambda v: plan(m, v).smem_bytes <= 32 * 1024),
        )
        d = _default(m, n, k, dtype, lambda v: all(r.check({**v, "split_k": 1})
                                                    for r in rules))
        tunables = (
            Tunable("cols", COLS, d["cols"]),
            Tunable("threads", THREADS, d["threads"]),
            Tunable("unroll", UNROLLS, d["unroll"]),
            Tunable("split_k", SPLITS, d["split_k"]),
        )
        return Space(tunables, rules)

    def emit(self, region: Region, config: Config) -> KernelSource:
        return _emit(region, config, self.platform)


lane = GemvLane()

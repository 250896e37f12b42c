"""The generic HIP lane: generated HIP-dialect kernels (shared row programs, tiled f32 GEMM)
built by nvcc for NVIDIA or hipcc/clang for AMD from the same text, run through the GPU ABI."""

from __future__ import annotations

from arbiter.lane import (
    AttentionRegion,
    Config,
    EmitError,
    FusedRegion,
    GatedRegion,
    KernelSource,
    Region,
    RowwiseRegion,
    Rule,
    Space,
    Tunable,
)

from .._gpu.lane import GpuLane
from .attention import attention_space, emit_attention
from .emit import REG_BUDGET, emit, items_per_thread, parse_pair

__all__ = ["HipScalarLane", "lane"]

STRATEGIES = ("thread", "warp", "block")
THREADS = (1, 32, 64, 128, 256, 512, 1024)
ROWS = (1, 2, 4, 8, 64, 128, 256)
TILES = ("64x64", "128x64", "64x128", "128x128")
MICROS = ("4x4", "8x4", "4x8", "8x8")

_STRATEGY_RULES = {
    "thread": lambda v: v["threads"] == 1 and v["rows"] >= 64,
    "warp": lambda v: v["threads"] == 32 and v["rows"] <= 8,
    "block": lambda v: v["threads"] >= 64 and v["rows"] == 1,
}


def _rowwise_space(region: RowwiseRegion) -> Space:
    n = region.N
    arrays = 1 + int(region.has_bias) + int(region.residual)
    tunables = (
        Tunable("strategy", STRATEGIES, "block"),
        Tunable("threads", THREADS, 256 if n >= 2048 else 64),
        Tunable("rows", ROWS, 1),
        Tunable("vec", (1, 4), 4 if n % 4 == 0 else 1),
        Tunable("cache", ("global", "regs"), "global"),
    )
    rules = (
        Rule("strategy fixes the spread: thread -> threads=1, rows>=64; warp -> threads=32, "
             "rows<=8; block -> threads>=64, rows=1",
             lambda v: _STRATEGY_RULES[v["strategy"]](v)),
        Rule("block strategy: no more threads per row than N rounded up to 64",
             lambda v: v["strategy"] != "block" or v["threads"] <= max(64, _pow2_at_least(n))),
        Rule("vec=4 (float4 loads) needs N % 4 == 0", lambda v: v["vec"] == 1 or n % 4 == 0),
        Rule("vec=4 only with cache=regs (global loops are scalar)",
             lambda v: v["vec"] == 1 or v["cache"] == "regs"),
        Rule(f"cache=regs: row, bias and residual slices must fit {REG_BUDGET} registers "
             "per thread",
             lambda v: v["cache"] == "global"
             or items_per_thread(n, v["threads"], v["vec"]) * arrays <= REG_BUDGET),
    )
    space = Space(tunables, rules)
    default = space.default
    if space.violation(default) is not None:
        regs = Config.of({**default.as_dict(), "cache": "regs"})
        glob = Config.of({**default.as_dict(), "cache": "global", "vec": 1})
        fallback = regs if space.violation(regs) is None else glob
        space = Space(tuple(Tunable(t.name, t.choices, fallback[t.name]) for t in tunables), rules)
    else:
        regs = Config.of({**default.as_dict(), "cache": "regs"})
        if space.violation(regs) is None:
            space = Space(tuple(Tunable(t.name, t.choices, regs[t.name]) for t in tunables), rules)
    return space


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _fused_space(region: FusedRegion | GatedRegion) -> Space:
    big = region.M >= 512 and region.N >= 512 and isinstance(region, FusedRegion)
    acc = 2 if isinstance(region, GatedRegion) else 1  # gated: a gate and an up accumulator
    tunables = (
        Tunable("tile", TILES, "128x128" if big else "64x64"),
        Tunable("micro", MICROS, "8x8" if big else "4x4"),
        Tunable("bk", (8, 16), 8),
    )

    def threads(v) -> int:
        bm, bn = parse_pair(v["tile"])
        tm, tn = parse_pair(v["micro"])
        return (bm // tm) * (bn // tn)

    def pressure(v) -> int:
        bm, bn = parse_pair(v["tile"])
        tm, tn = parse_pair(v["micro"])
        return acc * tm * tn + (bm + acc * bn) * v["bk"] // threads(v)

    rules = (
        Rule("threads per GEMM block = (BM/TM)*(BN/TN) must be 64..256",
             lambda v: 64 <= threads(v) <= 256),
        Rule("registers: TM*TN accumulators + (BM+BN)*BK/threads staged loads (both doubled "
             "for gated's two B) < 80 per thread (the gfx1151 gate saw 128x128 tile, 8x8 "
             "micro, bk=16 spill)",
             lambda v: pressure(v) < 80),
    )
    return Space(tunables, rules)


class HipScalarLane(GpuLane):
    name = "hip_scalar"
    precisions = ("f32",)
    dtypes = ("f32",)  # 16-bit storage: not yet generated (the numpy lane computes it)
    version = "1"

    def applies_to(self, region: Region) -> str | None:
        return None

    def space(self, region: Region) -> Space:
        if isinstance(region, (FusedRegion, GatedRegion)):
            return _fused_space(region)
        if isinstance(region, RowwiseRegion):
            return _rowwise_space(region)
        if isinstance(region, AttentionRegion):
            return attention_space(region)
        raise EmitError(f"{self.name}: no space for {region.kind} regions")

    def emit(self, region: Region, config: Config) -> KernelSource:
        if isinstance(region, AttentionRegion):
            return emit_attention(region, config, self.name)
        return emit(region, config)


lane = HipScalarLane()

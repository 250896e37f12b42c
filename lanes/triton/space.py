"""The triton lane's tunables, as Triton users search them: tile sizes (BLOCK_M/N/K), the
grouped launch order (GROUP_M), num_warps, num_stages; on ROCm also `waves_per_eu` (the
occupancy hint the HIP backend passes to LLVM); for float32 storage, what `tl.dot` multiplies
(`ieee` float32, `tf32` on NVIDIA, or operands rounded to f16: gfx11 has no f32 WMMA).

Rules keep out what cannot launch or would spill: operand tiles over the target's shared
memory (227 KiB per block on sm_90, gfx1151's 64 KiB of LDS per workgroup), more accumulators
per lane than the register file holds, tiles larger than their dimension, and a fused row
reduction whose row does not fit one BLOCK_N tile. The rocm space adds what gfx1151 builds
were measured to need to stay within 256 VGPRs per lane (docs/gfx1151.md, triton section):
operand tile bytes per lane for matmuls; for attention key blocks of 16 and a byte budget on
the query and in-flight key tiles. Its defaults keep every rule (a fused row reduction falls
back to a separate pass where the row's tile does not fit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arbiter.lane import (
    AttentionRegion,
    FusedRegion,
    GatedRegion,
    Platform,
    Region,
    RowwiseRegion,
    Rule,
    Space,
    Tunable,
)

from .._gpu.resources import GFX1151
from .plan import pow2

__all__ = ["SHARED_LIMIT", "space"]

SHARED_LIMIT = {Platform.CUDA: 227 * 1024, Platform.ROCM: GFX1151.lds_per_workgroup,
                Platform.CPU: 227 * 1024}
# accumulator and operand elements per lane past which a build spills: gfx11's WMMA layouts
# keep each operand twice (lanes 16-31 repeat lanes 0-15), so its budget is the smaller
LANE_BUDGET = {Platform.CUDA: 128, Platform.ROCM: 48, Platform.CPU: 128}
ROW_BUDGET = {Platform.CUDA: 64, Platform.ROCM: 32, Platform.CPU: 64}  # rowwise: row elements
# gfx1151 builds (Triton's HIP backend) spilled past these, measured per lane: attention's
# query and in-flight key tile bytes, a matmul's one-stage operand tile bytes
ROCM_ATTENTION_BYTES = 64
ROCM_OPERAND_BYTES = 64
# ... and 48 for float32 storage under a waves_per_eu hint, which lets LLVM take the whole
# register file: at 64 such builds reached 239-256 VGPRs, and 3 of them spilled
ROCM_HINTED_F32_BYTES = 48
FUSED_ROW_MAX = 1024  # widest row a fused reduction holds in one tile
_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def _fits(dim: int, block: int) -> bool:
    return block <= max(16, pow2(dim))


def _common(platform: Platform, region: Region, stages: tuple[int, ...],
            default_stages: int, dot: str = "ieee") -> list[Tunable]:
    out = [Tunable("num_stages", stages, default_stages)]
    if platform is Platform.ROCM:
        out.append(Tunable("waves_per_eu", (0, 1, 2, 4), 0))
    if region.dtype == "f32" and not isinstance(region, RowwiseRegion):
        dots = ("ieee", "f16") if platform is Platform.ROCM else ("ieee", "tf32", "f16")
        out.append(Tunable("dot", dots, dot))
    return out


def _matmul(region: FusedRegion | GatedRegion, platform: Platform) -> Space:
    space = _matmul_space(region, platform, fuse=True)
    if space.violation(space.default) is None:
        return space
    return _matmul_space(region, platform, fuse=False)  # (gfx11: the row's tile does not fit)


def _matmul_space(region: FusedRegion | GatedRegion, platform: Platform, fuse: bool) -> Space:
    """The space, its default fusing the row reduction when `fuse` and the row fits a tile."""
    rocm = platform is Platform.ROCM
    size = _BYTES[region.dtype]
    operands = 2 if isinstance(region, GatedRegion) else 1  # B tiles per A tile
    reduction = isinstance(region, FusedRegion) and region.reduction is not None
    row = max(16, pow2(region.N))
    fusable = reduction and row <= FUSED_ROW_MAX
    widths = (16, 32, 64, 128, 256) + ((row,) if fusable and row > 256 else ())
    fused = fusable and fuse
    small = 32 if rocm else 64
    bm = min(16 if fused else small, max(16, pow2(region.M)))
    bn = row if fused else min(small, row)
    bk = min(16 if fused and rocm else 32, max(16, pow2(region.K)))
    wide = row >= 256 if rocm else row > 256
    tunables = [
        Tunable("BLOCK_M", (16, 32, 64, 128), bm),
        Tunable("BLOCK_N", widths, bn),
        Tunable("BLOCK_K", (16, 32, 64, 128), bk),
        Tunable("GROUP_M", (1, 4, 8), 8),
        Tunable("num_warps", (2, 4, 8), 8 if fused and wide else 4),
        *_common(platform, region, (1, 2, 3) if rocm else (1, 2, 3, 4), 2 if rocm else 3),
    ]
    if reduction:
        tunables.append(Tunable("fuse_reduction", (True, False), fused))
    shared, budget = SHARED_LIMIT[platform], LANE_BUDGET[platform]
    accumulators = operands if isinstance(region, GatedRegion) else 1

    def lanes(c: Mapping[str, Any]) -> float:
        tiles = c["BLOCK_M"] * c["BLOCK_K"] + operands * c["BLOCK_K"] * c["BLOCK_N"]
        held = accumulators * c["BLOCK_M"] * c["BLOCK_N"] + (tiles * size / 4 if rocm else 0)
        return held / (32 * c["num_warps"])

    def operand_bytes(c: Mapping[str, Any]) -> float:  # one stage's A and B tiles, per lane
        tiles = c["BLOCK_K"] * (c["BLOCK_M"] + operands * c["BLOCK_N"])
        return tiles * size / (32 * c["num_warps"])

    rules = [
        Rule("no tile larger than its dimension (rounded up to a power of two, at least 16)",
             lambda c: _fits(region.M, c["BLOCK_M"]) and _fits(region.N, c["BLOCK_N"])
             and _fits(region.K, c["BLOCK_K"])),
        Rule(f"num_stages x operand tiles must fit {shared // 1024} KiB of shared memory",
             lambda c: max(1, c["num_stages"]) * size * c["BLOCK_K"]
             * (c["BLOCK_M"] + operands * c["BLOCK_N"]) <= shared),
        Rule(f"at most {budget} accumulator{'/operand' if rocm else ''} elements per lane "
             "(BLOCK_M x BLOCK_N over 32 x num_warps): more spills",
             lambda c: lanes(c) <= budget),
    ]
    if rocm:
        rules.append(Rule(
            f"at most {ROCM_OPERAND_BYTES} bytes per lane of one stage's operand tiles "
            "(BLOCK_K x (BLOCK_M + BLOCK_N) x storage bytes over 32 x num_warps; gfx1151: "
            "256 VGPRs per lane, more spills)",
            lambda c: operand_bytes(c) <= ROCM_OPERAND_BYTES))
        if region.dtype == "f32":
            rules.append(Rule(
                f"float32 storage with a waves_per_eu hint: at most {ROCM_HINTED_F32_BYTES} "
                "bytes per lane of one stage's operand tiles (gfx1151: the hint lets the "
                "compiler fill all 256 VGPRs per lane; at 64 it spilled)",
                lambda c: not c["waves_per_eu"] or operand_bytes(c) <= ROCM_HINTED_F32_BYTES))
    if reduction:
        rules.append(Rule(f"fuse_reduction needs the row ({region.N}) in one BLOCK_N tile",
                          lambda c: not c["fuse_reduction"] or c["BLOCK_N"] >= region.N))
    return Space(tuple(tunables), tuple(rules))


def _rowwise(region: RowwiseRegion, platform: Platform) -> Space:
    top = min(max(32, pow2(region.N)), 16384)
    widths = tuple(w for w in (top >> i for i in range(4, -1, -1)) if w >= 32)
    per_lane = ROW_BUDGET[platform]
    bm = 1 if top >= 1024 else min(16, max(1, pow2(region.M)), max(1, 1024 // top))
    warps = min(16, max(1, pow2(-(-bm * top // (32 * per_lane)))))
    tunables = [Tunable("BLOCK_M", (1, 2, 4, 8, 16), bm), Tunable("BLOCK_N", widths, top),
                Tunable("num_warps", (1, 2, 4, 8, 16), warps)]
    if platform is Platform.ROCM:
        tunables.append(Tunable("waves_per_eu", (0, 1, 2, 4), 0))
    rules = (
        Rule("BLOCK_M no larger than M (rounded up to a power of two)",
             lambda c: c["BLOCK_M"] <= pow2(region.M)),
        Rule(f"at most {per_lane} row elements per lane (BLOCK_M x BLOCK_N over 32 x "
             "num_warps): more spills",
             lambda c: c["BLOCK_M"] * c["BLOCK_N"] <= per_lane * 32 * c["num_warps"]),
    )
    return Space(tuple(tunables), rules)


def _attention_bytes(c: Mapping[str, Any], d: int, size: int) -> float:
    """gfx11 attention's register estimate, bytes per lane: the query tile plus the key tiles
    in flight (num_stages - 1 ahead, at least one) over head_dim, at the storage's width (f32
    storage is loaded as f32 before a `dot=f16` rounds it; `dot=ieee`'s FMA loops count 8)."""
    keys = max(1, c["num_stages"] - 1) * c["BLOCK_N"]
    width = 8 if c.get("dot") == "ieee" else size
    return (c["BLOCK_M"] + keys) * d * width / (32 * c["num_warps"])


def _attention(region: AttentionRegion, platform: Platform) -> Space:
    rocm = platform is Platform.ROCM
    size = _BYTES[region.dtype]
    d = max(16, pow2(region.head_dim))
    bm = min(64, max(16, pow2(region.seq_q)))
    bn = min(64, max(16, pow2(region.seq_k)))
    warps, stages, dot = 4, 2, "ieee"
    if rocm:  # a query block of 32 where it fits gfx11's registers at 8 warps, else 16; f32
        # operands rounded to f16 (1 stage) where not even 16 fits as ieee
        bm, bn, warps = min(32, bm), 16, 8
        for m, dot, stages in ((bm, "ieee", 2), (16, "ieee", 2), (16, "f16", 1)):
            tiles = {"BLOCK_M": m, "BLOCK_N": bn, "num_stages": stages, "num_warps": warps,
                     "dot": dot if region.dtype == "f32" else "native"}
            if _attention_bytes(tiles, d, size) <= ROCM_ATTENTION_BYTES:
                break
        bm = m
    tunables = [
        Tunable("BLOCK_M", (16, 32, 64, 128), bm),
        Tunable("BLOCK_N", (16, 32, 64, 128), bn),
        Tunable("num_warps", (2, 4, 8), warps),
        *_common(platform, region, (1, 2, 3), stages, dot),
    ]
    shared, budget = SHARED_LIMIT[platform], LANE_BUDGET[platform]
    rules = [
        Rule("no block larger than its sequence (rounded up to a power of two, at least 16)",
             lambda c: _fits(region.seq_q, c["BLOCK_M"]) and _fits(region.seq_k, c["BLOCK_N"])),
        Rule(f"Q plus num_stages x K and V tiles must fit {shared // 1024} KiB of shared memory",
             lambda c: size * d * (c["BLOCK_M"] + 2 * max(1, c["num_stages"]) * c["BLOCK_N"])
             <= shared),
        Rule(f"at most {budget} accumulator and score elements per lane "
             "(BLOCK_M x (head_dim + BLOCK_N) over 32 x num_warps): more spills",
             lambda c: c["BLOCK_M"] * (d + c["BLOCK_N"]) <= budget * 32 * c["num_warps"]),
    ]
    if rocm:
        rules += [
            Rule("BLOCK_N 16 on gfx11 (gfx1151: 256 VGPRs per lane; key blocks of 32 or more "
                 "spill to scratch, measured)", lambda c: c["BLOCK_N"] == 16),
            Rule(f"at most {ROCM_ATTENTION_BYTES} bytes per lane of query and in-flight key "
                 "tiles ((BLOCK_M + max(1, num_stages - 1) x BLOCK_N) x head_dim x storage "
                 "bytes (8 for dot=ieee) over 32 x num_warps; gfx1151: 256 VGPRs per lane, "
                 "more spills)",
                 lambda c: _attention_bytes(c, d, size) <= ROCM_ATTENTION_BYTES),
        ]
    return Space(tuple(tunables), tuple(rules))


def space(region: Region, platform: Platform) -> Space:
    """The space for `region` on `platform` (the CPU: Triton's interpreter, sized as CUDA)."""
    if isinstance(region, AttentionRegion):
        return _attention(region, platform)
    if isinstance(region, RowwiseRegion):
        return _rowwise(region, platform)
    return _matmul(region, platform)

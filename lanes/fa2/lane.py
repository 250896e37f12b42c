"""The FlashAttention-2 lane: one hand-written forward kernel, tiled and tuned per region."""

from __future__ import annotations

from arbiter.lane import (
    AttentionRegion,
    Config,
    KernelSource,
    Platform,
    Region,
    Rule,
    Space,
    Tunable,
)

from .._gpu.lane import GpuLane
from .._gpu.resources import GFX1151
from .emit import HEAD_DIMS, LANE, STAGINGS, smem_bytes
from .emit import emit as _emit

__all__ = ["FA2Lane", "lane", "space_for"]

# Dynamic shared memory one block may ask for: gfx11 gives a workgroup 64 KiB of the WGP's
# 128 KiB LDS; an sm_90 block may opt in to 227 KiB.
SMEM_LIMIT = {Platform.ROCM: GFX1151.lds_per_workgroup, Platform.CUDA: 227 * 1024}
SMEM_WHY = {Platform.ROCM: f" (gfx1151: {GFX1151.lds_per_workgroup // 1024} KiB of LDS per "
                           "workgroup)", Platform.CUDA: ""}
# gfx11 VGPRs a thread may give, by the estimate in `_inline2_vgprs`, to the O accumulator, the
# S/P tile and the next K or V tile held in registers, without a causal mask. clang-19 for
# gfx1151 spilled 17 of 18 probes above 96 (100-176: head_dim 32-128, block_k 32-128) and fit
# all 19 at or below it (docs/gfx1151.md); with a causal mask the same tilings fit.
ROCM_INLINE2_VGPRS = 96
MAX_STAGED_FLOAT4 = 8  # per thread per K or V tile; 16 spills next to the O accumulator at d128
MAX_COPIES = 8  # 16-byte cp.async per thread per K or V tile (prepass staging)


# batch * heads * seq_q * seq_k from which sm_90 defaults to the prepass staging: its three
# extra conversion launches are ~7% of the call at 2**30 (measured); below 2**26 not measured.
LARGE_PAIRS = 2**26


def _pairs(region: Region) -> int:
    if not isinstance(region, AttentionRegion):
        return 0
    return region.batch * region.heads * region.seq_q * region.seq_k


def _inline2_vgprs(d: int, vec: int, v) -> int:
    """VGPRs of the O accumulator (d / 2: d/16 fragments of 8), of S and P (block_k), and of
    the next tile's 16-byte loads (4 each) that 2-stage inline staging holds over the WMMAs."""
    return d // 2 + v["block_k"] + 4 * (v["block_k"] * d // vec // (32 * v["warps"]))


def space_for(region: Region, platform: Platform) -> Space:
    """The fa2 space for `region` on `platform` (the shared-memory limit differs, and gfx11
    has a register rule of its own)."""
    limit = SMEM_LIMIT[platform]
    d = region.head_dim if isinstance(region, AttentionRegion) else 64
    causal = bool(region.causal) if isinstance(region, AttentionRegion) else False
    # 16-bit storage is read as the operands: its own type only, 8 elements per 16-byte load
    precisions = ("f16", "bf16") if region.dtype == "f32" else (region.dtype,)
    vec = 4 if region.dtype == "f32" else 8
    # defaults: 8 warps x 64 keys on sm_90 at d128 (64 KiB of 227), 32 keys above (a K or V
    # tile held in registers); 4 x 32 fits gfx11's 64 KiB
    cuda = platform is Platform.CUDA
    warps, block_k = ((4, 64) if d <= 64 else (8, 64) if cuda and d <= 128 else (8, 32) if cuda
                      else (4, 32))
    staging = "inline" if d <= 128 else "prepass"
    if platform is Platform.CUDA and _pairs(region) >= LARGE_PAIRS and d <= 128:
        # measured on the H200 (BENCHMARKS.md): prepass, 4 warps x 64 keys, 2 stages is the
        # fastest or within 1.1% of it at d64 and d128, causal or not (b4 h16 s4096); above
        # d128 its K/V tile needs more async copies per thread than the rule allows
        staging, warps, block_k = "prepass", 4, 64
    tunables = (
        Tunable("staging", STAGINGS, staging),
        Tunable("warps", (2, 4, 8), warps),
        Tunable("block_q", (32, 64, 128), 16 * warps),
        Tunable("block_k", (32, 64, 128), block_k),
        Tunable("stages", (1, 2, 3), 2),
        Tunable("precision", precisions, precisions[0]),
    )
    rules: tuple[Rule, ...] = (
        Rule("block_q must be 16 * warps: each warp owns 16 query rows",
             lambda v: v["block_q"] == 16 * v["warps"]),
        Rule("staging=inline keeps 1 or 2 shared-memory stages (registers prefetch the next "
             "tile); staging=prepass streams 2 or 3 stages of async copies",
             lambda v: v["stages"] <= 2 if v["staging"] == "inline" else v["stages"] >= 2),
        Rule("inline staging: one K or V tile must split into whole 16-byte loads per thread",
             lambda v: v["staging"] != "inline"
             or (v["block_k"] * d // vec) % (32 * v["warps"]) == 0),
        Rule(f"K/V stages (and gfx11 Q/P scratch) must fit {limit // 1024} KiB of shared memory"
             f"{SMEM_WHY[platform]}",
             lambda v: smem_bytes(platform, d, v) <= limit),
        Rule(f"inline staging holds a K or V tile in registers: at most {MAX_STAGED_FLOAT4} "
             "16-byte loads per thread (more spills next to the O accumulator)",
             lambda v: v["staging"] != "inline"
             or v["block_k"] * d // vec // (32 * v["warps"]) <= MAX_STAGED_FLOAT4),
        Rule("inline staging above head_dim 128 spills (ptxas, nvcc 13: the O accumulator "
             "and a register-held K or V tile do not fit together)",
             lambda v: v["staging"] != "inline" or d <= 128),
        Rule(f"prepass staging: at most {MAX_COPIES} 16-byte async copies per thread per K or "
             "V tile (their addresses spill at 16: ptxas, nvcc 13)",
             lambda v: v["staging"] != "prepass"
             or v["block_k"] * d // 8 // (32 * v["warps"]) <= MAX_COPIES),
    )
    if platform is Platform.ROCM and not causal:
        rules += (
            Rule(f"gfx1151, no causal mask: 2-stage inline staging keeps the next K or V tile "
                 f"in VGPRs over the WMMAs; head_dim/2 (O) + block_k (S, P) + 4 per 16-byte "
                 f"load of that tile at most {ROCM_INLINE2_VGPRS}: more spilled (clang-19)",
                 lambda v: v["staging"] != "inline" or v["stages"] != 2
                 or _inline2_vgprs(d, vec, v) <= ROCM_INLINE2_VGPRS),
        )
    space = Space(tunables, rules)
    if space.violation(space.default) is None:
        return space
    # (e.g. 16-bit storage at d80: 8-element loads do not split a 64-key tile over 8 warps)
    # the valid config that changes the fewest of the default's values, if there is one
    base = space.default.as_dict()
    valid = [c for c in space.configs() if space.violation(c) is None]
    if not valid:
        return space
    best = min(valid, key=lambda c: sum(c[k] != v for k, v in base.items()))
    return Space(tuple(Tunable(t.name, t.choices, best[t.name]) for t in tunables), rules)


class FA2Lane(GpuLane):
    name = LANE
    precisions = ("f16", "bf16")
    dtypes = ("f32", "f16", "bf16")
    version = "2"
    launch_lds = (("fa2_forward", "FA2_SMEM_BYTES"),)  # dynamic shared memory

    def applies_to(self, region: Region) -> str | None:
        if not isinstance(region, AttentionRegion):
            return "fa2 computes attention regions only"
        if region.head_dim not in HEAD_DIMS:
            return (f"head_dim {region.head_dim} not supported (fa2: a multiple of 16 in "
                    "16..256)")
        space = self.space(region)
        problem = space.violation(space.default)
        if problem is not None:  # (gfx11's 64 KiB of LDS holds no tiling above d128)
            return f"head_dim {region.head_dim} on {self.platform.value}: {problem}"
        return None

    def space(self, region: Region) -> Space:
        return space_for(region, self.platform)

    def emit(self, region: Region, config: Config) -> KernelSource:
        return _emit(region, config, self.platform)


lane = FA2Lane()

"""The wmma_gemm lane: a tiled tensor-core GEMM (gfx11 WMMA / NVIDIA mma.sync) with the
region's prologue applied on load of A and its epilogue fused on the accumulators."""

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
from .._gpu.resources import GFX1151
from .emit import LANE, smem_bytes
from .emit import emit as _emit

__all__ = ["WmmaGemmLane", "lane"]

# Dynamic shared memory one block may ask for: gfx11 gives a workgroup 64 KiB of the WGP's
# 128 KiB LDS; an sm_90 block may opt in to 227 KiB.
SMEM_LIMIT = {Platform.ROCM: GFX1151.lds_per_workgroup, Platform.CUDA: 227 * 1024}
# Why each limit holds, as the rules say it (the CUDA texts are the ones records already hold).
SMEM_WHY = {Platform.ROCM: f" (gfx1151: {GFX1151.lds_per_workgroup // 1024} KiB of LDS per "
                           "workgroup)", Platform.CUDA: ""}
# 32-bit registers one block may hold (64K on both an sm_90 SM and a gfx11 WGP's wave32 SIMDs
# at one block per unit); the estimate per thread is accumulators + fragments and addresses.
REGISTER_FILE = 65536
# Per-thread estimate allowed: sm_90 has 255 (an estimate of 248 spilled 8 bytes); gfx11 has
# 256 VGPRs per wave32 lane, but past ~200 of our estimate it spilled (64x64 prepass: 72).
THREAD_REGS = {Platform.ROCM: 200, Platform.CUDA: 240}
REGS_WHY = {Platform.ROCM: "more spills to scratch (gfx1151 has 256 VGPRs per lane; clang-19 "
                           "spilled past 200 of this estimate)",
            Platform.CUDA: "more spills to scratch / local memory"}
# f32 values an inline-staging thread holds for the next K tile (gfx11 spilled at 48:
# 128x64 tile, block_k 64, 256 threads).
PREFETCH_LIMIT = {Platform.ROCM: 32, Platform.CUDA: 64}
# 16-bit elements a prepass-staging thread copies per K tile on gfx11, which has no async copy:
# clang-19 issues all of a tile's 16-byte loads before their LDS stores, so they sit in VGPRs
# (half as many) next to the accumulators. 192 (a 64x32 warp tile, block_k 64, one warp per 96
# rows + columns) spilled wherever the main loop issues copies; 160 and below fit
# (bench/gfx1151_fit.py, docs/gfx1151.md).
ROCM_PREPASS_COPY_LIMIT = 160


def _up_to(choices: tuple[int, ...], extent: int, floor: int) -> tuple[int, ...]:
    """Choices no larger than the smallest power of two covering `extent` (at least `floor`):
    a 256-row tile for a 17-row matrix computes 239 rows of padding."""
    cap = max(floor, 1 << max(0, extent - 1).bit_length())
    return tuple(c for c in choices if c <= cap) or (min(choices),)


def _regs_per_thread(v, platform: Platform) -> int:
    """Estimate: accumulators + one k-step of fragments + prefetched floats + ~40 for addresses.

    A gfx11 A/B fragment takes 8 VGPRs (lanes 16-31 duplicate 0-15); an NVIDIA one 4."""
    per_frag = 8 if platform is Platform.ROCM else 4
    regs = v["warp_m"] * v["warp_n"] // 32 + (v["warp_m"] + v["warp_n"]) // 16 * per_frag + 40
    if v["staging"] == "inline":
        regs += (v["block_m"] + v["block_n"]) * v["block_k"] // v["threads"]
    return regs


LARGE_PRODUCT = 512**3  # M*N*K from which the large-tile prepass default applies


class WmmaGemmLane(GpuLane):
    name = LANE
    precisions = ("f16", "bf16")
    dtypes = ("f32", "f16", "bf16")
    version = "1"
    launch_lds = (("gemm_kernel", "GEMM_SMEM_BYTES"),)  # dynamic shared memory

    def applies_to(self, region: Region) -> str | None:
        if not isinstance(region, FusedRegion):
            return "wmma_gemm computes matmul-rooted (fused) regions only"
        return None

    def space(self, region: Region) -> Space:
        platform = self.platform
        limit = SMEM_LIMIT[platform]
        m = region.M if isinstance(region, FusedRegion) else 128
        n = region.N if isinstance(region, FusedRegion) else 128
        k = region.K if isinstance(region, FusedRegion) else 64
        precisions = self.precisions if region.dtype == "f32" else (region.dtype,)
        bms = _up_to((32, 64, 128, 256), m, 32)
        bns = _up_to((32, 64, 128, 256), n, 32)
        bks = _up_to((16, 32, 64), k, 16)
        bm, bn = min(64, max(bms)), min(64, max(bns))
        wm, wn = min(32, bm), min(32, bn)
        small = {"staging": "inline", "block_m": bm, "block_n": bn,
                 "block_k": min(32, max(bks)), "warp_m": wm, "warp_n": wn,
                 "threads": 32 * (bm // wm) * (bn // wn), "stages": 2}
        # large products: the configuration bench/gemm.py measured fastest on the H200 at 4096^3
        # (2.1x the inline default there); small ones keep one launch and small tiles
        large = {"staging": "prepass", "block_m": 128, "block_n": 128, "block_k": 32,
                 "warp_m": 32, "warp_n": 64, "threads": 256, "stages": 4}
        d = large if m * n * k >= LARGE_PRODUCT and 128 in bms and 128 in bns else small
        tunables = (
            # 16-bit storage is read as the operands: its own type only
            Tunable("precision", precisions, precisions[0]),
            Tunable("staging", ("inline", "prepass"), d["staging"]),
            Tunable("block_m", bms, d["block_m"]),
            Tunable("block_n", bns, d["block_n"]),
            Tunable("block_k", bks, d["block_k"] if d["block_k"] in bks else small["block_k"]),
            Tunable("warp_m", (16, 32, 64), d["warp_m"]),
            Tunable("warp_n", (16, 32, 64), d["warp_n"]),
            Tunable("threads", (32, 64, 128, 256, 512), d["threads"]),
            Tunable("stages", (1, 2, 3, 4), d["stages"]),
            Tunable("group_m", (1, 8), 8),
        )
        rules: tuple[Rule, ...] = (
            Rule("warp_m must divide block_m and warp_n must divide block_n",
                 lambda v: v["block_m"] % v["warp_m"] == 0 and v["block_n"] % v["warp_n"] == 0),
            Rule("threads must be 32 * (block_m/warp_m) * (block_n/warp_n): one warp per warp tile",
                 lambda v: v["threads"]
                 == 32 * (v["block_m"] // v["warp_m"]) * (v["block_n"] // v["warp_n"])),
            Rule("staging=inline uses 1 or 2 shared-memory stages (registers prefetch the next "
                 "tile); staging=prepass streams 2 to 4 stages of async copies",
                 lambda v: v["stages"] <= 2 if v["staging"] == "inline" else v["stages"] >= 2),
            Rule(f"inline staging prefetches (block_m + block_n) * block_k / threads floats per "
                 f"thread: at most {PREFETCH_LIMIT[platform]}",
                 lambda v: v["staging"] != "inline"
                 or (v["block_m"] + v["block_n"]) * v["block_k"] // v["threads"]
                 <= PREFETCH_LIMIT[platform]),
            Rule(f"stages * (block_m*(block_k+8) + block_k*(block_n+8)) * 2 bytes of shared "
                 f"memory must fit {limit // 1024} KiB{SMEM_WHY[platform]}",
                 lambda v: smem_bytes(v) <= limit),
            Rule(f"threads * registers per thread (accumulators + fragments + prefetch + 40) "
                 f"must fit {REGISTER_FILE}",
                 lambda v: v["threads"] * _regs_per_thread(v, platform) <= REGISTER_FILE),
            Rule(f"registers per thread (accumulators + fragments + prefetch + 40) at most "
                 f"{THREAD_REGS[platform]}: {REGS_WHY[platform]}",
                 lambda v: _regs_per_thread(v, platform) <= THREAD_REGS[platform]),
        )
        if platform is Platform.ROCM:
            rules += (
                Rule(f"gfx1151 has no async copy: prepass staging copies (block_m + block_n) * "
                     f"block_k / threads 16-bit elements per thread through VGPRs; at most "
                     f"{ROCM_PREPASS_COPY_LIMIT} while the main loop issues copies (K / block_k "
                     f">= stages): more spilled next to the accumulators (clang-19)",
                     lambda v: v["staging"] != "prepass"
                     or -(-k // v["block_k"]) < v["stages"]  # every tile issued up front
                     or (v["block_m"] + v["block_n"]) * v["block_k"] // v["threads"]
                     <= ROCM_PREPASS_COPY_LIMIT),
            )
        space = Space(tunables, rules)
        if d is large and space.violation(space.default) is not None:
            space = self._small_default(space, small)
        if space.violation(space.default) is not None:
            # (gfx11's prefetch limit refuses the small default's 32x64 tile over 64 threads):
            # the first valid config in the space's order instead
            valid = next((c for c in space.configs() if space.violation(c) is None), None)
            if valid is not None:
                space = self._small_default(space, valid.as_dict())
        return space

    @staticmethod
    def _small_default(space: Space, small: dict) -> Space:
        tunables = tuple(Tunable(t.name, t.choices, small.get(t.name, t.default))
                         for t in space.tunables)
        return Space(tunables, space.rules)

    def emit(self, region: Region, config: Config) -> KernelSource:
        return _emit(region, config, self.platform)


lane = WmmaGemmLane()

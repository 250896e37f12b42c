"""HIP-dialect source for the FlashAttention-2 lane: constants + fa2_kernel.hip + runner ABI.

The kernel text lives beside this module (`fa2_kernel.hip`); emit only writes the header
comment, the compile-time constants of one (region, config) and the runner's size table, so a
failing trial can be rebuilt by hand from the printed source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arbiter.lane import AttentionRegion, Config, EmitError, KernelSource, Platform, Region

from .._gpu.abi import REBUILD, runner_table, store_defines

__all__ = ["HEAD_DIMS", "LANE", "STAGINGS", "emit", "smem_bytes"]

LANE = "fa2"
HEAD_DIMS = tuple(range(16, 257, 16))  # any multiple of 16 to 256: the kernel's 16-wide tiles
STAGINGS = ("inline", "prepass")
_KERNEL = Path(__file__).with_name("fa2_kernel.hip")


def smem_bytes(platform: Platform, head_dim: int, config: Config | Mapping[str, Any]) -> int:
    """Dynamic shared memory of one block: K/V stages (+ per-warp P scratch on gfx11).

    Mirrors the FA2_*_HALVES macros of fa2_kernel.hip: rows padded by 8 halves (16 bytes).
    """
    bk, stages, warps = int(config["block_k"]), int(config["stages"]), int(config["warps"])
    ldk = head_dim + 8
    if platform is Platform.CUDA:
        halves = stages * 2 * bk * ldk
    else:  # V stored transposed, plus per warp a 16 x (bk + 8) P scratch and its 16 Q rows
        halves = stages * (bk * ldk + head_dim * (bk + 8)) + warps * 16 * (bk + 8 + ldk)
    return 2 * halves


def _check(region: Region, config: Config) -> AttentionRegion:
    if not isinstance(region, AttentionRegion):
        raise EmitError(f"{LANE}: only attention regions, got {region.kind}")
    if region.head_dim not in HEAD_DIMS:
        raise EmitError(f"{LANE}: head_dim {region.head_dim} is not a multiple of 16 in "
                        "16..256")
    if int(config["block_q"]) != 16 * int(config["warps"]):
        raise EmitError(f"{LANE}: block_q must be 16 * warps (each warp owns 16 query rows)")
    if config["precision"] not in ("f16", "bf16"):
        raise EmitError(f"{LANE}: precision {config['precision']!r} not f16/bf16")
    if region.dtype != "f32" and config["precision"] != region.dtype:
        raise EmitError(f"{LANE}: {region.dtype} storage computes with {region.dtype} operands, "
                        f"not {config['precision']}")
    staging = config.get("staging", "inline")
    if staging not in STAGINGS:
        raise EmitError(f"{LANE}: staging {staging!r} not in {STAGINGS}")
    stages = int(config["stages"])
    if not (1 <= stages <= 2 if staging == "inline" else 2 <= stages <= 4):
        raise EmitError(f"{LANE}: staging {staging} cannot stream {stages} stages")
    return region


def emit(region: Region, config: Config, platform: Platform) -> KernelSource:
    r = _check(region, config)
    smem = smem_bytes(platform, r.head_dim, config)
    bf16 = config["precision"] == "bf16"
    consts = {
        "FA2_B": r.batch,
        "FA2_H": r.heads,
        "FA2_SQ": r.seq_q,
        "FA2_SK": r.seq_k,
        "FA2_D": r.head_dim,
        "FA2_CAUSAL": int(r.causal_offset is not None),
        "FA2_OFF": r.causal_offset or 0,
        "FA2_SCALE_LOG2": f"{float(r.scale) * math.log2(math.e)!r}f",
        "FA2_BQ": int(config["block_q"]),
        "FA2_BK": int(config["block_k"]),
        "FA2_WARPS": int(config["warps"]),
        "FA2_STAGES": int(config["stages"]),
        "FA2_PREPASS": int(config.get("staging", "inline") == "prepass"),
        "FA2_SMEM_BYTES": smem,
        "FA2_NATIVE": int(r.dtype != "f32"),
    }
    lines = [
        f"/* arbiter lane {LANE}: generated, do not edit.",
        f" * region key: {r.key}",
        f" * region:     {r.describe()} scale={r.scale!r}",
        f" * config:     {config}",
        f" * target:     {platform.value}; shared memory {smem} bytes per block",
        *REBUILD,
        " */",
    ]
    lines += [f"#define {k} {v}" for k, v in consts.items()]
    if bf16:
        lines += ["#define FA2_BF16 1", "#define ARB_FRAG_BF16 1"]
    lines += store_defines(r).splitlines()
    lines.append('#include "arb_gpu.h"')
    lines += runner_table(r).splitlines()
    text = "\n".join(lines) + "\n\n" + _KERNEL.read_text()
    return KernelSource(LANE, r.key, config, "hip", text)

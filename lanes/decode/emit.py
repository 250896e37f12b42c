"""HIP-dialect source for the decode lane: constants + decode_kernel.hip + runner ABI.

The kernel text lives beside this module (`decode_kernel.hip`); emit writes the header
comment, the storage dtype's defines, the compile-time constants of one (region, config) and
the runner's size table, so a failing trial can be rebuilt by hand from the printed source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arbiter.lane import AttentionRegion, Config, EmitError, KernelSource, Platform, Region

from .._gpu import abi

__all__ = ["HEAD_DIMS", "LANE", "MAX_SEQ_Q", "emit", "group_lanes", "tile_keys"]

LANE = "decode"
MAX_SEQ_Q = 16
HEAD_DIMS = tuple(range(8, 257, 8))  # one lane holds 8 elements; a row fits one warp
_KERNEL = Path(__file__).with_name("decode_kernel.hip")


def group_lanes(head_dim: int) -> int:
    """Lanes that read one key row: head_dim / 8, rounded up to a power of two."""
    return 1 << max(0, math.ceil(math.log2(head_dim // 8)))


def tile_keys(head_dim: int, config: Config | Mapping[str, Any]) -> int:
    """Keys one block reads per iteration: its key groups times keys_per_thread."""
    return 32 * int(config["warps"]) // group_lanes(head_dim) * int(config["keys_per_thread"])


def _check(region: Region, config: Config) -> AttentionRegion:
    if not isinstance(region, AttentionRegion):
        raise EmitError(f"{LANE}: only attention regions, got {region.kind}")
    if region.seq_q > MAX_SEQ_Q:
        raise EmitError(f"{LANE}: seq_q {region.seq_q} > {MAX_SEQ_Q}")
    if region.head_dim not in HEAD_DIMS:
        raise EmitError(f"{LANE}: head_dim {region.head_dim} is not a multiple of 8 in 8..256")
    if int(config["split_keys"]) % tile_keys(region.head_dim, config) != 0:
        raise EmitError(f"{LANE}: split_keys {config['split_keys']} is not a multiple of the "
                        f"{tile_keys(region.head_dim, config)} keys one iteration reads")
    return region


def emit(region: Region, config: Config, platform: Platform) -> KernelSource:
    r = _check(region, config)
    split_keys = int(config["split_keys"])
    qb = int(config["queries_per_block"])
    consts = {
        "DEC_B": r.batch,
        "DEC_H": r.heads,
        "DEC_SQ": r.seq_q,
        "DEC_SK": r.seq_k,
        "DEC_D": r.head_dim,
        "DEC_CAUSAL": int(r.causal_offset is not None),
        "DEC_OFF": r.causal_offset or 0,
        "DEC_SCALE_LOG2": f"{float(r.scale) * math.log2(math.e)!r}f",
        "DEC_SPLIT_KEYS": split_keys,
        "DEC_SPLITS": -(-r.seq_k // split_keys),
        "DEC_WARPS": int(config["warps"]),
        "DEC_KPT": int(config["keys_per_thread"]),
        "DEC_QB": qb,
        "DEC_QGROUPS": -(-r.seq_q // qb),
        "DEC_GP": group_lanes(r.head_dim),
    }
    lines = [
        f"/* arbiter lane {LANE}: generated, do not edit.",
        f" * region key: {r.key}",
        f" * region:     {r.describe()} scale={r.scale!r}",
        f" * config:     {config}",
        f" * target:     {platform.value}; storage {r.dtype}",
        *abi.REBUILD,
        " */",
    ]
    lines += [f"#define {k} {v}" for k, v in consts.items()]
    text = "\n".join(lines) + "\n" + abi.store_defines(r) + '#include "arb_gpu.h"\n'
    text += abi.runner_table(r) + "\n" + _KERNEL.read_text()
    return KernelSource(LANE, r.key, config, "hip", text)

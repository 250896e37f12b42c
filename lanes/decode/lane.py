"""The decode lane: split-KV ("flash-decoding") attention for a few queries over long keys."""

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
from .emit import HEAD_DIMS, LANE, MAX_SEQ_Q, tile_keys
from .emit import emit as _emit

__all__ = ["DecodeLane", "lane", "space_for"]

SPLIT_KEYS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
# Blocks of 8 warps worth launching: about two per multiprocessor (132 SMs on the H200, 40 CUs
# on gfx1151); the default chunk is the longest that still gives that many. On the H200 fewer,
# longer blocks read faster than many short ones (BENCHMARKS.md, decode).
TARGET_BLOCKS = {Platform.CUDA: 256, Platform.ROCM: 80}
# Registers a thread may hold in Q, accumulators, scores and loads in flight (estimate below);
# above it ptxas spills (nvcc 13, sm_90) and gfx11 leaves fewer waves per SIMD.
REGISTER_BUDGET = 176


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _elem_bytes(region: Region) -> int:
    return 4 if region.dtype == "f32" else 2


def registers(region: AttentionRegion, values) -> int:
    """Per-thread f32 registers the main loop keeps live: Q and acc (8 per query), m and l,
    the raw K and V words of keys_per_thread keys, and their scores and weights."""
    qb, kpt = int(values["queries_per_block"]), int(values["keys_per_thread"])
    return 18 * qb + 4 * _elem_bytes(region) * kpt + 2 * kpt * qb


def _blocks(region: AttentionRegion, split_keys: int, qb: int) -> int:
    splits = -(-region.seq_k // split_keys)
    return region.batch * region.heads * -(-region.seq_q // qb) * splits


def space_for(region: Region, platform: Platform) -> Space:
    """The decode space for `region` on `platform` (only the default split differs)."""
    if not isinstance(region, AttentionRegion):
        region = AttentionRegion(1, 1, 1, 128, seq_k=4096)
    d, sk = region.head_dim, region.seq_k
    qbs = tuple(q for q in (1, 2, 4, 8, 16) if q <= _pow2_at_least(region.seq_q))
    warps = 8
    qb = max(q for q in qbs if registers(region, {"queries_per_block": q,
                                                  "keys_per_thread": 2}) <= REGISTER_BUDGET)
    kpt = 4 if _elem_bytes(region) == 2 and qb <= 2 else 2
    tile = tile_keys(d, {"warps": warps, "keys_per_thread": kpt})
    longest = max(SPLIT_KEYS[0], _pow2_at_least(sk))

    def single(v) -> int:  # the one chunk that covers seq_k for v's tile
        return max(longest, tile_keys(d, v))

    splits = [s for s in SPLIT_KEYS if s % tile == 0 and s <= max(longest, tile)]
    enough = [s for s in splits if _blocks(region, s, qb) >= TARGET_BLOCKS[platform]]
    split = max(enough) if enough else splits[0]
    tunables = (
        Tunable("split_keys", SPLIT_KEYS, split),
        Tunable("warps", (1, 2, 4, 8), warps),
        Tunable("keys_per_thread", (1, 2, 4, 8), kpt),
        Tunable("queries_per_block", qbs, qb),
    )
    rules = (
        Rule("split_keys must be a multiple of the keys one iteration reads "
             "(32 * warps / lanes per key row * keys_per_thread)",
             lambda v: v["split_keys"] % tile_keys(d, v) == 0),
        Rule(f"split_keys at most seq_k rounded up to a power of two ({longest}) or one "
             "iteration's keys: a longer chunk is the same single split",
             lambda v: v["split_keys"] <= single(v)),
        Rule(f"Q, accumulators and loads in flight within {REGISTER_BUDGET} registers a "
             "thread (18 * queries_per_block + 4 * storage bytes * keys_per_thread + "
             "2 * keys_per_thread * queries_per_block)",
             lambda v: registers(region, v) <= REGISTER_BUDGET),
    )
    return Space(tunables, rules)


class DecodeLane(GpuLane):
    name = LANE
    precisions = ("f32",)
    dtypes = ("f32", "f16", "bf16")
    version = "1"

    def applies_to(self, region: Region) -> str | None:
        if not isinstance(region, AttentionRegion):
            return "decode computes attention regions only"
        if region.seq_q > MAX_SEQ_Q:
            return f"decode: seq_q {region.seq_q} > {MAX_SEQ_Q}, fa2's shape"
        if region.head_dim not in HEAD_DIMS:
            return (f"head_dim {region.head_dim} not supported (decode: a multiple of 8 in "
                    "8..256)")
        return None

    def space(self, region: Region) -> Space:
        return space_for(region, self.platform)

    def emit(self, region: Region, config: Config) -> KernelSource:
        return _emit(region, config, self.platform)


lane = DecodeLane()

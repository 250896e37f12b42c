"""Each region kind's array names and shapes (no numpy: the worker's first compile needs them
before numpy is imported)."""

from __future__ import annotations

from ._region import AttentionRegion, FusedRegion, Region, RowwiseRegion

__all__ = ["input_shapes", "output_shape"]


def input_shapes(region: Region) -> dict[str, tuple[int, ...]]:
    """Required arrays and their shapes, in the order runners pass them."""
    if isinstance(region, FusedRegion):
        shapes: dict[str, tuple[int, ...]] = {"A": (region.M, region.K), "B": (region.K, region.N)}
    elif isinstance(region, RowwiseRegion):
        shapes = {"X": (region.M, region.N)}
    elif isinstance(region, AttentionRegion):
        b, h = region.batch, region.heads
        return {
            "q": (b, h, region.seq_q, region.head_dim),
            "k": (b, h, region.seq_k, region.head_dim),
            "v": (b, h, region.seq_k, region.head_dim),
        }
    else:
        raise TypeError(f"not a region: {region!r}")
    if region.has_bias:
        shapes["bias"] = (region.N,)
    if region.residual:
        shapes["residual"] = (region.M, region.N)
    return shapes


def output_shape(region: Region) -> tuple[int, ...]:
    if isinstance(region, AttentionRegion):
        return (region.batch, region.heads, region.seq_q, region.head_dim)
    return (region.M, region.N)

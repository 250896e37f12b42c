"""FlashAttention-2 forward lane (HIP dialect; gfx1151 WMMA and sm_90 mma.sync)."""

from __future__ import annotations

from .lane import FA2Lane, lane

__all__ = ["FA2Lane", "lane"]

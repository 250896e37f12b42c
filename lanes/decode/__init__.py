"""Split-KV ("flash-decoding") attention lane for seq_q <= 16 (HIP dialect; gfx1151, sm_90)."""

from __future__ import annotations

from .lane import DecodeLane, lane

__all__ = ["DecodeLane", "lane"]

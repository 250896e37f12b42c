"""The gemv lane: skinny GEMM / GEMV (M <= 16) streaming B once, epilogue fused (gfx11 / sm_90)."""

from .lane import GemvLane, lane

__all__ = ["GemvLane", "lane"]

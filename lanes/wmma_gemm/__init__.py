"""The wmma_gemm lane: tensor-core GEMM with the region's epilogue fused (gfx11 / sm_90)."""

from .lane import WmmaGemmLane, lane

__all__ = ["WmmaGemmLane", "lane"]

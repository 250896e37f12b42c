"""The triton lane: generated Triton kernels (fixed templates, constexpr-specialized) for fused
matmuls, gated feed-forwards, rowwise chains and attention."""

from .lane import TritonLane, lane

__all__ = ["TritonLane", "lane"]

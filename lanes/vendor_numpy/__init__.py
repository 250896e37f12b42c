"""The numpy vendor lane: OpenBLAS matmul and an eager float32 numpy epilogue."""

from .lane import NumpyLane, lane

__all__ = ["NumpyLane", "lane"]

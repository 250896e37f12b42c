"""The torch GPU vendor lane (cuBLAS / hipBLASLt + eager epilogue, SDPA)."""

from .lane import TorchLane, lane

__all__ = ["TorchLane", "lane"]

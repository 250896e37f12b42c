"""The inductor lane: the region's PyTorch function under torch.compile (Triton on a GPU, C++
on the CPU)."""

from .lane import InductorLane, lane

__all__ = ["InductorLane", "lane"]

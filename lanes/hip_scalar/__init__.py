"""The generic HIP lane (gfx1151 via hipcc/clang, sm_90 via nvcc, one source)."""

from .lane import HipScalarLane, lane

__all__ = ["HipScalarLane", "lane"]

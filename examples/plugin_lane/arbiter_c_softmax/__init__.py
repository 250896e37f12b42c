"""An example plug-in lane: row softmax (`kind = "rowwise"`, `reduction = "softmax"`, f32, no
epilogue) as generated C, built by gcc through Arbiter's build cache and run through ctypes.

It imports only `arbiter.lane`, the public plug-in contract, and is registered by one entry
point in its pyproject.toml.
"""

from __future__ import annotations

from .lane import CSoftmax

__all__ = ["CSoftmax", "lane"]

lane = CSoftmax()

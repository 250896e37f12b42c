"""Storage dtypes: what every input and the output of a region are stored as. Kernels
accumulate in f32 whatever the storage; the oracle computes in float64 from the stored values.

bf16 arrays are numpy arrays of `ml_dtypes.bfloat16` (the type JAX uses).
"""

from __future__ import annotations

from functools import cache

import numpy as np

__all__ = ["DEFAULT_BUDGETS", "DTYPES", "numpy_dtype", "storage_view"]

DTYPES = ("f32", "f16", "bf16")

# Relative Frobenius error allowed when a region names no budget. f32 storage: f16 operands
# with f32 accumulation land near 3e-4 and tf32 near 3e-4 on unit-variance data, so 1e-3 admits
# them, while bf16 operands (2e-3..5e-3) need a looser, explicit budget. 16-bit storage: the
# output's own rounding costs about 2^-11 (f16) and 2^-8 (bf16) of its norm before any kernel
# error; the budgets leave room for the f32-accumulating kernels measured in docs/dtypes.md.
DEFAULT_BUDGETS = {"f32": 1e-3, "f16": 2e-3, "bf16": 1e-2}


@cache
def numpy_dtype(name: str) -> np.dtype:
    if name == "bf16":
        import ml_dtypes  # a slow extension to load: only in processes that meet bf16

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f32": np.float32, "f16": np.float16}[name])


def storage_view(a: np.ndarray, name: str) -> np.ndarray:
    """`a` as the storage dtype `name` when it holds that type's bytes without its tag: a bf16
    array saved with `np.save` loads back as two-byte void ('V2')."""
    want = numpy_dtype(name)
    if a.dtype.kind == "V" and a.dtype.itemsize == want.itemsize and not a.dtype.fields:
        return a.view(want)
    return a

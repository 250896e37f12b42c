"""What every runner checks before native code sees an array."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._errors import InputError
from ..region import Region, input_shapes, numpy_dtype, output_shape

__all__ = ["InputsChanged", "validate_inputs", "validate_output"]


class InputsChanged(RuntimeError):
    """Raised by a runner that finds the kernel wrote into its inputs (a GPU runner comparing
    its device copies with the host arrays they came from): the checker records the candidate
    as `inputs_changed`. The host arrays a runner is given are checked by the checker itself."""


def validate_inputs(region: Region, arrays: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Check every array the region needs: present, of the region's storage dtype (float32,
    float16, or ml_dtypes.bfloat16), right shape.

    Returns the arrays to pass to native code (C-contiguous). Extra arrays are ignored.
    Raises one `InputError` naming the first problem.
    """
    out: dict[str, np.ndarray] = {}
    want = numpy_dtype(region.dtype)
    for name, shape in input_shapes(region).items():
        if name not in arrays or arrays[name] is None:
            raise InputError(f"{region.label}: missing input {name!r} of shape {shape}")
        a = arrays[name]
        if not isinstance(a, np.ndarray):
            raise InputError(f"{region.label}: input {name!r} is {type(a).__name__}, not an array")
        if a.dtype != want:
            raise InputError(f"{region.label}: input {name!r} has dtype {a.dtype}, need {want} "
                             f"({region.dtype})")
        if a.shape != shape:
            raise InputError(f"{region.label}: input {name!r} has shape {a.shape}, need {shape}")
        out[name] = np.ascontiguousarray(a)
    return out


def validate_output(region: Region, out: object) -> np.ndarray:
    shape = output_shape(region)
    want = numpy_dtype(region.dtype)
    if not isinstance(out, np.ndarray) or out.dtype != want or out.shape != shape:
        got = getattr(out, "shape", None), getattr(out, "dtype", None)
        raise InputError(f"{region.label}: output must be {want} {shape}, got {got}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise InputError(f"{region.label}: output must be a writeable C-contiguous array")
    return out

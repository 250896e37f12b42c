"""ctypes runner: validate every array, then hand plain pointers to the generated C.

Arrays travel in the region's storage dtype (f32, f16 or bf16 bits) both ways; only the
workspace is f32."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from arbiter.lane import (
    HOST_METHOD,
    Artifact,
    Region,
    input_shapes,
    numpy_dtype,
    output_shape,
    time_host,
    validate_inputs,
    validate_output,
)

__all__ = ["CRunner"]

_ALIGN = 64


def _aligned_floats(n: int) -> np.ndarray:
    raw = np.zeros(n + _ALIGN // 4, np.float32)
    off = (-raw.ctypes.data % _ALIGN) // 4
    return raw[off : off + n]


class CRunner:
    """Loads one built library. Not thread-safe: one scratch workspace per runner."""

    timing_method = HOST_METHOD

    def __init__(self, artifact: Artifact, region: Region) -> None:
        if artifact.path is None:
            raise RuntimeError(f"{artifact.lane}: artifact has no library path")
        self.region = region
        self._names = list(input_shapes(region))
        lib = ctypes.CDLL(artifact.path)
        run = lib.arbiter_run
        run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_void_p]
        run.restype = ctypes.c_int
        size = lib.arbiter_workspace_floats
        size.argtypes = []
        size.restype = ctypes.c_long
        n = int(size())
        if n < 1:
            raise RuntimeError(f"{artifact.path}: bad workspace size {n}")
        self._lib: ctypes.CDLL | None = lib
        self._run: Callable[..., int] | None = run
        self._work = _aligned_floats(n)

    def _pointers(self, inputs: Mapping[str, np.ndarray]):
        arrays = validate_inputs(self.region, inputs)
        ptrs = (ctypes.c_void_p * len(self._names))(*(arrays[k].ctypes.data for k in self._names))
        return arrays, ptrs  # arrays keeps any contiguous copies alive during the call

    def _call(self, ptrs, out: np.ndarray) -> None:
        if self._run is None:
            raise RuntimeError("runner is closed")
        rc = self._run(ptrs, out.ctypes.data, self._work.ctypes.data)
        if rc != 0:
            raise RuntimeError(f"x86_c kernel returned {rc}")

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        validate_output(self.region, out)
        _keep, ptrs = self._pointers(inputs)
        self._call(ptrs, out)

    def time(
        self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int, repeats: int
    ) -> list[float]:
        prepared = [self._pointers(s) for s in input_sets]
        outs = [np.empty(output_shape(self.region), numpy_dtype(self.region.dtype))
                for _ in prepared]
        return time_host(lambda i: self._call(prepared[i][1], outs[i]), len(prepared),
                         warmup=warmup, repeats=repeats)

    def close(self) -> None:
        # The library stays mapped (dlclose under live OpenMP threads is unsafe); drop our refs.
        self._run = None
        self._lib = None

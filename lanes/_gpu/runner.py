"""A ctypes runner over the arb_runner.h ABI, shared by every GPU lane."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

import numpy as np

from arbiter.lane import (
    Artifact,
    Platform,
    Region,
    input_shapes,
    numpy_dtype,
    output_shape,
    validate_inputs,
    validate_output,
)

__all__ = ["GpuRunner"]

_FLOAT_P = ctypes.POINTER(ctypes.c_float)
_METHOD = {Platform.CUDA: "cuda_events", Platform.ROCM: "hip_events"}


class GpuRunner:
    """Loads one built library and launches it on `region`'s arrays.

    The library's compiled-in element counts are checked against the region when loading, so
    an artifact built for another shape is refused before any launch.
    """

    def __init__(self, artifact: Artifact, region: Region, platform: Platform) -> None:
        if artifact.path is None:
            raise RuntimeError(f"{artifact.lane}: artifact has no library path")
        self.region = region
        self.timing_method = _METHOD[platform]
        lib = ctypes.CDLL(artifact.path, mode=ctypes.RTLD_LOCAL)
        lib.arbiter_last_error.restype = ctypes.c_char_p
        lib.arbiter_n_inputs.restype = ctypes.c_int
        lib.arbiter_input_elems.restype = ctypes.c_longlong
        lib.arbiter_input_elems.argtypes = [ctypes.c_int]
        lib.arbiter_output_elems.restype = ctypes.c_longlong
        lib.arbiter_elem_bytes.restype = ctypes.c_int
        lib.arbiter_prepare.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        lib.arbiter_run.argtypes = [ctypes.c_int, ctypes.c_void_p]
        lib.arbiter_time.argtypes = [ctypes.c_int, ctypes.c_int, _FLOAT_P]
        lib.arbiter_release.restype = None
        self._lib = lib
        self._names = list(input_shapes(region))
        want = [int(np.prod(s)) for s in input_shapes(region).values()]
        have = [lib.arbiter_input_elems(i) for i in range(lib.arbiter_n_inputs())]
        out_want, out_have = int(np.prod(output_shape(region))), lib.arbiter_output_elems()
        if have != want or out_have != out_want:
            raise RuntimeError(
                f"{artifact.lane}: library built for inputs {have} -> {out_have} elements, "
                f"region {region.label} needs {want} -> {out_want}")
        size = numpy_dtype(region.dtype).itemsize
        if lib.arbiter_elem_bytes() != size:
            raise RuntimeError(f"{artifact.lane}: library stores {lib.arbiter_elem_bytes()}-byte "
                               f"elements, region {region.label} is {region.dtype}")
        self._kept: list[np.ndarray] = []

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            msg = (self._lib.arbiter_last_error() or b"").decode(errors="replace")
            raise RuntimeError(f"{what}: {msg}")

    def _prepare(self, sets: Sequence[Mapping[str, np.ndarray]]) -> None:
        arrays = [validate_inputs(self.region, s) for s in sets]
        flat = [a[n] for a in arrays for n in self._names]
        ptrs = (ctypes.c_void_p * len(flat))(*(a.ctypes.data for a in flat))
        self._check(self._lib.arbiter_prepare(len(arrays), ptrs), "arbiter_prepare")
        self._kept = flat  # hold the host arrays until the copies are done

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        validate_output(self.region, out)
        self._prepare([inputs])
        self._check(self._lib.arbiter_run(0, out.ctypes.data), "arbiter_run")

    def time(
        self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int, repeats: int
    ) -> list[float]:
        if not input_sets or repeats < 1 or warmup < 0:
            raise ValueError("need at least one input set and one repeat")
        self._prepare(input_sets)
        ms = np.zeros(repeats, np.float32)
        self._check(self._lib.arbiter_time(warmup, repeats, ms.ctypes.data_as(_FLOAT_P)),
                    "arbiter_time")
        return [float(v) * 1e-3 for v in ms]

    def close(self) -> None:
        if self._lib is not None:
            self._lib.arbiter_release()
            self._lib = None  # type: ignore[assignment]
        self._kept = []

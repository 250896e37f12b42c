"""A ctypes runner over the arb_runner.h ABI, shared by every GPU lane."""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter

import numpy as np

from arbiter.lane import (
    Artifact,
    InputsChanged,
    Platform,
    Region,
    input_shapes,
    numpy_dtype,
    output_shape,
    validate_inputs,
    validate_output,
)

__all__ = ["ClockChoice", "GpuRunner", "choose_clock"]

_FLOAT_P = ctypes.POINTER(ctypes.c_float)
_METHOD = {Platform.CUDA: "cuda_events", Platform.ROCM: "hip_events"}
WALL_CLOCK = "wall_clock"
_log = logging.getLogger(__name__)

# Events that add up to more than the wall clock around them are impossible; the slack covers
# the two clocks' skew and rounding. Events this many times under the wall time of their own
# launches (once that wall time is long enough to be more than host overhead) measured nothing.
_OVER_SLACK, _OVER_ABS_S = 1.10, 1e-4
_UNDER_RATIO, _UNDER_MIN_WALL_S = 1000.0, 1e-3
_WALL_BATCH_S = 1e-3  # a wall-clock sample times launches back to back for about this long


@dataclass(frozen=True)
class ClockChoice:
    use_events: bool
    reason: str


def choose_clock(event_s: Sequence[float], wall_s: float, launches: int) -> ClockChoice:
    """Trust the device events, or fall back to the wall clock.

    `event_s`: per-launch event times (seconds) of the timed launches; `wall_s`: host wall
    time around the whole timing call (its `launches` launches, warmup included, synchronized).
    The seed saw hipEvent times under WSL2 that were zero, negative, NaN, or unrelated to the
    wall time; any of those means the events cannot be used for this device.
    """
    if not event_s:
        return ClockChoice(False, "no event samples")
    if any(not math.isfinite(v) for v in event_s):
        return ClockChoice(False, "an event time is not finite")
    if any(v <= 0 for v in event_s):
        return ClockChoice(False, "an event time is zero or negative")
    total = math.fsum(event_s)
    if total > wall_s * _OVER_SLACK + _OVER_ABS_S:
        return ClockChoice(False, f"events add up to {total * 1e3:.3g} ms, more than the "
                                  f"{wall_s * 1e3:.3g} ms wall clock around them")
    timed_wall = wall_s * len(event_s) / max(launches, len(event_s))
    if timed_wall > _UNDER_MIN_WALL_S and total * _UNDER_RATIO < timed_wall:
        return ClockChoice(False, f"events add up to {total * 1e3:.3g} ms, over "
                                  f"{_UNDER_RATIO:.0f}x under their launches' "
                                  f"{timed_wall * 1e3:.3g} ms wall clock")
    return ClockChoice(True, "device events agree with the wall clock")


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
        self._platform = platform
        self.clock_note = ""  # why the wall clock replaced the device events, when it did
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
        lib.arbiter_read_input.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
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
        self._timed = False  # the device inputs were checked after a timing

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

    def _inputs_kept(self, when: str) -> None:
        """Raise InputsChanged when a device input no longer holds what was copied in."""
        n = len(self._names)
        for k, host in enumerate(self._kept):
            back = np.empty_like(host)
            self._check(self._lib.arbiter_read_input(k // n, k % n, back.ctypes.data),
                        "arbiter_read_input")
            if not np.array_equal(back.view(np.uint8), host.view(np.uint8)):
                raise InputsChanged(f"the kernel wrote into its device input "
                                    f"{self._names[k % n]!r} (set {k // n}) {when}")

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        validate_output(self.region, out)
        self._prepare([inputs])
        self._check(self._lib.arbiter_run(0, out.ctypes.data), "arbiter_run")
        self._inputs_kept("while checked")

    def time(
        self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int, repeats: int
    ) -> list[float]:
        if not input_sets or repeats < 1 or warmup < 0:
            raise ValueError("need at least one input set and one repeat")
        self._prepare(input_sets)
        samples = self._timing(warmup, repeats)
        if not self._timed:  # (once a runner: the first timing of a candidate, or a finalist)
            self._timed = True
            self._inputs_kept("while timed")
        return samples

    def _timing(self, warmup: int, repeats: int) -> list[float]:
        if self.timing_method != WALL_CLOCK:
            start = perf_counter()
            samples = self._events(warmup, repeats)
            wall = perf_counter() - start
            if self._platform is not Platform.ROCM:
                return samples
            choice = choose_clock(samples, wall, warmup + repeats)
            if choice.use_events:
                return samples
            self.timing_method, self.clock_note = WALL_CLOCK, choice.reason
            _log.warning("hip events unusable (%s): timing with the wall clock", choice.reason)
        return self._wall(warmup, repeats)

    def _events(self, warmup: int, repeats: int) -> list[float]:
        ms = np.zeros(repeats, np.float32)
        self._check(self._lib.arbiter_time(warmup, repeats, ms.ctypes.data_as(_FLOAT_P)),
                    "arbiter_time")
        return [float(v) * 1e-3 for v in ms]

    def _wall(self, warmup: int, repeats: int) -> list[float]:
        """`repeats` wall-clock samples, each a batch of launches back to back (arbiter_time
        synchronizes at its end) divided by its size, sized from the warmup's wall time so
        host overhead does not swamp a short kernel."""
        start = perf_counter()
        self._events(warmup, 1)
        per_launch = (perf_counter() - start) / (warmup + 1)
        batch = max(1, min(64, round(_WALL_BATCH_S / max(per_launch, 1e-9))))
        out = []
        for _ in range(repeats):
            start = perf_counter()
            self._events(0, batch)
            out.append((perf_counter() - start) / batch)
        return out

    def close(self) -> None:
        if self._lib is not None:
            self._lib.arbiter_release()
            self._lib = None  # type: ignore[assignment]
        self._kept = []

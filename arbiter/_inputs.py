"""Input validation per region kind (names and shapes: `_shapes`); seeded random inputs;
poisoning."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ._errors import InputError
from ._parts import in_parts
from ._region import Region
from ._shapes import input_shapes, output_shape

__all__ = [
    "POISON_BITS",
    "input_shapes",
    "output_shape",
    "poison",
    "random_inputs",
    "untouched_count",
    "validate_output",
    "validate_inputs",
]

# A quiet-NaN bit pattern no arithmetic produces by accident: a runner that leaves an output
# element unwritten is caught by this exact pattern, told apart from a NaN it computed.
POISON_BITS = np.uint32(0x7FC0DEAD)


def validate_inputs(region: Region, arrays: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Check every array the region needs: present, float32, right shape, C-contiguous.

    Returns the arrays to pass to native code. Extra arrays are ignored. Raises one
    `InputError` naming the first problem.
    """
    out: dict[str, np.ndarray] = {}
    for name, shape in input_shapes(region).items():
        if name not in arrays or arrays[name] is None:
            raise InputError(f"{region.label}: missing input {name!r} of shape {shape}")
        a = arrays[name]
        if not isinstance(a, np.ndarray):
            raise InputError(f"{region.label}: input {name!r} is {type(a).__name__}, not an array")
        if a.dtype != np.float32:
            raise InputError(f"{region.label}: input {name!r} has dtype {a.dtype}, need float32")
        if a.shape != shape:
            raise InputError(f"{region.label}: input {name!r} has shape {a.shape}, need {shape}")
        out[name] = np.ascontiguousarray(a)
    return out


def validate_output(region: Region, out: object) -> np.ndarray:
    shape = output_shape(region)
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != shape:
        got = getattr(out, "shape", None), getattr(out, "dtype", None)
        raise InputError(f"{region.label}: output must be float32 {shape}, got {got}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise InputError(f"{region.label}: output must be a writeable C-contiguous array")
    return out


def standard_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard-normal float32 values by the Box-Muller transform of float32 uniforms: numpy's
    own float32 normals took 8.6 ns a value, most of a rowwise region's case at a sweep's start;
    this takes about 3. (|x| stays below 5.8: 2^-24 is the smallest uniform; a draw beyond it
    comes once in 10^8.)"""
    n = math.prod(shape)
    half = (n + 1) // 2
    u = rng.random(2 * half, dtype=np.float32)
    radius, angle = u[:half], u[half:]
    np.subtract(np.float32(1), radius, out=radius)  # (0, 1]: no log(0)
    np.log(radius, out=radius)
    radius *= np.float32(-2)
    np.sqrt(radius, out=radius)
    angle *= np.float32(2 * math.pi)
    out = np.empty(2 * half, np.float32)
    np.cos(angle, out=out[:half])
    np.sin(angle, out=out[half:])
    out[:half] *= radius
    out[half:] *= radius
    return out[:n].reshape(shape)


def random_inputs(region: Region, seed: int) -> dict[str, np.ndarray]:
    """Standard-normal float32 inputs; B is scaled by 1/sqrt(K) so the product has unit variance
    and activations and reductions see values in their interesting range."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, shape in input_shapes(region).items():
        a = standard_normal(rng, shape)
        if name == "B":
            a *= np.float32(1.0 / math.sqrt(shape[0]))
        arrays[name] = a
    return arrays


# Elements per thread of a poisoning at least: a fill is cheaper than a comparison, so the
# hand-off pays later (16-core host: 2M elements 0.40 ms on one thread, 0.50 on four).
POISON_PART_MIN = 1 << 21


def poison(out: np.ndarray) -> None:
    bits = out.view(np.uint32)
    if not bits.flags.c_contiguous:  # a slice: in place as it is
        bits[...] = POISON_BITS
        return
    flat = bits.reshape(-1)
    in_parts(flat.size, lambda lo, hi: flat[lo:hi].fill(POISON_BITS), part_min=POISON_PART_MIN)


def untouched_count(out: np.ndarray) -> int:
    return int(np.count_nonzero(out.view(np.uint32) == POISON_BITS))

"""The numpy lane's computation: `A @ B` through numpy's BLAS, then one numpy call per op."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from arbiter.lane import (
    HOST_METHOD,
    AttentionRegion,
    Epilogue,
    FusedRegion,
    GatedRegion,
    Reduction,
    Region,
    time_host,
    validate_inputs,
    validate_output,
)

__all__ = ["NumpyRunner", "compute"]

_F = np.float32
_GELU_C = _F(math.sqrt(2.0 / math.pi))


def _sigmoid(x):
    return _F(1) / (_F(1) + np.exp(-x))


_POINTWISE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, _F(0)),
    "gelu": lambda x: _F(0.5) * x * (_F(1) + np.tanh(_GELU_C * (x + _F(0.044715) * x * x * x))),
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
}


def _reduce(x: np.ndarray, reduction: Reduction, eps: float) -> np.ndarray:
    if reduction is Reduction.SOFTMAX:
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if reduction is Reduction.RMSNORM:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + _F(eps))
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    return d / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + _F(eps))


def _attention(region: AttentionRegion, q, k, v) -> np.ndarray:
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * _F(region.scale)
    off = region.causal_offset
    if off is not None:
        i = np.arange(region.seq_q)[:, None]
        j = np.arange(region.seq_k)[None, :]
        s = np.where(j <= i + off, s, -np.inf).astype(_F)
    m = s.max(axis=-1, keepdims=True)
    dead = ~np.isfinite(m)
    p = np.exp(s - np.where(dead, _F(0), m))
    o = np.matmul(p, v) / np.where(dead, _F(1), p.sum(axis=-1, keepdims=True))
    return np.where(dead, _F(0), o)


def compute(region: Region, stored: Mapping[str, np.ndarray]) -> np.ndarray:
    """The result in the region's storage dtype: 16-bit inputs are widened to float32 first
    (numpy has no 16-bit BLAS), as a user of numpy would."""
    a = stored if region.dtype == "f32" else {k: v.astype(_F) for k, v in stored.items()}
    out = _compute(region, a)
    return out if region.dtype == "f32" else out.astype(next(iter(stored.values())).dtype)


def _compute(region: Region, a: Mapping[str, np.ndarray]) -> np.ndarray:
    if isinstance(region, AttentionRegion):
        return _attention(region, a["q"], a["k"], a["v"])
    if isinstance(region, GatedRegion):
        gate, up = a["A"] @ a["Wg"], a["A"] @ a["Wu"]
        if region.bias:
            gate, up = gate + a["bias_g"], up + a["bias_u"]
        return _POINTWISE[region.activation.value](gate) * up
    if isinstance(region, FusedRegion):
        x = a["A"]
        for pre in region.prologue:
            x = _POINTWISE[pre.value](x)
        x = x @ a["B"]
    else:
        x = a["X"]
    for op in region.epilogue:
        x = x + a["bias"] if op is Epilogue.BIAS else _POINTWISE[op.value](x)
    if region.residual:
        x = x + a["residual"]
    if region.reduction is not None:
        x = _reduce(x, region.reduction, region.eps)
    return x


class NumpyRunner:
    timing_method = HOST_METHOD

    def __init__(self, region: Region) -> None:
        self.region = region

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        a = validate_inputs(self.region, inputs)
        validate_output(self.region, out)
        out[...] = compute(self.region, a)

    def time(
        self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int, repeats: int
    ) -> list[float]:
        sets = [validate_inputs(self.region, s) for s in input_sets]
        return time_host(lambda i: compute(self.region, sets[i]), len(sets),
                         warmup=warmup, repeats=repeats)

    def close(self) -> None:
        pass

"""The float64 numpy reference every lane is judged against."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..lane import usable_cores, validate_inputs
from ..region import (
    AttentionRegion,
    Epilogue,
    FusedRegion,
    GatedRegion,
    Pointwise,
    Reduction,
    Region,
    RowwiseRegion,
    output_shape,
)

__all__ = ["reference"]

_GELU_C = math.sqrt(2.0 / math.pi)

# The chain's ops work in place on a float64 block of rows the chain owns, so a large region
# needs no full-size temporaries. Each keeps its formula's order of operations, so the results
# are the formulas' to the bit (tests/test_oracle.py).


def _gelu(x: np.ndarray) -> np.ndarray:
    """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x * x * x)))"""
    a = 0.044715 * x
    a *= x
    a *= x
    a += x
    a *= _GELU_C
    np.tanh(a, out=a)
    a += 1.0
    x *= 0.5
    x *= a
    return x


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """0.5 * (1 + tanh(0.5 * x)): the overflow-free form of 1 / (1 + exp(-x))"""
    x *= 0.5
    np.tanh(x, out=x)
    x += 1.0
    x *= 0.5
    return x


def _silu(x: np.ndarray) -> np.ndarray:
    x *= _sigmoid(x.copy())
    return x


POINTWISE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, 0.0, out=x),
    "gelu": _gelu,
    "silu": _silu,
    "sigmoid": _sigmoid,
    "tanh": lambda x: np.tanh(x, out=x),
}


def _softmax(x: np.ndarray, eps: float) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)), row by row"""
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def _rmsnorm(x: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x * x) + eps), row by row"""
    x /= np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x


def _layer_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(mean((x - mean)^2) + eps), row by row"""
    x -= x.mean(axis=-1, keepdims=True)
    x /= np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x


REDUCTIONS = {"softmax": _softmax, "rmsnorm": _rmsnorm, "layer_norm": _layer_norm}


def _chain(
    x: np.ndarray,
    epilogue: tuple[Epilogue, ...],
    bias: np.ndarray | None,
    residual: np.ndarray | None,
    reduction: Reduction | None,
    eps: float,
) -> None:
    """The ops after the matmul, on the float64 block `x` in place (a stored residual is
    added as float64: the cast is exact)."""
    for op in epilogue:
        if op is Epilogue.BIAS:
            x += bias
        else:
            POINTWISE[op.value](x)
    if residual is not None:
        x += residual.astype(np.float64)
    if reduction is not None:
        REDUCTIONS[reduction.value](x, eps)


def _attention(region: AttentionRegion, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    out = np.empty(q.shape, np.float64)
    off = region.causal_offset
    step = max(1, ATTENTION_BLOCK // region.seq_k)

    def rows(b: int, h: int, r0: int) -> None:
        """Query rows r0.. of one (batch, head): their scores stay a small block, and a causal
        block multiplies only the keys its last row sees (the others' weights are exact
        zeros)."""
        r1 = min(region.seq_q, r0 + step)
        keys = region.seq_k if off is None else min(region.seq_k, max(0, r1 + off))
        if keys == 0:  # no row of the block sees a key: zeros
            out[b, h, r0:r1] = 0.0
            return
        s = q[b, h, r0:r1] @ k[b, h, :keys].T
        s *= region.scale
        if off is not None:
            s[np.arange(keys)[None, :] > np.arange(r0, r1)[:, None] + off] = -np.inf
        m = s.max(axis=-1, keepdims=True)
        dead = ~np.isfinite(m)  # rows that see no key output zeros
        s -= np.where(dead, 0.0, m)
        np.exp(s, out=s)
        o = s @ v[b, h, :keys]
        o /= np.where(dead, 1.0, s.sum(axis=-1, keepdims=True))
        out[b, h, r0:r1] = np.where(dead, 0.0, o)

    # numpy's ufuncs and BLAS release the GIL: the blocks run on every core this process has
    # (the exponentials, single-threaded in numpy, are most of a large region's time)
    blocks = [(b, h, r0) for b in range(region.batch) for h in range(region.heads)
              for r0 in range(0, region.seq_q, step)]
    with ThreadPoolExecutor(min(usable_cores(), len(blocks))) as pool:
        for done in [pool.submit(rows, *blk) for blk in blocks]:
            done.result()
    return out


# Scores per block of an attention reference (16 MiB of float64).
ATTENTION_BLOCK = 1 << 21

# Elements per block of rows of a rowwise reference: the chain's float64 temporaries stay
# small (in cache).
BLOCK_ELEMENTS = 1 << 16
# ... and of a matmul's (16 MiB of float64): rows enough for BLAS to run at speed (at 2**16 a
# 4096-wide product took 16 rows a call, each call reading all of B again).
MATMUL_BLOCK_ELEMENTS = 1 << 21


def reference(region: Region, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The region's exact result in float64, from the validated inputs as stored (already
    rounded to the region's dtype)."""
    return _reference(region, validate_inputs(region, arrays))


def _gated(region: GatedRegion, a: Mapping[str, np.ndarray]) -> np.ndarray:
    """act(A @ Wg + bias_g) * (A @ Wu + bias_u), a block of rows at a time"""
    wg, wu = a["Wg"].astype(np.float64), a["Wu"].astype(np.float64)
    bg = a["bias_g"].astype(np.float64) if region.bias else None
    bu = a["bias_u"].astype(np.float64) if region.bias else None
    out = np.empty(output_shape(region), np.float64)
    step = max(1, MATMUL_BLOCK_ELEMENTS // region.N)
    for s in range(0, region.M, step):
        x = a["A"][s:s + step].astype(np.float64)
        gate, up = x @ wg, x @ wu
        if bg is not None and bu is not None:
            gate += bg
            up += bu
        POINTWISE[region.activation.value](gate)
        np.multiply(gate, up, out=out[s:s + step])
    return out


def _reference(region: Region, a: Mapping[str, np.ndarray]) -> np.ndarray:
    if isinstance(region, AttentionRegion):
        return _attention(region, *(a[k].astype(np.float64) for k in ("q", "k", "v")))
    if isinstance(region, GatedRegion):
        return _gated(region, a)
    if isinstance(region, FusedRegion):
        rows, b = a["A"], a["B"].astype(np.float64)
    elif isinstance(region, RowwiseRegion):
        rows, b = a["X"], None
    else:
        raise TypeError(f"not a region: {region!r}")
    bias = a["bias"].astype(np.float64) if "bias" in a else None
    residual = a.get("residual")
    out = np.empty(output_shape(region), np.float64)
    step = max(1, (BLOCK_ELEMENTS if b is None else MATMUL_BLOCK_ELEMENTS) // out.shape[1])
    # every op after the matmul works row by row, so each block of rows is done in full, in
    # its place in the result
    for s in range(0, out.shape[0], step):
        block = out[s:s + step]
        if b is not None:
            x = rows[s:s + step].astype(np.float64)
            for op in region.prologue:  # type: ignore[union-attr]
                POINTWISE[Pointwise(op).value](x)
            block[...] = x @ b
        else:
            block[...] = rows[s:s + step].astype(np.float64)
        _chain(block, region.epilogue, bias,
               residual[s:s + step] if residual is not None else None, region.reduction,
               region.eps)
    return out

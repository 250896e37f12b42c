"""The float64 numpy reference every lane is judged against, and the comparison itself."""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._compare_c import Sums, fits, squares
from ._errors import ArbiterError, InputError
from ._inputs import POISON_BITS, output_shape, untouched_count, validate_inputs
from ._ops import Epilogue, Pointwise, Reduction
from ._parts import PART_MIN, cores_but_one, in_parts
from ._region import (
    DEFAULT_BUDGET,
    AttentionRegion,
    FusedRegion,
    Region,
    RowwiseRegion,
    is_real,
)
from ._values import Status

__all__ = ["Verdict", "compare", "reference", "budget_of"]

_GELU_C = math.sqrt(2.0 / math.pi)

# The chain's ops work in place, on a float64 block the chain owns: each new temporary of a
# block (64K elements, 512 KB) was a fresh mapping whose pages faulted in (gelu: 1.0 -> 0.4
# ms a block on a 2-core VM). Each keeps its formula's order of operations, so the results
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
    """The ops after the matmul, on the float64 block `x` in place (a float32 residual is
    added as float64: the cast is exact)."""
    for op in epilogue:
        if op is Epilogue.BIAS:
            x += bias
        else:
            POINTWISE[op.value](x)
    if residual is not None:
        x += residual
    if reduction is not None:
        REDUCTIONS[reduction.value](x, eps)


def _attention(region: AttentionRegion, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    i = np.arange(region.seq_q)[:, None]
    j = np.arange(region.seq_k)[None, :]
    visible = j <= i + (region.seq_k - region.seq_q) if region.causal else None
    out = np.empty(q.shape, np.float64)
    # one (batch, head) at a time through BLAS: the full score tensor of a large region would
    # not fit in memory, and einsum would not use BLAS
    for b in range(region.batch):
        for h in range(region.heads):
            s = (q[b, h] @ k[b, h].T) * region.scale
            if visible is not None:
                s = np.where(visible, s, -np.inf)
            m = s.max(axis=-1, keepdims=True)
            dead = ~np.isfinite(m)  # rows that see no key output zeros
            p = np.exp(s - np.where(dead, 0.0, m))
            o = (p @ v[b, h]) / np.where(dead, 1.0, p.sum(axis=-1, keepdims=True))
            out[b, h] = np.where(dead, 0.0, o)
    return out


# Rows per block of a matmul/rowwise reference: the float64 temporaries of the chain (~64K
# elements) stay in cache; the whole-array form ran 3-4x slower (512x1024: 10 ms -> 2.8 ms).
BLOCK_ELEMENTS = 1 << 16


_BLAS_LIMIT = threading.Lock()


@functools.cache
def _blas_pools() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _spare_a_core() -> AbstractContextManager[Any]:
    """BLAS on every core but one while the oracle multiplies. A sweep's parent process works
    beside the worker that computes the references (its sampler, its database writes); a
    product spread over every core waits for the one the parent holds (a small matmul
    chain's references: 3 ms alone, 10-30 ms beside a busy parent on 2 cores). The products
    are done a block of rows at a time, so one thread fewer costs nothing measurable."""
    return _blas_pools().limit(limits=cores_but_one(), user_api="blas")


def reference(region: Region, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The region's exact result in float64, from validated float32 inputs."""
    a = validate_inputs(region, arrays)
    # the limit is the process's: two references at once must not restore each other's
    with _BLAS_LIMIT, _spare_a_core():
        return _reference(region, a)


def _reference(region: Region, a: Mapping[str, np.ndarray]) -> np.ndarray:
    if isinstance(region, AttentionRegion):
        return _attention(region, *(a[k].astype(np.float64) for k in ("q", "k", "v")))
    if isinstance(region, FusedRegion):
        rows, b = a["A"], a["B"].astype(np.float64)
    elif isinstance(region, RowwiseRegion):
        rows, b = a["X"], None
    else:
        raise TypeError(f"not a region: {region!r}")
    bias = a["bias"].astype(np.float64) if "bias" in a else None
    residual = a.get("residual")
    out = np.empty(output_shape(region), np.float64)
    step = max(1, BLOCK_ELEMENTS // out.shape[1])
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
            block[...] = rows[s:s + step]
        _chain(block, region.epilogue, bias,
               residual[s:s + step] if residual is not None else None, region.reduction,
               region.eps)
    return out


def checked_budget(budget: object) -> float:
    """A relative error budget given on the command line or to the API, or one line on what is
    wrong with it (a spec's are checked with its regions)."""
    if not is_real(budget) or not 0 < budget < math.inf:
        raise ArbiterError(f"--budget must be a positive number, got {budget!r}")
    return float(budget)


def budget_of(region: Region, override: float | None = None) -> float:
    if override is not None:
        return checked_budget(override)
    return region.budget if region.budget is not None else DEFAULT_BUDGET


@dataclass(frozen=True)
class Verdict:
    status: Status
    rel_error: float | None
    max_abs: float | None
    detail: str = ""


# Elements per pass of the comparison: its float64 temporaries stay in cache, and a large
# output (64M elements at benchmark scale) needs no 512 MB difference array.
CHUNK = 1 << 16


def frobenius(a: np.ndarray) -> float:
    """||a|| in float64, chunk by chunk (pairwise sums; BLAS dot is fast when the machine is
    idle, but took ~6 ms for 512K elements with the 2 cores busy, against ~0.2 ms idle)."""
    flat = a.reshape(-1)
    buf = np.empty(min(CHUNK, flat.size), np.float64)
    total = 0.0
    for s in range(0, flat.size, CHUNK):
        part = buf[: min(CHUNK, flat.size - s)]
        np.square(flat[s:s + CHUNK], out=part, dtype=np.float64)
        total += float(part.sum())
    return math.sqrt(total)


def _sums(flat_out: np.ndarray, flat_ref: np.ndarray, lo: int, hi: int,
          repoison: bool) -> Sums:
    """`Sums` over lo..hi, and with `repoison` the poison put back there: in one pass of C
    once it is built (`_compare_c`), else a cached chunk at a time (a chunk's faults counted
    only when its sum is not finite: the poison is a NaN, and a float32 difference squared
    cannot overflow float64)."""
    loop = squares()
    if loop is not None and fits(flat_out, flat_ref):
        return loop(flat_out[lo:hi], flat_ref[lo:hi], repoison)
    buf = np.empty(min(CHUNK, hi - lo), np.float64)
    sumsq = max_sq = 0.0
    untouched = nonfinite = 0
    for s in range(lo, hi, CHUNK):
        o = flat_out[s:min(s + CHUNK, hi)]
        d = buf[:o.size]
        d[...] = o  # one plain cast: a mixed-type subtract casts in small buffered pieces
        np.subtract(d, flat_ref[s:s + o.size], out=d)
        np.square(d, out=d)
        part = float(d.sum())
        sumsq += part
        max_sq = max(max_sq, float(d.max()))
        if not math.isfinite(part):
            untouched += untouched_count(o)
            nonfinite += o.size - int(np.count_nonzero(np.isfinite(o)))
        if repoison:
            o.view(np.uint32).fill(POISON_BITS)
    return sumsq, max_sq, untouched, nonfinite


def compare(out: np.ndarray, ref: np.ndarray, budget: float,
            norm_ref: float | None = None, threads: int | None = None,
            part_min: int = PART_MIN, repoison: bool = False) -> Verdict:
    """Judge `out` against `ref`: poison left behind, NaN/Inf, then relative Frobenius error.

    `norm_ref` is `||ref||` when the caller already has it (the check compares many candidates
    against one reference). A large output is compared in parts on the free cores
    (`_parts.in_parts`; `threads` and `part_min` override how many). With `repoison`, `out`
    (contiguous) holds the poison afterwards, ready for the next run into it."""
    if out.shape != ref.shape:
        raise InputError(f"output shape {out.shape} != reference shape {ref.shape}")
    if repoison and not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("compare: only a writeable contiguous output is poisoned again")
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    parts = in_parts(out.size, lambda lo, hi: _sums(flat_out, flat_ref, lo, hi, repoison),
                     align=CHUNK, threads=threads, part_min=part_min)
    sumsq = sum(p[0] for p in parts)
    max_sq = max(p[1] for p in parts)
    untouched = sum(p[2] for p in parts)
    nonfinite = sum(p[3] for p in parts)
    # the largest |difference|, exactly (sqrt(x*x) == |x| while x*x does not underflow:
    # below 1e-154, far under any budget)
    max_abs = math.sqrt(max_sq)
    if untouched:
        return Verdict(Status.UNTOUCHED, None, None,
                       f"{untouched} of {out.size} elements unwritten")
    if nonfinite:
        return Verdict(Status.NAN, None, None,
                       f"{nonfinite} of {out.size} elements are NaN or Inf")
    if norm_ref is None:
        norm_ref = frobenius(ref)
    norm_diff = math.sqrt(sumsq)
    rel = norm_diff / norm_ref if norm_ref > 0 else norm_diff
    if not rel <= budget:
        return Verdict(
            Status.WRONG_RESULT, rel, max_abs, f"rel_error {rel:.3g} > budget {budget:.3g}"
        )
    return Verdict(Status.OK, rel, max_abs)

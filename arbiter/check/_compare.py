"""The verdict on one output: poison left behind, NaN/Inf, then relative Frobenius error."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._errors import ArbiterError, InputError
from ..lane import Status
from ..region import Region, is_real

__all__ = ["POISON_BITS", "POISON_BITS_16", "Verdict", "budget_of", "checked_budget", "compare",
           "frobenius", "poison", "untouched_count"]

# NaN bit patterns no arithmetic produces by accident (computed NaNs are the canonical
# 0x7FC00000 / 0x7E00 / 0x7FC0): a runner that leaves an output element unwritten is caught by
# its storage type's exact pattern, told apart from a NaN it computed.
POISON_BITS = np.uint32(0x7FC0DEAD)
POISON_BITS_16 = {"f16": np.uint16(0x7EAD), "bf16": np.uint16(0x7FED)}


def _poison_bits(out: np.ndarray) -> tuple[np.dtype, np.unsignedinteger]:
    if out.dtype.itemsize == 4:
        return np.dtype(np.uint32), POISON_BITS
    return np.dtype(np.uint16), POISON_BITS_16["f16" if out.dtype == np.float16 else "bf16"]

# Elements per pass: the float64 temporaries stay in cache, and a large output needs no
# full-size difference array.
CHUNK = 1 << 16


def poison(out: np.ndarray) -> None:
    """Fill `out` (float32, float16 or bfloat16) with its type's poison pattern."""
    view, bits = _poison_bits(out)
    out.view(view)[...] = bits


def untouched_count(out: np.ndarray) -> int:
    view, bits = _poison_bits(out)
    return int(np.count_nonzero(out.view(view) == bits))


@dataclass(frozen=True)
class Verdict:
    status: Status
    rel_error: float | None
    max_abs: float | None
    detail: str = ""


def checked_budget(budget: object) -> float:
    """A relative error budget given on the command line or to the API, or one line on what is
    wrong with it (a spec's are checked with its regions)."""
    if not is_real(budget) or not 0 < budget < math.inf:
        raise ArbiterError(f"--budget must be a positive number, got {budget!r}")
    return float(budget)


def budget_of(region: Region, override: float | None = None) -> float:
    if override is not None:
        return checked_budget(override)
    return region.budget if region.budget is not None else region.default_budget


def frobenius(a: np.ndarray) -> float:
    """||a|| in float64, chunk by chunk."""
    flat = a.reshape(-1)
    total = 0.0
    for s in range(0, flat.size, CHUNK):
        part = flat[s:s + CHUNK].astype(np.float64)
        total += float(np.dot(part, part))
    return math.sqrt(total)


def compare(out: np.ndarray, ref: np.ndarray, budget: float,
            norm_ref: float | None = None) -> Verdict:
    """Judge `out` against `ref`. `norm_ref` is `||ref||` when the caller has it already."""
    if out.shape != ref.shape:
        raise InputError(f"output shape {out.shape} != reference shape {ref.shape}")
    flat_out, flat_ref = out.reshape(-1), ref.reshape(-1)
    sumsq = max_sq = 0.0
    untouched = nonfinite = 0
    for s in range(0, flat_out.size, CHUNK):
        o = flat_out[s:s + CHUNK]
        d = o.astype(np.float64) - flat_ref[s:s + CHUNK]
        d *= d
        part = float(d.sum())
        sumsq += part
        max_sq = max(max_sq, float(d.max()))
        if not math.isfinite(part):  # the poison is a NaN, so only then count the faults
            untouched += untouched_count(o)
            nonfinite += o.size - int(np.count_nonzero(np.isfinite(o.astype(np.float32))))
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
    max_abs = math.sqrt(max_sq)
    if not rel <= budget:
        return Verdict(Status.WRONG_RESULT, rel, max_abs,
                       f"rel_error {rel:.3g} > budget {budget:.3g}")
    return Verdict(Status.OK, rel, max_abs)

"""Is it right: the float64 oracle, the verdict on an output, and the check of a candidate."""

from __future__ import annotations

from ._cases import Case, cases, changed_inputs, fresh_seeds, random_inputs, verify
from ._compare import (
    POISON_BITS,
    Verdict,
    budget_of,
    checked_budget,
    compare,
    frobenius,
    poison,
    untouched_count,
)
from ._oracle import reference

__all__ = [
    "POISON_BITS", "Case", "Verdict", "budget_of", "cases", "changed_inputs", "checked_budget",
    "compare", "fresh_seeds", "frobenius", "poison", "random_inputs", "reference",
    "untouched_count", "verify",
]

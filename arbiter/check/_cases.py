"""The check of one loaded candidate: run it on fresh random inputs into a poisoned output
and judge each output against the float64 reference.

Native code ignores numpy's read-only flag: a kernel that writes into its inputs (in place,
or out of bounds) would be judged on inputs it changed and leave them changed for every
candidate after it. Each case keeps two copies of its inputs, one checked on and one timed on;
after every call the copy the kernel had is compared with the other, and a candidate that
changed it is `inputs_changed` (never a winner), its case drawn afresh from its seed for the
next one."""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..lane import InputsChanged, Runner, Status
from ..region import Region, input_shapes, numpy_dtype, output_shape
from ._compare import Verdict, compare, frobenius, poison
from ._oracle import reference

__all__ = ["Case", "cases", "changed_inputs", "fresh_seeds", "random_inputs", "verify"]


def random_inputs(region: Region, seed: int) -> dict[str, np.ndarray]:
    """Standard-normal inputs in the region's storage dtype (drawn in float32, then rounded);
    B is scaled by 1/sqrt(K) so the product has unit variance and activations and reductions
    see values in their interesting range."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, shape in input_shapes(region).items():
        a = rng.standard_normal(shape, dtype=np.float32)
        if name == "B":
            a *= np.float32(1.0 / np.sqrt(shape[0]))
        arrays[name] = a.astype(numpy_dtype(region.dtype), copy=False)
    return arrays


def fresh_seeds(n: int = 2) -> list[int]:
    return [secrets.randbits(31) for _ in range(n)]


@dataclass
class Case:
    """One seed's inputs (read-only, so an in-process lane cannot change what the next
    candidate is checked on), the reference, and a copy of the inputs for timing (a kernel that
    writes to its inputs while timed must not change the checked ones either). A kernel meets
    one of the two copies at a time, so the other tells whether it changed it."""

    seed: int
    inputs: dict[str, np.ndarray]
    reference: np.ndarray
    norm: float
    timing: dict[str, np.ndarray]

    def renewed(self, region: Region) -> bool:
        """Did a kernel change the inputs or their timing copy? Then both are drawn again
        from the seed: the same values, in arrays no kernel has had."""
        if all(_same_bits(self.inputs[n], self.timing[n]) for n in self.inputs):
            return False
        fresh = _inputs(region, self.seed)
        self.inputs, self.timing = fresh.inputs, fresh.timing
        return True


def _frozen(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for a in arrays.values():
        a.flags.writeable = False
    return arrays


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    # as unsigned integers of the element's width: exact (a -0.0 or a NaN payload written over
    # a value counts), and one pass over the bytes instead of hashing them
    word = np.dtype(f"u{a.dtype.itemsize}")
    return a.shape == b.shape and bool(np.array_equal(a.view(word), b.view(word)))


def _inputs(region: Region, seed: int) -> Case:
    arrays = _frozen(random_inputs(region, seed))
    return Case(seed, arrays, np.empty(0), 0.0, _frozen({k: a.copy() for k, a in arrays.items()}))


def _case(region: Region, seed: int) -> Case:
    case = _inputs(region, seed)
    case.reference = reference(region, case.inputs)
    case.norm = frobenius(case.reference)
    return case


# The float64 reference runs once per region and seed in a worker, not once per candidate.
# A sweep goes region by region, and a large region's cases take GBs: few are kept.
_CASES: OrderedDict[tuple[Region, int], Case] = OrderedDict()
KEEP_CASES = 2


def cases(region: Region, seeds: list[int]) -> list[Case]:
    """Each seed's Case, made on first use."""
    for seed in seeds:
        key = (region, seed)
        if key not in _CASES:
            _CASES[key] = _case(region, seed)
        _CASES.move_to_end(key)
    while len(_CASES) > max(KEEP_CASES, len(seeds)):
        _CASES.popitem(last=False)
    return [_CASES[(region, s)] for s in seeds]


def changed_inputs(region: Region, seeds: list[int], *, timing: bool = False) -> str | None:
    """What a kernel changed of the seeds' inputs (`timing`: of their timing copies), those
    cases drawn afresh; None when nothing."""
    return _changed(region, cases(region, seeds), timing)


def _changed(region: Region, of: list[Case], timing: bool = False) -> str | None:
    changed = [c.seed for c in of if c.renewed(region)]
    if not changed:
        return None
    return (f"the candidate wrote into its {'timing ' if timing else ''}input arrays (seed "
            f"{', '.join(map(str, changed))}): judged on inputs it changed, it would pass or "
            "fail for the wrong reason, and so would every candidate after it")


def verify(runner: Runner, region: Region, budget: float,
           seeds: list[int]) -> tuple[Verdict, str]:
    """Run on each seed's inputs into a poisoned output, then compare; the first failure or
    the worst error, with a log line per seed. A run that changed its inputs is
    `inputs_changed`, whatever its output."""
    worst: Verdict | None = None
    log = []
    for case in cases(region, seeds):
        out = np.empty(output_shape(region), numpy_dtype(region.dtype))
        poison(out)
        what = None
        try:
            runner.run(case.inputs, out)
        except InputsChanged as e:  # (a GPU runner's device copies of them)
            what = str(e)
        finally:  # (a run that failed may have changed them too: the next one gets fresh ones)
            what = _changed(region, [case]) or what
        if what is not None:
            log.append(f"seed {case.seed}: {Status.INPUTS_CHANGED.value}: {what}")
            return Verdict(Status.INPUTS_CHANGED, None, None, what), "\n".join(log)
        v = compare(out, case.reference, budget, case.norm)
        log.append(f"seed {case.seed}: {v.status.value} rel_error={v.rel_error} "
                   f"{v.detail}".rstrip())
        if v.status is not Status.OK:
            return v, "\n".join(log)
        if worst is None or (v.rel_error or 0.0) > (worst.rel_error or 0.0):
            worst = v
    assert worst is not None
    return worst, "\n".join(log)

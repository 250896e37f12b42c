"""The oracle's per-candidate passes over an output (poisoning it, comparing it with the float64
reference) on 1..N threads, for output sizes from a small region's to benchmark scale: where
splitting them across the free cores (`arbiter._parts.in_parts`) starts to pay on this machine.
The comparison is timed twice: with its squared differences in C (`arbiter._compare_c`, built
first) and in numpy's passes (where no compiler builds the loop).

    python3 bench/oracle_parts.py [--out FILE.json]

Timing: perf_counter around one call, median of 21 after 3 warm-ups, on arrays allocated and
touched once (as a sweep's cases are); fresh random data for each row, its rel_error checked
against one thread's (to 1e-12).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from arbiter import _oracle
from arbiter._compare_c import squares_when_built
from arbiter._inputs import POISON_BITS
from arbiter._parts import cores_but_one, in_parts

SIZES = [1 << 15, 1 << 17, 1 << 19, 1 << 21, 1 << 23, 1 << 25]
MIN = 1 << 14  # the smallest part measured (the arbiter's own floor is _parts.PART_MIN)


def _median_ms(fn, runs: int = 21, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


def _row(n: int, threads: int, rng: np.random.Generator) -> dict:
    ref = rng.standard_normal(n)
    out = (ref + 1e-4 * rng.standard_normal(n)).astype(np.float32)
    norm = _oracle.frobenius(ref)
    bits = np.zeros(n, np.uint32)  # a buffer of its own: the poison is a NaN
    errors = []

    def cmp() -> None:
        errors.append(_oracle.compare(out, ref, 1e-2, norm, threads=threads,
                                      part_min=MIN).rel_error)

    c_ms = _median_ms(cmp) if squares_when_built() is not None else None
    loop = _oracle.squares
    _oracle.squares = lambda: None  # type: ignore[assignment]
    try:
        numpy_ms = _median_ms(cmp)
    finally:
        _oracle.squares = loop

    def fill() -> None:
        in_parts(n, lambda lo, hi: bits[lo:hi].fill(POISON_BITS), threads=threads,
                 part_min=MIN)

    row = {"elements": n, "threads": threads, "compare_c_ms": c_ms, "compare_numpy_ms": numpy_ms,
           "poison_ms": _median_ms(fill)}
    one = _oracle.compare(out, ref, 1e-2, norm, threads=1)
    assert all(abs(e - one.rel_error) <= 1e-12 * one.rel_error for e in errors), errors
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    free = cores_but_one()
    counts = sorted({1, 2, 4, 8, free, free + 1} & set(range(1, free + 2)))
    rng = np.random.default_rng()
    rows = []
    for n in SIZES:
        for k in counts:
            if n // k < MIN:
                continue
            row = _row(n, k, rng)
            rows.append(row)
            c = "-" if row["compare_c_ms"] is None else f"{row['compare_c_ms']:.3f}"
            print(f"{n:>10} elements, {k:>2} threads: compare {c} ms in C, "
                  f"{row['compare_numpy_ms']:.3f} ms in numpy, poison {row['poison_ms']:.3f} ms",
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cores_but_one": free, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

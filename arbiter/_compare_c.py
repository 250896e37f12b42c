"""The comparison's pass over an output in C, where a C compiler builds it: the squared
differences' sum and largest, the elements left poisoned and those NaN or Inf, and, for a
check's output buffer, the poison put back for the next candidate's run.

numpy makes five passes over each chunk of an output (cast, subtract, square, sum, max):
0.29 ms for 512K elements on this project's 2-core machine and 0.9 ms on the H200 host,
whose cores are slower. The loop below reads each element once: 0.07 ms here at the
machine's fastest, ~0.35 ms in its slow states. Poisoning the
buffer again in the same pass, while its lines are in cache, added 0.01 ms to two such
comparisons on a 2-core Xeon VM, where a fill of a cold buffer before the next run took 0.3
ms. It is built with the lanes' C compiler (`ARBITER_CC`) into the build cache, in a thread,
the first time a process asks for it; until then, and wherever it does not build or load,
numpy does the work (`_oracle._sums`), to the same result within rounding.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ._build import build_key, cached_build, run_tool
from ._inputs import POISON_BITS
from ._settings import settings

__all__ = ["Sums", "fits", "squares", "squares_when_built"]

# Eight running sums and maxima, so the compiler can keep them in vector registers without
# reordering one sum (it may not, without -ffast-math). On x86-64 the loop is also built for
# AVX2, picked at load time where the CPU has it (3x the SSE2 build's speed here). The
# faults are counted on the float's bits: the poison is one exact pattern, and NaN or Inf
# is an all-ones exponent. They are counted in 32 bits within a block (64-bit counts took
# six lane-widening shuffles every 8 elements, on the one port shuffles share), and the
# loop fetches ahead of itself: a sweep's reference is out of cache by its comparison, and
# on the 2-core VM a 512K comparison from memory went from 0.70 to 0.54 ms with both.
SOURCE = r"""
#include <stdint.h>
#include <string.h>

#define ALL_ONES 0x7f800000u
#define BLOCK (1 << 23)
#define AHEAD 512

#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 14 : __GNUC__ >= 6)
__attribute__((target_clones("avx2", "default")))
#endif
void arbiter_squares(float *out, const double *ref, int64_t n, uint32_t poison,
                     int repoison, double *res) {
    double sum[8] = {0}, top[8] = {0};
    int64_t u = 0, f = 0;
    float p;
    memcpy(&p, &poison, sizeof p);
    int64_t i = 0, whole = n - n % 8, fetched = n - AHEAD;
    while (i < whole) {
        int64_t end = whole - i > BLOCK ? i + BLOCK : whole;
        int32_t left[8] = {0}, bad[8] = {0};
        for (; i < end; i += 8) {
            if (i < fetched) {
                __builtin_prefetch(ref + i + AHEAD);
                __builtin_prefetch(out + i + AHEAD);
            }
            for (int j = 0; j < 8; j++) {
                uint32_t bits;
                memcpy(&bits, out + i + j, sizeof bits);
                double d = (double)out[i + j] - ref[i + j];
                double s = d * d;
                sum[j] += s;
                top[j] = s > top[j] ? s : top[j];
                left[j] += bits == poison;
                bad[j] += (bits & ALL_ONES) == ALL_ONES;
            }
            if (repoison)
                for (int j = 0; j < 8; j++)
                    out[i + j] = p;
        }
        for (int j = 0; j < 8; j++) {
            u += left[j];
            f += bad[j];
        }
    }
    double a = 0, m = 0;
    for (; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, out + i, sizeof bits);
        double d = (double)out[i] - ref[i];
        double s = d * d;
        a += s;
        m = s > m ? s : m;
        u += bits == poison;
        f += (bits & ALL_ONES) == ALL_ONES;
        if (repoison)
            out[i] = p;
    }
    for (int j = 0; j < 8; j++) {
        a += sum[j];
        m = top[j] > m ? top[j] : m;
    }
    res[0] = a;
    res[1] = m;
    res[2] = (double)u;
    res[3] = (double)f;
}
"""
FLAGS = ("-O2", "-ftree-vectorize", "-shared", "-fPIC")

# (sum of squared differences, the largest one, elements left poisoned, elements NaN or Inf)
Sums = tuple[float, float, int, int]
Squares = Callable[[np.ndarray, np.ndarray, bool], Sums]

_LOCK = threading.Lock()
_STATE: dict[str, Squares | None] = {}  # "loop": the loaded loop (None: none in this process)
_BUILDING: list[threading.Thread] = []


def fits(out: np.ndarray, ref: np.ndarray) -> bool:
    """Can the loop take these: a float32 and a float64 array, contiguous, of one size?"""
    return (out.dtype == np.float32 and ref.dtype == np.float64 and out.size == ref.size
            and out.flags.c_contiguous and ref.flags.c_contiguous)


def squares() -> Squares | None:
    """The C loop: `(out, ref, repoison) -> Sums` over a float32 and a float64 array, both
    contiguous and of one size; with `repoison`, `out` holds the poison afterwards. None
    while it is being built (the first call in a process starts that) or where it cannot
    be; never waits for a compiler."""
    with _LOCK:
        if "loop" in _STATE:
            return _STATE["loop"]
        if not _BUILDING:
            _BUILDING.append(threading.Thread(target=_build_and_load, daemon=True,
                                              name="arbiter-compare-build"))
            _BUILDING[0].start()
    return None


def squares_when_built(timeout: float = 120.0) -> Squares | None:
    """`squares()`, waiting for its build (tests, benchmarks)."""
    squares()
    with _LOCK:
        building = _BUILDING[0] if _BUILDING else None
    if building is not None:
        building.join(timeout)
    return squares()


def _build_and_load() -> None:
    loop: Squares | None = None
    try:
        loop = _load(_built())
    except Exception:  # noqa: BLE001  no compiler, a failed build, an unwritable cache...
        pass  # ... whatever it was, numpy does the work
    finally:
        with _LOCK:
            _STATE["loop"] = loop
            _BUILDING.clear()


def _built() -> Path:
    cc = settings().cc
    key = build_key(source=SOURCE, compiler=cc, flags=FLAGS, arch=platform.machine(),
                    lane="oracle-compare")

    def compile_it(tmp: Path, target: Path) -> tuple[int, str]:
        src = tmp / "compare.c"
        src.write_text(SOURCE)
        return run_tool([cc, *FLAGS, str(src), "-o", str(target)], timeout=120)

    return cached_build(key, ".so", compile_it)[0]


def _load(path: Path) -> Squares:
    fn = ctypes.CDLL(str(path)).arbiter_squares  # ctypes lets go of the GIL during the call
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32,
                   ctypes.c_int, ctypes.c_void_p]
    fn.restype = None

    def run(out: np.ndarray, ref: np.ndarray, repoison: bool = False) -> Sums:
        if not fits(out, ref):
            raise ValueError("squares: a contiguous float32 and float64 array of one size")
        if repoison and not out.flags.writeable:
            raise ValueError("squares: a read-only output cannot be poisoned again")
        res = np.empty(4, np.float64)
        fn(out.ctypes.data, ref.ctypes.data, out.size, int(POISON_BITS), int(repoison),
           res.ctypes.data)
        return float(res[0]), float(res[1]), int(res[2]), int(res[3])

    return run


def _forget_build() -> None:
    # a forked child has no build thread: it starts its own
    global _LOCK
    _LOCK = threading.Lock()
    _BUILDING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_build)

"""The comparison's C loop (`arbiter._compare_c`) of this tree against an older revision's,
on a sweep's output size, with its data in cache and out of it.

    python3 bench/compare_loop.py REV|FILE [--n ELEMENTS] [--runs N] [--out FILE.json]

REV: an older revision; FILE: its arbiter/_compare_c.py (a machine without git).

Each loop is built with the lanes' C compiler (`ARBITER_CC`, else gcc) and the module's
flags. Timing: perf_counter around one ctypes call, poison put back as a check does; "cold":
a 256 MB buffer is written between calls (the reference and output leave every cache, as
a sweep's timing runs leave them), "hot": the call before was on the same arrays. The two
loops alternate, call by call; median of `--runs`. Both loops' sums are checked equal.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from arbiter import _compare_c
from arbiter._inputs import POISON_BITS

ROOT = Path(__file__).resolve().parent.parent


def _source_at(rev: str) -> str:
    if Path(rev).is_file():  # an older arbiter/_compare_c.py (where there is no git)
        text = Path(rev).read_text()
    else:
        text = subprocess.run(["git", "show", f"{rev}:arbiter/_compare_c.py"], cwd=ROOT,
                              check=True, capture_output=True, text=True).stdout
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SOURCE":
            return ast.literal_eval(node.value)
    raise SystemExit(f"{rev}: no SOURCE in arbiter/_compare_c.py")


def _load(source: str, tmp: Path, name: str):
    cc = os.environ.get("ARBITER_CC", "gcc")
    src, lib = tmp / f"{name}.c", tmp / f"{name}.so"
    src.write_text(source)
    subprocess.run([cc, *_compare_c.FLAGS, str(src), "-o", str(lib)], check=True)
    fn = ctypes.CDLL(str(lib)).arbiter_squares
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint32,
                   ctypes.c_int, ctypes.c_void_p]
    fn.restype = None
    return fn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rev", help="the older revision, or its arbiter/_compare_c.py")
    ap.add_argument("--n", type=int, default=512 * 1024, help="elements (a sweep's 512x1024)")
    ap.add_argument("--runs", type=int, default=41)
    ap.add_argument("--out")
    args = ap.parse_args()
    rng = np.random.default_rng()
    ref = rng.standard_normal(args.n)
    out = (ref * (1 + 1e-4 * rng.standard_normal(args.n))).astype(np.float32)
    flush = np.zeros(256 << 20, np.uint8)
    with tempfile.TemporaryDirectory() as t:
        loops = {"old": _load(_source_at(args.rev), Path(t), "old"),
                 "new": _load(_compare_c.SOURCE, Path(t), "new")}
        result: dict = {"rev": args.rev, "n": args.n, "runs": args.runs,
                        "cpu": platform.processor() or platform.machine()}
        sums = {}
        for case in ("hot", "cold"):
            times: dict[str, list[float]] = {k: [] for k in loops}
            for _ in range(args.runs):
                for name, fn in loops.items():
                    work = out.copy()
                    res = np.empty(4)
                    fn(work.ctypes.data, ref.ctypes.data, args.n, int(POISON_BITS), 1,
                       res.ctypes.data)  # (warms it, for "hot")
                    work[:] = out
                    if case == "cold":
                        flush += 1
                    t0 = time.perf_counter()
                    fn(work.ctypes.data, ref.ctypes.data, args.n, int(POISON_BITS), 1,
                       res.ctypes.data)
                    times[name].append(time.perf_counter() - t0)
                    sums[name] = res.tolist()
            result[case] = {k: 1e3 * statistics.median(v) for k, v in times.items()}
            print(f"{case}: old {result[case]['old']:.3f} ms, new {result[case]['new']:.3f} ms "
                  f"({result[case]['new'] / result[case]['old']:.2f}x)", flush=True)
        if sums["old"] != sums["new"]:
            raise SystemExit(f"the loops disagree: {sums}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

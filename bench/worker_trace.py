"""Where a whole-spec sweep's uncovered time goes: the worker's time with no compile, no timing,
no verification run and no finalists' re-timing going on, split by the steps around it.

    python3 bench/worker_trace.py [--rev REV] [--keep DIR] [--top N] [--warm | --exhaustive]

Runs bench/arbiter_overhead.py's whole-spec sweep (a fresh process, cache and database), or
with `--warm` its exhaustive sweep and then one warm-cache sweep (`--warm 1`: the last one is
traced), or with `--exhaustive` that exhaustive sweep alone (`--warm 0`), with a
`sitecustomize` that wraps the worker's steps in both processes (a timestamp per step and
thread, dumped at exit), each module as it is first imported, so that neither process's
start-up changes; `--rev`: REV's tree, laid out by bench/old_tree.sh, instead of this
checkout. Printed: that sweep's literal overhead, the worker's uncovered time before its first
check (from the parent's first message) and after it (to its last reply), and the largest
stretches by the pair of steps on either side. The wrappers cost a few us a step: the literal
moves with them a little.

Steps: chk (a check request taken up), recv/send (a message read or written), g0/g1 (waiting
for a go), bb (a background build asked for), ho0/ho1 (its hand-over to the builder thread),
ru0 (the builder taking it up), c0/c1 (a compile on the builder thread), ta0/ta1 (taking a
background build up: waiting for it, or stopping it), b0/b1 (a build in the request), ld0/ld1
(the runner's load), r0/r1 (a verification run), t0/t1 (a timing), i0/i1 (finalists re-timed).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COVERED = ("c", "b", "t", "r", "i")

SITE = '''
import atexit, os, sys, threading, time

_TRACE = []


def _t(step):
    _TRACE.append((time.perf_counter(), threading.get_ident(), step))


@atexit.register
def _dump():
    if _TRACE:
        with open(os.environ["ARBITER_WORKER_TRACE"] + "." + str(os.getpid()), "w") as f:
            f.writelines(f"{t} {th} {s}\\n" for t, th, s in _TRACE)


def _wrapped(f, before, after, only=None):
    def step(*a, **kw):
        on = only is None or only()
        if on and before:
            _t(before)
        try:
            return f(*a, **kw)
        finally:
            if on and after:
                _t(after)
    step.traced = True
    return step


def _wrap(owner, name, before, after, only=None):
    setattr(owner, name, _wrapped(getattr(owner, name), before, after, only))


def _child_side(c):
    _wrap(c._Timed, "build", "b0", "b1")
    _wrap(c._Timed, "runner", "ld0", "ld1")
    _wrap(c._TimedRunner, "time", "t0", "t1")
    _wrap(c._TimedRunner, "run", "r0", "r1")
    _wrap(c._Go, "wait", "g0", "g1")
    _wrap(c, "_receive", None, "recv")
    _wrap(c, "send" if hasattr(c, "send") else "_send", "send", None)
    _wrap(c, "_build_behind", "bb", None)
    _wrap(c, "_take_ahead", "ta0", "ta1")
    _wrap(c._Builder, "hand_over", "ho0", "ho1")
    _wrap(c._Ahead, "run", "ru0", None)
    c._HANDLERS["check"] = _wrapped(c._HANDLERS["check"], "chk", None)
    c._HANDLERS["interleave"] = _wrapped(c._HANDLERS["interleave"], "i0", "i1")


def _worker(w):
    if hasattr(w, "_Timed"):  # a tree from before the child's side had a module of its own
        _child_side(w)
    elif hasattr(w, "send") and not hasattr(w.send, "traced"):
        _wrap(w, "send", "send", None)  # bound before the child's module was wrapped
    _wrap(w.Worker, "_meanwhile_then_go", "mw0", "mw1")
    _wrap(w.Worker, "_reply", "rp0", "rp1")
    _wrap(w.Worker, "check", "ck0", "ck1")


# Each module is wrapped as it is first imported, in whichever process imports it: imported
# here, the parent's modules (SQLAlchemy with the records) would load into the child too, and
# both processes' start-ups would have their imports paid before they began.
_HOOKS = {
    "arbiter._lane": lambda m: _wrap(m, "build_candidate", "c0", "c1", lambda: (
        threading.current_thread().name == "arbiter-build")),
    "arbiter._worker_child": _child_side,
    "arbiter._worker": _worker,
    "arbiter._check": lambda m: _wrap(m, "_judge", "cmp0", "cmp1"),
    "arbiter._api": lambda m: _wrap(m, "tune", "tu0", "tu1"),
    "arbiter._records": lambda m: _wrap(m.Records, "record", "rec0", "rec1"),
    "arbiter._studies": lambda m: _wrap(m.Studies, "flush_all", "fl0", "fl1"),
    "arbiter._asker": lambda m: _wrap(m.Asker, "propose", "ask0", "ask1"),
    "arbiter._tpe_study": lambda m: (_wrap(m.TPEStudy, "ask", "tpe0", "tpe1"),
                                     _wrap(m.TPEStudy, "tell", "tell0", "tell1")),
}


class _AfterImport:
    """Runs a module's hook once the module has run."""

    def find_spec(self, name, path, target=None):
        if name not in _HOOKS:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is not self and find is not None:
                spec = find(name, path, target)
                if spec is not None:
                    break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            hook = _HOOKS.pop(name, None)  # (`-m` finds the child's module without running it)
            if hook is not None:
                hook(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterImport())
'''


def _read(prefix: Path) -> dict[int, list[tuple[float, str, str]]]:
    out = {}
    for f in prefix.parent.glob(prefix.name + ".*"):
        rows = [ln.split() for ln in f.read_text().splitlines()]
        out[int(f.suffix[1:])] = sorted((float(t), th, s) for t, th, s in rows)
    return out


def _uncovered(steps: list[tuple[float, str, str]], start: float, end: float) -> tuple[
        float, collections.Counter[tuple[str, str]], collections.Counter[tuple[str, str]]]:
    running: collections.Counter[str] = collections.Counter()
    total, by, n = 0.0, collections.Counter(), collections.Counter()
    last_t, last_s = start, "start"
    for t, _, s in steps:
        if start <= t <= end:
            if not any(running.values()):
                total += t - last_t
                by[(last_s, s)] += t - last_t
                n[(last_s, s)] += 1
            last_t, last_s = t, s
        if s[:-1] in COVERED and s[-1] in "01":
            running[s[:-1]] += 1 if s[-1] == "0" else -1
    return total, by, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", help="a commit to trace (default: this checkout as it is)")
    ap.add_argument("--keep", type=Path, help="keep the traces and the sweep's JSON here")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--warm", action="store_true",
                    help="trace a warm-cache sweep (after the exhaustive one) instead")
    ap.add_argument("--exhaustive", action="store_true",
                    help="trace the exhaustive sweep (fresh cache, its process's first) instead")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="arbiter-trace-") as tmp:
        work = Path(tmp)
        tree = ROOT
        if a.rev:
            tree = work / "tree"
            subprocess.run(["bash", str(ROOT / "bench" / "old_tree.sh"), a.rev, str(tree)],
                           check=True)
        (work / "site").mkdir()
        (work / "site" / "sitecustomize.py").write_text(SITE)
        keep = a.keep or work
        keep.mkdir(parents=True, exist_ok=True)
        prefix = keep / "trace"
        for old in keep.glob("trace.*"):  # a kept directory's traces of an earlier run
            old.unlink()
        path = [str(work / "site"), str(tree), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p),
                   ARBITER_WORKER_TRACE=str(prefix), ARBITER_CACHE_DIR=str(work / "cache"),
                   PYTHONUNBUFFERED="1")
        how = (["--warm", "1"] if a.warm else ["--warm", "0"] if a.exhaustive
               else ["--spec-sweep", str(work), repr(time.time())])
        sweep = subprocess.run([sys.executable, "bench/arbiter_overhead.py", *how], cwd=tree,
                               env=env, capture_output=True, text=True)
        if sweep.returncode != 0:
            sys.exit(f"worker_trace: the sweep failed:\n{sweep.stderr[-3000:]}")
        (keep / "sweep.json").write_text(sweep.stdout)
        d = json.loads(sweep.stdout.splitlines()[-1])
        traces = _read(prefix)
    child = next(p for p, s in traces.items() if any(x == "chk" for _, _, x in s))
    steps = traces[child]
    parent = [s for p, s in traces.items() if p != child and s]
    # the traced sweep: the last `tune` call's (a warm sweep's worker served the one before)
    first = max(t for s in parent for t, _, x in s if x == "tu0")
    last = max(t for s in parent for t, _, x in s if x == "tu1")
    chk = next(t for t, _, s in steps if s == "chk" and t > first)
    end = max(t for t, _, s in steps if s == "send" and t < last)
    before, _, _ = _uncovered(steps, first, chk)
    total, by, n = _uncovered(steps, chk, end)
    # (an older tree's `--warm` lines lack the count: its check requests then, called-off ones
    # among them)
    trials = d.get("trials") or sum(1 for t, _, s in steps if s == "chk" and first < t < last)
    print(f"literal {d['total_minus_build_and_kernel_ms_per_trial']:.2f} ms a trial over "
          f"{trials} trials; start-up {d['startup_s']:.3f} s")
    print(f"worker uncovered: {before:.3f} s before its first check, {total:.3f} s after "
          f"({1e3 * total / trials:.2f} ms a trial)")
    for (s0, s1), v in by.most_common(a.top):
        print(f"  {s0:>6} -> {s1:<6} {1e3 * v:8.1f} ms  n={n[(s0, s1)]:4d}  "
              f"mean {1e3 * v / n[(s0, s1)]:.3f} ms")
    print("parent steps:")
    for name, (v, k) in _spans([x for s in parent for x in s], first, last).items():
        print(f"  {name:>6} {1e3 * v:8.1f} ms  n={k:4d}  mean {1e3 * v / k:.3f} ms")


def _spans(steps: list[tuple[float, str, str]], start: float, end: float,
           ) -> dict[str, tuple[float, int]]:
    """Each parent step's total time and count between `start` and `end` (outermost calls
    only, per thread)."""
    open_at: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    out: dict[str, tuple[float, int]] = {}
    for t, th, s in sorted(steps):
        if not start <= t <= end or s[-1] not in "01" or s[:-1] in ("tu", "cmp"):
            continue
        stack = open_at[(th, s[:-1])]
        if s[-1] == "0":
            stack.append(t)
        elif stack:
            t0 = stack.pop()
            if not stack:
                v, k = out.get(s[:-1], (0.0, 0))
                out[s[:-1]] = (v + t - t0, k + 1)
    return out


if __name__ == "__main__":
    main()

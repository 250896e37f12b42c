"""A first sweep's start-up, traced: when the worker's first compiler (cc1) starts, when the
first request goes out and when its result comes back, in ms after `tune` is called.

    python3 bench/startup_trace.py        # from the tree to measure; one line per run

A thread walks /proc for the worker's children; the spec is examples/regions.toml with
trials 2, x86_c and numpy, a fresh build cache and database. Run it in fresh processes.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

d = tempfile.mkdtemp(prefix="arbiter-trace-")
os.environ["ARBITER_CACHE_DIR"] = d + "/cache"

import arbiter  # noqa: E402
from arbiter import _worker  # noqa: E402


def _children(pid: str) -> list[str]:
    out = []
    try:
        for f in Path(f"/proc/{pid}/task").glob("*/children"):
            out += f.read_text().split()
    except OSError:  # the process or one of its threads has ended
        pass
    return out


def _name(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def main() -> None:
    spec = arbiter.load_spec(Path(__file__).resolve().parent.parent / "examples" / "regions.toml")
    tune = arbiter.tune  # loaded before the clock, as the overhead bench does
    checks: list[tuple[float, float, float]] = []
    check = _worker.Worker.check

    def timed(self, *a, **kw):
        start = time.perf_counter()
        out = check(self, *a, **kw)
        checks.append((start, time.perf_counter(), out.build_s))
        return out

    _worker.Worker.check = timed
    seen: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:  # the worker's descendants only (not the parent's own probe compile)
        while not done.is_set():
            stack = [k for k in _children(str(os.getpid())) if _name(k).startswith("python")]
            while stack:
                for k in _children(stack.pop()):
                    seen.setdefault(_name(k), time.perf_counter())
                    stack.append(k)
            time.sleep(0.0005)

    threading.Thread(target=watch, daemon=True).start()
    t0 = time.perf_counter()
    tune(spec, db=f"sqlite:///{d}/trace.db", trials=2, lanes=["x86_c", "numpy"], seed=0)
    done.set()

    def ms(t: float) -> int:
        return round(1e3 * (t - t0))

    (s, e, wait), second = checks[0], checks[1]
    cc1 = ms(seen["cc1"]) if "cc1" in seen else None
    print(f"worker's first cc1 {cc1} first request {ms(s)} first result {ms(e)} "
          f"(its build wait {1e3 * wait:.0f}) second result {ms(second[1])}", flush=True)


if __name__ == "__main__":
    main()

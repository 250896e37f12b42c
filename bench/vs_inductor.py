"""The arbiter's winners against what a PyTorch user would run instead (issue 39's numbers).

    python3 bench/vs_inductor.py --db vs.db --out vs.json [--regions GROUPS|NAMES]
        [--dtypes f32,bf16] [--trials N] [--quick] [--device cuda|cpu]
    python3 bench/vs_inductor.py --merge part1.json part2.json ...   # one table from parts

For each benchmark region (groups: rowwise chains at 16384x4096; matmul+bias+gelu at 1024^3,
4096^3 and 8192x8192x1024; matmul+bias+softmax / rmsnorm / layer_norm at 4096x4096x1024;
attention b4 h16 S4096, d64 and d128, causal and not), in each storage dtype:

1. the arbiter tunes every region over the device's available lanes into a fresh database
   (`--db`), its wall time per region and in total noted;
2. independently of the arbiter, in this process: `torch.compile(fn, mode=...)` of the
   region's PyTorch function (`arbiter.lanes._torch_region.compute`, the function the torch
   and inductor lanes run), its first call timed as Inductor's compile time (cold: a fresh
   Inductor cache), and the same function eagerly;
3. the declared winner and the fastest candidate of a first-party kernel lane (OWN_LANES) are
   loaded from the build cache the tune filled, in a process of their own as the tune's worker
   had them (`LaneProcess`); every contender is checked against the float64 oracle on one
   input set and then timed in the same interleaved rounds, the finalists' method of
   docs/timing.md; the ratios and the tie rule are the core's own
   (`arbiter.measure.compare_rounds`, the band `choose.py` decides ties with).

Both sides start cold: the arbiter's build cache is a fresh folder too (`--cache-dir` keeps
one instead). With `--merge`, the parts' JSON files become one table (no torch needed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import pickle
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arbiter import AttentionRegion, Config, FusedRegion, Region, RowwiseRegion
from arbiter.measure import EQUIVALENCE, ROUND_CALLS, TIE, UNRESOLVED, compare_rounds, estimate
from arbiter.region import input_shapes, numpy_dtype, output_shape

OWN_LANES = ("hip_scalar", "wmma_gemm", "fa2", "gemv", "decode", "x86_c", "triton")
MODE = "max-autotune-no-cudagraphs"
DTYPES = ("f32", "bf16")
DRIFT = 0.10  # the winner re-timed here vs its record: reported past this
SLOWER = "slower"  # a ratio's interval wholly under 1 (compare_rounds calls it unresolved)


def _rowwise(m: int, n: int) -> dict[str, Region]:
    return {
        "row_bias_softmax": RowwiseRegion(m, n, epilogue=("bias",), reduction="softmax"),
        "row_rmsnorm": RowwiseRegion(m, n, reduction="rmsnorm"),
        "row_layer_norm": RowwiseRegion(m, n, reduction="layer_norm"),
        "row_bias_gelu_residual": RowwiseRegion(m, n, epilogue=("bias", "gelu"),
                                                residual=True),
    }


def _gelu(shapes: Sequence[tuple[int, int, int]]) -> dict[str, Region]:
    return {f"mm{m}x{n}x{k}_bias_gelu": FusedRegion(m, n, k, epilogue=("bias", "gelu"))
            for m, n, k in shapes}


def _norms(m: int, n: int, k: int) -> dict[str, Region]:
    return {f"mm{m}x{n}x{k}_bias_{r}": FusedRegion(m, n, k, epilogue=("bias",), reduction=r)
            for r in ("softmax", "rmsnorm", "layer_norm")}


def _attention(batch: int, heads: int, seq: int) -> dict[str, Region]:
    return {f"attn_d{d}{'_causal' if c else ''}": AttentionRegion(batch, heads, seq, d,
                                                                  causal=c)
            for d in (64, 128) for c in (False, True)}


# group -> its regions (f32; each dtype is a copy), at benchmark scale and --quick
GROUPS: dict[str, Callable[[bool], dict[str, Region]]] = {
    "rowwise": lambda q: _rowwise(256, 1024) if q else _rowwise(16384, 4096),
    "gelu": lambda q: _gelu([(64, 64, 64), (128, 128, 128), (128, 128, 32)] if q else
                            [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 1024)]),
    "norms": lambda q: _norms(128, 128, 32) if q else _norms(4096, 4096, 1024),
    "attention": lambda q: _attention(1, 2, 128) if q else _attention(4, 16, 4096),
}


def fused_chain(region: Region) -> bool:
    """The regions the issue's geomean target is about: every chain but attention."""
    return not isinstance(region, AttentionRegion)


# Parts of the benchmark that each fit one 10-minute device command (bench/gpu_suite.sh
# vs_inductor:PART:DTYPE), two regions each.
PARTS = {
    "rows-a": "row_bias_softmax,row_rmsnorm",
    "rows-b": "row_layer_norm,row_bias_gelu_residual",
    "mm-a": "mm1024x1024x1024_bias_gelu,mm4096x4096x4096_bias_gelu",
    "mm-b": "mm8192x8192x1024_bias_gelu,mm4096x4096x1024_bias_softmax",
    "mm-c": "mm4096x4096x1024_bias_rmsnorm,mm4096x4096x1024_bias_layer_norm",
    "attn-d64": "attn_d64,attn_d64_causal",
    "attn-d128": "attn_d128,attn_d128_causal",
}
# --quick without --regions: one region of each kind, so a CPU run takes minutes
QUICK = "row_bias_softmax,mm128x128x32_bias_layer_norm,attn_d64_causal"


def pick_regions(names: str | None, dtypes: Sequence[str], quick: bool) -> list[Region]:
    """The regions asked for (group or region names), one copy per dtype, named
    `<name>_<dtype>`."""
    every = {n: (g, r) for g, make in GROUPS.items() for n, r in make(quick).items()}
    names = names or (QUICK if quick else ",".join(GROUPS))
    wanted = [n for w in names.split(",") if w.strip()
              for n in PARTS.get(w.strip(), w.strip()).split(",")]
    chosen: dict[str, Region] = {}
    for w in wanted:
        if w in GROUPS:
            chosen.update({n: r for n, (g, r) in every.items() if g == w})
        elif w in every:
            chosen[w] = every[w][1]
        else:
            raise SystemExit(f"vs_inductor: unknown region or group {w!r} (groups: "
                             f"{', '.join(GROUPS)}; parts: {', '.join(PARTS)}; regions: "
                             f"{', '.join(every)})")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise SystemExit(f"vs_inductor: unknown dtype {bad[0]!r} (known: {', '.join(DTYPES)})")
    import dataclasses

    return [dataclasses.replace(r, dtype=d, name=f"{n}_{d}")
            for d in dtypes for n, r in chosen.items()]


@dataclass(frozen=True)
class Rounds:
    """How the contenders are timed: the finalists' interleaved rounds (docs/timing.md)."""

    min_rounds: int = 10  # first look, doubled at each look
    max_rounds: int = 80
    max_seconds: float = 20.0
    wait: float = 0.5  # seconds a round may wait for the machine to quiet down


@dataclass
class Contender:
    role: str  # winner, own, inductor, eager
    lane: str
    config: dict[str, Any]
    runner: Any = None
    samples: list[float] = field(default_factory=list)
    rel_error: float | None = None
    status: str = "ok"
    note: str = ""

    @property
    def label(self) -> str:
        shown = " ".join(f"{k}={v}" for k, v in sorted(self.config.items()))
        return f"{self.lane} ({shown})" if shown else self.lane


# --------------------------------------------------------------------------- the machine


def last_level_cache(device: str) -> int:
    """Bytes of the cache the inputs must be rotated past: the GPU's L2, or the CPU's last
    level (sysfs; 32 MiB when it cannot be read)."""
    if device != "cpu":
        import torch

        props = torch.cuda.get_device_properties(0)
        return int(getattr(props, "L2_cache_size", 0) or 50 << 20)
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        with contextlib.suppress(ValueError):
            sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=32 << 20)


def input_sets(region: Region, llc: int) -> int:
    """How many input sets a region's timing rotates through. Each round makes four calls
    (a warm-up and ROUND_CALLS timed) on the first four sets of the list, and every device
    runner copies the whole list in order before its calls, so the sets after those four
    must be more than the cache to evict them; a set larger than the cache needs one other."""
    size = sum(math.prod(s) for s in input_shapes(region).values())
    set_bytes = size * numpy_dtype(region.dtype).itemsize
    if set_bytes >= 1.5 * llc:
        return 2
    return min(64, ROUND_CALLS + 1 + math.ceil(1.5 * llc / set_bytes))


def machine(device: str) -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info = {"cpu": cpu, "cpus": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "python": platform.python_version(), "device": device}
    if device != "cpu":
        info["gpu"] = torch.cuda.get_device_name(0)
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            info["triton"] = version("triton")
    return info


# --------------------------------------------------------------------------- the arbiter


class Tuner:
    """`arbiter.tune` as `api.tune` runs it (one sweep lock, one worker for the whole run),
    one region at a time, so each region's wall time is its own and its results can be
    measured before the next region starts (a run cut short keeps what it finished)."""

    def __init__(self, url: str, lanes: Sequence[str], trials: int, timeout: float) -> None:
        from arbiter.api import tune_settings, usable_lanes
        from arbiter.measure import Worker
        from arbiter.records import holder_id, one_sweep

        self.url = url
        self.how = tune_settings(trials=trials, timeout=timeout)
        self.lanes = usable_lanes(list(lanes))
        self.holder = holder_id()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(one_sweep(url))
        self.worker = self._stack.enter_context(Worker(self.how.timeout))

    def tune(self, region: Region) -> tuple[dict[str, Any], float]:
        """The region's row (as `arbiter tune --json` prints it) and the seconds it took."""
        from arbiter.api import sweep_regions

        t0 = time.perf_counter()
        row = sweep_regions(self.url, [region], self.lanes, self.how, self.worker,
                            holder=self.holder)[0]
        return row, time.perf_counter() - t0

    def close(self) -> None:
        self._stack.close()


def device_lanes(device: str) -> list[str]:
    """The available lanes that run on the device: GPU lanes on a GPU (the CPU lanes would
    time 4096^3 GEMMs on the host), CPU lanes on the CPU."""
    from arbiter.api import usable_lanes
    from arbiter.lane import Platform

    want_cpu = device == "cpu"
    return [ln.name for ln in usable_lanes(None) if (ln.platform is Platform.CPU) == want_cpu]


def best_own(url: str, region: Region, budget: float) -> tuple[str, dict[str, Any]] | None:
    """The fastest recorded candidate of a first-party kernel lane within the budget (its
    finalist re-timing where it had one, else its sweep latency)."""
    from arbiter.records import FINAL, Records, fingerprint

    records = Records(url, create=False)
    region_id = records.region_id(region.key)
    env_id = records.environment_id(fingerprint().hash)
    if region_id is None or env_id is None:
        return None
    final = {r.candidate_id: r for r in records.results(region_id, env_id, FINAL)}
    fit = []
    for r in records.results(region_id, env_id):
        r = final.get(r.candidate_id, r)
        if r.lane in OWN_LANES and r.fits(budget):
            fit.append(r)
    if not fit:
        return None
    top = min(fit, key=lambda r: r.latency)
    return top.lane, top.config.as_dict()


# --------------------------------------------------------------------------- the contenders


def lane_contender(role: str, lane_name: str, config: dict[str, Any],
                   region: Region) -> Contender:
    from arbiter.lane import get_lane
    from arbiter.measure import Measurement, build_candidate

    c = Contender(role, lane_name, config)
    try:
        lane = get_lane(lane_name)
        built = build_candidate(lane, region, Config.of(config))
        if isinstance(built, Measurement):
            c.status, c.note = built.status.value, built.log.strip()[-300:]
            return c
        c.runner = lane.runner(built, region)
    except Exception as e:  # noqa: BLE001  (what the worker would record as launch_failed)
        c.status, c.note = "launch_failed", f"{type(e).__name__}: {e}"[:300]
    return c


SERVE = "--serve-lanes"  # this script as the lane process


class LaneProcess:
    """The lane contenders of one region in a process of their own, as the tune's worker had
    them. Beside the reference compiles of this process they would not be what the tune
    timed: within a process Inductor shares loaded Triton kernels by their source, with the
    launch tuning of whoever loaded them first. The process makes the region's input sets and
    their reference itself, from the same seeds as this one."""

    def __init__(self, region: Region, n_sets: int, budget: float) -> None:
        self.start = {"region": region, "n_sets": n_sets, "budget": budget}
        self.proc: subprocess.Popen[bytes] | None = None

    def _started(self) -> None:
        """A process that has ended (a lane crashed it) is replaced for the next contender."""
        if self.proc is None or self.proc.poll() is not None:
            env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), SERVE],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            try:
                self.ask("start", **self.start)
            except RuntimeError:
                self.close()  # (the next contender starts another and is told the same)
                raise

    def ask(self, op: str, **request: Any) -> Any:
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        try:
            pickle.dump({"op": op, **request}, self.proc.stdin)
            self.proc.stdin.flush()
            reply = pickle.load(self.proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            raise RuntimeError(f"the lane process ended (exit {self.proc.wait()})") from None
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["ok"]

    def contender(self, role: str, lane: str, config: dict[str, Any]) -> Contender:
        """The lane's candidate loaded and checked there; its `runner` times it there."""
        c = Contender(role, lane, config)
        try:
            self._started()
            got = self.ask("add", role=role, lane=lane, config=config)
        except RuntimeError as e:
            c.status, c.note = "launch_failed", str(e)[:300]
            return c
        c.status, c.note, c.rel_error = got["status"], got["note"], got["rel_error"]
        if got["timing_method"] is not None:
            c.runner = Apart(self, role, got["timing_method"])
        return c

    def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@dataclass
class Apart:
    """A contender's runner in the lane process: one round of its calls from `offset`."""

    lanes: LaneProcess
    role: str
    timing_method: str

    def time_round(self, offset: int) -> list[float]:
        return self.lanes.ask("time", role=self.role, offset=offset)

    def close(self) -> None:
        pass  # (the process closes them all)


def rotated(sets: list[Any], offset: int) -> list[Any]:
    return sets[offset:] + sets[:offset]


def serve_lanes() -> int:
    """The lane process: requests from stdin, replies to the stdout it was given (what the
    lanes print goes to stderr), until stdin ends."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    state: dict[str, Any] = {}
    while True:
        try:
            request = pickle.load(sys.stdin.buffer)
        except EOFError:
            break
        try:
            reply = {"ok": _lane_request(request, state)}
        except Exception as e:  # noqa: BLE001  the parent records it as the contender's
            reply = {"error": f"{type(e).__name__}: {e}"[:300]}
        pickle.dump(reply, replies)
        replies.flush()
    for c in state.get("contenders", {}).values():
        if c.runner is not None:
            c.runner.close()
    return 0


def _lane_request(request: dict[str, Any], state: dict[str, Any]) -> Any:
    from arbiter import random_inputs, reference

    op = request["op"]
    if op == "start":
        region = request["region"]
        sets = [random_inputs(region, 1000 + i) for i in range(request["n_sets"])]
        state.update(region=region, budget=request["budget"], sets=sets,
                     ref=reference(region, sets[0]), contenders={})
        return None
    if op == "add":
        c = lane_contender(request["role"], request["lane"], request["config"], state["region"])
        if c.runner is not None:
            check(c, state["region"], state["sets"][0], state["ref"], state["budget"])
        state["contenders"][c.role] = c
        method = c.runner.timing_method if c.runner is not None and c.status == "ok" else None
        return {"status": c.status, "note": c.note, "rel_error": c.rel_error,
                "timing_method": method}
    if op == "time":
        c = state["contenders"][request["role"]]
        return list(c.runner.time(rotated(state["sets"], request["offset"]), warmup=1,
                                  repeats=ROUND_CALLS))
    raise ValueError(f"unknown request {op!r}")


def torch_contender(role: str, region: Region, device: str, tf32: bool, mode: str | None,
                    first: dict[str, np.ndarray]) -> tuple[Contender, float | None]:
    """The region's PyTorch function eagerly (`mode` None) or under torch.compile, with the
    seconds its first call (on `first`) took: the compile."""
    import torch
    from arbiter.lanes._torch_region import TorchRunner, compute, set_tf32

    names = tuple(input_shapes(region))

    def region_fn(*tensors: Any) -> Any:
        return compute(region, dict(zip(names, tensors)))

    gpu = device != "cpu"
    if mode is not None:
        torch.compiler.reset()  # each region compiles alone, as a user's first run would
        if gpu:
            set_tf32(tf32)  # (read by Inductor when it compiles)
        fn = torch.compile(region_fn, mode=mode)
    else:
        fn = region_fn

    def call(tensors: Any) -> Any:
        if gpu:
            set_tf32(tf32)  # process-wide; a lane runner timed beside it may set another
        return fn(*(tensors[n] for n in names))

    lane = "torch.compile" if mode is not None else "torch eager"
    config = {"mode": mode} if mode is not None else {}
    if gpu and region.dtype == "f32" and not isinstance(region, AttentionRegion):
        config["tf32"] = tf32
    c = Contender(role, lane, config, TorchRunner(region, call, device))
    if mode is None:
        return c, None
    placed = c.runner.place(first)
    t0 = time.perf_counter()
    try:
        call(placed)
        if gpu:
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001  a compile that fails is a result
        c.runner, c.status, c.note = None, "compile_failed", f"{type(e).__name__}: {e}"[:300]
        return c, None
    return c, time.perf_counter() - t0


def check(c: Contender, region: Region, inputs: dict[str, np.ndarray], ref: np.ndarray,
          budget: float) -> None:
    from arbiter.check import compare, poison

    out = np.empty(output_shape(region), numpy_dtype(region.dtype))
    poison(out)
    try:
        c.runner.run(inputs, out)
    except RuntimeError as e:
        c.status, c.note = "launch_failed", str(e)[:300]
        return
    v = compare(out, ref, budget)
    c.rel_error = v.rel_error
    if v.status.value != "ok":
        c.note = f"{v.status.value} at budget {budget:g}"


def versus(a: Contender, b: Contender, band: float) -> dict[str, Any] | None:
    """b's time over a's, round by round (above 1: a is faster), with the core's verdict;
    `slower` where the interval lies wholly under 1."""
    if not a.samples or not b.samples:
        return None
    c = compare_rounds(a.samples, b.samples, band)
    verdict = SLOWER if c.verdict == UNRESOLVED and c.high < 1.0 else c.verdict
    return {"ratio": c.ratio, "low": c.low, "high": c.high, "verdict": verdict,
            "rounds": c.rounds}


PAIRS = (("winner", "inductor"), ("winner", "eager"), ("own", "inductor"))


def interleaved(contenders: dict[str, Contender], sets: list[dict[str, np.ndarray]],
                r: Rounds, band: float) -> tuple[int, float | None]:
    """Interleaved rounds until every pair's ratio is resolved (faster, tie or slower) at a
    look, or the rounds or seconds run out; each round waits briefly for a quiet machine, as
    the finalists' do. Each round rotates the input list four sets on, so a round's calls
    use the sets least recently used. Returns the rounds and the highest load over one."""
    from arbiter.measure import Load

    live = {k: c for k, c in contenders.items() if c.runner is not None and c.status == "ok"}
    rng = random.Random(0)
    load, busy = Load(), None
    start, rounds, look, offset = time.monotonic(), 0, r.min_rounds, 0
    while live:
        load.quiet(r.wait)
        at, offset = offset, (offset + ROUND_CALLS + 1) % len(sets)
        order = sorted(live)
        rng.shuffle(order)
        for k in order:
            runner = live[k].runner
            try:
                live[k].samples += (runner.time_round(at) if isinstance(runner, Apart) else
                                    list(runner.time(rotated(sets, at), warmup=1,
                                                     repeats=ROUND_CALLS)))
            except RuntimeError as e:
                live[k].status, live[k].note = "launch_failed", f"while timed: {e}"[:300]
                live[k].samples = []
                del live[k]
        now = load.now()
        busy = now if busy is None or (now is not None and now > busy) else busy
        rounds += 1
        if rounds >= r.max_rounds or time.monotonic() - start > r.max_seconds:
            break
        if rounds >= look:
            verdicts = [versus(live[a], live[b], band) for a, b in PAIRS
                        if a in live and b in live and live[a] is not live[b]]
            if all(v is None or v["verdict"] != UNRESOLVED for v in verdicts):
                break
            look *= 2
    return rounds, busy


def measure_region(region: Region, row: dict[str, Any], url: str, device: str, tf32: bool,
                   mode: str, llc: int, r: Rounds, band: float) -> dict[str, Any]:
    from arbiter import random_inputs, reference
    from arbiter.check import budget_of

    budget = budget_of(region)
    n_sets = input_sets(region, llc)
    t0 = time.perf_counter()
    sets = [random_inputs(region, 1000 + i) for i in range(n_sets)]
    ref = reference(region, sets[0])
    contenders: dict[str, Contender] = {}
    inductor, compile_s = torch_contender("inductor", region, device, tf32, mode, sets[-1])
    contenders["inductor"] = inductor
    contenders["eager"] = torch_contender("eager", region, device, tf32, None, sets[-1])[0]
    for c in contenders.values():
        if c.runner is not None:
            check(c, region, sets[0], ref, budget)
    own = best_own(url, region, budget)
    lanes = LaneProcess(region, n_sets, budget) if row.get("lane") or own is not None else None
    try:
        if row.get("lane"):
            contenders["winner"] = lanes.contender("winner", row["lane"], row["config"])
        if own is not None and row.get("lane") and own == (row["lane"], row["config"]):
            contenders["own"] = contenders["winner"]
        elif own is not None:
            contenders["own"] = lanes.contender("own", own[0], own[1])
        unique = {k: c for k, c in contenders.items()
                  if k != "own" or c is not contenders.get("winner")}
        rounds, busy = interleaved(unique, sets, r, band)
    finally:
        if lanes is not None:
            lanes.close()
    methods = sorted({c.runner.timing_method for c in unique.values() if c.runner is not None})
    out: dict[str, Any] = {
        "region": region.name, "describe": region.describe(), "dtype": region.dtype,
        "key": region.key, "fused_chain": fused_chain(region), "budget": budget,
        "input_sets": n_sets,
        "input_set_mb": sum(a.nbytes for a in sets[0].values()) / 2**20, "rounds": rounds,
        "load": busy,
        "timing_methods": methods, "inductor_compile_s": compile_s,
        "arbiter": {k: row.get(k) for k in ("lane", "config", "status", "latency_ms",
                                            "verdict", "rel_error")},
        "contenders": {}, "measure_s": 0.0,
    }
    for k, c in contenders.items():
        e = estimate(c.samples) if c.samples else None
        out["contenders"][k] = {
            "lane": c.lane, "config": c.config, "label": c.label, "status": c.status,
            "note": c.note, "rel_error": c.rel_error,
            "latency_ms": None if e is None else e.latency * 1e3,
            "low_ms": None if e is None else e.low * 1e3,
            "high_ms": None if e is None else e.high * 1e3}
    out["ratios"] = {f"{a}/{b}": versus(contenders[a], contenders[b], band)
                     for a, b in PAIRS if a in contenders and b in contenders}
    v = out["ratios"].get("winner/inductor")
    out["never_slower"] = None if v is None else bool(v["ratio"] >= 1.0 or v["verdict"] == TIE)
    for c in unique.values():
        if c.runner is not None:
            c.runner.close()
    if device != "cpu":
        import torch

        torch.cuda.empty_cache()  # (the next region's contenders get the memory back)
    out["measure_s"] = time.perf_counter() - t0
    return out


def inductor_startup(device: str, mode: str) -> float:
    """Seconds the first torch.compile in a process takes on a trivial function (importing
    and starting Inductor), paid once; kept out of every region's compile time."""
    import torch

    x = torch.ones(8, device=device)
    t0 = time.perf_counter()
    torch.compile(lambda t: torch.relu(t) + 1, mode=mode)(x)
    if device != "cpu":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- the report


def geomean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def record_ratio(r: dict[str, Any]) -> float | None:
    """The winner's latency in this bench over the latency the tune recorded for it."""
    here = (r["contenders"].get("winner") or {}).get("latency_ms")
    recorded = r["arbiter"].get("latency_ms")
    return here / recorded if here and recorded else None


def summarize(regions: list[dict[str, Any]], tune_s: float, startup_s: float) -> dict:
    def ratio(r: dict, pair: str) -> float | None:
        v = r["ratios"].get(pair)
        return None if v is None else v["ratio"]

    verdicts = [r["never_slower"] for r in regions]
    compile_s = sum(r["inductor_compile_s"] or 0.0 for r in regions)
    summary: dict[str, Any] = {
        "regions": len(regions),
        "never_slower_passed": sum(1 for v in verdicts if v),
        "never_slower_failed": [r["region"] for r in regions if r["never_slower"] is False],
        # of those, the ones whose interval reaches 1: slower is not shown, a tie neither
        "never_slower_unresolved": [r["region"] for r in regions if r["never_slower"] is False
                                    and r["ratios"]["winner/inductor"]["verdict"] == UNRESOLVED],
        "never_slower_unmeasured": [r["region"] for r in regions if r["never_slower"] is None],
        # of the failed, those whose winner is the inductor lane: the same function compiled
        # again, where max-autotune's own benchmarking may settle on other kernels
        "never_slower_self": [r["region"] for r in regions if r["never_slower"] is False
                              and r["arbiter"].get("lane") == "inductor"],
        # the winner's time here over the tune's record of it, where they differ past DRIFT
        "record_drift": [(r["region"], x) for r in regions
                         if (x := record_ratio(r)) is not None and abs(x - 1) > DRIFT],
        "tune_s": tune_s, "inductor_compile_s": compile_s, "inductor_startup_s": startup_s,
        "geomean_own_vs_inductor": {}, "geomean_winner_vs_inductor": {},
    }
    for d in sorted({r["dtype"] for r in regions}) + ["all"]:
        chains = [r for r in regions if r["fused_chain"] and d in ("all", r["dtype"])]
        summary["geomean_own_vs_inductor"][d] = geomean([ratio(r, "own/inductor")
                                                         for r in chains])
        summary["geomean_winner_vs_inductor"][d] = geomean([ratio(r, "winner/inductor")
                                                            for r in chains])
    return summary


def _x(v: dict | None) -> str:
    if v is None:
        return "-"
    tag = {TIE: " tie", SLOWER: " slower", UNRESOLVED: " ?"}.get(v["verdict"], "")
    return f"{v['ratio']:.2f}x{tag}"


def _ms(c: dict | None) -> str:
    if c is None or c["latency_ms"] is None:
        return "-" if c is None else c["status"]
    return f"{c['latency_ms']:.4g}"


def _n(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(results: dict[str, Any]) -> str:
    s = results["summary"]
    lines = []
    for part in results["parts"]:
        m = part["machine"]
        where = m.get("gpu") or m["cpu"]
        lines.append(f"Command: `{part['command']}` ({where}, {m['cpus']} CPUs, torch "
                     f"{m['torch']}{', Triton ' + m['triton'] if 'triton' in m else ''}, "
                     f"{part['date']}, {part['wall_s']:.0f} s).")
    lines += [
        "",
        f"Timing: {results['parts'][0]['timing']}",
        "",
        "| region | winner | recorded ms | winner ms | Inductor ms | eager ms | winner vs Inductor "
        "| vs eager | best own lane | own vs Inductor | Inductor compile s | tune s "
        "| never slower |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["regions"]:
        c = r["contenders"]
        own = c.get("own")
        lines.append(
            f"| {r['region']} | {c['winner']['label'] if 'winner' in c else '-'} "
            f"| {_n(r['arbiter'].get('latency_ms'), '{:.4g}')} | {_ms(c.get('winner'))} "
            f"| {_ms(c.get('inductor'))} | {_ms(c.get('eager'))} "
            f"| {_x(r['ratios'].get('winner/inductor'))} | {_x(r['ratios'].get('winner/eager'))} "
            f"| {own['label'] if own else '-'} | {_x(r['ratios'].get('own/inductor'))} "
            f"| {_n(r['inductor_compile_s'], '{:.1f}')} | {_n(r.get('tune_s'), '{:.0f}')} "
            f"| {_pass(r['never_slower'])} |")
    geo = s["geomean_own_vs_inductor"]
    geo_w = s["geomean_winner_vs_inductor"]
    mode = results["parts"][0]["mode"]
    lines += [
        "",
        f"- Winner never slower than Inductor (ratio >= 1, or a tie within the "
        f"{100 * results['band']:g}% band): **{s['never_slower_passed']} of {s['regions']}**"
        + "".join(f"; {word}: {', '.join(names)}" for word, names in (
            ("slower", [n for n in s["never_slower_failed"]
                        if n not in s["never_slower_unresolved"]]),
            ("under 1 but unresolved (neither slower nor a tie at 99.4%)",
             s["never_slower_unresolved"])) if names)
        + (f"; not measured: {', '.join(s['never_slower_unmeasured'])}"
           if s["never_slower_unmeasured"] else "") + "."
        + (f" Of those short of it, {len(s['never_slower_self'])} declared the inductor lane "
           f"itself, another compile of the same function: {', '.join(s['never_slower_self'])}."
           if s.get("never_slower_self") else ""),
        "- Geomean of the best own lane over Inductor on the fused chains: "
        + ", ".join(f"{d} {_n(g, '{:.2f}x')}" for d, g in geo.items())
        + " (target above 1.2x); of the winner: "
        + ", ".join(f"{d} {_n(g, '{:.2f}x')}" for d, g in geo_w.items()) + ".",
        "- The winner re-timed here against the latency the tune recorded for it: "
        + (", ".join(f"{n} {x:.2f}x" for n, x in s["record_drift"])
           + f" (more than {100 * DRIFT:g}% apart; the others within it)"
           if s.get("record_drift") else f"all within {100 * DRIFT:g}%") + ".",
        f"- Tuning (all regions, cold build cache): **{s['tune_s']:.0f} s**; Inductor's "
        f"compiles (`{mode}`, cold cache): **{s['inductor_compile_s']:.0f} s** "
        f"(+ {s['inductor_startup_s']:.1f} s starting Inductor once per process).",
        "",
        "Ratios: Inductor's (or eager's) time over ours, the median of per-round ratios "
        "(above 1: ours is faster); `tie`: the ratio's 99.4% interval lies within the core's "
        "equivalence band (arbiter.measure.compare_rounds, as choose.py decides winners), "
        "`slower`: wholly under 1, `?`: unresolved. Best own lane: the fastest recorded "
        f"candidate of {', '.join(OWN_LANES)} within the region's budget.",
    ]
    notes = [f"{r['region']} {k}: {c['note']}" for r in results["regions"]
             for k, c in r["contenders"].items() if c["note"]]
    if notes:
        lines += ["", "Notes: " + "; ".join(notes) + "."]
    return "\n".join(lines)


def _pass(v: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "-"}[v]


def timing_text(device: str, llc: int, r: Rounds, tf32: bool, mode: str) -> str:
    clock = ("CUDA events between back-to-back launches (torch.cuda.Event for torch, "
             "arb_runner.h for kernel lanes)" if device != "cpu" else
             "the host's monotonic clock around each call (CPU timing: perf_counter_ns)")
    tf32_text = "" if device == "cpu" else (
        f"; float32 matmuls {'with' if tf32 else 'without'} TF32 in both")
    return (f"every contender in the same interleaved rounds, the finalists' method of "
            f"docs/timing.md: each round, in a new random order, one warm-up call and "
            f"{ROUND_CALLS} timed calls each; a round's value is its fastest call, a latency "
            f"the median over rounds ({r.min_rounds}-{r.max_rounds} rounds, at most "
            f"{r.max_seconds:g} s a region; a round waits up to {r.wait:g} s for other "
            f"processes to leave the CPUs, the highest load over a round is in the JSON); "
            f"clock: {clock}. Inputs: random sets rotated "
            f"past the {llc / 2**20:.0f} MiB {'L2' if device != 'cpu' else 'last-level'} "
            f"cache (a region's set count is in the JSON), copied in again before each "
            f"round. Inductor: `torch.compile(fn, mode=\"{mode}\")` of the region's PyTorch "
            f"function, compile = its first call, cold cache; eager: the same function "
            f"uncompiled{tf32_text}. Each contender checked against the float64 oracle first.")


# --------------------------------------------------------------------------- main


def say(text: str) -> None:
    print(f"vs_inductor: {text}", file=sys.stderr, flush=True)


def sqlite_url(db: str) -> str:
    if "://" in db:
        return db
    path = Path(db)
    if path.exists():
        raise SystemExit(f"vs_inductor: {db} exists: the tune needs a fresh database "
                         f"(remove it or name another)")
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def merge(paths: Sequence[str]) -> dict[str, Any]:
    parts = [json.loads(Path(p).read_text()) for p in paths]
    regions = [r for p in parts for r in p["regions"]]
    merged = {"parts": [q for p in parts for q in p["parts"]], "band": parts[0]["band"],
              "regions": regions}
    merged["summary"] = summarize(regions, sum(p["summary"]["tune_s"] for p in parts),
                                  max(p["summary"]["inductor_startup_s"] for p in parts))
    return merged


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == [SERVE]:
        return serve_lanes()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", help="a new SQLite file (or a database URL) for the tune")
    ap.add_argument("--out", help="write the results here (JSON)")
    ap.add_argument("--regions", help=f"groups ({', '.join(GROUPS)}), parts "
                                      f"({', '.join(PARTS)}) or region names, comma-separated "
                                      "(default: all)")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="storage dtypes (f32,bf16)")
    ap.add_argument("--quick", action="store_true",
                    help="small shapes, few trials and rounds (a smoke test, CPU too)")
    ap.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when present")
    ap.add_argument("--lanes", help="lanes the arbiter tunes over (default: the available "
                                    "lanes of the device)")
    ap.add_argument("--trials", type=int, help="candidates a region (default 8; --quick 3)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a candidate")
    ap.add_argument("--mode", default=MODE, help=f"torch.compile mode (default {MODE})")
    ap.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True,
                    help="float32 matmuls of the torch references on TF32 (default: yes, "
                         "the arbiter's candidates may use it within the budget)")
    ap.add_argument("--cache-dir", help="the arbiter's build cache (default: a fresh one, "
                                        "removed at the end)")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="print one table from these runs' JSON files (nothing is run)")
    args = ap.parse_args(argv)
    if args.merge:
        merged = merge(args.merge)
        if args.out:
            Path(args.out).write_text(json.dumps(merged, indent=2) + "\n")
        print(markdown(merged))
        return 0
    if not args.db:
        ap.error("--db is required (a new SQLite file for the tune)")
    return run(args, list(argv) if argv is not None else sys.argv[1:])


def run(args: argparse.Namespace, argv: list[str]) -> int:
    started = time.perf_counter()
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    regions = pick_regions(args.regions, dtypes, args.quick)
    url = sqlite_url(args.db)
    scratch = Path(tempfile.mkdtemp(prefix="vs_inductor."))
    os.environ["ARBITER_CACHE_DIR"] = args.cache_dir or str(scratch / "build")
    # the references compile into a cache of their own, cold (the inductor lane's builds and
    # worker name theirs); Triton's cache then lies inside each
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(scratch / "inductor")
    os.environ.pop("TRITON_CACHE_DIR", None)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("vs_inductor: --device cuda, but torch sees no GPU")
    trials = args.trials or (3 if args.quick else 8)
    rounds = Rounds(5, 10, 10.0, 0.5) if args.quick else Rounds()
    lanes = args.lanes.split(",") if args.lanes else device_lanes(device)
    llc = last_level_cache(device)
    part = {"command": "python3 bench/vs_inductor.py " + shlex.join(argv),
            "date": datetime.date.today().isoformat(), "machine": machine(device),
            "wall_s": 0.0, "lanes": lanes, "trials": trials, "mode": args.mode,
            "timing": timing_text(device, llc, rounds, args.tf32, args.mode)}
    results: dict[str, Any] = {"parts": [part], "band": EQUIVALENCE, "regions": []}
    say(f"{len(regions)} regions on {device}; tuning over {', '.join(lanes)}, {trials} trials "
        f"a region, into {url}")
    tuner = Tuner(url, lanes, trials, args.timeout)
    tune_total, startup = 0.0, None
    try:
        for region in regions:
            row, tune_s = tuner.tune(region)
            tune_total += tune_s
            say(f"tuned {region.name} in {tune_s:.0f} s: winner {row['lane']} {row['config']} "
                f"({row['status']})")
            if startup is None:
                startup = inductor_startup(device, args.mode)
            r = measure_region(region, row, url, device, args.tf32, args.mode, llc, rounds,
                               EQUIVALENCE)
            r["tune_s"] = tune_s
            results["regions"].append(r)
            say(f"{region.name}: winner/Inductor {_x(r['ratios'].get('winner/inductor'))}, "
                f"Inductor compile {_n(r['inductor_compile_s'], '{:.1f}')} s, {r['rounds']} "
                f"rounds, measured in {r['measure_s']:.0f} s")
            part["wall_s"] = time.perf_counter() - started
            results["summary"] = summarize(results["regions"], tune_total, startup)
            if args.out:  # after every region: a run cut short keeps what it finished
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    finally:
        tuner.close()
        if not args.cache_dir:
            shutil.rmtree(scratch, ignore_errors=True)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU lanes benchmark: the x86 C lane's best config vs the numpy lane vs a plain memory copy.

Run from the repository root:  python bench/cpu_lanes.py [--quick] [--no-write]

For each region the x86 lane's space is swept briefly (its default plus a fixed-seed sample,
a few timed calls each; every config is checked against the float64 oracle first, so a wrong
fast config cannot win). The winner, the numpy lane and `np.copyto` of the bytes the region
must move are then timed in interleaved rounds (median of all samples, inputs rotated through
several sets larger than the last-level cache). Results are printed and written into the
"CPU lanes" section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- cpu_lanes:begin -->", "<!-- cpu_lanes:end -->"
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _reexec_without_blas_overrides() -> list[str]:
    """The machine may pin OpenBLAS to an old core type; benchmark the numpy a user gets."""
    found = [k for k in BLAS_ENV if k in os.environ]
    if found and os.environ.get("ARBITER_BENCH_REEXEC") != "1":
        env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
        env["ARBITER_BENCH_REEXEC"] = "1"
        env["ARBITER_BENCH_UNSET"] = ",".join(f"{k}={os.environ[k]}" for k in found)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    return [s for s in os.environ.get("ARBITER_BENCH_UNSET", "").split(",") if s]


UNSET = _reexec_without_blas_overrides()

from arbiter.lanes.vendor_numpy import lane as numpy_lane  # noqa: E402
from arbiter.lanes.x86_c import lane as x86  # noqa: E402

from arbiter import FusedRegion, Measurement, RowwiseRegion, Status, random_inputs  # noqa: E402
from arbiter.check import budget_of, compare, poison, reference  # noqa: E402
from arbiter.lane import HOST_METHOD, time_host, usable_cores  # noqa: E402
from arbiter.measure import build_candidate  # noqa: E402
from arbiter.region import input_shapes, output_shape  # noqa: E402

S = 4096
REGIONS = [
    RowwiseRegion(S, S, epilogue=("bias", "gelu"), residual=True, name="row bias+gelu+residual"),
    RowwiseRegion(S, S, reduction="softmax", name="row softmax"),
    RowwiseRegion(S, S, reduction="rmsnorm", name="row rmsnorm"),
    RowwiseRegion(S, S, reduction="layer_norm", name="row layer_norm"),
    FusedRegion(1024, 1024, 1024, epilogue=("bias", "gelu"), name="mm1024^3 bias+gelu"),
    FusedRegion(2048, 2048, 2048, epilogue=("bias", "gelu"), name="mm2048^3 bias+gelu"),
]


def busy_fraction(interval: float = 0.5) -> float:
    """Share of all CPUs busy over `interval` seconds (from /proc/stat), 0..1."""
    def sample() -> tuple[int, int]:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(f), f[3] + f[4]  # total, idle + iowait

    t0, i0 = sample()
    time.sleep(interval)
    t1, i1 = sample()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit_s: float, log) -> float:
    """Wait (at most `limit_s`) until other processes leave the CPUs nearly idle: a
    two-thread kernel on a two-core machine is timed, not the neighbours."""
    deadline = time.time() + limit_s
    busy = busy_fraction()
    while busy > 0.1 and time.time() < deadline:
        time.sleep(2.0)
        busy = busy_fraction()
    if busy > 0.1:
        log(f"  machine still {100 * busy:.0f}% busy after {limit_s:.0f} s; timing anyway")
    return busy


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def moved_bytes(region) -> int:
    """Compulsory traffic: every input read once, the output written once."""
    n = sum(int(np.prod(s)) for s in input_shapes(region).values())
    return 4 * (n + int(np.prod(output_shape(region))))


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "threadpoolctl not installed (pip install threadpoolctl to report the kernel)"
    rows = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(
        f"{i.get('internal_api')} {i.get('version')} kernel={i.get('architecture')} "
        f"threads={i.get('num_threads')}" for i in rows
    ) or "no BLAS found by threadpoolctl"


def sweep(region, budget: float, n_configs: int, repeats: int, log) -> tuple:
    space = x86.space(region)
    configs = list(space.configs())
    rng = random.Random(20240607)
    picks = [space.default] + [c for c in rng.sample(configs, min(n_configs, len(configs)))
                               if c != space.default]
    sets = [random_inputs(region, 100 + i) for i in range(2 if region.kind == "fused" else 3)]
    ref = reference(region, sets[0])  # one float64 reference per region, fresh inputs
    best = None
    for cfg in picks:
        built = build_candidate(x86, region, cfg)
        if isinstance(built, Measurement):
            log(f"    {cfg}: {built.status.value}")
            continue
        runner = x86.runner(built, region)
        out = np.empty(output_shape(region), np.float32)
        poison(out)
        runner.run(sets[0], out)
        v = compare(out, ref, budget)
        if v.status is not Status.OK:
            log(f"    {cfg}: {v.status.value} {v.detail}")
            runner.close()
            continue
        t = median(runner.time(sets, warmup=2, repeats=repeats))
        runner.close()
        log(f"    {t * 1e3:8.2f} ms  rel_err {v.rel_error:.1e}  {cfg}")
        if best is None or t < best[1]:
            best = (cfg, t, v.rel_error)
    return best, len(picks), len(configs)


def timed_rounds(region, cfg, rounds: int, reps: dict[str, int]) -> dict[str, list[float]]:
    sets = [random_inputs(region, 200 + i) for i in range(2 if region.kind == "fused" else 3)]
    runner = x86.runner(x86.build(x86.emit(region, cfg)), region)
    npr = numpy_lane.runner(None, region)
    half = moved_bytes(region) // 8  # floats per copy buffer: read half + write half
    srcs = [np.random.default_rng(i).standard_normal(half, dtype=np.float32) for i in range(3)]
    dst = np.empty_like(srcs[0])

    cpus = usable_cores()
    pool = ThreadPoolExecutor(cpus)
    cuts = np.linspace(0, half, cpus + 1).astype(int)

    def copy_all_cores(src: np.ndarray) -> None:
        # numpy releases the GIL for a plain float copy, so these run on every core at once
        jobs = [pool.submit(np.copyto, dst[a:b], src[a:b]) for a, b in zip(cuts, cuts[1:])]
        for j in jobs:
            j.result()

    def copy_times(n: int, parallel: bool) -> list[float]:
        out = []
        for i in range(n + 2):
            t0 = time.perf_counter_ns()
            if parallel:
                copy_all_cores(srcs[i % 3])
            else:
                np.copyto(dst, srcs[i % 3])
            if i >= 2:
                out.append((time.perf_counter_ns() - t0) * 1e-9)
        return out

    samples: dict[str, list[float]] = {"x86_c": [], "numpy": [], "copy": [], "copy_mt": []}
    mm_out = np.empty(output_shape(region), np.float32)
    for _ in range(rounds):
        wait_quiet(10.0, lambda _m: None)
        samples["x86_c"] += runner.time(sets, warmup=2, repeats=reps["x86_c"])
        time.sleep(0.05)  # let OpenMP workers go idle before numpy's turn
        samples["numpy"] += npr.time(sets, warmup=1, repeats=reps["numpy"])
        samples["copy"] += copy_times(reps["copy"], False)
        samples["copy_mt"] += copy_times(reps["copy"], True)
        if region.kind == "fused":  # the BLAS call alone, without numpy's epilogue passes
            samples.setdefault("matmul", []).extend(time_host(
                lambda i: np.matmul(sets[i]["A"], sets[i]["B"], out=mm_out), len(sets),
                warmup=1, repeats=reps["numpy"]))
    runner.close()
    pool.shutdown()
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer configs and rounds (smoke run)")
    ap.add_argument("--no-write", action="store_true", help="do not touch BENCHMARKS.md")
    ap.add_argument("--wait", type=float, default=90.0,
                    help="seconds to wait for idle CPUs before timing each region (default 90)")
    args = ap.parse_args()
    n_cfg, rounds = (3, 2) if args.quick else (16, 5)
    t_start = time.time()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="arbiter-bench-") as cache:
        os.environ["ARBITER_CACHE_DIR"] = cache
        rows = []
        for region in REGIONS:
            budget = budget_of(region)
            print(f"{region.name}: sweeping x86_c", flush=True)
            wait_quiet(args.wait / 3, lambda m: print(m, flush=True))
            best, tried, size = sweep(region, budget, n_cfg, 3, lambda s: print(s, flush=True))
            if best is None:
                print("  no x86_c config passed the oracle", flush=True)
                continue
            fused = region.kind == "fused"
            reps = ({"x86_c": 8, "numpy": 4, "copy": 8} if fused
                    else {"x86_c": 12, "numpy": 4, "copy": 12})
            busy = wait_quiet(args.wait, lambda m: print(m, flush=True))
            s = timed_rounds(region, best[0], rounds, reps)
            load = os.getloadavg()[0]
            t = {k: median(v) for k, v in s.items()}
            nbytes = moved_bytes(region)
            row = {
                "region": region.name, "config": str(best[0]), "tried": f"{tried}/{size}",
                "rel_error": best[2], "x86_ms": t["x86_c"] * 1e3, "numpy_ms": t["numpy"] * 1e3,
                "speedup": t["numpy"] / t["x86_c"], "x86_gbs": nbytes / t["x86_c"] / 1e9,
                "copy_gbs": nbytes / t["copy"] / 1e9, "fused": fused,
                "copy_mt_gbs": nbytes / t["copy_mt"] / 1e9,
                "n": {k: len(v) for k, v in s.items()}, "load": load, "busy": busy,
            }
            row["copy_frac"] = row["x86_gbs"] / max(row["copy_gbs"], row["copy_mt_gbs"])
            if fused:
                row["gflops"] = 2.0 * region.M * region.N * region.K / t["x86_c"] / 1e9
                row["np_gflops"] = 2.0 * region.M * region.N * region.K / t["numpy"] / 1e9
                row["mm_gflops"] = 2.0 * region.M * region.N * region.K / t["matmul"] / 1e9
                row["ok"] = row["speedup"] >= 0.5
            else:
                row["ok"] = row["speedup"] >= 3.0 and row["copy_frac"] >= 0.5
            rows.append(row)
            print(f"  -> x86 {row['x86_ms']:.2f} ms, numpy {row['numpy_ms']:.2f} ms, "
                  f"x{row['speedup']:.2f}, {row['x86_gbs']:.1f} GB/s vs copy "
                  f"{row['copy_gbs']:.1f} / {row['copy_mt_gbs']:.1f} GB/s", flush=True)
    load1 = os.getloadavg()
    text = render(rows, load0, load1, time.time() - t_start, args.quick)
    print()
    print(text)
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", text)
        print(f"wrote the CPU lanes section of {ROOT / 'BENCHMARKS.md'}")
    return 0 if rows and all(r["ok"] for r in rows) else 1


def _gcc() -> str:
    out = subprocess.run([os.environ.get("ARBITER_CC", "gcc"), "--version"],
                         capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0] if out else "?"


def render(rows, load0, load1, seconds: float, quick: bool) -> str:
    lines = [
        BEGIN,
        "## CPU lanes",
        "",
        f"Command: `python bench/cpu_lanes.py{' --quick' if quick else ''}` "
        f"({seconds:.0f} s, {time.strftime('%Y-%m-%d')}).",
        f"Machine: {cpu_model()}, {os.cpu_count()} logical CPUs; {_gcc()}; "
        f"numpy {np.__version__}; BLAS: {blas_info()}.",
        "OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE: "
        + (f"were set ({', '.join(UNSET)}); unset for this run only." if UNSET
           else "not set in this environment."),
        f"Timing: `{HOST_METHOD}` around each call (perf_counter_ns), median of all samples; "
        "x86_c, numpy and copy timed in interleaved rounds; inputs rotated through 3 sets "
        "(rowwise, 3 x 64-128 MiB) or 2 sets (matmul). Copy = `np.copyto` of a buffer holding "
        "half the region's compulsory bytes (inputs read once + output written once), so it "
        "moves the same number of bytes; GB/s counts read + write. It is timed on one thread "
        "(plain `np.copyto`) and split over all cores (one `np.copyto` per core from a thread "
        "pool); the target is judged against the faster of the two. "
        f"Load average (1 min) {load0[0]:.2f} at start, {load1[0]:.2f} at end: this machine is "
        "shared with other work, so single numbers carry noise.",
        "x86_c config: best of a brief sweep (default + a fixed-seed sample of the space, each "
        "checked against the float64 oracle before timing; `tried` = configs swept / space "
        "size).",
        "",
        "| region | x86_c ms | numpy ms | x86_c vs numpy | x86_c GB/s | copy GB/s 1 thread / "
        "all cores | x86_c / faster copy | GFLOPS x86_c / numpy lane / OpenBLAS matmul alone | "
        "target | busy / load | "
        "best config (tried) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        target = ("x>=0.5 numpy" if r["fused"] else "x>=3 numpy, >=50% copy")
        verdict = "met" if r["ok"] else "**missed**"
        gf = (f"{r['gflops']:.0f} / {r['np_gflops']:.0f} / {r['mm_gflops']:.0f}" if r["fused"]
              else "-")
        frac = "- (compute-bound)" if r["fused"] else f"{100 * r['copy_frac']:.0f}%"
        lines.append(
            f"| {r['region']} | {r['x86_ms']:.2f} | {r['numpy_ms']:.2f} | "
            f"{r['speedup']:.2f}x | {r['x86_gbs']:.1f} | "
            f"{r['copy_gbs']:.1f} / {r['copy_mt_gbs']:.1f} | "
            f"{frac} | {gf} | {target}: {verdict} | {100 * r['busy']:.0f}% / {r['load']:.1f} | "
            f"`{r['config']}` ({r['tried']}) |"
        )
    lines.append("")
    missed = [r for r in rows if not r["ok"]]
    if missed:
        lines.append("Missed targets in this run: " + "; ".join(
            f"{r['region']} ({r['speedup']:.2f}x numpy"
            + ("" if r["fused"] else f", {100 * r['copy_frac']:.0f}% of copy") + ")"
            for r in missed) + ".")
    else:
        lines.append("Every target was met in this run.")
    lines += ["", *LIMITS, END]
    return "\n".join(lines)


LIMITS = [
    "What limits these numbers (`busy` = share of the CPUs used by other processes just "
    "before the region was timed, after waiting up to `--wait` s for it to drop under 10%; "
    "`load` = 1-minute load average after timing. The machine has 2 cores shared with other "
    "work: a two-thread kernel whose other core is taken waits for it at the end of every "
    "call, so a busy neighbour slows x86_c far more than single-threaded numpy):",
    "- Rowwise chains are memory-bound: each row is read from DRAM once, the later passes of a "
    "reduction run on the row while it sits in L1, and `stream=True` writes the finished row "
    "with non-temporal stores (no read-for-ownership), as glibc's large `memcpy` does. Near "
    "100% of copy bandwidth is the ceiling; a busy second core shows up as a lower fraction "
    "and as single-thread configs winning the sweep. Softmax is the exception that is "
    "partly compute-bound: one polynomial exp per element (about 20 vector instructions per "
    "16 floats on top of three passes over the row) is comparable to the DRAM time on 2 cores.",
    "- GEMM: the micro-kernel is plain C that gcc auto-vectorizes (MR x NR accumulators in "
    "zmm/ymm registers, packed A/B panels, MC/KC blocking, OpenMP over column panels); "
    "OpenBLAS runs hand-written assembly for the core it detects (its kernel, above). The "
    "fused epilogue runs "
    "on each finished MC-row block while it is in L2, so bias+gelu costs almost nothing "
    "extra, whereas numpy makes one pass (and one temporary) per op.",
]


def write_section(path: Path, section: str) -> None:
    """Replace the CPU lanes section in place (re-reading the shared file right before)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())

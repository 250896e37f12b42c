"""A candidate that writes into its input arrays (issue 41, item 1): it gets a status of its own
and never wins, and every candidate after it is judged on intact inputs."""

from __future__ import annotations

import sqlite3

import pytest

import arbiter
from arbiter import FusedRegion, Status
from arbiter.check import fresh_seeds
from arbiter.lane import get_lane
from arbiter.measure import Timing, Worker, build_candidate
from tests import fake_lanes

REGION = FusedRegion(8, 16, 8, name="small", epilogue=("bias", "relu"))
QUICK = Timing(warmup=1, rounds=2, wait=0.0)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes())
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    return f"sqlite:///{tmp_path / 'arbiter.db'}"


def _built(lane: str):
    ln = get_lane(lane)
    return build_candidate(ln, REGION, ln.space(REGION).default)


@pytest.mark.parametrize("lane, words", [("fake_clobber", "wrote into its input arrays"),
                                         ("fake_clobber_timed", "while timed")])
def test_a_candidate_that_zeroes_its_inputs_is_inputs_changed_and_the_next_one_is_right(
        env, lane, words):
    seeds = fresh_seeds()
    with Worker(timeout=60) as w:
        m = w.check(lane, REGION, _built(lane), 1e-3, seeds=seeds, timing=QUICK)
        assert m.status is Status.INPUTS_CHANGED and words in m.log, m.log
        assert m.samples == ()
        after = w.check("numpy", REGION, _built("numpy"), 1e-3, seeds=seeds, timing=QUICK)
        assert w.starts == 1  # the same worker, the same cases: drawn afresh
    assert after.status is Status.OK and after.rel_error < 1e-5, after.log


@pytest.mark.parametrize("lane", ["fake_clobber", "fake_clobber_timed"])
def test_a_finalist_that_changes_its_inputs_is_out_and_the_others_are_timed_on_fresh_ones(
        env, lane):
    entries = [(lane, _built(lane)), ("numpy", _built("numpy"))]
    with Worker(timeout=60) as w:
        bad, numpy = w.finals(REGION, entries, 1e-3, seeds=fresh_seeds(),
                              timing=Timing(wait=0.0, min_rounds=4, max_rounds=8))
    assert bad.status is Status.INPUTS_CHANGED and bad.samples == (), bad.log
    assert numpy.status is Status.OK and numpy.samples


def test_it_never_wins_and_poisons_no_candidate_after_it(env):
    lanes = ["fake_clobber", "numpy"] + (["x86_c"] if get_lane("x86_c").available() else [])
    [row] = arbiter.tune(REGION, db=env, trials=6, lanes=lanes, timing=Timing(wait=0.2))
    assert row["lane"] != "fake_clobber" and row["status"] in ("ok", "tie", "unresolved")
    with sqlite3.connect(env.removeprefix("sqlite:///")) as con:
        got = con.execute("select l.name, m.status, m.rel_error from measurements m join "
                          "candidates c on m.candidate_id = c.id join lanes l on "
                          "c.lane_id = l.id where m.kind = 'sweep'").fetchall()
    assert {s for name, s, _ in got if name == "fake_clobber"} == {"inputs_changed"}
    # (a config the lane's space rejects is never built or run, so nothing of it is judged)
    others = [(name, s, e) for name, s, e in got if name != "fake_clobber" and s != "invalid"]
    assert others and all(s == "ok" and e < 1e-5 for _, s, e in others), others
    assert arbiter.best(REGION, db=env)["lane"] != "fake_clobber"


class _DeviceLib:
    """The arb_runner.h ABI in Python for `region`: its "device" inputs are copies of what it
    was given, which its kernel zeroes when `clobber` says so."""

    def __init__(self, region, clobber: bool) -> None:
        import ctypes
        import math

        from arbiter.lane import input_shapes, numpy_dtype, output_shape

        shapes = [math.prod(s) for s in input_shapes(region).values()]
        size = numpy_dtype(region.dtype).itemsize
        self.device: list[bytearray] = []

        def prepare(n, ptrs):
            self.device = [bytearray(ctypes.string_at(ptrs[i], shapes[i % len(shapes)] * size))
                           for i in range(n * len(shapes))]
            return 0

        def launch() -> None:
            if clobber:
                for d in self.device:
                    d[:] = bytes(len(d))

        def run(s, out):
            launch()
            return 0

        def time(warmup, repeats, ms_out):
            launch()
            for i in range(repeats):
                ms_out[i] = 1e-3
            return 0

        def read_input(s, k, host):
            ctypes.memmove(host, bytes(self.device[s * len(shapes) + k]), shapes[k] * size)
            return 0

        for name, fn in {
            "arbiter_last_error": lambda: b"", "arbiter_n_inputs": lambda: len(shapes),
            "arbiter_input_elems": lambda i: shapes[i],
            "arbiter_output_elems": lambda: math.prod(output_shape(region)),
            "arbiter_elem_bytes": lambda: size, "arbiter_prepare": prepare,
            "arbiter_run": run, "arbiter_time": time, "arbiter_read_input": read_input,
            "arbiter_release": lambda: None,
        }.items():
            setattr(self, name, fn)


@pytest.mark.parametrize("clobber", [True, False])
def test_a_gpu_runner_compares_its_device_inputs_with_what_it_copied_in(monkeypatch, clobber):
    from arbiter.lanes._gpu import runner as gpu_runner

    from arbiter.check import cases, verify
    from arbiter.lane import Artifact, Config, InputsChanged, KernelSource, Platform

    monkeypatch.setattr(gpu_runner.ctypes, "CDLL", lambda path, mode=0: _DeviceLib(REGION,
                                                                                   clobber))
    source = KernelSource("fake", REGION.key, Config(), "hip", "")
    artifact = Artifact("fake", "k", source, "/nonexistent/fake.so", 0.0, False, "")
    runner = gpu_runner.GpuRunner(artifact, REGION, Platform.CUDA)
    seeds = fresh_seeds()
    verdict, log = verify(runner, REGION, 1e-3, seeds)
    sets = [c.timing for c in cases(REGION, seeds)]
    if clobber:
        assert verdict.status is Status.INPUTS_CHANGED and "device input 'A'" in log, log
        with pytest.raises(InputsChanged, match="while timed"):
            runner.time(sets, warmup=1, repeats=3)
    else:  # (its output is left as the poison: the inputs are all that is checked first)
        assert verdict.status is Status.UNTOUCHED
        assert runner.time(sets, warmup=1, repeats=3) == pytest.approx([1e-6] * 3)

"""bench/vs_inductor.py: the issue-39 benchmark's regions and parts (no torch needed), and its
--quick path end to end on the CPU where torch is installed (skipped where it is not), and its
lane process."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "vs_inductor.py"


def _module():
    spec = importlib.util.spec_from_file_location("vs_inductor", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_inductor"] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_regions_are_the_issues_and_the_parts_cover_them_once():
    vs = _module()
    regions = vs.pick_regions(None, ["f32", "bf16"], quick=False)
    assert len(regions) == 28
    assert {r.dtype for r in regions} == {"f32", "bf16"}
    shapes = {r.describe().split(":")[0] for r in regions}
    assert {"row16384x4096+rmsnorm", "mm1024x1024x1024+bias+gelu", "mm4096x4096x4096+bias+gelu",
            "mm8192x8192x1024+bias+gelu", "mm4096x4096x1024+bias+layer_norm",
            "attn4x16x4096x4096x64+causal", "attn4x16x4096x4096x128"} <= shapes
    in_parts = [n for part in vs.PARTS.values() for n in part.split(",")]
    assert sorted(in_parts) == sorted(r.name.removesuffix("_f32") for r in regions
                                      if r.dtype == "f32")
    assert [r.name for r in vs.pick_regions("attn-d64", ["bf16"], quick=False)] == [
        "attn_d64_bf16", "attn_d64_causal_bf16"]
    with pytest.raises(SystemExit, match="unknown region or group"):
        vs.pick_regions("nope", ["f32"], quick=False)


def test_inputs_rotate_past_the_cache():
    vs = _module()
    small, big = vs.pick_regions("mm1024x1024x1024_bias_gelu,row_rmsnorm", ["f32"], False)
    l2 = 50 << 20
    n = vs.input_sets(small, l2)  # 8 MiB a set: the sets after a round's four exceed the L2
    assert (n - vs.ROUND_CALLS - 1) * 8 * 2**20 > 1.5 * l2
    assert vs.input_sets(big, l2) == 2  # 256 MiB a set


@pytest.mark.slow
def test_quick_run_on_the_cpu(tmp_path):
    pytest.importorskip("torch", reason="torch is an optional extra (CI has none)")
    if shutil.which("g++") is None:
        pytest.skip("Inductor's C++ backend needs g++")
    out = tmp_path / "vs.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--device", "cpu", "--regions",
         "row_rmsnorm", "--dtypes", "f32", "--db", str(tmp_path / "vs.db"), "--out", str(out)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    (region,) = results["regions"]
    assert region["region"] == "row_rmsnorm_f32"
    assert region["timing_methods"] == ["monotonic_ns"]
    for role in ("winner", "inductor", "eager"):
        c = region["contenders"][role]
        assert c["latency_ms"] > 0 and c["rel_error"] < region["budget"], (role, c)
    assert region["inductor_compile_s"] > 0 and region["tune_s"] > 0
    assert region["never_slower"] in (True, False)
    assert results["summary"]["regions"] == 1
    assert "| row_rmsnorm_f32 |" in done.stdout and "CPU timing" in done.stdout
    # the parts' JSON files become one table
    merged = subprocess.run([sys.executable, str(SCRIPT), "--merge", str(out), str(out)],
                            capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout.count("| row_rmsnorm_f32 |") == 2


def test_merge_of_the_recorded_h200_parts_tells_unresolved_from_slower():
    """The parts measured on the H200 (bench/results) merge without torch, and a winner under 1
    whose interval reaches 1 is reported as unresolved, not as slower."""
    parts = sorted((SCRIPT.parent / "results").glob("vs_inductor.*.json"))
    assert parts
    merged = subprocess.run([sys.executable, str(SCRIPT), "--merge", *map(str, parts)],
                            capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0, merged.stderr
    regions = [r for p in parts for r in json.loads(p.read_text())["regions"]]
    summary = _module().summarize(regions, 0.0, 0.0)
    assert "row_rmsnorm_f32" in summary["never_slower_unresolved"]  # 0.97x, interval to 1.0005
    by_name = {r["region"]: r["ratios"]["winner/inductor"] for r in regions}
    for name in summary["never_slower_failed"]:
        ratio = by_name[name]
        if name in summary["never_slower_unresolved"]:
            assert ratio["ratio"] < 1.0 <= ratio["high"], name
        else:
            assert ratio["high"] < 1.0, name
    slower = [n for n in summary["never_slower_failed"]
              if n not in summary["never_slower_unresolved"]]
    assert "under 1 but unresolved" in merged.stdout
    assert ("; slower: " + ", ".join(slower)) in merged.stdout
    assert summary["never_slower_self"] == [
        n for n in summary["never_slower_failed"]
        if next(r for r in regions if r["region"] == n)["arbiter"]["lane"] == "inductor"]
    assert "declared the inductor lane itself" in merged.stdout


def test_merge_reports_winners_whose_retiming_left_their_record():
    """The winner's time in the bench against the latency the tune recorded: those more than
    DRIFT apart are named with their ratio, and only those."""
    vs = _module()
    regions = [r for p in sorted((SCRIPT.parent / "results").glob("vs_inductor.*.json"))
               for r in json.loads(p.read_text())["regions"]]
    drift = dict(vs.summarize(regions, 0.0, 0.0)["record_drift"])
    for r in regions:
        here = r["contenders"]["winner"]["latency_ms"]
        x = here / r["arbiter"]["latency_ms"]
        assert (r["region"] in drift) == (abs(x - 1) > vs.DRIFT), r["region"]
        if r["region"] in drift:
            assert drift[r["region"]] == pytest.approx(x)
    text = vs.markdown(vs.merge(
        [str(p) for p in sorted((SCRIPT.parent / "results").glob("vs_inductor.*.json"))]))
    assert all(f"{n} {x:.2f}x" in text for n, x in drift.items())


def test_the_lane_contenders_are_checked_and_timed_in_a_process_of_their_own(monkeypatch):
    """The winner and best own lane load in the lane process (away from the reference
    compiles), are judged there on the same seeds' inputs, and time one round a request."""
    from arbiter import FusedRegion
    from arbiter.check import budget_of
    from arbiter.measure import ROUND_CALLS
    from tests import fake_lanes

    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_garbage"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    vs = _module()
    region = FusedRegion(24, 40, 16, name="small", epilogue=("bias", "gelu"))
    lanes = vs.LaneProcess(region, 6, budget_of(region))
    try:
        good = lanes.contender("winner", "numpy", {})
        bad = lanes.contender("own", "fake_garbage", {})
        assert good.status == "ok" and good.rel_error < 1e-6 and not good.note, good
        assert bad.rel_error > 1e-2 and "wrong_result" in bad.note, bad
        assert good.runner.timing_method == "monotonic_ns"
        samples = good.runner.time_round(5)
        assert len(samples) == ROUND_CALLS and all(s > 0 for s in samples)
        assert lanes.proc.poll() is None
    finally:
        lanes.close()
    assert lanes.proc.returncode == 0


def test_a_lane_that_kills_its_process_fails_alone(monkeypatch):
    from arbiter import FusedRegion
    from arbiter.check import budget_of
    from tests import fake_lanes

    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_segfault"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    vs = _module()
    region = FusedRegion(8, 16, 8, name="small", epilogue=("bias",))
    lanes = vs.LaneProcess(region, 2, budget_of(region))
    try:
        crashed = lanes.contender("winner", "fake_segfault", {})
        after = lanes.contender("own", "numpy", {})
        assert crashed.status == "launch_failed" and crashed.runner is None
        assert "the lane process ended (exit -11)" in crashed.note, crashed.note
        assert after.status == "ok" and after.rel_error < 1e-6, after  # a new lane process
        assert len(after.runner.time_round(0)) > 0
    finally:
        lanes.close()

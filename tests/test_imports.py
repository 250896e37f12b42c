"""What the trial worker's first compile and `import arbiter` load: no numpy (a sweep's
worker compiles its first candidates while numpy is still to be imported)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import arbiter


def _run(code: str, tmp_path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ARBITER_CACHE_DIR=str(tmp_path))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_workers_early_builds_need_no_numpy(tmp_path):
    # the modules `python -m arbiter._worker_child --hint-first` loads, then its early-build path:
    # the lane lookups (is it a CPU lane?) and a real compile of x86_c's default
    code = """
import sys
from arbiter._worker_child import _AHEAD, _READY, _build_early, _take_ahead
from arbiter._registry import get_lane
from arbiter import FusedRegion
region = FusedRegion(8, 16, 8, epilogue=("bias", "relu"))
_build_early({"candidates": [(region, name, get_lane(name).space(region).default)
                             for name in ("numpy", "x86_c")]})
_AHEAD[0].done.wait()
_take_ahead()
built = {key[1]: b for key, (b, _) in _READY.items()}
assert sorted(built) == ["numpy", "x86_c"], built
assert all(getattr(b, "path", None) or b.lane == "numpy" for b in built.values()), built
print(sorted(m for m in sys.modules if m == "numpy" or m.startswith("numpy.")))
"""
    done = _run(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_import_arbiter_loads_its_verbs_on_first_use(tmp_path):
    done = _run("import sys, arbiter; print('numpy' in sys.modules)", tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
    from arbiter import _api, _inputs, _oracle

    assert (arbiter.tune, arbiter.run, arbiter.compare, arbiter.random_inputs) == (
        _api.tune, _api.run, _oracle.compare, _inputs.random_inputs)
    assert set(arbiter.__all__) <= set(dir(arbiter))
    for name in arbiter.__all__:
        assert getattr(arbiter, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        arbiter.nope  # noqa: B018


def test_a_worker_told_its_parents_lane_table_scans_no_entry_points(tmp_path):
    # the parent sends the entry points it scanned with its first message: the child's first
    # lane lookup (before its first compile) then reads no installed distribution's metadata
    from arbiter._registry import get_lane, installed_table

    get_lane("x86_c")
    table = installed_table()
    assert table is not None and dict(table)["x86_c"]
    code = f"""
import sys
from arbiter._registry import adopt_table, get_lane, lane_names
adopt_table({(*table, ("told-only", "tests.fake_lanes:tiny"))!r})
assert get_lane("x86_c").name == "x86_c"
print("importlib.metadata" in sys.modules)  # (before the fake lanes: numpy imports it)
assert get_lane("told-only").name == "fake_tiny"
assert "told-only" in lane_names()
"""
    from tests import fake_lanes

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=fake_lanes.pythonpath()), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"

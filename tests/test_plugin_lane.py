"""examples/plugin_lane installs as a package of its own, registers through the `arbiter.lanes`
entry point and passes the conformance suite every lane runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin_lane"


@pytest.mark.slow
def test_the_example_lane_installs_registers_and_conforms(tmp_path):
    site, copy = tmp_path / "site", tmp_path / "plugin_lane"  # pip builds in the folder
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                 "__pycache__"))
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--target", str(site), str(copy)],
                         capture_output=True, text=True, timeout=300)
    if pip.returncode != 0 and "Could not find a version" in pip.stderr:
        pytest.skip("no package index here for pip's build isolation (setuptools)")
    assert pip.returncode == 0, pip.stderr
    env = dict(os.environ, PYTHONPATH=str(site), ARBITER_CACHE_DIR=str(tmp_path / "cache"))
    lanes = subprocess.run([sys.executable, "-m", "arbiter", "lanes", "--json"], env=env,
                           capture_output=True, text=True, timeout=120)
    row = {r["name"]: r for r in json.loads(lanes.stdout)}["c_softmax"]
    assert row["available"] and row["platform"] == "cpu"
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests"], cwd=copy, env=env, capture_output=True, text=True,
                           timeout=600)
    assert suite.returncode == 0, suite.stdout[-3000:]
    assert " passed" in suite.stdout and "failed" not in suite.stdout

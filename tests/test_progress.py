"""What `arbiter tune` says while it works: a bar whose total holds on a terminal, lines in a
log, the version, and Optuna study names a person can read."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading

import optuna
import pytest

import arbiter
from arbiter.cli.export import export_optuna
from arbiter.measure import Timing
from tests import fake_lanes
from tests.test_sweep import REGION

QUICK = Timing(wait=0.1, rounds=2, input_sets=1, min_rounds=2, max_rounds=4, max_seconds=1)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    return f"sqlite:///{tmp_path / 'arbiter.db'}"


def test_version_is_one_line():
    p = subprocess.run([sys.executable, "-m", "arbiter", "--version"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"arbiter {arbiter.__version__}"


def test_a_log_gets_a_line_every_ten_trials_and_one_per_region(env, monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    arbiter.tune(REGION, db=env, trials=12, lanes=["fake_tiny"], seed=1, timing=QUICK,
                 progress=True)
    lines = [ln for ln in log.getvalue().splitlines() if ln.startswith("arbiter: [")]
    assert lines[0] == "arbiter: [1/1] small: 10/12 trials"
    assert re.fullmatch(r"arbiter: \[1/1\] small: done, 12 new trials, fake_tiny [\d.]+ ms "
                        r"\((ok|tie|unresolved)\)", lines[1]), lines
    assert len(lines) == 2
    # the same records as an Optuna study, named region first
    export_optuna(env)
    [summary] = optuna.get_all_study_summaries(storage=env)
    assert summary.study_name.startswith("small mm8x16x8+bias+relu on ")
    # the machine in words (its GPUs, else its CPU and count), then the hashes
    assert re.fullmatch(r"small mm8x16x8\+bias\+relu on .+ "
                        r"\[region [0-9a-f]{8}, env [0-9a-f]{8}, lanes [0-9a-f]{8}\]",
                        summary.study_name), summary.study_name


def test_the_bar_on_a_terminal_ends_at_its_total(env, monkeypatch):
    # the whole space is enumerated: 24 configs, of which the lane's rule refuses 6 and its
    # emitter 1; those are recorded but neither built nor counted
    main, side = pty.openpty()
    # a terminal of 24 rows: tqdm draws nothing on one of 0 rows
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    seen = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the other end closed
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    with os.fdopen(side, "w") as terminal:
        monkeypatch.setattr(sys, "stderr", terminal)
        arbiter.tune(REGION, db=env, trials=30, lanes=["fake_tiny"], timing=QUICK,
                     progress=True)
        monkeypatch.undo()
    reader.join(timeout=10)
    os.close(main)
    counts = [(int(n), int(t)) for n, t in re.findall(rb"(\d+)/(\d+) \[", bytes(seen))]
    assert counts and all(n <= t for n, t in counts), bytes(seen[-3000:])
    assert counts[-1] == (17, 17), counts

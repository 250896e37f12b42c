"""`arbiter run --output` on a disk that fills up (issue 41, item 12): the file is written
whole or not at all, never left truncated under its final name."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SPEC = '[[region]]\nname = "r"\nkind = "rowwise"\nM = 512\nN = 1024\nepilogue = ["bias", "gelu"]\n'
LIMIT = 3 << 20  # bytes any file may grow to: the output needs about 4 MiB


def _small_disk() -> None:
    """In the child: no file may grow past LIMIT (a write past it fails with EFBIG, as one on
    a full disk fails with ENOSPC; Python ignores the SIGXFSZ that comes with it)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_an_output_that_does_not_fit_leaves_the_old_file_whole(tmp_path):
    spec, inputs, out = tmp_path / "s.toml", tmp_path / "in.npz", tmp_path / "out.npz"
    spec.write_text(SPEC)
    rng = np.random.default_rng(0)
    np.savez(inputs, X=rng.standard_normal((512, 1024), dtype=np.float32),
             bias=rng.standard_normal(1024, dtype=np.float32))
    np.savez(out, out=np.arange(3.0))  # an earlier run's
    p = subprocess.run([sys.executable, "-m", "arbiter", "run", str(spec), "r", "--lane",
                        "numpy", "--inputs", str(inputs), "--output", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, preexec_fn=_small_disk,
                       env=dict(os.environ, ARBITER_CACHE_DIR=str(tmp_path / "cache")))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "cannot be written" in lines[0], p.stderr
    with np.load(out) as z:
        assert list(z["out"]) == [0.0, 1.0, 2.0]
    assert not list(tmp_path.glob(".out.npz*"))  # (nor a part of it beside it)
    p = subprocess.run([sys.executable, "-m", "arbiter", "run", str(spec), "r", "--lane",
                        "numpy", "--inputs", str(inputs), "--output", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, ARBITER_CACHE_DIR=str(tmp_path / "cache")))
    assert p.returncode == 0, p.stderr
    with np.load(out) as z:
        assert z["out"].shape == (512, 1024)
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

"""The build cache trusts only what it built (issue 41, items 6 and 12): private to its user,
every artifact checked against the digest recorded when it was built, and no build folder
left behind by a build that was killed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arbiter import CacheError, RowwiseRegion, Status
from arbiter.check import fresh_seeds
from arbiter.lane import get_lane
from arbiter.measure import Worker, build_candidate

ROOT = Path(__file__).resolve().parents[2]
REGION = RowwiseRegion(8, 64, name="cache", epilogue=("gelu",))
PLANTED = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    FILE* f = fopen(getenv("PLANTED_MARK"), "w");
    if (f) { fputs("ran\n", f); fclose(f); }
}
"""


@pytest.fixture
def x86_c(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PLANTED_MARK", str(tmp_path / "planted-ran"))
    lane = get_lane("x86_c")
    if not lane.available():
        pytest.skip("no C compiler")
    return lane


def _build(lane):
    a = build_candidate(lane, REGION, lane.space(REGION).default)
    assert not hasattr(a, "status"), a
    return a


def _planted_library(tmp_path: Path) -> Path:
    src, lib = tmp_path / "planted.c", tmp_path / "planted.so"
    src.write_text(PLANTED)
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return lib


def _checked(artifact):
    with Worker(timeout=60) as w:
        return w.check("x86_c", REGION, artifact, 1e-3, seeds=fresh_seeds(), timing=None)


def test_a_library_planted_at_a_key_is_built_over_and_its_constructor_never_runs(x86_c,
                                                                                 tmp_path):
    first = _build(x86_c)
    path = Path(first.path)
    shutil.copyfile(_planted_library(tmp_path), path)  # (no digest of its own: never built)
    again = _build(x86_c)
    assert again.path == first.path and not again.cached and "built again" in again.log
    assert _checked(again).status is Status.OK
    assert not (tmp_path / "planted-ran").exists()


def test_a_truncated_library_is_built_again(x86_c):
    first = _build(x86_c)
    path = Path(first.path)
    path.write_bytes(path.read_bytes()[:1000])
    again = _build(x86_c)
    assert not again.cached and path.stat().st_size > 1000
    assert _checked(again).status is Status.OK
    assert _build(x86_c).cached  # and it is a cache hit after that


def test_a_library_swapped_after_its_build_is_not_loaded(x86_c, tmp_path):
    built = _build(x86_c)
    shutil.copyfile(_planted_library(tmp_path), built.path)  # (between build and load)
    m = _checked(built)
    assert m.status is Status.LAUNCH_FAILED and "do not match the digest" in m.log, m.log
    assert not (tmp_path / "planted-ran").exists()


def test_the_cache_is_made_private_whatever_the_umask(x86_c, tmp_path):
    old = os.umask(0)
    try:
        built = _build(x86_c)
    finally:
        os.umask(old)
    cache = tmp_path / "cache"
    for d in (cache, Path(built.path).parent):
        assert d.stat().st_mode & 0o777 == 0o700, oct(d.stat().st_mode)
    assert Path(built.path).stat().st_mode & 0o077 == 0


def _arbiter(env, *args):
    return subprocess.run([sys.executable, "-m", "arbiter", *map(str, args)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("how", ["writable by others", "another user's"])
def test_a_cache_others_can_write_is_refused_in_one_line(x86_c, tmp_path, how):
    cache = tmp_path / "cache"
    cache.mkdir()
    if how == "writable by others":
        cache.chmod(0o777)
    elif os.geteuid() == 0:
        os.chown(cache, 65534, 65534)
    else:
        cache = Path("/")  # (root's)
    with pytest.raises(CacheError, match=how.split()[0] if how != "another user's"
                       else "another user"):
        build_candidate(x86_c, REGION, x86_c.space(REGION).default)
    env = dict(os.environ, ARBITER_CACHE_DIR=str(cache), ARBITER_DB=f"sqlite:///{tmp_path}/a.db")
    spec = tmp_path / "s.toml"
    spec.write_text("[[region]]\nname = \"r\"\nkind = \"rowwise\"\nM = 8\nN = 64\n"
                    "epilogue = [\"gelu\"]\n")
    for args in (["tune", spec, "--lanes", "x86_c", "--trials", "1"],
                 ["run", spec, "r", "--lane", "x86_c", "--inputs", tmp_path / "i.npz",
                  "--output", tmp_path / "o.npz"]):
        p = _arbiter(env, *args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, p.stderr
        assert lines[0].startswith("arbiter: error: build cache") and "Traceback" not in p.stderr


BUILD_FOREVER = """
import sys
from arbiter.lane import cached_build, run_tool
cached_build(sys.argv[1], ".so", lambda tmp, target: run_tool(["sleep", "60"]))
"""


BUILD_ONE = """
from arbiter import RowwiseRegion
from arbiter.lane import get_lane
lane, region = get_lane("x86_c"), RowwiseRegion(8, 32, epilogue=("relu",))
lane.build(lane.emit(region, lane.space(region).default))
"""


def test_a_killed_build_leaves_no_build_folder_after_the_next_build(x86_c, tmp_path):
    cache = tmp_path / "cache"
    p = subprocess.Popen([sys.executable, "-c", BUILD_FOREVER, "ab" + "0" * 62],
                         env=dict(os.environ), cwd=ROOT)
    deadline = time.monotonic() + 60
    while not list(cache.glob("ab/arbiter-build-*")):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    live = subprocess.Popen([sys.executable, "-c", BUILD_FOREVER, "cd" + "0" * 62],
                            env=dict(os.environ), cwd=ROOT)
    while not list(cache.glob("cd/arbiter-build-*")):
        assert time.monotonic() < deadline and live.poll() is None
        time.sleep(0.05)
    try:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        [dead] = cache.glob("ab/arbiter-build-*")
        [building] = cache.glob("cd/arbiter-build-*")
        for d in (dead, building):  # (both older than a build that is just starting)
            os.utime(d, (time.time() - 3600, time.time() - 3600))
        subprocess.run([sys.executable, "-c", BUILD_ONE], check=True, cwd=ROOT)
        assert not dead.exists()
        assert building.exists()  # (its build is still running)
    finally:
        live.kill()
        live.wait()

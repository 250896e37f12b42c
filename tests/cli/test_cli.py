"""The `arbiter` command as a user runs it: a real subprocess, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "regions.toml"


def arbiter(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "arbiter", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def assert_one_line_error(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("arbiter: error:"), p.stderr
    assert needle in lines[0]
    assert "Traceback" not in p.stderr


def test_lanes_json_lists_numpy():
    p = arbiter("lanes", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)}
    assert rows["numpy"]["available"] is True and rows["numpy"]["platform"] == "cpu"
    keys = {"name", "platform", "available", "reason", "schema"}
    assert all(set(r) == keys for r in rows.values())


def test_check_numpy_on_examples_passes():
    p = arbiter("check", str(EXAMPLES), "--lanes", "numpy", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert len(rows) == 9 and all(r["status"] == "ok" for r in rows)
    assert all(r["rel_error"] < 1e-5 for r in rows)


def test_check_fails_with_exit_1_when_budget_impossible(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[[region]]\nname="r"\nM=64\nN=64\nK=64\nepilogue=["gelu"]\nbudget=1e-12\n')
    p = arbiter("check", str(spec), "--lanes", "numpy")
    assert p.returncode == 1
    assert "wrong_result" in p.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["check", "nope.toml"], "no such spec file"),
        (["check", str(EXAMPLES), "--lanes", "bogus"], "unknown lane 'bogus' (known:"),
        (
            [
                "run",
                str(EXAMPLES),
                "zz",
                "--lane",
                "numpy",
                "--inputs",
                "i.npz",
                "--output",
                "o.npz",
            ],
            "no region named 'zz'",
        ),
        (
            [
                "run",
                str(EXAMPLES),
                "mm_relu",
                "--lane",
                "numpy",
                "--config",
                "x=1",
                "--inputs",
                "i.npz",
                "--output",
                "o.npz",
            ],
            "unknown tunable 'x'",
        ),
    ],
)
def test_user_mistakes_get_one_line_and_exit_2(tmp_path, args, needle):
    assert_one_line_error(arbiter(*args, cwd=tmp_path), needle)


def test_bad_spec_names_file_region_field(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('[[region]]\nname="r"\nM=4\nN=4\nK="x"\n')
    assert_one_line_error(arbiter("check", str(spec)), "bad.toml: region 'r': field 'K'")


def test_run_draws_missing_inputs_saves_them_and_is_reproducible(tmp_path):
    ins, out1, out2 = tmp_path / "in.npz", tmp_path / "o1.npz", tmp_path / "o2.npz"
    a = np.random.default_rng(5).standard_normal((256, 256), dtype=np.float32)
    np.savez(ins, A=a)
    p = arbiter(
        "run",
        str(EXAMPLES),
        "mm_relu",
        "--lane",
        "numpy",
        "--inputs",
        str(ins),
        "--output",
        str(out1),
    )
    assert p.returncode == 0, p.stderr
    assert "drawn inputs: B, bias" in p.stdout
    with np.load(out1) as z:
        assert set(z.files) == {"out", "A", "B", "bias"}
        assert np.array_equal(z["A"], a)
        first = {k: z[k] for k in z.files}
    from arbiter import load_spec, reference

    region = load_spec(EXAMPLES).get("mm_relu")
    ref = reference(region, first)
    assert np.linalg.norm(first["out"] - ref) / np.linalg.norm(ref) < 1e-5
    p = arbiter(
        "run",
        str(EXAMPLES),
        "mm_relu",
        "--lane",
        "numpy",
        "--inputs",
        str(ins),
        "--output",
        str(out2),
    )
    assert p.returncode == 0
    with np.load(out2) as z:
        assert np.array_equal(z["out"], first["out"])


def test_run_creates_missing_input_file(tmp_path):
    ins, out = tmp_path / "new.npz", tmp_path / "o.npz"
    p = arbiter(
        "run",
        str(EXAMPLES),
        "attn_causal",
        "--lane",
        "numpy",
        "--inputs",
        str(ins),
        "--output",
        str(out),
        "--seed",
        "3",
    )
    assert p.returncode == 0, p.stderr
    with np.load(ins) as z:
        assert set(z.files) == {"q", "k", "v"}


def test_run_rejects_wrong_shapes_in_npz(tmp_path):
    ins = tmp_path / "in.npz"
    np.savez(ins, A=np.ones((256, 255), np.float32))
    p = arbiter(
        "run",
        str(EXAMPLES),
        "mm_relu",
        "--lane",
        "numpy",
        "--inputs",
        str(ins),
        "--output",
        str(tmp_path / "o.npz"),
    )
    assert_one_line_error(p, "input 'A' has shape (256, 255), need (256, 256)")


@pytest.mark.parametrize("case, needle", [
    ("missing_dir", "its directory does not exist"),
    ("npy", "inputs file must end in .npz"),
    ("npy_named_npz", "one array (.npy), not an .npz file"),
    ("unknown_name", "a not among the inputs of mm_relu (A, B, bias)"),
])
def test_run_refuses_bad_files_before_running(tmp_path, case, needle):
    ins, out = tmp_path / "in.npz", tmp_path / "o.npz"
    a = np.random.default_rng(1).standard_normal((256, 256), dtype=np.float32)
    if case == "missing_dir":
        out = tmp_path / "nowhere" / "o.npz"
    elif case == "npy":
        ins = tmp_path / "in.npy"
        np.save(ins, a)
    elif case == "npy_named_npz":
        np.save(tmp_path / "a.npy", a)
        (tmp_path / "a.npy").rename(ins)
    else:
        np.savez(ins, A=a, a=a)
    p = arbiter("run", str(EXAMPLES), "mm_relu", "--lane", "numpy", "--inputs", str(ins),
                "--output", str(out))
    assert_one_line_error(p, needle)
    assert not out.exists()


def test_run_reads_inputs_from_a_directory_it_may_not_write(tmp_path, monkeypatch):
    import os

    from arbiter.cli import run as _api

    ro, out = tmp_path / "ro", tmp_path / "o.npz"
    ro.mkdir()
    rng = np.random.default_rng(2)
    np.savez(ro / "in.npz", A=rng.standard_normal((256, 256), dtype=np.float32),
             B=rng.standard_normal((256, 256), dtype=np.float32),
             bias=rng.standard_normal(256, dtype=np.float32))
    writable = os.access
    monkeypatch.setattr(_api.os, "access", lambda p, mode: Path(p) != ro and writable(p, mode))
    info = _api.run_npz(EXAMPLES, "mm_relu", lane="numpy", config=[],
                        inputs=str(ro / "in.npz"), output=str(out))
    assert info["drawn"] == [] and out.exists()
    with pytest.raises(_api.InputError, match="cannot be written"):  # what it would save
        _api.run_npz(EXAMPLES, "mm_relu", lane="numpy", config=[],
                     inputs=str(ro / "new.npz"), output=str(out))


def test_run_takes_several_config_values_after_one_flag(tmp_path):
    out = tmp_path / "o.npz"
    p = arbiter("run", str(EXAMPLES), "row_gelu_residual", "--lane", "x86_c", "--config",
                "threads=1", "row_block=4", "--inputs", str(tmp_path / "in.npz"),
                "--output", str(out))
    if "not available" in p.stderr:
        pytest.skip(p.stderr.strip())
    assert p.returncode == 0, p.stderr
    assert "row_block=4" in p.stdout and "threads=1" in p.stdout
    with np.load(out) as z:
        from arbiter import load_spec, reference

        got = {k: z[k] for k in z.files}
    ref = reference(load_spec(EXAMPLES).get("row_gelu_residual"), got)
    assert np.linalg.norm(got["out"] - ref) / np.linalg.norm(ref) < 1e-5


def test_check_survives_a_crashing_lane(tmp_path):
    import os

    from tests import fake_lanes

    env = {**os.environ, "ARBITER_EXTRA_LANES": fake_lanes.extra_lanes(),
           "PYTHONPATH": fake_lanes.pythonpath(), "ARBITER_CACHE_DIR": str(tmp_path / "c")}
    spec = tmp_path / "s.toml"
    spec.write_text('[[region]]\nname="r"\nM=8\nN=16\nK=8\nepilogue=["bias","relu"]\n')
    p = subprocess.run([sys.executable, "-m", "arbiter", "check", str(spec), "--lanes",
                        "fake_segfault,numpy", "--json"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 1, p.stderr
    rows = {r["lane"]: r for r in json.loads(p.stdout)}
    assert rows["fake_segfault"]["status"] == "crashed"
    assert rows["numpy"]["status"] == "ok"


def test_run_with_a_lane_whose_runner_cannot_load_is_one_line(tmp_path):
    """A runner raising RuntimeError (a library that cannot load) was a traceback."""
    import os

    from tests import fake_lanes

    env = {**os.environ, "ARBITER_EXTRA_LANES": fake_lanes.extra_lanes("fake_unloadable"),
           "PYTHONPATH": fake_lanes.pythonpath(), "ARBITER_CACHE_DIR": str(tmp_path / "c")}
    p = subprocess.run([sys.executable, "-m", "arbiter", "run", str(EXAMPLES), "mm_relu",
                        "--lane", "fake_unloadable", "--inputs", str(tmp_path / "in.npz"),
                        "--output", str(tmp_path / "out.npz")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert_one_line_error(p, "lane 'fake_unloadable' could not run mm_relu: RuntimeError: "
                          "libfake.so: undefined symbol")
    assert not (tmp_path / "out.npz").exists()


def test_ctrl_c_while_the_command_is_still_importing_is_one_line_and_130():
    """SIGINT once numpy is being loaded (the slow part of starting up): no traceback."""
    import signal
    import time

    from tests.procs import soon

    def loading_numpy(pid: int) -> bool:
        try:
            return "numpy" in Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            return True

    for _ in range(3):
        p = subprocess.Popen([sys.executable, "-m", "arbiter", "lanes"], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert soon(lambda p=p: loading_numpy(p.pid) or p.poll() is not None, within=30)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 130 and err in ("", "arbiter: interrupted\n"), err
        time.sleep(0.1)

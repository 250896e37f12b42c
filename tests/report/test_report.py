"""Reports: exact frames on a known database, every figure, the page, the CLI, the notebook."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import delete, select

from arbiter import best, report
from arbiter._errors import StoreError
from arbiter.lane import Status
from arbiter.records import (
    CandidateModel,
    EnvironmentModel,
    LaneModel,
    MeasurementModel,
    RegionModel,
    WinnerModel,
    session_scope,
    upgrade,
)
from arbiter.region import AttentionRegion, FusedRegion, RowwiseRegion, load_spec
from arbiter.report import _ceilings, _frames

from . import report_db

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "latency_report.ipynb"

SMALL_SPEC = """
[[region]]
name = "mm_relu"
M = 64
N = 64
K = 64
epilogue = ["bias", "relu"]

[[region]]
name = "row_gelu"
kind = "rowwise"
M = 64
N = 256
epilogue = ["bias", "gelu"]

[[region]]
name = "attn"
kind = "attention"
batch = 1
heads = 2
seq_q = 32
head_dim = 16
causal = true
"""


def arbiter(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "arbiter", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env=env,
    )


def one_line_error(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("arbiter: error:"), p.stderr
    assert needle in lines[0] and "Traceback" not in p.stderr


@pytest.fixture
def known(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'known.db'}"
    report_db.known(url)
    return url


@pytest.fixture(scope="session")
def tuned_run(tmp_path_factory) -> tuple[Path, str, list[dict]]:
    """A database written by a real, short `arbiter tune` (numpy + x86_c, 3 small regions):
    its folder, URL, and the rows `tune --json` printed."""
    import os

    d = tmp_path_factory.mktemp("tuned")
    (d / "spec.toml").write_text(SMALL_SPEC)
    url = f"sqlite:///{d / 'arbiter.db'}"
    env = dict(os.environ, ARBITER_CACHE_DIR=str(d / "cache"))
    p = arbiter(
        "tune",
        "spec.toml",
        "--trials",
        "4",
        "--lanes",
        "numpy,x86_c",
        "--seed",
        "0",
        "--db",
        url,
        "--json",
        cwd=d,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return d, url, json.loads(p.stdout)


@pytest.fixture(scope="session")
def tuned(tuned_run) -> str:
    return tuned_run[1]


# --- frames -----------------------------------------------------------------------------------


def test_trials_frame_exact(known: str) -> None:
    t = report.trials(known)
    assert list(t.columns) == _frames.TRIAL_COLUMNS
    assert list(t["region"]) == ["mm_relu"] * 4 + ["row_gelu"] * 2
    assert list(t["lane"]) == ["numpy", "x86_c", "x86_c", "x86_c", "numpy", "x86_c"]
    assert list(t["config"]) == [
        "(default)",
        "tile=4x8",
        "tile=8x8",
        "tile=2x8",
        "(default)",
        "(default)",
    ]
    assert list(t["status"]) == ["ok", "ok", "wrong_result", "compile_failed", "ok", "ok"]
    assert list(t["trial"]) == [1, 2, 3, 4, 1, 2]
    # the decision's latency, not numpy's bimodal plain median (20 ms)
    assert t["latency_ms"].iloc[:3].tolist() == pytest.approx([2.0, 1.0, 0.5])
    assert t["latency_low_ms"].iloc[0] == pytest.approx(1.9)
    assert t["latency_high_ms"].iloc[0] == pytest.approx(2.1)
    assert math.isnan(t["latency_ms"].iloc[3]) and math.isnan(t["rel_error"].iloc[3])
    assert math.isnan(t["latency_low_ms"].iloc[3])
    assert t["spread_ms"].iloc[0] == pytest.approx(0.1)
    assert list(t["unstable"]) == [False] * 5 + [True]
    assert t["load"].iloc[1] == pytest.approx(0.25) and math.isnan(t["load"].iloc[0])
    assert t["rel_error"].iloc[2] == pytest.approx(5e-2) and t["max_abs"].iloc[2] == 1.0
    assert set(t["precision"]) == {"f32"} and set(t["environment"]) == {"Test CPU"}
    assert list(t["kind"]) == ["fused"] * 4 + ["rowwise"] * 2
    assert t["timing_method"].iloc[0] == "monotonic_ns" and t["timing_method"].iloc[3] == ""
    assert set(t["measurement"]) == {"sweep"}
    everything = report.trials(known, measurements=None)
    assert len(everything) == 8 and list(everything["measurement"].iloc[-2:]) == ["final"] * 2
    assert everything["latency_ms"].iloc[-2:].tolist() == pytest.approx([0.9, 1.8])


def test_winners_frame_exact(known: str) -> None:
    w = report.winners(known)
    assert len(w) == 1
    row = w.iloc[0]
    assert (row["region"], row["lane"], row["config"], row["runner_up"]) == (
        "mm_relu",
        "x86_c",
        "tile=4x8",
        "numpy",
    )
    assert row["latency_ms"] == pytest.approx(0.9) and row["margin_ms"] == pytest.approx(0.9)
    assert (row["latency_low_ms"], row["latency_high_ms"]) == pytest.approx((0.88, 0.93))
    assert (row["ratio"], row["ratio_low"], row["ratio_high"]) == pytest.approx((2.0, 1.9, 2.1))
    assert row["verdict"] == "faster" and not row["unstable"] and row["load"] == 0.05
    assert row["budget"] == 1e-3 and not row["tie"] and row["platform"] == "cpu"


def test_best_per_lane_ignores_failed_trials(known: str) -> None:
    best = report.best_per_lane(report.trials(known))
    mm = best[best["region"] == "mm_relu"].set_index("lane")
    assert mm.loc["x86_c", "config"] == "tile=4x8"  # not the faster wrong_result 8x8
    assert mm.loc["x86_c", "latency_ms"] == pytest.approx(1.0)  # its sweep: best is per lane
    assert bool(mm.loc["numpy", "vendor"]) and not bool(mm.loc["x86_c", "vendor"])


def test_summary_exact(known: str) -> None:
    s = report.summary(known).set_index("region")
    mm, row = s.loc["mm_relu"], s.loc["row_gelu"]
    assert (mm["winner"], mm["winner_config"], mm["vendor"]) == ("x86_c", "tile=4x8", "numpy")
    assert bool(mm["declared"]) and not bool(row["declared"])  # row_gelu: fastest trial stands in
    assert (mm["trials"], mm["ok"], mm["lanes"]) == (4, 2, 2)
    # the declared winner's latency (its finals), and numpy re-timed in those same rounds
    assert mm["winner_ms"] == pytest.approx(0.9) and mm["vendor_ms"] == pytest.approx(1.8)
    assert (mm["winner_low_ms"], mm["winner_high_ms"]) == pytest.approx((0.88, 0.93))
    assert (mm["verdict"], mm["vendor_timing"], bool(mm["unstable"])) == (
        "faster",
        "same rounds",
        False,
    )
    assert mm["speedup"] == pytest.approx(2.0) and row["speedup"] == pytest.approx(4.0)
    assert row["winner_ms"] == pytest.approx(0.1) and row["vendor_timing"] == "sweep"
    assert bool(row["unstable"]) and pd.isna(row["verdict"])
    # 64x32x16 bias+relu: A 1024 + B 512 + bias 32 + out 2048 floats
    assert mm["flops"] == 2 * 64 * 32 * 16 and mm["bytes"] == 4 * (1024 + 512 + 32 + 2048)
    assert mm["gflops"] == pytest.approx(65536 / 0.9e-3 / 1e9)
    assert math.isnan(row["gflops"]) and row["gbytes_s"] == pytest.approx(8192 / 1e-4 / 1e9)


def _drop_measurements(url: str, lane: str, kind: str) -> None:
    with session_scope(url) as s:
        ids = select(CandidateModel.id).join(LaneModel).where(LaneModel.name == lane)
        s.execute(
            delete(MeasurementModel).where(
                MeasurementModel.candidate_id.in_(ids), MeasurementModel.kind == kind
            )
        )


def test_summary_vendor_from_its_sweep_when_it_was_no_finalist(known: str) -> None:
    _drop_measurements(known, "numpy", "final")
    mm = report.summary(known).set_index("region").loc["mm_relu"]
    assert mm["winner_ms"] == pytest.approx(0.9)
    assert (mm["vendor_ms"], mm["vendor_timing"]) == (pytest.approx(2.0), "sweep")


def test_summary_ignores_finals_after_the_declaration(known: str) -> None:
    """A later re-timing that declared nothing (its finalists all failed) is no one's round."""
    with session_scope(known) as s:
        numpy_final = s.scalars(
            select(MeasurementModel)
            .where(MeasurementModel.kind == "final")
            .order_by(MeasurementModel.id.desc())
        ).first()
        assert numpy_final is not None
        s.add(
            MeasurementModel(
                candidate_id=numpy_final.candidate_id,
                kind="final",
                status="ok",
                budget=1e-3,
                latency=50e-3,
                created_at=report_db.T0.replace(hour=13),
            )
        )
    mm = report.summary(known).set_index("region").loc["mm_relu"]
    assert mm["vendor_ms"] == pytest.approx(1.8) and mm["speedup"] == pytest.approx(2.0)


def test_work_counts() -> None:
    w = report.work(FusedRegion(8, 4, 2))
    assert (w.flops, w.bytes) == (2 * 8 * 4 * 2, 4 * (16 + 8 + 32))
    assert report.work(RowwiseRegion(4, 8, epilogue=("relu",))).flops == 0
    full = report.work(AttentionRegion(2, 3, 16, 8, seq_k=32))
    causal = report.work(AttentionRegion(2, 3, 16, 8, seq_k=32, causal=True))
    assert full.flops == 4 * 2 * 3 * 16 * 32 * 8 and causal.flops == full.flops / 2
    assert full.bytes == 4 * (2 * 3 * 16 * 8 * 2 + 2 * 2 * 3 * 32 * 8)
    assert report.REFERENCE_MODELS["gfx1151"].flops["f16"] == 59.4e12
    region = FusedRegion(8, 4, 2, epilogue=("bias", "gelu"), reduction="softmax")
    assert report.region_from_canonical(json.dumps(region.canonical())) == region


def test_ceilings_recorded_once_for_this_machine(known: str, monkeypatch) -> None:
    from arbiter.records import fingerprint

    assert list(report.ceilings(known)["name"]) == ["copy_bandwidth", "matmul_f32"]
    calls = []
    fake = [("copy_bandwidth", 5e9, "B/s", "fake"), ("matmul_f32", 7e9, "FLOP/s", "fake")]
    monkeypatch.setattr(_ceilings, "measure_cpu", lambda: calls.append(1) or fake)
    assert report.ensure_ceilings(known, gpu=False) == []  # this machine is not in the records
    with session_scope(known) as s:
        EnvironmentModel.find_or_add(s, fingerprint().hash, dict(fingerprint()))
    assert report.ensure_ceilings(known, gpu=False) == ["copy_bandwidth", "matmul_f32"]
    assert report.ensure_ceilings(known, gpu=False) == []  # measured once, kept
    c = report.ceilings(known)
    assert len(c) == 4 and calls == [1]
    assert set(c[c["method"] == "fake"]["value"]) == {5e9, 7e9}


def test_measure_cpu_is_plausible() -> None:
    values = {name: (value, unit) for name, value, unit, _ in report.measure_cpu()}
    assert values["copy_bandwidth"][1] == "B/s" and 1e8 < values["copy_bandwidth"][0] < 1e13
    assert values["matmul_f32"][1] == "FLOP/s" and 1e8 < values["matmul_f32"][0] < 1e14


# --- figures and page ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["known", pytest.param("rich", marks=pytest.mark.slow)])
def test_every_figure_draws(which: str, known: str, tmp_path: Path) -> None:
    url = known
    if which == "rich":
        url = f"sqlite:///{tmp_path / 'rich.db'}"
        report_db.rich(url, str(ROOT / "examples" / "regions.toml"), trials=6)
    rep = report.build_report(url, reference="gfx1151")
    assert set(rep.figures) == set(report.FIGURES)
    for name, fig in rep.figures.items():
        assert fig._suptitle is not None or any(ax.get_title() for ax in fig.axes), name
        for ax in fig.axes:
            if ax.get_visible() and ax.has_data():
                assert ax.get_xlabel(), f"{name}: unlabelled x axis"
        path = tmp_path / f"{name}.png"
        fig.savefig(path, dpi=40)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_winner_bar_is_the_declared_latency(known: str) -> None:
    rep = report.build_report(known)
    ax = rep.figures["latency_by_lane"].axes[0]
    assert ax.get_title() == "mm_relu"
    bars = {t.get_text(): p.get_width() for t, p in zip(ax.get_yticklabels(), ax.patches)}
    # the finals' numbers (winner 0.9, numpy 1.8 in the same rounds), not their sweeps' 1.0, 2.0
    assert bars == pytest.approx({"★ x86_c": 0.9, "numpy": 1.8})


def test_figures_say_when_there_is_nothing_to_draw(known: str) -> None:
    empty = report.summary(known).iloc[0:0]
    trials = report.trials(known).iloc[0:0]
    for fig in (
        report.latency_by_lane(report.best_per_lane(trials), empty),
        report.speedup(empty),
        report.convergence(trials, empty),
        report.latency_vs_error(trials, empty),
        report.roofline(empty, report.ceilings(known)),
    ):
        assert fig.axes[0].texts  # a sentence, not an empty axis


def _page_rows(text: str, fmt: str) -> list[list[str]]:
    """The winners table's body rows as cell texts."""
    if fmt == "html":
        return [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr><td>.*?</tr>", text)]
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")][1:]  # after the header
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_page_references_files_that_exist(fmt: str, known: str, tmp_path: Path) -> None:
    written = report.write_report(known, tmp_path / "out", fmt=fmt)
    page = written["page"]
    text = page.read_text()
    refs = (
        re.findall(r"src='([^']+)'", text)
        if fmt == "html"
        else re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    )
    assert sorted(refs) == sorted(f"{stem}.png" for stem in report.FIGURES)
    for ref in refs:
        assert (page.parent / ref).is_file()
    assert "mm_relu" in text and "x86_c" in text and "tile=4x8" in text
    # the winner's declared latency with its interval and verdict; the stand-in says so
    rows = {r[0]: r for r in _page_rows(text, fmt)}
    assert rows["mm_relu"][4:8] == ["0.9", "0.88–0.93", "faster", ""]
    assert rows["row_gelu"][4:8] == ["0.1", "0.095–0.105", "not declared", "unstable"]
    if fmt == "html":
        assert "<table>" in text and "http" not in text  # self-contained: no external fetch


# --- command line ------------------------------------------------------------------------------


def test_cli_missing_empty_and_foreign_databases(tmp_path: Path) -> None:
    p = arbiter("report", "--db", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    one_line_error(p, "no database at")
    assert not (tmp_path / "none.db").exists()  # reading never creates a database
    (tmp_path / "foreign.db").write_bytes(b"")
    p = arbiter("report", "--db", f"sqlite:///{tmp_path / 'foreign.db'}", cwd=tmp_path)
    one_line_error(p, "holds no Arbiter records")
    upgrade(f"sqlite:///{tmp_path / 'empty.db'}")
    p = arbiter("report", "--db", f"sqlite:///{tmp_path / 'empty.db'}", cwd=tmp_path)
    one_line_error(p, "holds no measurements")


def test_cli_unknown_reference_model(known: str, tmp_path: Path) -> None:
    p = arbiter("report", "--db", known, "--reference", "gfx9999", cwd=tmp_path)
    one_line_error(p, "gfx1151")


def test_help_stays_light() -> None:
    code = (
        "import sys; from arbiter.cli import _parser; _parser(); "
        "print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_cli_report_on_a_real_tune(tuned: str, tmp_path: Path) -> None:
    p = arbiter("report", "--db", tuned, "--out", "rep", "--format", "md", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    printed = [
        line.removeprefix("wrote ") for line in p.stdout.splitlines() if line.startswith("wrote ")
    ]
    assert printed[0].endswith("report.md") and len(printed) == 1 + len(report.FIGURES)
    assert all((tmp_path / f).is_file() for f in printed)
    t = report.trials(tuned)
    assert set(t["status"]) <= {s.value for s in Status}
    assert set(t["region"]) == {"mm_relu", "row_gelu", "attn"}
    s = report.summary(tuned)
    assert s["winner"].notna().all()
    # the search may not sample the vendor lane in 4 trials; where it did, it is numpy
    assert set(s["vendor"].dropna()) == {"numpy"}
    assert (report.ceilings(tuned)["name"] == "copy_bandwidth").any()  # measured by the report


def test_one_latency_per_winner_everywhere(tuned_run, tmp_path: Path) -> None:
    """One winner, one latency: `tune`'s row, `best`, the `winners` table, the summary and the
    page all show the finals' number, with the same interval."""
    d, url, rows = tuned_run
    spec = load_spec(d / "spec.toml")
    summary = report.summary(url).set_index("region")
    frame = report.winners(url).set_index("region")
    page = report.write_report(url, tmp_path / "out", fmt="md")["page"].read_text()
    on_page = {r[0]: r for r in _page_rows(page, "md")}
    assert {r["region"] for r in rows} == {"mm_relu", "row_gelu", "attn"}
    for row in rows:
        name, ms = row["region"], row["latency_ms"]
        interval = (row["latency_low_ms"], row["latency_high_ms"])
        answer = best(spec.get(name), db=url)
        with session_scope(url) as s:
            [stored] = s.scalars(
                select(WinnerModel).join(RegionModel).where(RegionModel.name == name)
            ).all()
            stored_ms = stored.latency * 1e3
        assert (answer["latency_ms"], answer["latency_low_ms"], answer["latency_high_ms"]) == (
            ms,
            *interval,
        )
        assert stored_ms == ms and frame.loc[name, "latency_ms"] == ms
        assert bool(summary.loc[name, "declared"]) and summary.loc[name, "winner_ms"] == ms
        assert (summary.loc[name, "winner_low_ms"], summary.loc[name, "winner_high_ms"]) == interval
        assert summary.loc[name, "verdict"] == row["verdict"] == answer["verdict"]
        assert on_page[name][4] == f"{ms:.3g}"  # as `arbiter best` prints it


# --- notebook ----------------------------------------------------------------------------------


def test_notebook_is_stored_without_outputs() -> None:
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None


def test_notebook_executes_on_a_real_tune(tuned: str, tmp_path: Path, monkeypatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("ARBITER_DB", tuned)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == len(report.FIGURES)


def test_open_records_rejects_missing_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no database at"):
        report.open_records(f"sqlite:///{tmp_path / 'missing.db'}")


def test_a_link_planted_beside_the_report_is_not_followed(known: str, tmp_path: Path) -> None:
    """Each file is written under a random name made exclusively, then moved over its own:
    a symlink planted at a predictable temporary name (`.report.html.<pid>.tmp`) made the
    report write into the file it points to, and then took the report's name itself."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    for name in ["report.html", *(f"{stem}.png" for stem in report.FIGURES)]:
        (out / f".{name}.{os.getpid()}.tmp").symlink_to(victim)
    written = report.write_report(known, out)
    assert victim.read_text() == "keep me\n"
    assert all(p.is_file() and not p.is_symlink() for p in written.values())
    assert len(list(out.glob(".*.part"))) == 0

"""`write_report`: every figure as PNG plus one HTML or Markdown page beside them.

The page references the PNGs by relative name and carries its own CSS, so the output folder
can be copied or zipped as a whole and opened anywhere.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from .._atomic import whole_file
from .._errors import masked_url
from . import _figures as figs
from ._frames import best_per_lane, ceilings, open_records, summary, trials, winners
from ._gfx1151 import GFX1151_HOW, GFX1151_TITLE, gfx1151_view

__all__ = ["FIGURES", "PANELS", "Report", "build_report", "drawn", "write_report"]

PANELS = 36  # regions a figure with a panel (or a bar) per region draws at most
PANEL_FIGURES = ("latency_by_lane", "speedup", "latency_vs_error", "convergence")

# file stem -> (caption, how to read it)
FIGURES = {
    "latency_by_lane": (
        "Best latency per lane",
        "Each panel is one region; bars are each lane's fastest passing config in the "
        "search, whiskers its 95% interval. The outlined bar (★) is the declared winner at "
        "its declared latency (the finalists' interleaved re-timing, as in the table), and "
        "the vendor lane's bar and dashed line are its re-timing in those same rounds.",
    ),
    "speedup": (
        "Fused vs unfused",
        "How much faster the winner is than the vendor lane's eager chain "
        "(one library call per op), both timed in the same interleaved rounds unless the "
        "label says otherwise. 1× means fusing bought nothing; the axis is logarithmic when "
        "the ratios span a decade or more.",
    ),
    "latency_vs_error": (
        "Latency vs error",
        "Every timed trial. Points left of the red budget line pass; ◂ marks an error more "
        "than 100× below the budget, drawn at the axis' edge. The star with whiskers is the "
        "winner at its declared latency and 95% interval (the table's numbers); the black "
        "step is the front a different budget would pick from without re-measuring.",
    ),
    "convergence": (
        "Search convergence",
        "Best passing sweep latency found so far against trial number; the star with "
        "whiskers is the winner at its declared latency and interval, at the trial that "
        "first measured it. A long flat tail means the search had converged.",
    ),
    "roofline": (
        "Roofline position",
        "Achieved FLOP/s and GB/s of each winner against this machine's measured "
        "copy bandwidth and matmul rate (a named model's peaks only when asked, labelled "
        "as that model). A hatched bar's working set fits in the cache: not a DRAM rate.",
    ),
}

WINNER_TABLE = {
    "region": "region",
    "winner": "winner",
    "winner_config": "config",
    "precision": "precision",
    "winner_ms": "latency (ms)",
    "interval_ms": "95% interval (ms)",
    "verdict": "verdict",
    "unstable": "unstable",
    "winner_rel_error": "rel. error",
    "budget": "budget",
    "vendor": "vendor lane",
    "vendor_ms": "vendor (ms)",
    "vendor_timing": "vendor timed",
    "speedup": "speed-up (×)",
    "gbytes_s": "GB/s",
    "gflops": "GFLOP/s",
    "trials": "trials",
    "environment": "environment",
}


WINNERS_HOW = (
    "A declared winner's latency is the one `arbiter tune` and `arbiter best` print: the median "
    "over the finalists' interleaved rounds of each round's fastest call, with its 95% "
    "interval. The verdict says whether it was told apart from the runner-up (faster), fell "
    "inside the equivalence band (tie), or neither (unresolved); unstable marks a timing whose "
    "rounds spread widely even when re-measured. A region not declared yet shows its fastest "
    "passing search trial."
)


@dataclass
class Report:
    url: str
    trials: pd.DataFrame
    winners: pd.DataFrame
    best: pd.DataFrame
    summary: pd.DataFrame
    ceilings: pd.DataFrame
    figures: dict = field(default_factory=dict)
    gfx1151: pd.DataFrame | None = None  # a model of the winners on gfx1151 (_gfx1151)
    drawn: str = ""  # which regions the figures with a panel each draw, when not all


def drawn(summary_frame: pd.DataFrame, panels: int = PANELS) -> tuple[pd.DataFrame, str]:
    """The summary rows the figures with a panel (or a bar) per region draw, and what the
    page says of the others: every row when they fit, else the first `panels` by name of the
    machine with the most regions (the one the roofline draws). A figure of thousands of
    panels is neither drawable in reasonable time and memory nor readable."""
    if len(summary_frame) <= panels:
        return summary_frame, ""
    fp = summary_frame["fingerprint"].value_counts().index[0]
    mine = summary_frame[summary_frame["fingerprint"] == fp]
    shown = mine.head(panels)
    many = summary_frame["fingerprint"].nunique()
    whose = f"{shown['environment'].iloc[0]}'s (the machine with the most of {many})" if (
        many > 1) else "the"
    return shown, (f"Drawn: {whose} first {len(shown)} regions by name, of "
                   f"{len(summary_frame)} regions × machines in the records; the winners "
                   "table lists every one.")


def build_report(url: str, *, reference: str | None = None, panels: int = PANELS) -> Report:
    """Read the records and draw every figure (nothing written); figures with a panel per
    region draw `panels` of them at most."""
    open_records(url)
    t = trials(url)
    w = winners(url)
    s = summary(url, t, w)
    c = ceilings(url)
    best = best_per_lane(t)
    shown, note = drawn(s, panels)
    rep = Report(url, t, w, best, s, c, gfx1151=gfx1151_view(url), drawn=note)
    rep.figures = {
        "latency_by_lane": figs.latency_by_lane(best, shown),
        "speedup": figs.speedup(shown),
        "latency_vs_error": figs.latency_vs_error(t, shown),
        "convergence": figs.convergence(t, shown),
        "roofline": figs.roofline(s, c, reference=reference),
    }
    return rep


def _verdict(row: pd.Series) -> str | None:
    """Rows declared before verdicts were recorded have only `tie`; a stand-in has neither."""
    if not row["declared"]:
        return "not declared"
    return row["verdict"] if isinstance(row["verdict"], str) else ("tie" if row["tie"] else None)


def winner_table(summary_frame: pd.DataFrame) -> pd.DataFrame:
    """The page's table: readable column names, the winner's latency as `arbiter best` prints
    it with its interval, its verdict over the runner-up and whether its timing was unstable."""
    s = summary_frame.assign(
        interval_ms=[
            None if pd.isna(lo) else f"{_fmt(lo)}–{_fmt(hi)}"
            for lo, hi in zip(summary_frame["winner_low_ms"], summary_frame["winner_high_ms"])
        ],
        verdict=[_verdict(r) for _, r in summary_frame.iterrows()],
        unstable=["unstable" if u else "" for u in summary_frame["unstable"]],
    )
    t = s[list(WINNER_TABLE)].rename(columns=WINNER_TABLE)
    if summary_frame["environment"].nunique() <= 1:
        t = t.drop(columns="environment")
    return t


def _fmt(v: object) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "–"
    if isinstance(v, float):
        # three significant digits, as the CLI's tables print them
        return f"{v:.3g}" if abs(v) < 1e3 else f"{v:.0f}"
    return str(v)


def _markdown(table: pd.DataFrame) -> str:
    head = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = [
        "| " + " | ".join(_fmt(v).replace("|", "\\|") for v in row) + " |"
        for row in table.itertuples(index=False)
    ]
    return "\n".join([head, rule, *body])


def _html_table(table: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in table.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


CSS = """body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #ccc;
padding:4px 8px;text-align:right}th{background:#f2f2f2}td:first-child,th:first-child{
text-align:left}img{max-width:100%;border:1px solid #eee}p.how{color:#555;max-width:60em}"""


def _overview(rep: Report) -> list[str]:
    s, t = rep.summary, rep.trials
    envs = ", ".join(sorted(s["environment"].unique()))
    return [
        f"{len(s)} regions, {len(t)} trials ({int((t['status'] == 'ok').sum())} passed), "
        f"lanes: {', '.join(sorted(t['lane'].unique()))}",
        f"machine: {envs}",
        f"records: {masked_url(rep.url)} (report written {datetime.now():%Y-%m-%d %H:%M})",
    ]


def html_page(rep: Report, src: Callable[[str], str], *, before: str = "",
              head: str = "") -> str:
    """The report as one HTML page; `src(stem)` is where each figure's PNG is found, `before`
    HTML put ahead of the winners (the server's jobs), `head` into the page's head."""
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'>{head}"
        f"<title>Arbiter latency report</title><style>{CSS}</style></head><body>",
        "<h1>Arbiter latency report</h1><ul>",
        *(f"<li>{html.escape(line)}</li>" for line in _overview(rep)),
        "</ul>", before,
        f"<h2>Winners</h2><p class='how'>{html.escape(WINNERS_HOW)}</p>",
        _html_table(winner_table(rep.summary)),
    ]
    for stem, (caption, how) in FIGURES.items():
        note = f" {rep.drawn}" if rep.drawn and stem in PANEL_FIGURES else ""
        parts += [
            f"<h2>{html.escape(caption)}</h2><p class='how'>{html.escape(how + note)}</p>",
            f"<img src='{html.escape(src(stem))}' alt='{html.escape(caption)}'>",
        ]
    if rep.gfx1151 is not None and len(rep.gfx1151):
        parts += [f"<h2>{html.escape(GFX1151_TITLE)}</h2><p class='how'>"
                  f"{html.escape(GFX1151_HOW)}</p>", _html_table(rep.gfx1151)]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    url: str,
    out_dir: str | Path,
    *,
    fmt: str = "html",
    reference: str | None = None,
    dpi: int = 110,
    panels: int = PANELS,
) -> dict[str, Path]:
    """Write `<stem>.png` for every figure and `report.html` / `report.md`; returns the paths.
    Each file is written whole or not at all (a report stopped midway leaves no half PNG)."""
    if fmt not in ("html", "md"):
        raise ValueError(f"format must be html or md, got {fmt!r}")
    rep = build_report(url, reference=reference, panels=panels)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for stem, fig in rep.figures.items():
        path = out / f"{stem}.png"
        with whole_file(path) as f:
            fig.savefig(f, dpi=dpi, format="png")
        written[stem] = path
    table = winner_table(rep.summary)
    if fmt == "md":
        parts = [
            "# Arbiter latency report",
            "",
            *(f"- {line}" for line in _overview(rep)),
            "",
            "## Winners",
            "",
            WINNERS_HOW,
            "",
            _markdown(table),
            "",
        ]
        for stem, (caption, how) in FIGURES.items():
            note = f" {rep.drawn}" if rep.drawn and stem in PANEL_FIGURES else ""
            parts += [f"## {caption}", "", how + note, "", f"![{caption}]({stem}.png)", ""]
        if rep.gfx1151 is not None and len(rep.gfx1151):
            parts += [f"## {GFX1151_TITLE}", "", GFX1151_HOW, "", _markdown(rep.gfx1151), ""]
        page, text = out / "report.md", "\n".join(parts)
    else:
        page, text = out / "report.html", html_page(rep, lambda stem: f"{stem}.png")
    with whole_file(page, "w") as f:
        f.write(text)
    written["page"] = page
    return written


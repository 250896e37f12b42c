"""Figures from the frames: each a `matplotlib.figure.Figure` (no pyplot state, Agg-safe).

One look should answer one question: which lane wins each region and by how much; what the
latency/error front looks like against the budget; whether the search had converged; what
fusing bought over the library's eager chain; how close each winner is to the machine.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ._frames import SAME_ROUNDS
from ._work import BANDWIDTH, MATMUL, REFERENCE_MODELS

__all__ = [
    "convergence",
    "lane_colors",
    "latency_by_lane",
    "latency_vs_error",
    "roofline",
    "speedup",
]

PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#d62728",
    "#7f7f7f",
]
WINNER = "#d4a017"  # gold edge / star
VENDOR = "#555555"
BUDGET = "#d62728"
COLS = 3
ERROR_DECADES = 1e-2  # latency/error axes start this far below the budget
PLAIN = FuncFormatter(lambda v, _: f"{v:g}")


def lane_colors(lanes) -> dict[str, str]:
    """The same lane gets the same colour in every figure."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(set(lanes)))}


def _grid(n: int, title: str, panel: tuple[float, float] = (4.6, 3.0)) -> tuple[Figure, list]:
    cols = min(COLS, max(n, 1))
    rows = max(1, math.ceil(n / cols))
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows + 0.9), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=14, fontweight="bold")
    return fig, axes[:n]


def _empty(title: str, message: str) -> Figure:
    fig = Figure(figsize=(7, 3), layout="constrained")
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=12, wrap=True)
    fig.suptitle(title, fontsize=14, fontweight="bold")
    return fig


def _fmt_ms(ms: float) -> str:
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1e3:.0f} µs" if ms >= 0.01 else f"{ms * 1e3:.1f} µs"


def _regions(summary: pd.DataFrame) -> list[tuple[str, str, pd.Series]]:
    """(region_key, fingerprint, summary row) in display order."""
    return [(r["region_key"], r["fingerprint"], r) for _, r in summary.iterrows()]


def _panel_title(row: pd.Series, many_envs: bool) -> str:
    t = str(row["region"])
    return f"{t}  [{row['environment']}]" if many_envs else t


def _declared(lanes: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """A region's per-lane bars with the winner's and the vendor's latencies put in from the
    summary: the numbers the winners table and `arbiter best` show, not their sweep's."""
    b = lanes.copy()
    if row.get("declared") and not (b["lane"] == row["winner"]).any():
        # its sweep judged it against a tighter budget: no passing bar of its own
        b = pd.concat([b, pd.DataFrame([{"lane": row["winner"]}])], ignore_index=True)
    win = b["lane"] == row["winner"]
    if row.get("declared"):
        b.loc[win, ["config", "latency_ms", "latency_low_ms", "latency_high_ms"]] = [
            row["winner_config"],
            row["winner_ms"],
            row["winner_low_ms"],
            row["winner_high_ms"],
        ]
    if row.get("vendor_timing") == SAME_ROUNDS and row["vendor"] != row["winner"]:
        # the low/high of this re-timing are not in the summary: no interval drawn
        b.loc[b["lane"] == row["vendor"], ["latency_ms", "latency_low_ms", "latency_high_ms"]] = [
            row["vendor_ms"],
            np.nan,
            np.nan,
        ]
    return b


def latency_by_lane(best: pd.DataFrame, summary: pd.DataFrame) -> Figure:
    """Per region: each lane's best config as a bar (ms) with its interval, winner starred,
    vendor as a line. The winner's bar is its declared latency (the finalists' re-timing)."""
    title = (
        "Best latency of each lane, per region (shorter is faster; whiskers: 95% interval)\n"
        "★ = declared winner (black outline)   ┆ dashed line = vendor library lane"
    )
    if summary.empty:
        return _empty(title, "no regions with passing trials")
    colors = lane_colors(best["lane"])
    many = summary["fingerprint"].nunique() > 1
    regions = _regions(summary)
    fig, axes = _grid(len(regions), title, panel=(4.6, 0.5 * best["lane"].nunique() + 1.6))
    for ax, (key, fp, row) in zip(axes, regions):
        b = _declared(best[(best["region_key"] == key) & (best["fingerprint"] == fp)], row)
        b = b.sort_values("latency_ms", ascending=False)  # fastest at the top
        y = np.arange(len(b))
        is_win = (b["lane"] == row["winner"]).to_numpy()
        ms = b["latency_ms"].to_numpy(float)
        err = np.clip(
            [ms - b["latency_low_ms"].to_numpy(float), b["latency_high_ms"].to_numpy(float) - ms],
            0,
            None,
        )
        ax.barh(
            y,
            ms,
            height=0.7,
            color=[colors[n] for n in b["lane"]],
            edgecolor=["black" if w else "none" for w in is_win],
            linewidth=[2.5 if w else 0 for w in is_win],
            xerr=err,
            error_kw={"ecolor": "#333333", "elinewidth": 1, "capsize": 2},
        )
        ax.set_yticks(y, [f"★ {n}" if w else n for n, w in zip(b["lane"], is_win)])
        for yi, x, high, w in zip(y, ms, b["latency_high_ms"], is_win):
            text = " " + _fmt_ms(x)
            if w and pd.notna(row.get("speedup")) and row["winner"] != row["vendor"]:
                text += f"  ({row['speedup']:.1f}× vs {row['vendor']})"
            if w and row.get("verdict") in ("tie", "unresolved"):
                text += f"  {row['verdict']}"
            elif w and row.get("tie"):
                text += "  tie"
            if w and row.get("unstable"):
                text += "  unstable"
            if w and not row.get("declared"):
                text += "  (not declared: fastest trial)"
            right = high if pd.notna(high) else x
            ax.text(right, yi, text, va="center", fontsize=9, fontweight="bold" if w else None)
        if pd.notna(row.get("vendor_ms")):
            ax.axvline(row["vendor_ms"], color=VENDOR, ls="--", lw=1.2)
        top = np.nanmax(np.fmax(ms, b["latency_high_ms"].to_numpy(float))) if len(b) else 1
        ax.set_xlim(0, top * 1.6)
        ax.set_xlabel("latency per call (ms)")
        ax.set_title(_panel_title(row, many), fontsize=11)
    return fig


def _star(ax: Axes, x, y, size: float) -> None:
    """The winner's mark, drawn over everything else in a panel."""
    ax.scatter(x, y, s=size, marker="*", color=WINNER, edgecolor="black", linewidth=0.6, zorder=5)


def _log_ms_axis(ax: Axes, values: pd.Series) -> None:
    """Log latency axis with plain 1-2-5 labels, at least a factor 4 tall so ticks show."""
    v = values.dropna()
    if v.empty:
        return
    lo, hi = float(v.min()), float(v.max())
    mid = math.sqrt(lo * hi)
    span = max(hi / lo, 4.0) ** 0.5 * 1.15
    ax.set_ylim(mid / span, mid * span)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(PLAIN)
    ax.yaxis.set_minor_formatter(NullFormatter())


def _pareto(points: pd.DataFrame) -> pd.DataFrame:
    """Passing trials no other passing trial beats on both latency and error."""
    p = points.sort_values(["rel_error", "latency_ms"])
    keep, best = [], math.inf
    for i, ms in zip(p.index, p["latency_ms"]):
        if ms < best:
            keep.append(i)
            best = ms
    return p.loc[keep]


def _winner_mark(ax: Axes, x: float, row: pd.Series, size: float) -> None:
    """The winner at its declared latency with its 95% interval: the numbers of the table."""
    low, high = row.get("winner_low_ms"), row.get("winner_high_ms")
    if pd.notna(low) and pd.notna(high):
        ax.errorbar([x], [row["winner_ms"]], yerr=[[row["winner_ms"] - low],
                                                   [high - row["winner_ms"]]],
                    fmt="none", ecolor="black", elinewidth=1.2, capsize=4, zorder=4)
    _star(ax, [x], [row["winner_ms"]], size)


def latency_vs_error(trials: pd.DataFrame, summary: pd.DataFrame) -> Figure:
    """Per region: every measured trial at (relative error, latency); the budget as a line.
    Errors far below the budget are drawn at the axis' left edge (◂) rather than leaving
    decades of empty axis between them and the budget."""
    title = (
        "Latency vs error (left of the red line passes the budget; lower is faster; "
        "★ = winner at its declared latency)"
    )
    t = trials[trials["latency_ms"].notna() & trials["rel_error"].notna()]
    if summary.empty or t.empty:
        return _empty(title, "no timed trials with a recorded error")
    colors = lane_colors(trials["lane"])
    many = summary["fingerprint"].nunique() > 1
    regions = _regions(summary)
    fig, axes = _grid(len(regions), title)
    for ax, (key, fp, row) in zip(axes, regions):
        r = t[(t["region_key"] == key) & (t["fingerprint"] == fp)].copy()
        floor = row["budget"] * ERROR_DECADES
        below = r["rel_error"] < floor
        r["rel_error"] = r["rel_error"].clip(lower=floor)
        for lane, g in r.groupby("lane"):
            for fails, marker in ((False, "o"), (True, "x")):
                for low, m in ((False, marker), (True, "<")):
                    pick = g[((g["status"] != "ok") == fails) & (below[g.index] == low)]
                    ax.scatter(pick["rel_error"], pick["latency_ms"], s=24, color=colors[lane],
                               marker=m, alpha=0.8)
        front = _pareto(r[r["status"] == "ok"])
        if len(front) > 1:
            ax.step(
                front["rel_error"],
                front["latency_ms"],
                where="post",
                color="black",
                lw=0.8,
                alpha=0.6,
            )
        ax.axvline(row["budget"], color=BUDGET, ls="--", lw=1.5)
        if row.get("declared") and pd.notna(row["winner_rel_error"]):
            # at its declared latency, which may sit off its own sweep point
            _winner_mark(ax, max(row["winner_rel_error"], floor), row, 220)
        else:
            win = r[(r["lane"] == row["winner"]) & (r["config"] == row["winner_config"])]
            if not win.empty:
                _star(ax, win["rel_error"], win["latency_ms"], 220)
        ax.set_xscale("log")
        worst = r["rel_error"].max() if len(r) else row["budget"]  # a region with no trial
        ax.set_xlim(floor / 1.6, max(worst, row["budget"]) * 2.5)
        ax.set_yscale("log")
        _log_ms_axis(ax, pd.concat([r["latency_ms"], pd.Series(
            [row["winner_ms"], row.get("winner_low_ms"), row.get("winner_high_ms")])]))
        ax.set_xlabel("relative error ‖out−ref‖/‖ref‖")
        ax.set_ylabel("latency (ms)")
        ax.set_title(_panel_title(row, many), fontsize=11)
    handles = [Line2D([], [], ls="", marker="o", color=c, label=n) for n, c in colors.items()]
    handles += [
        Line2D([], [], ls="", marker="x", color="black", label="failed (wrong/NaN)"),
        Line2D([], [], ls="", marker="<", color="black",
               label=f"error below {ERROR_DECADES:g} × budget (at the edge)"),
        Line2D(
            [], [], ls="", marker="*", ms=14, color=WINNER, markeredgecolor="black", label="winner"
        ),
        Line2D([], [], ls="--", color=BUDGET, label="accuracy budget"),
        Line2D([], [], color="black", lw=0.8, label="latency/error front"),
    ]
    fig.legend(
        handles=handles, loc="outside lower center", ncols=min(len(handles), 8), frameon=False
    )
    return fig


def convergence(trials: pd.DataFrame, summary: pd.DataFrame) -> Figure:
    """Per region: best passing latency found so far against trial number."""
    title = "Search convergence (best-so-far latency; a flat tail means more trials won't help)"
    if summary.empty:
        return _empty(title, "no trials")
    many = summary["fingerprint"].nunique() > 1
    regions = _regions(summary)
    colors = lane_colors(trials["lane"])
    fig, axes = _grid(len(regions), title)
    for ax, (key, fp, row) in zip(axes, regions):
        r = trials[(trials["region_key"] == key) & (trials["fingerprint"] == fp)]
        r = r.sort_values("trial")
        ok = r["latency_ms"].where(r["status"] == "ok")
        best = ok.cummin().ffill()
        ax.scatter(r["trial"], ok, s=12, c=[colors[n] for n in r["lane"]], alpha=0.45)
        ax.step(r["trial"], best, where="post", color="black", lw=1.8)
        if pd.notna(row.get("vendor_ms")):
            ax.axhline(row["vendor_ms"], color=VENDOR, ls="--", lw=1)
        if best.notna().any():
            final = best.dropna().iloc[-1]
            first = int(r["trial"][best == final].iloc[0])
            found = r[(r["lane"] == row["winner"]) & (r["config"] == row["winner_config"])]
            if row.get("declared") and not found.empty:
                # the winner at its declared latency (the table's), where the search found it
                first = int(found["trial"].iloc[0])
                _winner_mark(ax, first, row, 160)
                said = f"winner {_fmt_ms(row['winner_ms'])} (declared), found at trial"
            else:
                _star(ax, [first], [final], 160)
                said = f"sweep best {_fmt_ms(final)}, found at trial"
            ax.text(
                0.97,
                0.93,
                f"{said} {first} of {len(r)}",
                transform=ax.transAxes,
                ha="right",
                va="top",
                fontsize=9,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            )
            top = ok.quantile(0.9) if ok.notna().sum() > 3 else ok.max()
            high = max(top, row.get("vendor_ms") or 0, final, row.get("winner_high_ms") or 0)
            final = min(final, row.get("winner_low_ms") or final)
            if final > 0 and high / final > 20:
                # one slow lane would flatten the rest on a linear axis
                ax.set_yscale("log")
                ax.set_ylim(final / 1.5, high * 1.5)
            else:
                ax.set_ylim(0, high * 1.25)
        ax.set_xlabel("trial number")
        ax.set_ylabel("latency (ms)")
        ax.set_title(_panel_title(row, many), fontsize=11)
    handles = [Line2D([], [], ls="", marker="o", color=c, label=n) for n, c in colors.items()]
    handles.append(Line2D([], [], color="black", lw=1.8, label="best so far"))
    handles.append(Line2D([], [], color=VENDOR, ls="--", lw=1, label="vendor lane"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    return fig


def speedup(summary: pd.DataFrame) -> Figure:
    """Per region: vendor eager-chain latency / winner latency; 1.0 = no gain from fusing.

    Both sides come from the finalists' interleaved rounds where the vendor was re-timed there;
    a label says when the vendor's number is its sweep's instead."""
    title = "Fused winner vs vendor library's eager chain (speed-up, higher is better)"
    s = summary[summary["speedup"].notna()]
    if s.empty:
        return _empty(title, "no region has both a winner and a vendor-lane measurement")
    s = s.sort_values("speedup")
    colors = lane_colors(summary["winner"].dropna())
    many = summary["fingerprint"].nunique() > 1
    fig = Figure(figsize=(9, 0.45 * len(s) + 1.8), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(s))
    ax.barh(y, s["speedup"], color=[colors[n] for n in s["winner"]])
    ax.axvline(1.0, color=VENDOR, ls="--", lw=1.2)
    ax.set_yticks(y, [_panel_title(r, many) for _, r in s.iterrows()])
    for yi, (_, r) in enumerate(s.iterrows()):
        ax.text(
            r["speedup"],
            yi,
            f" {r['speedup']:.2f}×  {r['winner']} "
            f"({_fmt_ms(r['winner_ms'])} vs {r['vendor']} {_fmt_ms(r['vendor_ms'])}"
            f"{'' if r['vendor_timing'] == SAME_ROUNDS else ', vendor from its sweep'})",
            va="center",
            fontsize=9,
        )
    low, high = s["speedup"].min(), s["speedup"].max()
    if high / low >= 10:  # one large ratio would flatten the others on a linear axis
        ax.set_xscale("log")
        ax.set_xlim(min(low, 1.0) / 1.5, high * 8)
        ax.xaxis.set_major_formatter(PLAIN)
    else:
        ax.set_xlim(0, high * 1.9)
    ax.set_xlabel("speed-up over vendor lane (×; dashed line = same speed)")
    missing = summary[summary["speedup"].isna()]["region"].tolist()
    if missing:
        ax.text(
            0.99,
            0.01,
            "vendor lane not measured: " + ", ".join(map(str, missing)),
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=8,
            color=VENDOR,
        )
    ax.set_title(title, fontsize=12, fontweight="bold")
    return fig


def _cache_bytes() -> int | None:
    """The largest CPU cache of the machine drawing the report (Linux), else None."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        with contextlib.suppress(ValueError):
            sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes) if sizes else None


def _ceiling(ceilings: pd.DataFrame, fingerprint: str, names: tuple[str, ...]) -> float | None:
    c = ceilings[(ceilings["fingerprint"] == fingerprint) & ceilings["name"].isin(names)]
    return float(c["value"].max()) if not c.empty else None


def roofline(
    summary: pd.DataFrame, ceilings: pd.DataFrame, *, reference: str | None = None
) -> Figure:
    """Each winner's achieved rate against this machine's measured roof.

    Left: FLOP/s against arithmetic intensity (regions with FLOPs); right: achieved GB/s of
    every region against the measured copy bandwidth. `reference` adds a named model's peaks
    (e.g. "gfx1151") as a dashed roof.
    """
    title = "Roofline position of each winner (closer to the line = nearer the hardware limit)"
    s = summary[summary["winner_ms"].notna()]
    if s.empty:
        return _empty(title, "no winners")
    fp = s["fingerprint"].value_counts().index[0]
    s = s[s["fingerprint"] == fp]
    env = s["environment"].iloc[0]
    gpu = (s["platform"] != "cpu").sum() > len(s) / 2  # the roof of most winners' platform
    bw_names = ("gpu_copy_bandwidth",) if gpu else (BANDWIDTH,)
    mm_names = ("gpu_matmul_f32",) if gpu else (MATMUL,)
    bw = _ceiling(ceilings, fp, bw_names)
    mm = _ceiling(ceilings, fp, mm_names)
    ref = REFERENCE_MODELS[reference] if reference else None

    fig = Figure(figsize=(16, 5.6), layout="constrained")
    ax, bx = fig.subplots(1, 2, width_ratios=[1.5, 1])
    fig.suptitle(f"{title}\n{env}", fontsize=13, fontweight="bold")
    colors = lane_colors(summary["winner"].dropna())

    f = s[s["flops"] > 0]
    ai = f["flops"] / f["bytes"]
    lo = max(min(ai.min() / 4, 0.1), 1e-3) if len(f) else 0.1
    hi = max(ai.max() * 4, 100) if len(f) else 100
    rates = [
        r
        for r in [
            mm,
            *(_ceiling(ceilings, fp, (f"gpu_matmul_{p}",)) for p in set(s["precision"].dropna())),
        ]
        if r
    ]
    if bw and rates:
        hi = max(hi, 3 * max(rates) / bw)  # show where the roof turns flat
    if ref:
        hi = max(hi, 3 * max(ref.flops.values()) / ref.bandwidth)
    x = np.logspace(np.log10(lo), np.log10(hi), 200)

    def roof(axis: Axes, bw_: float, mm_: float, style: str, label: str) -> None:
        axis.plot(x, np.minimum(mm_, bw_ * x) / 1e9, style, color="black", lw=1.5, label=label)

    if bw and mm:
        roof(
            ax,
            bw,
            mm,
            "-",
            f"measured roof: copy {bw / 1e9:.0f} GB/s, library matmul {mm / 1e9:.0f} GFLOP/s",
        )
    low = sorted(set(s["precision"].dropna()) - {"f32", "tf32"})  # f16/bf16 winners
    for p in low:
        rate = _ceiling(ceilings, fp, (f"gpu_matmul_{p}",))
        if bw and rate:
            roof(ax, bw, rate, ":", f"measured {p} matmul {rate / 1e9:.0f} GFLOP/s")
    if ref:
        roof(
            ax,
            ref.bandwidth,
            ref.matmul,
            "--",
            f"{ref.name} peak: {ref.bandwidth / 1e9:.0f} GB/s, {ref.matmul / 1e12:.1f} TFLOP/s f32",
        )
        for p in low:
            if p in ref.flops:
                roof(
                    ax,
                    ref.bandwidth,
                    ref.flops[p],
                    "-.",
                    f"{ref.name} peak {p}: {ref.flops[p] / 1e12:.1f} TFLOP/s",
                )
    markers = "osD^vP*Xhp<>"
    for i, ((_, r), a) in enumerate(zip(f.iterrows(), ai)):
        ax.scatter(
            a,
            r["gflops"],
            s=70,
            marker=markers[i % len(markers)],
            color=PALETTE[i % len(PALETTE)],
            edgecolor="black",
            zorder=5,
            label=f"{r['region']} ({r['winner']}, {r['gflops']:.3g} GFLOP/s)",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum traffic)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title("compute: each winner with a matmul vs the roof", fontsize=11)
    if not (bw and mm) and not ref:
        ax.text(
            0.5,
            0.5,
            "no ceilings measured for this environment",
            transform=ax.transAxes,
            ha="center",
            color=BUDGET,
        )
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)

    b = s.sort_values("gbytes_s")
    y = np.arange(len(b))
    cache = _cache_bytes()
    # a working set that fits in the cache is not served by DRAM: its rate may pass the roof
    resident = [(cache is not None and p == "cpu" and n <= cache)
                or (bw is not None and g > bw / 1e9)
                for p, n, g in zip(b["platform"], b["bytes"], b["gbytes_s"])]
    bx.barh(y, b["gbytes_s"], color=[colors[n] for n in b["winner"]],
            hatch=["//" if r else "" for r in resident], edgecolor="white")
    bx.set_yticks(y, b["region"])
    top = b["gbytes_s"].max()
    if bw:
        bx.axvline(bw / 1e9, color="black", lw=1.5)
        bx.text(
            bw / 1e9,
            -0.9,
            f"measured copy bandwidth {bw / 1e9:.0f} GB/s ",
            fontsize=8,
            va="center",
            ha="right",
        )
        bx.set_ylim(-1.3, len(b) - 0.4)
        top = max(top, bw / 1e9)
        for yi, g, r in zip(y, b["gbytes_s"], resident):
            note = ", cache-resident" if r else ""
            bx.text(g, yi, f" {g:.1f} ({100 * g / (bw / 1e9):.0f}%{note})", va="center",
                    fontsize=8)
    bx.set_xlim(0, top * 1.45)
    label = "achieved GB/s (inputs read once + output written once)"
    if any(resident):
        label += ("\nhatched: the working set fits in the cache"
                  + (f" ({cache / 2**20:g} MiB here)" if cache else "") + ": not a DRAM rate")
    bx.set_xlabel(label)
    bx.set_title("memory: achieved bandwidth of every winner", fontsize=11)
    return fig

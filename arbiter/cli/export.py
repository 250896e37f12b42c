"""`arbiter export`: the records out of Arbiter.

Without a target, a table of the records (`--what trials|winners`, the report's pandas frames)
written as CSV, Parquet or JSON. `arbiter export optuna` writes the searches as Optuna studies
in the same database, one per region and environment, for `optuna-dashboard`: each candidate
built and run, with its params, its latency in ms as the value and the accuracy constraint.
Studies written before get only what they lack. (Optuna's storage takes milliseconds a trial:
a sweep leaves this to the user who wants the dashboard.)"""

from __future__ import annotations

import argparse
import hashlib
import json
from typing import Any

from ..settings import settings

FORMATS = ("csv", "parquet", "json")
TABLES = ("winners", "trials")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", choices=["optuna"],
                   help="optuna: the searches as Optuna studies in the same database, for "
                   "optuna-dashboard; without it, a table of the records")
    p.add_argument("--what", choices=TABLES, default="winners",
                   help="winners: one row per declared winner (default); trials: one row per "
                   "measurement (sweep, final re-timing, verification)")
    p.add_argument("--format", choices=FORMATS, default="csv", help="default csv")
    p.add_argument("--out", metavar="FILE", help="write here (default: standard output; "
                   "parquet needs a file)")
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")


def main(args: argparse.Namespace) -> int:
    from .._errors import masked_url

    url = args.db or settings().db
    if args.target is None:
        write_table(table(url, args.what), args.format, args.out)
        return 0
    names = export_optuna(url)
    shown = masked_url(url)
    print(f"{shown}: {len(names)} Optuna studies written (optuna-dashboard {shown})")
    return 0


def table(url: str, what: str) -> Any:
    """The records as a pandas frame: `winners` or every measurement (`trials`)."""
    from ..report import open_records, trials, winners

    open_records(url)
    return winners(url) if what == "winners" else trials(url, measurements=None)


def write_table(frame: Any, fmt: str, out: str | None) -> None:
    """CSV, Parquet or JSON (a list of rows, each with the `schema` key every `--json` row
    carries) to `out`, or to standard output."""
    import sys

    from .._atomic import whole_file
    from .._errors import ArbiterError
    from ._table import json_text

    if fmt == "parquet" and out is None:
        raise ArbiterError("--format parquet writes a file: give --out FILE")
    text = None if fmt != "json" else json_text(json.loads(frame.to_json(
        orient="records", date_format="iso"))) + "\n"
    try:
        if out is None:
            if text is None:
                frame.to_csv(sys.stdout, index=False)
            else:
                sys.stdout.write(text)
            return
        with whole_file(out, "wb" if fmt == "parquet" else "w") as f:
            if fmt == "parquet":
                frame.to_parquet(f, index=False)
            elif text is None:
                frame.to_csv(f, index=False)
            else:
                f.write(text)
    except ImportError as e:
        raise ArbiterError(f"--format parquet needs pyarrow (pip install pyarrow): {e}") from e
    except OSError as e:
        raise ArbiterError(f"cannot write {out}: {e.strerror or e}") from e


def export_optuna(url: str) -> list[str]:
    """Write the studies; their names."""
    from ..lane import get_lane, lane_names
    from ..search import plan
    from ._swept import swept

    installed = set(lane_names())
    names = []
    for sweep, results in swept(url):
        lanes = [get_lane(n) for n in sorted({r.lane for r in results}) if n in installed]
        p = plan(sweep.region, lanes, results, len(results))
        names.append(_name(sweep.region, sweep.fingerprint, json.loads(sweep.details), p))
        _write(url, names[-1], p, sweep.budget)
    return names


def _name(region: Any, fingerprint: str, details: dict[str, Any], p: Any) -> str:
    """Readable, region name first and the machine in words, and one per set of lanes and
    choices (a study's distributions never change under one name); the hashes come last."""
    lanes = ";".join(f"{n}@{p.lanes[n].version}:" + ",".join(
        f"{t.name}={t.choices!r}" for t in p.spaces[n].tunables) for n in sorted(p.lanes))
    tag = hashlib.sha256(lanes.encode()).hexdigest()[:8]
    gpus = [g for names in (details.get("gpu") or {}).values() for g in names]
    machine = ", ".join(gpus) if gpus else (
        f"{details.get('cpu') or 'cpu'} ({details.get('usable_cpus', '?')} cpus)")
    shape = "" if region.label == region.describe() else f" {region.describe()}"
    return (f"{region.label}{shape} on {machine} "
            f"[region {region.key[:8]}, env {fingerprint[:8]}, lanes {tag}]")


def _write(url: str, name: str, p: Any, budget: float) -> None:
    """Add to the study `name` every recorded candidate it lacks (configs the lanes' rules
    refused, never built, left out). The records are committed already: a failure here loses
    none of them."""
    import optuna

    from .._errors import StoreError, one_line
    from ..lane import Status
    from ..records import BUSY_TIMEOUT_MS, sqlite_path
    from ..search import frozen_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    waits = {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1e3}} if sqlite_path(url) else {}
    try:
        storage = optuna.storages.RDBStorage(url, engine_kwargs=waits)
        study = optuna.create_study(storage=storage, study_name=name, load_if_exists=True,
                                    direction="minimize")
        have = {t.user_attrs.get("candidate") for t in study.get_trials(deepcopy=False)}
        missing = [t for r in p.measured.values()
                   if r.candidate_id not in have and r.status is not Status.INVALID
                   and (t := frozen_trial(p, r, budget)) is not None]
        study.add_trials(missing)
    except Exception as e:  # noqa: BLE001  Optuna's own tables, in the records' database
        raise StoreError(f"database {url}: optuna's study tables: {one_line(str(e))}") from e

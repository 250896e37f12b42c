"""`arbiter export optuna`: the records' searches as Optuna studies in the same database, one
per region and environment, for `optuna-dashboard`: each candidate built and run, with its
params, its latency in ms as the value and the accuracy constraint. Studies written before get
only what they lack. (Optuna's storage takes milliseconds a trial: a sweep leaves this to the
user who wants the dashboard.)"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

from ..settings import settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["optuna"],
                   help="optuna: the searches as Optuna studies in the same database, for "
                   "optuna-dashboard")
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")


def main(args: argparse.Namespace) -> int:
    url = args.db or settings().db
    names = export_optuna(url)
    print(f"{url}: {len(names)} Optuna studies written (optuna-dashboard {url})")
    return 0


def export_optuna(url: str) -> list[str]:
    """Write the studies; their names."""
    from sqlalchemy import select

    from ..check import budget_of
    from ..lane import get_lane, lane_names
    from ..records import CandidateModel, EnvironmentModel, Records, RegionModel, session_scope
    from ..region import region_from_canonical
    from ..search import plan

    records = Records(url, create=False)
    with session_scope(url) as s:
        swept = s.execute(select(RegionModel.id, RegionModel.name, RegionModel.canonical,
                                 EnvironmentModel.id, EnvironmentModel.fingerprint)
                          .join(CandidateModel, CandidateModel.region_id == RegionModel.id)
                          .join(EnvironmentModel,
                                EnvironmentModel.id == CandidateModel.environment_id)
                          .distinct().order_by(RegionModel.id, EnvironmentModel.id)).all()
    installed = set(lane_names())
    names = []
    for region_id, name, canonical, env_id, fp in swept:
        region = region_from_canonical(canonical).with_name(name)
        results = records.results(region_id, env_id)
        lanes = [get_lane(n) for n in sorted({r.lane for r in results}) if n in installed]
        declared = records.winners(region_id, env_id)
        budget = declared[-1]["budget"] if declared else budget_of(region)
        p = plan(region, lanes, results, len(results))
        names.append(_name(region, fp, p))
        _write(url, names[-1], p, budget)
    return names


def _name(region: Any, fingerprint: str, p: Any) -> str:
    """Readable, and one per set of lanes and choices (a study's distributions never change
    under one name)."""
    lanes = ";".join(f"{n}@{p.lanes[n].version}:" + ",".join(
        f"{t.name}={t.choices!r}" for t in p.spaces[n].tunables) for n in sorted(p.lanes))
    tag = hashlib.sha256(lanes.encode()).hexdigest()[:8]
    return f"{region.label} [{region.key[:8]}] env {fingerprint[:8]} lanes {tag}"


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

"""Lanes are found through the `arbiter.lanes` entry-point group and imported on first use."""

from __future__ import annotations

import importlib
from functools import cache, lru_cache

from ._errors import LaneError
from ._lane import Lane
from ._settings import settings

__all__ = ["get_lane", "lane_names", "all_lanes"]

GROUP = "arbiter.lanes"

# the lanes' entry points, found once per process (installs need a new process), or told:
# a trial worker takes its parent's table instead of a scan
_TABLE: list[tuple[tuple[str, str], ...]] = []


def _installed() -> tuple[tuple[str, str], ...]:
    # scanning every installed distribution's metadata costs ~10-30 ms (importing the scanner
    # as much again); the trial worker looks a lane up per request
    if not _TABLE:
        from importlib.metadata import entry_points

        _TABLE.append(tuple((ep.name, ep.value) for ep in entry_points(group=GROUP)))
    return _TABLE[0]


def installed_table() -> tuple[tuple[str, str], ...] | None:
    """The entry points found, if this process has looked (a trial worker's parent has)."""
    return _TABLE[0] if _TABLE else None


def adopt_table(table: tuple[tuple[str, str], ...]) -> None:
    """Take the parent's entry points (same interpreter, same environment) instead of a
    scan: the trial worker's first compile waits for its first lane lookup."""
    if not _TABLE:
        _TABLE.append(tuple((str(n), str(t)) for n, t in table))


def _targets() -> dict[str, str]:
    """name -> "module:attr", from entry points plus ARBITER_EXTRA_LANES (test-only lanes).
    The returned dict is shared: read it, never change it."""
    return _targets_with(settings().extra_lanes)


@lru_cache(maxsize=8)
def _targets_with(extra: str) -> dict[str, str]:
    # made once per setting: the worker looks lanes up several times a check
    found = dict(_installed())
    for item in filter(None, (s.strip() for s in extra.split(","))):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise LaneError(f"ARBITER_EXTRA_LANES: expected name=module:attr, got {item!r}")
        found[name.strip()] = target.strip()
    return found


def lane_names() -> list[str]:
    return sorted(_targets())


@cache
def _load(target: str) -> Lane:
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def get_lane(name: str) -> Lane:
    targets = _targets()
    if name not in targets:
        known = ", ".join(sorted(targets)) or "none installed"
        raise LaneError(f"unknown lane {name!r} (known: {known})")
    return _load(targets[name])


def all_lanes(names: list[str] | None = None) -> list[Lane]:
    return [get_lane(n) for n in (names if names is not None else lane_names())]

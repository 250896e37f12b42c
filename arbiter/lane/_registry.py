"""Lanes are found through the `arbiter.lanes` entry-point group (plus `ARBITER_EXTRA_LANES`)
and imported on first use."""

from __future__ import annotations

import importlib
from functools import cache

from .._errors import LaneError
from ..settings import settings
from ._protocol import Lane

__all__ = ["all_lanes", "get_lane", "lane_names"]

GROUP = "arbiter.lanes"


@cache
def _installed() -> tuple[tuple[str, str], ...]:
    from importlib.metadata import entry_points

    return tuple((ep.name, ep.value) for ep in entry_points(group=GROUP))


def _targets() -> dict[str, str]:
    """name -> "module:attr", from entry points plus ARBITER_EXTRA_LANES (lanes registered
    without installing a package: tests, a plug-in under development)."""
    found = dict(_installed())
    for item in filter(None, (s.strip() for s in settings().extra_lanes.split(","))):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise LaneError(f"ARBITER_EXTRA_LANES: expected name=module:attr, got {item!r}")
        found[name.strip()] = target.strip()
    return found


def lane_names() -> list[str]:
    return sorted(_targets())


@cache
def _load(target: str) -> object:
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def get_lane(name: str) -> Lane:
    targets = _targets()
    if name not in targets:
        known = ", ".join(sorted(targets)) or "none installed"
        raise LaneError(f"unknown lane {name!r} (known: {known})")
    try:
        lane = _load(targets[name])
    except Exception as e:  # noqa: BLE001  a plug-in's import: its error, in one line
        raise LaneError(f"lane {name!r} ({targets[name]}) failed to load: "
                        f"{type(e).__name__}: {e}") from None
    if not isinstance(lane, Lane):
        raise LaneError(f"lane {name!r} ({targets[name]}) is not a lane: it lacks what "
                        "arbiter.lane.Lane requires")
    return lane


def all_lanes(names: list[str] | None = None) -> list[Lane]:
    return [get_lane(n) for n in (names if names is not None else lane_names())]

"""Which candidate next: the plan from the records, then defaults, enumeration or Optuna's
samplers."""

from __future__ import annotations

from ._plan import Plan, plan
from ._replay import Replay, recorded_space, replay
from ._restrict import Restriction, coerce, split_item
from ._samplers import DEFAULT_SAMPLER, SAMPLERS, check_sampler, make_sampler
from ._study import Proposal, Search, frozen_trial

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "Plan", "Proposal", "Replay", "Restriction", "Search",
           "check_sampler", "coerce", "frozen_trial", "make_sampler", "plan", "recorded_space",
           "replay", "split_item"]

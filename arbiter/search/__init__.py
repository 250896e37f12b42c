"""Which candidate next: the plan from the records, then defaults, enumeration or Optuna's
samplers."""

from __future__ import annotations

from ._plan import Plan, plan
from ._samplers import DEFAULT_SAMPLER, SAMPLERS, check_sampler, make_sampler
from ._study import Proposal, Search, mirror, study_name

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "Plan", "Proposal", "Search", "check_sampler",
           "make_sampler", "mirror", "plan", "study_name"]

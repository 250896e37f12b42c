"""The values a lane speaks in: frozen, picklable dataclasses that cross process boundaries."""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

__all__ = ["ENUMERABLE", "Artifact", "Availability", "Config", "KernelSource", "Platform", "Rule",
           "Space", "Status", "Tunable"]


class Platform(str, enum.Enum):
    CPU = "cpu"
    ROCM = "rocm"
    CUDA = "cuda"


class Status(str, enum.Enum):
    """What became of one candidate. Only `OK` may win."""

    OK = "ok"
    INVALID = "invalid"  # config breaks a constraint of the lane's space, or emit refused
    COMPILE_FAILED = "compile_failed"
    LAUNCH_FAILED = "launch_failed"  # the runner reported an error (bad launch, API error)
    CRASHED = "crashed"  # the worker process died (segfault, abort)
    TIMEOUT = "timeout"  # the worker did not finish in time (hang)
    NAN = "nan"  # output holds NaN or Inf
    UNTOUCHED = "untouched"  # some output element still holds the poison pattern
    WRONG_RESULT = "wrong_result"  # finite, fully written, but over the accuracy budget
    INPUTS_CHANGED = "inputs_changed"  # it wrote into its input arrays (judged on fresh ones)
    OUT_OF_MEMORY = "out_of_memory"  # the worker's memory passed its limit (killed)


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Config:
    """A lane's tunable values, as sorted (name, value) pairs so it hashes and pickles."""

    items: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, values: Mapping[str, Any] | None = None, **kw: Any) -> Config:
        merged = dict(values or {}, **kw)
        return cls(tuple(sorted(merged.items())))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.items)

    def __getitem__(self, name: str) -> Any:
        return self.as_dict()[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.as_dict().get(name, default)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    @cached_property
    def key(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.items) or "(default)"


@dataclass(frozen=True)
class Tunable:
    """One searchable knob: a finite ordered set of choices and the default among them."""

    name: str
    choices: tuple[Any, ...]
    default: Any

    def __post_init__(self) -> None:
        if self.default not in self.choices:
            raise ValueError(f"tunable {self.name}: default {self.default!r} not in choices")


@dataclass(frozen=True)
class Rule:
    """A stated constraint between tunables; `check(values)` is True for a valid combination."""

    text: str
    check: Callable[[Mapping[str, Any]], bool]


ENUMERABLE = 50_000  # larger spaces (counted without their rules) are sampled only, never listed


@dataclass(frozen=True)
class Space:
    """A lane's tunables for one region, plus the rules that combinations must satisfy."""

    tunables: tuple[Tunable, ...] = ()
    rules: tuple[Rule, ...] = ()

    @property
    def default(self) -> Config:
        return Config.of({t.name: t.default for t in self.tunables})

    def violation(self, config: Config) -> str | None:
        """The first broken rule's text, an unknown or out-of-range value, or None."""
        values = config.as_dict()
        known = {t.name: t for t in self.tunables}
        for name, value in values.items():
            if name not in known:
                return f"unknown tunable {name!r} (known: {', '.join(known) or 'none'})"
            if value not in known[name].choices:
                return f"{name}={value!r} not among {list(known[name].choices)}"
        missing = [n for n in known if n not in values]
        if missing:
            return f"missing tunables: {', '.join(missing)}"
        for rule in self.rules:
            if not rule.check(values):
                return rule.text
        return None

    def configs(self) -> Iterator[Config]:
        """Every valid combination, in a stable order."""
        names = [t.name for t in self.tunables]
        for combo in itertools.product(*(t.choices for t in self.tunables)):
            cfg = Config.of(dict(zip(names, combo)))
            if self.violation(cfg) is None:
                yield cfg

    def size(self) -> int:
        return sum(1 for _ in self.configs())

    def combinations(self) -> int:
        """Its tunables' choices combined, rules not applied (nothing walked)."""
        return math.prod(len(t.choices) for t in self.tunables)

    def complete(self, partial: Mapping[str, Any]) -> Config:
        """Fill unnamed tunables with defaults (for `--config k=v` on the command line)."""
        values = {t.name: t.default for t in self.tunables}
        values.update(partial)
        return Config.of(values)


@dataclass(frozen=True)
class KernelSource:
    """Generated code for one (region, config), with the flags its build must use."""

    lane: str
    region_key: str
    config: Config
    language: str  # "c", "hip", "python"
    text: str
    options: tuple[str, ...] = ()  # lane-chosen compiler flags, never user strings
    entry: str = "arbiter_run"


@dataclass(frozen=True)
class Artifact:
    """A built candidate: `path` to a loadable library (None for in-process vendor lanes)."""

    lane: str
    key: str
    source: KernelSource
    path: str | None = None
    compile_seconds: float = 0.0
    cached: bool = False
    log: str = ""
    # what the build uses on its target (registers, LDS, scratch, waves per SIMD), where the
    # lane can read it from the binary: JSON-ready, recorded with the candidate
    resources: dict[str, Any] | None = field(default=None, compare=False)

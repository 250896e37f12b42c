"""How far a `tune` is, on stderr: a tqdm bar on a terminal; elsewhere (a CI log, a pipe) a
line every `every` trials and one when a region is done, so a log is never silent for long.

The total counts the candidates the plans say will be measured. A config the lanes' rules
refuse is recorded but never built, so it does not count (the plan does not count it either);
a region that runs out of candidates before its plan gives its unused share back."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from .lane import Status

__all__ = ["EVERY", "Progress"]

EVERY = 10  # trials between two lines when stderr is not a terminal


class Progress:
    def __init__(self, planned: list[int], shown: bool, *, every: int = EVERY,
                 stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.planned, self.every = planned, every
        self.lines = shown and not self.stream.isatty()
        self.index, self.name, self.counted = -1, "", 0
        self.bar: Any = None

        if shown and not self.lines:
            from tqdm import tqdm

            self.bar = tqdm(total=sum(planned), unit="trial", file=self.stream, leave=False)

    def region(self, name: str) -> None:
        """The next region of the plan starts."""
        self.index, self.name, self.counted = self.index + 1, name, 0
        if self.bar is not None:
            self.bar.set_description(name)

    def trial(self, r: Any) -> None:
        if r.status is Status.INVALID:
            return
        self.counted += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.lines and self.counted % self.every == 0:
            self._say(f"{self.counted}/{self.planned[self.index]} trials")

    def region_done(self, row: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.total += self.counted - self.planned[self.index]
            self.bar.refresh()
        elif self.lines:
            won = (f"{row['lane']} {row['latency_ms']:.4g} ms" if row.get("lane")
                   and row.get("latency_ms") is not None else row.get("lane") or "no winner")
            self._say(f"done, {self.counted} new trials, {won} ({row['status']})")

    def _say(self, text: str) -> None:
        print(f"arbiter: [{self.index + 1}/{len(self.planned)}] {self.name}: {text}",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

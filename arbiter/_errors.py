"""One exception root for everything Arbiter raises on purpose.

A failed *candidate* (compile error, crash, wrong result) is never an exception: it is a
`Status` recorded in a `Measurement`. These classes are for user mistakes (bad spec, bad input,
unknown lane) and for a lane refusing a request it cannot honour.
"""

from __future__ import annotations

import re

__all__ = ["ArbiterError", "BuildError", "EmitError", "InputError", "LaneError", "RegionError",
           "SpecError", "StoreError", "one_line"]


class ArbiterError(Exception):
    """Root of every error Arbiter raises deliberately; the CLI prints it as one line."""


class RegionError(ArbiterError, ValueError):
    """A region is malformed (unknown op, two biases, non-positive dimension...)."""


class SpecError(ArbiterError, ValueError):
    """A spec file cannot be read; the message names file, region and field."""


class InputError(ArbiterError, ValueError):
    """Arrays handed to a runner do not match the region (shape, dtype, missing buffer)."""


class LaneError(ArbiterError, LookupError):
    """Unknown lane name, or a lane that is not available / does not apply."""


class EmitError(ArbiterError):
    """A lane cannot generate code for this (region, config)."""


class BuildError(ArbiterError):
    """The compiler failed; `log` holds its output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class StoreError(ArbiterError):
    """The record store failed or is at a schema the code does not understand."""


def one_line(text: str) -> str:
    """An error as one line: a driver's message may span several (psycopg's hint, SQLAlchemy's
    "Background on this error" link), and a database URL's password is not shown."""
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.strip().startswith("(Background on this error")]
    return re.sub(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@", r"\1***@", " ".join(lines))

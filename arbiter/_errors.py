"""One exception root for everything Arbiter raises on purpose.

A failed *candidate* (compile error, crash, wrong result) is never an exception: it is a
`Status` recorded in a `Measurement`. These classes are for user mistakes (bad spec, bad input,
unknown lane) and for a lane refusing a request it cannot honour.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["ArbiterError", "BuildError", "CacheError", "EmitError", "InputError", "LaneError",
           "RegionError", "SpecError", "StoreError", "masked_url", "one_line"]


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


class CacheError(ArbiterError):
    """The build cache cannot be trusted: another user's, or writable by others."""


# SQLAlchemy reads a URL's password as far as the first "@" (spaces and "/" included; one
# meant to hold an unencoded "@" is masked to the last); a credential can also come as a query
# parameter (`?password=`, psycopg's `sslpassword=`, a libpq conninfo in `dbname=`...)
_USERINFO = re.compile(r"^([A-Za-z][\w+.-]*://[^:/@]*:).*@")
_USERINFO_IN_TEXT = re.compile(r"(\b[A-Za-z][\w+.-]*://[^:/@\s]*:)(?:(?!://|: )[^@\n'\"])*@")
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|credential", re.IGNORECASE)
_SECRET_PAIR = re.compile(r"\b([\w.-]*(?:pass|pwd|secret|token|credential)[\w.-]*)"
                          r"(\s*=\s*)(?!\*\*\*)('[^']*'|[^\s&'\",;)]*)", re.IGNORECASE)
SHOWN_SECRET = "***"
_LONG_ENOUGH = 4  # a shorter secret is masked where it stands in its URL only


def _holds_secret(name: str, value: str) -> bool:
    """Does the query parameter `name=value` carry a credential?"""
    if _SECRET_NAME.search(urllib.parse.unquote_plus(name)):
        return True
    text = urllib.parse.unquote_plus(value)
    return bool(_SECRET_PAIR.search(text) or _USERINFO_IN_TEXT.search(text))


def masked_url(url: str) -> str:
    """A database URL as it may be shown: its password, and every query parameter that
    carries a credential, as ***; the rest as given."""
    out = _USERINFO.sub(rf"\1{SHOWN_SECRET}@", url, count=1)
    head, sep, query = out.partition("?")
    if not sep:
        return out
    pairs = []
    for pair in query.split("&"):
        name, eq, value = pair.partition("=")
        pairs.append(f"{name}={SHOWN_SECRET}" if eq and _holds_secret(name, value) else pair)
    return head + sep + "&".join(pairs)


def _masked_pair(m: re.Match[str]) -> str:
    return f"{m.group(1)}{m.group(2)}{SHOWN_SECRET}"


def _secrets(url: str) -> list[str]:
    """The credentials written in `url`, as they are written there."""
    found = []
    m = _USERINFO.match(url)
    if m:
        found.append(url[len(m.group(1)):m.end() - 1])
    for pair in url.partition("?")[2].split("&"):
        name, eq, value = pair.partition("=")
        if eq and value and _holds_secret(name, value):
            found.append(value)
    return found


def one_line(text: str, *urls: str | None) -> str:
    """An error as one line: a driver's message may span several (psycopg's hint, SQLAlchemy's
    "Background on this error" link), and no credential is shown: not the password of a URL
    in it, not a `password=` pair, and nowhere the credentials of `urls` (the databases the
    command was given), however the message quotes them."""
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.strip().startswith("(Background on this error")]
    out = " ".join(lines)
    for url in urls:
        if not url:
            continue
        out = out.replace(url, masked_url(url))
        for secret in _secrets(url):
            for form in {secret, urllib.parse.unquote_plus(secret), urllib.parse.unquote(secret)}:
                if len(form) >= _LONG_ENOUGH:
                    out = out.replace(form, SHOWN_SECRET)
    out = _USERINFO_IN_TEXT.sub(rf"\1{SHOWN_SECRET}@", out)
    return _SECRET_PAIR.sub(_masked_pair, out)

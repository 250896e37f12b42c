"""Spec files: TOML with one [[region]] table per region. Errors name file, region, field."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .._errors import RegionError, SpecError
from ._region import AttentionRegion, FusedRegion, GatedRegion, Region, RowwiseRegion

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Spec", "load_spec", "parse_spec", "parse_table", "region_table"]

MAX_SPEC_BYTES = 16 << 20  # tens of thousands of regions
_STR, _INT, _BOOL = (str, "string"), (int, "integer"), (bool, "boolean")
_NUM, _OPS = ((int, float), "number"), (list, "list of op names")
SIZES = ("M", "N", "K", "batch", "heads", "seq_q", "seq_k", "head_dim")
_CAUSAL = ((bool, str), "true, false, \"top_left\" or \"bottom_right\"")
# field -> (accepted types, type name for messages); one table, shared by all kinds
_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "name": _STR, "kind": _STR, "shapes": _STR, "reduction": _STR, "prologue": _OPS,
    "epilogue": _OPS, "residual": _BOOL, "causal": _CAUSAL, "eps": _NUM, "scale": _NUM,
    "budget": _NUM, "dtype": _STR, "activation": _STR, "bias": _BOOL,
    **dict.fromkeys(SIZES, _INT),
}
_KINDS = {  # kind -> (class, required fields, optional fields)
    "fused": (FusedRegion, ("M", "N", "K"),
              ("prologue", "epilogue", "residual", "reduction", "eps")),
    "rowwise": (RowwiseRegion, ("M", "N"), ("epilogue", "residual", "reduction", "eps")),
    "gated": (GatedRegion, ("M", "N", "K"), ("activation", "bias")),
    "attention": (AttentionRegion, ("batch", "heads", "seq_q", "head_dim"),
                  ("seq_k", "causal", "scale")),
}


@dataclass(frozen=True)
class Spec:
    path: str
    regions: tuple[Region, ...]

    def __iter__(self) -> Iterator[Region]:
        return iter(self.regions)

    def names(self) -> list[str]:
        return [r.name for r in self.regions]

    def get(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise SpecError(f"{self.path}: no region named {name!r} (have: {', '.join(self.names())})")


def _region(path: str, index: int, table: object) -> Region:
    where = f"{path}: region #{index + 1}"
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table, got {type(table).__name__}")
    name = table.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"{where}: field 'name': required, a non-empty string")
    if not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise SpecError(
            f"{where}: field 'name': use letters, digits, '_', '-', '.' only ({name!r})"
        )
    where = f"{path}: region {name!r}"
    kind = table.get("kind", "fused")
    if kind not in _KINDS:
        raise SpecError(
            f"{where}: field 'kind': unknown kind {kind!r} (valid: {', '.join(_KINDS)})"
        )
    cls, required, optional = _KINDS[kind]
    allowed = {"name", "kind", "budget", "shapes", "dtype", *required, *optional}
    for key, value in table.items():
        if key not in allowed:
            raise SpecError(
                f"{where}: field {key!r}: not a field of a {kind} region "
                f"(valid: {', '.join(sorted(allowed))})"
            )
        types, tname = _TYPES[key]
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple)
                                                    else (types,)):
            raise SpecError(f"{where}: field {key!r}: expected {tname}, got boolean")
        if not isinstance(value, types):
            raise SpecError(f"{where}: field {key!r}: expected {tname}, got {type(value).__name__}")
    for key in required:
        if key not in table:
            raise SpecError(f"{where}: field {key!r}: required for a {kind} region")
    args = {k: v for k, v in table.items() if k not in ("kind", "shapes")}
    policy = table.get("shapes", "static")
    if policy not in ("static", "bucket"):
        raise SpecError(f"{where}: field 'shapes': 'static' (default) or 'bucket', got "
                        f"{policy!r}")
    if policy == "bucket":  # tuned and answered at the bucket's top: the next power of two
        for f in BUCKETED[kind]:
            if isinstance(args.get(f), int) and args[f] > 0:
                args[f] = 1 << (args[f] - 1).bit_length()
    try:
        return cls(**args)
    except RegionError as e:
        detail = str(e).removeprefix(f"{name}: ")
        raise SpecError(f"{where}: {detail}") from None


# the sizes a running model changes (tokens, batch, sequence): `shapes = "bucket"` rounds these
BUCKETED = {"fused": ("M",), "rowwise": ("M",), "gated": ("M",),
            "attention": ("batch", "seq_q", "seq_k")}
MAX_POINTS = 64  # regions one table with size ranges may expand into


def _expand(path: str, index: int, table: object) -> list[object]:
    """A table whose sizes are ranges (`M = [1, 8192]`) as one table per chosen point: the
    powers of two inside each range and its two ends, every combination, named
    `<name>-M64-N128`. Other tables as they are."""
    if not isinstance(table, dict):
        return [table]
    ranges = {k: v for k, v in table.items() if k in SIZES and isinstance(v, list)}
    if not ranges:
        return [table]
    name = table.get("name")
    where = f"{path}: region {name!r}" if isinstance(name, str) else f"{path}: region #{index + 1}"
    points: dict[str, list[int]] = {}
    for k, v in ranges.items():
        ok = (len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
              and 1 <= v[0] <= v[1])
        if not ok:
            raise SpecError(f"{where}: field {k!r}: a range is [low, high], two integers with "
                            f"1 <= low <= high, got {v!r}")
        lo, hi = v
        points[k] = sorted({lo, hi} | {1 << i for i in range(hi.bit_length() + 1)
                                       if lo <= 1 << i <= hi})
    combos = [dict(zip(points, c)) for c in itertools.product(*points.values())]
    if len(combos) > MAX_POINTS:
        raise SpecError(f"{where}: its ranges make {len(combos)} regions, more than "
                        f"{MAX_POINTS}: narrow them")
    return [{**table, **c, "name": f"{name}-" + "-".join(f"{k}{v}" for k, v in c.items())}
            for c in combos]


def parse_table(table: object, where: str = "<request>") -> Region:
    """One region from its spec table (a dict, as TOML or JSON gives it)."""
    return _region(where, 0, table)


def region_table(region: Region) -> dict:
    """The spec table that gives `region` back (name and budget included)."""
    table = {k: v for k, v in region.canonical().items() if v is not None}
    table["name"] = region.name
    if region.budget is not None:
        table["budget"] = region.budget
    return table


def parse_spec(text: str, path: str = "<spec>") -> Spec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    extra = [k for k in data if k != "region"]
    if extra:
        raise SpecError(f"{path}: unknown top-level key {extra[0]!r} (expected [[region]] tables)")
    tables = data.get("region")
    if not isinstance(tables, list) or not tables:
        raise SpecError(f"{path}: no [[region]] tables")
    regions: list[Region] = []
    seen: set[str] = set()
    expanded = [(i, e) for i, t in enumerate(tables) for e in _expand(path, i, t)]
    for i, t in expanded:
        r = _region(path, i, t)
        if r.name in seen:
            raise SpecError(f"{path}: region {r.name!r}: field 'name': duplicate name")
        seen.add(r.name)
        regions.append(r)
    return Spec(path, tuple(regions))


def load_spec(path: str | Path) -> Spec:
    p = Path(path)
    try:
        with open(p, "rb") as f:  # read so far and no further (`arbiter check /dev/zero`)
            data = f.read(MAX_SPEC_BYTES + 1)
        if len(data) > MAX_SPEC_BYTES:
            raise SpecError(f"{p}: larger than {MAX_SPEC_BYTES >> 20} MiB: not a spec file")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{p}: no such spec file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{p}: cannot read: {e}") from None
    return parse_spec(text, str(p))

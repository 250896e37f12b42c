"""The regions a compiler hands to Arbiter: frozen, picklable, validated at construction.

Identity (`key`) is a hash of the canonical form: kind, dimensions and ops. `name` and
`budget` are labels from the spec file and do not change the key, so the same region tuned
under two names shares its records.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TypeGuard, Union

from .._errors import RegionError
from ._dtype import DEFAULT_BUDGETS, DTYPES
from ._ops import Epilogue, Pointwise, Reduction, parse_op

__all__ = ["DEFAULT_BUDGET", "SHAPE_FIELDS", "AttentionRegion", "FusedRegion", "GatedRegion",
           "Region",
           "RowwiseRegion", "family_of", "input_shapes", "is_real", "output_shape",
           "region_from_canonical", "shape_distance", "shape_of"]

DEFAULT_BUDGET = DEFAULT_BUDGETS["f32"]
DEFAULT_EPS = 1e-5


def _positive_int(region: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RegionError(f"{region}: {name} must be a positive integer, got {value!r}")


def _ops(region: str, where: str, enum_type: type, values: object) -> tuple:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise RegionError(f"{region}: {where} must be a list of op names, got {values!r}")
    out = []
    for i, v in enumerate(values):
        try:
            out.append(parse_op(enum_type, v, f"{region}: {where}[{i}]"))
        except ValueError as e:
            raise RegionError(str(e)) from None
    return tuple(out)


def _reduction(region: str, value: object) -> Reduction | None:
    if value is None:
        return None
    try:
        return parse_op(Reduction, value, f"{region}: reduction")  # type: ignore[return-value]
    except ValueError as e:
        raise RegionError(str(e)) from None


def is_real(x: object) -> TypeGuard[int | float]:
    """An int or a float, not a bool (the bounds are each check's own)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_eps(region: str, eps: object) -> float:
    if not is_real(eps) or not (0 < eps < 1):
        raise RegionError(f"{region}: eps must be a number in (0, 1), got {eps!r}")
    return float(eps)


def _check_budget(region: str, budget: object) -> float | None:
    if budget is None:
        return None
    if not is_real(budget) or not 0 < budget < math.inf:  # (inf would pass anything)
        raise RegionError(f"{region}: budget must be a positive number, got {budget!r}")
    return float(budget)


def _check_dtype(region: str, dtype: object) -> None:
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise RegionError(f"{region}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def _chain(region: str, epilogue: tuple) -> None:
    if sum(op is Epilogue.BIAS for op in epilogue) > 1:
        raise RegionError(f"{region}: epilogue has more than one bias")


class _Keyed:
    """Shared identity behaviour; subclasses list their identity fields in `_IDENTITY`."""

    _KIND = ""
    _IDENTITY: tuple[str, ...] = ()
    dtype: str

    def canonical(self) -> dict:
        out: dict = {"kind": self._KIND}
        for name in self._IDENTITY:
            v = getattr(self, name)
            if isinstance(v, tuple):
                v = [x.value for x in v]
            elif hasattr(v, "value"):
                v = v.value
            out[name] = v
        if self.dtype != "f32":  # f32 regions keep the keys they had before dtypes
            out["dtype"] = self.dtype
        return out

    @functools.cached_property
    def key(self) -> str:
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def kind(self) -> str:
        return self._KIND

    @property
    def default_budget(self) -> float:
        return DEFAULT_BUDGETS[self.dtype]

    def _dtype_text(self) -> str:
        return "" if self.dtype == "f32" else f":{self.dtype}"

    @property
    def label(self) -> str:
        return self.name or self.describe()  # type: ignore[attr-defined]

    def with_name(self, name: str):
        return dataclasses.replace(self, name=name)  # type: ignore[type-var]


class _Chained(_Keyed):
    """Validation and queries shared by the regions that carry an epilogue chain."""

    epilogue: tuple[Epilogue, ...]
    residual: bool
    reduction: Reduction | None
    eps: float
    budget: float | None

    def _validate_chain(self, r: str) -> None:
        object.__setattr__(self, "epilogue", _ops(r, "epilogue", Epilogue, self.epilogue))
        _chain(r, self.epilogue)
        if not isinstance(self.residual, bool):
            raise RegionError(f"{r}: residual must be true or false, got {self.residual!r}")
        object.__setattr__(self, "reduction", _reduction(r, self.reduction))
        object.__setattr__(self, "eps", _check_eps(r, self.eps))
        object.__setattr__(self, "budget", _check_budget(r, self.budget))
        _check_dtype(r, self.dtype)

    @property
    def has_bias(self) -> bool:
        return Epilogue.BIAS in self.epilogue


def _chain_text(prologue: tuple, epilogue: tuple, residual: bool, reduction) -> str:
    parts = [f"pro:{op.value}" for op in prologue]
    parts += [op.value for op in epilogue]
    if residual:
        parts.append("residual")
    if reduction is not None:
        parts.append(reduction.value)
    return "+".join(parts)


@dataclass(frozen=True)
class FusedRegion(_Chained):
    """prologue(A)[M,K] @ B[K,N] -> epilogue chain -> (+ residual) -> (row reduction)."""

    M: int
    N: int
    K: int
    prologue: tuple[Pointwise, ...] = ()
    epilogue: tuple[Epilogue, ...] = ()
    residual: bool = False
    reduction: Reduction | None = None
    eps: float = DEFAULT_EPS
    dtype: str = "f32"
    name: str = field(default="", compare=False)
    budget: float | None = field(default=None, compare=False)

    _KIND = "fused"
    _IDENTITY = ("M", "N", "K", "prologue", "epilogue", "residual", "reduction", "eps")

    def __post_init__(self) -> None:
        r = self.name or "fused region"
        for d in ("M", "N", "K"):
            _positive_int(r, d, getattr(self, d))
        object.__setattr__(self, "prologue", _ops(r, "prologue", Pointwise, self.prologue))
        self._validate_chain(r)

    def describe(self) -> str:
        chain = _chain_text(self.prologue, self.epilogue, self.residual, self.reduction)
        return (f"mm{self.M}x{self.N}x{self.K}" + (f"+{chain}" if chain else "")
                + self._dtype_text())


@dataclass(frozen=True)
class RowwiseRegion(_Chained):
    """X[M,N] -> epilogue chain -> (+ residual) -> (row reduction); no matmul."""

    M: int
    N: int
    epilogue: tuple[Epilogue, ...] = ()
    residual: bool = False
    reduction: Reduction | None = None
    eps: float = DEFAULT_EPS
    dtype: str = "f32"
    name: str = field(default="", compare=False)
    budget: float | None = field(default=None, compare=False)

    _KIND = "rowwise"
    _IDENTITY = ("M", "N", "epilogue", "residual", "reduction", "eps")

    def __post_init__(self) -> None:
        r = self.name or "rowwise region"
        for d in ("M", "N"):
            _positive_int(r, d, getattr(self, d))
        self._validate_chain(r)
        if not self.epilogue and not self.residual and self.reduction is None:
            raise RegionError(f"{r}: a rowwise region needs at least one op")

    @property
    def prologue(self) -> tuple[Pointwise, ...]:
        return ()

    def describe(self) -> str:
        chain = _chain_text((), self.epilogue, self.residual, self.reduction)
        return f"row{self.M}x{self.N}+{chain}" + self._dtype_text()


@dataclass(frozen=True)
class GatedRegion(_Keyed):
    """act(A @ Wg [+ bias_g]) * (A @ Wu [+ bias_u]) for A[M,K], Wg/Wu[K,N]: the gated
    feed-forward of Llama-family models (SwiGLU with silu, GeGLU with gelu)."""

    M: int
    N: int
    K: int
    activation: Pointwise = Pointwise.SILU
    bias: bool = False
    dtype: str = "f32"
    name: str = field(default="", compare=False)
    budget: float | None = field(default=None, compare=False)

    _KIND = "gated"
    _IDENTITY = ("M", "N", "K", "activation", "bias")

    def __post_init__(self) -> None:
        r = self.name or "gated region"
        for d in ("M", "N", "K"):
            _positive_int(r, d, getattr(self, d))
        try:
            act = parse_op(Pointwise, self.activation, f"{r}: activation")
        except ValueError as e:
            raise RegionError(str(e)) from None
        object.__setattr__(self, "activation", act)
        if not isinstance(self.bias, bool):
            raise RegionError(f"{r}: bias must be true or false, got {self.bias!r}")
        object.__setattr__(self, "budget", _check_budget(r, self.budget))
        _check_dtype(r, self.dtype)

    def describe(self) -> str:
        return (f"gated{self.M}x{self.N}x{self.K}+{self.activation.value}"
                + ("+bias" if self.bias else "") + self._dtype_text())


@dataclass(frozen=True)
class AttentionRegion(_Keyed):
    """softmax(scale * Q K^T [+ causal mask]) V for q[b,h,sq,d], k/v[b,h,sk,d].

    Causal masking is bottom-right aligned: key j is visible to query i iff
    j <= i + seq_k - seq_q. A query row that sees no key (possible when seq_q > seq_k)
    outputs zeros.
    """

    batch: int
    heads: int
    seq_q: int
    head_dim: int
    seq_k: int = 0  # 0 means "same as seq_q"
    causal: bool | str = False  # True (= "bottom_right"), False or "top_left"
    scale: float = 0.0  # 0 means 1/sqrt(head_dim)
    dtype: str = "f32"
    name: str = field(default="", compare=False)
    budget: float | None = field(default=None, compare=False)

    _KIND = "attention"
    _IDENTITY = ("batch", "heads", "seq_q", "seq_k", "head_dim", "causal", "scale")

    def __post_init__(self) -> None:
        r = self.name or "attention region"
        if self.seq_k in (0, None):
            object.__setattr__(self, "seq_k", self.seq_q)
        for d in ("batch", "heads", "seq_q", "seq_k", "head_dim"):
            _positive_int(r, d, getattr(self, d))
        # true keeps its meaning (bottom-right, FlashAttention's), and its regions' keys
        if self.causal == "bottom_right":
            object.__setattr__(self, "causal", True)
        if not (isinstance(self.causal, bool) or self.causal == "top_left"):
            raise RegionError(f"{r}: causal must be true, false, \"bottom_right\" (as true) or "
                              f"\"top_left\", got {self.causal!r}")
        scale = self.scale
        if scale in (0, None):
            scale = 1.0 / math.sqrt(self.head_dim)
        if not is_real(scale) or not (math.isfinite(scale) and scale > 0):
            raise RegionError(f"{r}: scale must be a positive number, got {self.scale!r}")
        object.__setattr__(self, "scale", float(scale))
        object.__setattr__(self, "budget", _check_budget(r, self.budget))
        _check_dtype(r, self.dtype)

    @property
    def causal_offset(self) -> int | None:
        """Key j is visible to query i iff j <= i + this (None: not causal). Bottom-right
        (FlashAttention-2, and `causal = true`): seq_k - seq_q, the last query sees every key.
        Top-left (PyTorch's `is_causal`, the seed's): 0, query i sees keys 0..i."""
        if self.causal is False:
            return None
        return 0 if self.causal == "top_left" else self.seq_k - self.seq_q

    def describe(self) -> str:
        c = {False: "", True: "+causal", "top_left": "+causal_top_left"}[self.causal]
        return (f"attn{self.batch}x{self.heads}x{self.seq_q}x{self.seq_k}x{self.head_dim}{c}"
                + self._dtype_text())


Region = Union[FusedRegion, RowwiseRegion, GatedRegion, AttentionRegion]  # noqa: UP007


SHAPE_FIELDS = {"fused": ("M", "N", "K"), "rowwise": ("M", "N"), "gated": ("M", "N", "K"),
                "attention": ("batch", "heads", "seq_q", "seq_k", "head_dim")}


def shape_of(region: Region) -> dict[str, int]:
    """The region's sizes: what may differ between regions that share one op chain."""
    return {f: getattr(region, f) for f in SHAPE_FIELDS[region.kind]}


def family_of(region: Region) -> str:
    """What regions of one op chain share, shapes aside (an attention scale left at its
    default, 1/sqrt(head_dim), counts as the default at any head_dim)."""
    d = {k: v for k, v in region.canonical().items() if k not in SHAPE_FIELDS[region.kind]}
    if isinstance(region, AttentionRegion) and math.isclose(
            region.scale, 1.0 / math.sqrt(region.head_dim), rel_tol=1e-12):
        d["scale"] = "default"
    return json.dumps(d, sort_keys=True)


def shape_distance(a: Region, b: Region) -> float:
    """How far two regions' shapes are apart: the Euclidean distance of their sizes' log2
    (1.0: one size doubled or halved; infinite across op chains)."""
    if family_of(a) != family_of(b):
        return math.inf
    sa, sb = shape_of(a), shape_of(b)
    return math.sqrt(sum((math.log2(sa[f]) - math.log2(sb[f])) ** 2 for f in sa))


def input_shapes(region: Region) -> dict[str, tuple[int, ...]]:
    """Required arrays and their shapes, in the order runners pass them."""
    if isinstance(region, AttentionRegion):
        b, h = region.batch, region.heads
        return {"q": (b, h, region.seq_q, region.head_dim),
                "k": (b, h, region.seq_k, region.head_dim),
                "v": (b, h, region.seq_k, region.head_dim)}
    if isinstance(region, GatedRegion):
        m, n, k = region.M, region.N, region.K
        gated: dict[str, tuple[int, ...]] = {"A": (m, k), "Wg": (k, n), "Wu": (k, n)}
        return {**gated, "bias_g": (n,), "bias_u": (n,)} if region.bias else gated
    if isinstance(region, FusedRegion):
        shapes: dict[str, tuple[int, ...]] = {"A": (region.M, region.K), "B": (region.K, region.N)}
    elif isinstance(region, RowwiseRegion):
        shapes = {"X": (region.M, region.N)}
    else:
        raise TypeError(f"not a region: {region!r}")
    if region.has_bias:
        shapes["bias"] = (region.N,)
    if region.residual:
        shapes["residual"] = (region.M, region.N)
    return shapes


def output_shape(region: Region) -> tuple[int, ...]:
    if isinstance(region, AttentionRegion):
        return (region.batch, region.heads, region.seq_q, region.head_dim)
    return (region.M, region.N)


_KINDS: dict[str, type] = {"fused": FusedRegion, "rowwise": RowwiseRegion,
                           "gated": GatedRegion, "attention": AttentionRegion}


def region_from_canonical(canonical: str | dict) -> Region:
    """Rebuild a region from its canonical form (as stored in `regions.canonical`)."""
    d = dict(json.loads(canonical) if isinstance(canonical, str) else canonical)
    return _KINDS[d.pop("kind")](**d)

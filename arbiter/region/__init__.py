"""What is tuned: the ops, the region kinds, their storage dtypes and arrays, spec files."""

from __future__ import annotations

from ._dtype import DEFAULT_BUDGETS, DTYPES, numpy_dtype, storage_view
from ._ops import Epilogue, Pointwise, Reduction, parse_op
from ._region import (
    DEFAULT_BUDGET,
    SHAPE_FIELDS,
    AttentionRegion,
    FusedRegion,
    GatedRegion,
    Region,
    RowwiseRegion,
    family_of,
    input_shapes,
    is_real,
    output_shape,
    region_from_canonical,
    shape_distance,
    shape_of,
)
from ._spec import Spec, load_spec, parse_spec, parse_table, region_table

__all__ = [
    "DEFAULT_BUDGET", "DEFAULT_BUDGETS", "DTYPES", "SHAPE_FIELDS", "AttentionRegion", "Epilogue",
    "FusedRegion", "GatedRegion", "Pointwise", "Reduction", "Region", "RowwiseRegion", "Spec",
    "family_of", "input_shapes", "is_real", "load_spec", "numpy_dtype", "output_shape", "parse_op",
    "parse_spec", "parse_table", "region_from_canonical", "region_table", "shape_distance",
    "shape_of", "storage_view"
]

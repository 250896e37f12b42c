"""A package's names loaded on first use (a module `__getattr__`, PEP 562), so importing the
package stays cheap: `arbiter` keeps numpy out of the trial worker's first compile,
`arbiter.report` keeps pandas and matplotlib out of `arbiter --help`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["loader"]


def loader(package: str, names: Mapping[str, str],
           namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The package's `__getattr__`: `names` maps a public name to the private module (in
    `package`) that defines it; a name once loaded is kept in `namespace`."""

    def load(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return load

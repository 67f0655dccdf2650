"""Names a package offers without importing their modules until first use.

Names a package offers without importing their modules until first use (PEP 562): the one
``__getattr__`` the public packages share (``import trainperf`` loads no Lightning, Rich or
matplotlib; ``trainperf --help`` no matplotlib)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``exports[name]`` (a module) on first
    use of ``name`` and caches the value in the package's namespace."""
    namespace = vars(importlib.import_module(package))

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__

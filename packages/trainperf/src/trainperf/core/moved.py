"""Old import paths kept working for one release, with a deprecation warning.

Old import paths kept working for one release: a module that moved (or a name that was
renamed) leaves a shim whose attributes warn with a ``DeprecationWarning`` naming the new path.

A shim module is three lines::

    \"\"\"Moved to :mod:`trainperf.analysis.trials` (this path works until 0.3).\"\"\"
    from trainperf.core.moved import moved_module
    __getattr__ = moved_module(__name__, "trainperf.analysis.trials")

a renamed name inside a module that stays is ``renamed={"old": "new"}``, and names that moved out
of a module that stays to another are ``only={"Name", ...}`` (the stayed module's ``__getattr__``:
it binds none of them itself). The package's own code and tests import only the new paths (a test
imports every shim and checks the warning).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

#: The release from which the old paths stop working.
REMOVED_IN = "0.3"

#: Every shim made so far, old module -> new module (the test walks it).
SHIMS: dict[str, str] = {}
#: The names each shim renames, old module -> {old name: new name} (empty: same names).
RENAMED: dict[str, dict[str, str]] = {}
#: Modules that stay with some of their names moved away, old module -> those names.
MOVED_NAMES: dict[str, frozenset[str]] = {}


def moved_module(
    old: str,
    new: str,
    renamed: Mapping[str, str] | None = None,
    *,
    only: Collection[str] | None = None,
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` that returns ``new``'s attribute of the same name (or
    of the name ``renamed`` maps it to) with a ``DeprecationWarning``; with ``only``, ``old``
    stays and just those names moved to ``new``."""
    SHIMS[old] = new
    names = dict(renamed or {})
    RENAMED[old] = names
    if only is not None:
        MOVED_NAMES[old] = frozenset(only)

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if (new == old and name not in names) or (only is not None and name not in only):
            # a module that stays: a name it neither has nor renamed or moved is simply missing
            # (looking it up again would call this function without end)
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        return _served(old, new, name, names.get(name, name))

    return __getattr__


#: Every split module so far, old module -> the modules its names went to (the test walks it).
SPLITS: dict[str, tuple[str, ...]] = {}


def split_module(old: str, news: Sequence[str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old``, split into the modules ``news``: a name resolves to
    the first of them whose ``__all__`` holds it, with a ``DeprecationWarning`` naming it."""
    SPLITS[old] = tuple(news)

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for new in news:
            if name in getattr(importlib.import_module(new), "__all__", ()):
                return _served(old, new, name, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__


def _served(old: str, new: str, name: str, new_name: str) -> Any:
    """``new.new_name``, served for the old path ``old.name`` with a ``DeprecationWarning`` (an
    ``AttributeError`` naming the old path when ``new`` lacks it). Registers nothing: a lookup
    never changes :data:`SHIMS` or :data:`SPLITS`."""
    try:
        value = getattr(importlib.import_module(new), new_name)
    except AttributeError:
        raise AttributeError(f"module {old!r} has no attribute {name!r}") from None
    warnings.warn(
        f"{old}.{name} moved to {new}.{new_name}; the old path stops working in "
        f"trainperf {REMOVED_IN}",
        DeprecationWarning,
        stacklevel=3,
    )
    return value

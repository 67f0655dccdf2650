"""The private torch parts DataLoader worker timing relies on, checked at run time.

Checked instead of trusting a version list (the timing: :mod:`trainperf.probe.worker`).

Each :class:`Seam` names one private attribute, signature or behaviour and checks it in this
process, once (the first :func:`missing` call; :func:`recheck` runs them again). All present:
the loaders are instrumented and nothing is said. One missing: the caller turns worker timing
off and says which, in one line (:func:`describe`); phases, callbacks and hooks are measured
without it. A torch that passes every check is measured whatever its version: the newest torch
tried by hand is recorded in ``docs/development.md``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader


@dataclass(frozen=True, slots=True)
class Seam:
    """One thing the worker timing relies on beyond torch's public interface.

    Args:
        name: the attribute or signature, as a warning names it.
        check: ``None`` when it is there as relied on, else what was found instead.
    """

    name: str
    check: Callable[[], str | None]


def _private(module: str, name: str) -> Any:
    """``module.name``, or None where this torch has no such module or attribute."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _parameters(function: object) -> list[str] | None:
    try:
        return list(inspect.signature(function).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # not callable, or no signature (a C function)
        return None


def _wants(function: object, names: tuple[str, ...]) -> str | None:
    """None when ``function`` takes parameters ``names``, else what it takes."""
    if function is None:
        return "missing"
    params = _parameters(function)
    if params is None:
        return "no readable signature"
    absent = [name for name in names if name not in params]
    if absent:
        return f"no parameter {', '.join(absent)} (takes {', '.join(params)})"
    return None


def _base_iterator() -> str | None:
    cls = _private("torch.utils.data.dataloader", "_BaseDataLoaderIter")
    if not isinstance(cls, type):
        return "missing"
    absent = [name for name in ("__next__", "_reset") if not callable(getattr(cls, name, None))]
    return f"no {', '.join(absent)}" if absent else None


def _cached_iterator() -> str | None:
    loader: DataLoader[Any] = DataLoader([0])  # type: ignore[arg-type]  # a list is a dataset
    return None if "_iterator" in vars(loader) else "a new DataLoader has no _iterator"


def _late_collate() -> str | None:
    """Set ``collate_fn`` / ``worker_init_fn`` on a built loader, swap its class as
    ``InstrumentedLoader`` does, and take one batch in this process (no worker is started)."""
    seen: list[Any] = []

    def collate(items: list[Any]) -> str:
        seen.append(items)
        return "collated"

    # A private generator: a new iterator draws its base seed from the loader's generator, and
    # from torch's global one without it, which would shift every random number the user's
    # training draws afterwards (its augmentations, dropout, worker seeds).
    loader: DataLoader[Any] = DataLoader(
        [0, 1],  # type: ignore[arg-type]
        batch_size=2,
        generator=torch.Generator(),
    )
    try:
        loader.collate_fn = collate
        loader.worker_init_fn = None
        loader.__class__ = type("Probe", (type(loader),), {"__slots__": ()})
    except (TypeError, ValueError) as exc:  # DataLoader.__setattr__ refuses attributes it froze
        return f"refused: {exc}"
    batch = next(iter(loader))
    if batch != "collated" or seen != [[0, 1]]:
        return "the next iterator did not collate with the collate_fn set after construction"
    return None


def _worker_loop() -> str | None:
    """The loop's dataset parameter is not relied on (torch 2.15 passes it in a holder)."""
    loop = _private("torch.utils.data._utils.worker", "_worker_loop")
    return _wants(loop, ("collate_fn", "init_fn", "worker_id"))


def _fetcher() -> str | None:
    cls = _private("torch.utils.data._utils.fetch", "_MapDatasetFetcher")
    if not isinstance(cls, type):
        return "missing"
    if not callable(getattr(cls, "fetch", None)):
        return "no fetch"
    return _wants(cls, ("dataset", "collate_fn"))  # the signature of a class: its __init__'s


#: What worker timing relies on, in the order it is checked.
SEAMS: tuple[Seam, ...] = (
    # the timing iterator subclasses it, so Lightning still recognises a DataLoader iterator
    Seam("torch.utils.data.dataloader._BaseDataLoaderIter (__next__, _reset)", _base_iterator),
    # persistent workers' cached iterator, dropped so workers restart with the timed collate
    Seam("torch.utils.data.DataLoader._iterator", _cached_iterator),
    # the timed collate and worker init are set on the user's loader: its next iterator uses them
    Seam("DataLoader.collate_fn / worker_init_fn set after construction", _late_collate),
    # each worker runs the loader's worker_init_fn (timing on, dataset class swapped) and collates
    # with its collate_fn
    Seam(
        "torch.utils.data._utils.worker._worker_loop(collate_fn, init_fn, worker_id)", _worker_loop
    ),
    # the fetcher indexes the dataset object the worker holds (get_worker_info().dataset), whose
    # class is swapped to time __getitem__ / __getitems__
    Seam("torch.utils.data._utils.fetch._MapDatasetFetcher(dataset, collate_fn).fetch", _fetcher),
)

_FOUND: tuple[str, ...] | None = None


def recheck() -> tuple[str, ...]:
    """Run every check now: the missing seams, each ``"NAME: what was found"``. A check that
    raises counts as missing (its exception is what was found)."""
    global _FOUND
    found = []
    for seam in SEAMS:
        try:
            problem = seam.check()
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is not None:
            found.append(f"{seam.name}: {problem}")
    _FOUND = tuple(found)
    return _FOUND


def missing() -> tuple[str, ...]:
    """The missing seams (see :func:`recheck`), checked on the first call only."""
    return _FOUND if _FOUND is not None else recheck()


def describe(missing: tuple[str, ...]) -> str:
    """The one line a warning says when ``missing`` is not empty."""
    return (
        f"DataLoader worker timing (fetch, collate, parts) is off: torch {torch.__version__} "
        f"lacks what it relies on ({'; '.join(missing)}); phases, callbacks and hooks are still "
        "measured"
    )

"""Time DataLoader work where it happens (in the worker) and carry the timing back with the batch.

Work done in DataLoader workers overlaps the training step, so the training loop cannot see it.
:class:`InstrumentedLoader` makes every batch report how long its items took to fetch
(``dataset[i]``: read, decode, augment), how long the collate function took, and any finer parts
user code reported with :func:`report_part`, measured in the process that did the work.

How, for any map-style dataset and any collate function (the private parts of torch this relies
on are checked at run time by :mod:`trainperf.probe.loader_seams`; :class:`InstrumentedLoader`
refuses a torch that lacks one):

* ``loader.collate_fn`` is replaced by a picklable wrapper that times the collate call, drains
  this process's accumulator (fetch time and parts since the previous batch) and returns
  ``TimedBatch(batch, WorkerTiming)``.
* In worker processes a chained ``worker_init_fn`` turns the accumulator on and swaps the
  worker's copy of the dataset to a cached subclass whose ``__getitem__`` / ``__getitems__`` add
  their duration to it (the loader's ``dataset`` cannot be reassigned, and the worker's fetcher
  holds the dataset object itself). The main process's dataset is never touched. A dataset whose
  class cannot be swapped (a plain ``list``) or an iterable dataset still yields collate and part
  times; its batches say ``fetch_timed=False``.
* With ``num_workers=0`` fetch and collate run inside the consumer's ``next()``: the fetch time is
  the interval from the start of ``next()`` to the start of collate (index sampling included).
* Each batch also says when it was ready (``done_ns``, ``perf_counter_ns`` in the worker: on
  Linux ``CLOCK_MONOTONIC``, shared by the processes) and how many bytes and tensors it holds;
  the consumer's ``next()`` then splits its wait into waiting for the worker (until
  ``done_ns``) and the hand-over after it (the worker's send, the receive, ``pin_memory``).
* ``loader.__class__`` is swapped to a cached subclass whose ``__iter__`` wraps the iterator
  (creating it, worker start-up included, is charged to ``data_wait``). The wrapper's ``__next__``
  hands the timing to ``on_batch`` and returns the plain batch, so nothing downstream ever sees a
  ``TimedBatch``. ``pin_memory`` pins through it (it is a NamedTuple).

With ``persistent_workers`` the workers keep the collate function and ``worker_init_fn`` they
were started with, so instrumenting and restoring drop the loader's cached iterator: its workers
shut down when its last user lets go of it (an epoch in progress finishes with it), and the next
epoch starts workers with the current settings.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from trainperf.core.clock import PhaseClock
from trainperf.probe import loader_seams

try:
    from torch.utils.data.dataloader import _BaseDataLoaderIter
except ImportError:  # a torch without it still imports us; loader_seams names it, nothing is timed
    _BaseDataLoaderIter = object  # type: ignore[misc,assignment]

_now = time.perf_counter_ns


@dataclass(slots=True)
class WorkerTiming:
    """Where one batch's data-loading time went, measured in the process that built it.

    Args:
        fetch_ns: time in the dataset's ``__getitem__`` / ``__getitems__`` for this batch's items
            (read, decode, augment; with ``num_workers=0``: see the module docstring).
        collate_ns: time in the collate function (includes any reported parts of it).
        parts_ns: parts reported with :func:`report_part`; they overlap ``fetch_ns`` /
            ``collate_ns``, they do not add to them.
        samples: dataset items in the batch (1 without automatic batching).
        worker_id: the DataLoader worker that built it; -1 for the main process.
        fetch_timed: False when the fetch could not be timed (see the module docstring);
            ``fetch_ns`` is then 0, not a measurement.
        counts: counters reported with :func:`report_count`.
        done_ns: ``time.perf_counter_ns()`` in the building process when the batch was ready
            (the collate function returned). On Linux that is ``CLOCK_MONOTONIC``, one clock for
            every process of the machine, so the consumer can compare it with its own stamps.
        batch_bytes: bytes of the batch's tensors (``nbytes`` summed; counted where the batch
            was built, so the consumer reads none of it).
        batch_tensors: how many tensors the batch holds (each one a worker sends is its own
            shared-memory segment to receive and, with ``pin_memory``, to pin).
        wait_ns: set by the consumer: its time inside ``next()`` for this batch.
        worker_wait_ns: the part of ``wait_ns`` before ``done_ns`` (waiting for the worker to
            finish the batch); the rest was the hand-over (the worker's send, the consumer's
            receive and ``pin_memory``). With ``num_workers=0`` all of ``wait_ns`` is loading
            in the consumer's process, and this stays 0.
    """

    fetch_ns: int
    collate_ns: int
    parts_ns: dict[str, int]
    samples: int
    worker_id: int
    fetch_timed: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    done_ns: int = 0
    batch_bytes: int = 0
    batch_tensors: int = 0
    wait_ns: int = 0
    worker_wait_ns: int = 0


class TimedBatch(NamedTuple):
    """What the wrapped collate function returns: the batch and its timing."""

    batch: Any
    timing: WorkerTiming


# -- the per-process accumulator ---------------------------------------------------------------


@dataclass(slots=True)
class _Accumulator:
    """Timing collected in this process since the previous batch was collated: ``active`` in
    instrumented workers and inside an in-process ``next()``; ``depth``: nesting of timed dataset
    calls (``__getitems__`` calling ``self[i]``); ``fetch_start_ns``: set in-process, where
    fetch = collate start - this."""

    active: bool = False
    depth: int = 0
    fetch_ns: int = 0
    fetch_start_ns: int | None = None
    fetch_timed: bool = False
    parts: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


# Process-global rather than thread-local: a dataset may decode in helper threads and report
# from them. Each worker process has its own copy; an in-process ``next()`` swaps in its own.
_ACC = _Accumulator()


def report_part(name: str, ns: int) -> None:
    """Add ``ns`` nanoseconds to part ``name`` of the batch being built in this process (user
    code inside ``__getitem__`` or a collate function). A no-op (one attribute test) unless this
    process is building a batch for an :class:`InstrumentedLoader`."""
    acc = _ACC
    if acc.active:
        parts = acc.parts
        parts[name] = parts.get(name, 0) + ns


def report_count(name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` of the batch being built in this process (e.g. cache hits);
    carried back with the batch like :func:`report_part`, summed per epoch by the monitors. A
    no-op unless this process is building a batch for an :class:`InstrumentedLoader`."""
    acc = _ACC
    if acc.active:
        counts = acc.counts
        counts[name] = counts.get(name, 0) + n


# -- worker side -------------------------------------------------------------------------------


@dataclass
class _TimedCollate:
    """Picklable collate wrapper: times ``collate_fn`` and attaches this batch's timing.

    Called outside an instrumented context (e.g. directly by user code) it returns the plain
    batch, so the wrapper is transparent there.
    """

    collate_fn: Callable[[Any], Any]
    auto_collation: bool

    def __call__(self, data: Any) -> Any:
        acc = _ACC
        if not acc.active:
            return self.collate_fn(data)
        start = _now()
        batch = self.collate_fn(data)
        end = _now()
        if acc.fetch_start_ns is not None:
            fetch_ns, fetch_timed = start - acc.fetch_start_ns, True
        else:
            fetch_ns, fetch_timed = acc.fetch_ns, acc.fetch_timed
        parts, acc.parts, acc.fetch_ns = acc.parts, {}, 0
        counts, acc.counts = acc.counts, {}
        if self.auto_collation:
            try:
                samples = len(data)
            except TypeError:
                samples = 0
        else:
            samples = 1
        info = get_worker_info()
        nbytes, tensors = tensor_bytes(batch)
        # Positional arguments and tuple.__new__: this runs once per batch on the consumer's
        # thread with num_workers=0, where keyword handling and NamedTuple.__new__ (a Python
        # function) are measurable.
        timing = WorkerTiming(
            fetch_ns,
            end - start,
            parts,
            samples,
            -1 if info is None else info.id,
            fetch_timed,
            counts,
            end,
            nbytes,
            tensors,
        )
        return tuple.__new__(TimedBatch, (batch, timing))


def tensor_bytes(batch: Any, depth: int = 0) -> tuple[int, int]:
    """``(bytes, tensors)`` of the tensors in ``batch`` (a tensor, or mappings / lists / tuples
    of them, three levels deep): ``nbytes`` summed, nothing read or copied."""
    if isinstance(batch, Tensor):
        return batch.nbytes, 1
    if depth >= 3:
        return 0, 0
    if isinstance(batch, Mapping):
        values: Any = batch.values()
    elif isinstance(batch, list | tuple):
        values = batch
    else:
        return 0, 0
    nbytes = tensors = 0
    for value in values:
        if isinstance(value, Tensor):
            nbytes += value.nbytes
            tensors += 1
        elif isinstance(value, Mapping | list | tuple):
            more, count = tensor_bytes(value, depth + 1)
            nbytes += more
            tensors += count
    return nbytes, tensors


@dataclass
class _TimedWorkerInit:
    """Picklable ``worker_init_fn``: turns timing on in the worker, then calls the original."""

    worker_init_fn: Callable[[int], None] | None
    map_style: bool

    def __call__(self, worker_id: int) -> None:
        global _ACC
        _ACC = _Accumulator(active=True)
        info = get_worker_info()
        if self.map_style and info is not None:
            _ACC.fetch_timed = _time_fetches(info.dataset)
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)


def _timed_method(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        acc = _ACC
        if acc.depth:  # nested (e.g. __getitems__ calling self[i]): the outer call times it
            return method(self, *args, **kwargs)
        acc.depth = 1
        start = _now()
        try:
            return method(self, *args, **kwargs)
        finally:
            acc.fetch_ns += _now() - start
            acc.depth = 0

    return timed


@functools.cache
def _timed_class(cls: type) -> type | None:
    """The timing subclass of dataset class ``cls``; ``None`` when it cannot have one."""
    getitem = getattr(cls, "__getitem__", None)
    if getitem is None:
        return None
    namespace: dict[str, Any] = {
        "__slots__": (),  # same layout as cls, so __class__ assignment is allowed
        "__module__": __name__,
        "_ocr_perf_timed": True,
        "__getitem__": _timed_method(getitem),
    }
    getitems = getattr(cls, "__getitems__", None)
    if getitems:  # the fetcher only calls it when truthy, so mirror that
        namespace["__getitems__"] = _timed_method(getitems)
    try:
        return type(f"Timed{cls.__name__}", (cls,), namespace)
    except TypeError:  # a final / builtin class
        return None


def _time_fetches(dataset: Any) -> bool:
    """Swap this process's ``dataset`` to a timing subclass; False if its class cannot be."""
    cls = type(dataset)
    if getattr(cls, "_ocr_perf_timed", False):
        return True
    timed_cls = _timed_class(cls)  # type: ignore[arg-type]  # mypy: a class is no Hashable
    if timed_cls is None:
        return False
    try:
        dataset.__class__ = timed_cls
    except TypeError:  # builtins (list, tuple) and C types refuse __class__ assignment
        return False
    return True


# -- main-process side -------------------------------------------------------------------------


class _TimedIterator(_BaseDataLoaderIter):
    """Wraps a DataLoader iterator: unwraps the timing and hands it to its loader's handle.

    Subclasses ``_BaseDataLoaderIter`` (without running its ``__init__``) so code that treats
    DataLoader iterators specially (Lightning's CombinedLoader state) still recognises it; every
    other attribute is the wrapped iterator's.
    """

    def __init__(
        self, inner: _BaseDataLoaderIter, handle: InstrumentedLoader | None, in_process: bool
    ) -> None:
        self._inner = inner
        self._handle = handle
        self._in_process = in_process

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":  # not yet set (e.g. half-built): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __iter__(self) -> _TimedIterator:
        return self

    def __len__(self) -> int:
        return len(self._inner)

    def _reset(self, *args: Any, **kwargs: Any) -> None:
        self._inner._reset(*args, **kwargs)

    def __next__(self) -> Any:
        global _ACC
        # Runs once per batch on the training loop's thread: kept flat and allocation-light.
        handle = self._handle
        if handle is not None and not handle._delivering:
            handle = None
        start = _now()
        if self._in_process:
            # Nested inside another batch being built in this process: keep its state.
            saved = _ACC if _ACC.active else _Accumulator()
            _ACC = _Accumulator(True, 0, 0, start, True)
            try:
                item = next(self._inner)
            finally:
                _ACC = saved
        else:
            item = next(self._inner)
        if type(item) is TimedBatch:
            item, timing = item
            if handle is not None:
                got = _now()
                timing.wait_ns = got - start
                if not self._in_process:
                    # Waiting for the worker until it finished the batch (clipped to the wait);
                    # the rest is the hand-over: its send, our receive, pin_memory.
                    timing.worker_wait_ns = min(max(timing.done_ns - start, 0), got - start)
                handle._deliver(timing)
        return item


def _instrumented_iter(self: DataLoader) -> _BaseDataLoaderIter:
    base: type[DataLoader] = type(self)._ocr_perf_base  # type: ignore[attr-defined]
    handle = _HANDLES.get(self)
    clock = handle._clock if handle is not None and handle._delivering else None
    # Creating the iterator starts the worker processes (or resets persistent ones) while the
    # loop is blocked: that is waiting for data too, not unattributed time.
    owner = clock.current_owner if clock is not None else ""
    previous = clock.switch("data_wait") if clock is not None else ""
    try:
        inner = base.__iter__(self)
    finally:
        if previous:
            clock.switch(previous, owner)  # type: ignore[union-attr]
    return _TimedIterator(inner, handle, in_process=self.num_workers == 0)


# Loader -> its live handle. Weak, so a loader copied or re-created from an instrumented one
# (Lightning re-instantiates loaders by type) just unwraps batches and reports to nobody.
_HANDLES: weakref.WeakKeyDictionary[DataLoader, InstrumentedLoader] = weakref.WeakKeyDictionary()


@functools.cache
def _instrumented_class(base: type[DataLoader]) -> type[DataLoader]:
    namespace = {
        "__slots__": (),
        "__module__": __name__,
        "__doc__": base.__doc__,
        "__iter__": _instrumented_iter,
        "_ocr_perf_base": base,
    }
    return type(f"Instrumented{base.__name__}", (base,), namespace)


def _drop_cached_iterator(loader: DataLoader) -> None:
    """Persistent workers keep the collate / ``worker_init_fn`` they started with (module doc)."""
    if getattr(loader, "_iterator", None) is not None:
        loader._iterator = None


class InstrumentedLoader:
    """Instrument a DataLoader in place so each batch reports its worker-side timing.

    The loader keeps working as before for its users (same batches, same workers, same
    ``pin_memory``); until :meth:`restore`, each batch taken from it calls ``on_batch`` with its
    :class:`WorkerTiming`. Iterators created before instrumenting are not affected.

    Args:
        loader: not already instrumented; iterable datasets get collate/part timing only.
        on_batch: called in the consumer's thread, once per batch, with that batch's timing.
            Keep it cheap; it runs inside ``next()``.
        clock: the phase clock to charge an iterator's creation (worker start-up) to, as
            ``data_wait``, while it runs; None charges nothing. The wait in ``next()`` is the
            caller's to bracket (Lightning's ``*_dataloader_next`` action does).
        on_error: if given, an exception raised by ``on_batch`` is passed to it and ``on_batch``
            is not called again (the loader keeps serving batches); if None the exception
            propagates to the consumer of the loader.

    Raises:
        RuntimeError: this torch lacks a private part the timing relies on (the message names it,
            :func:`trainperf.probe.loader_seams.missing`); the loader is left untouched.
    """

    def __init__(
        self,
        loader: DataLoader,
        on_batch: Callable[[WorkerTiming], None],
        clock: PhaseClock | None = None,
        *,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        if not isinstance(loader, DataLoader):
            raise TypeError(
                "InstrumentedLoader needs a torch.utils.data.DataLoader, "
                f"got {type(loader).__name__}"
            )
        if getattr(type(loader), "_ocr_perf_base", None) is not None:
            raise ValueError(
                f"this {type(loader).__name__} is already instrumented; restore() the other "
                "InstrumentedLoader first"
            )
        if not callable(on_batch):
            raise TypeError(f"on_batch must be callable, got {type(on_batch).__name__}")
        missing = loader_seams.missing()
        if missing:
            raise RuntimeError(loader_seams.describe(missing))
        self._loader: DataLoader | None = loader
        self._on_batch = on_batch
        self._clock = clock
        self._on_error = on_error
        self._delivering = True
        self._original_class = type(loader)
        self._collate = _TimedCollate(loader.collate_fn, loader.batch_sampler is not None)
        self._worker_init = _TimedWorkerInit(
            loader.worker_init_fn, map_style=not isinstance(loader.dataset, IterableDataset)
        )
        # The class first: it is the only step that can fail, and nothing needs undoing then.
        loader.__class__ = _instrumented_class(type(loader))  # type: ignore[arg-type]
        loader.collate_fn = self._collate
        loader.worker_init_fn = self._worker_init
        _HANDLES[loader] = self
        _drop_cached_iterator(loader)

    def _deliver(self, timing: WorkerTiming) -> None:
        if self._on_error is None:
            self._on_batch(timing)
            return
        try:
            self._on_batch(timing)
        except Exception as exc:
            self._delivering = False
            self._on_error(exc)

    def restore(self) -> None:
        """Undo everything: loader class, collate function, ``worker_init_fn``; idempotent.

        An iterator in use keeps serving plain batches to the end; it no longer reports.
        Attributes someone else replaced after instrumenting are left as they are now.
        """
        loader = self._loader
        if loader is None:
            return
        self._loader = None
        self._delivering = False
        _HANDLES.pop(loader, None)
        if getattr(type(loader), "_ocr_perf_base", None) is self._original_class:
            loader.__class__ = self._original_class
        if loader.collate_fn is self._collate:
            loader.collate_fn = self._collate.collate_fn
        if loader.worker_init_fn is self._worker_init:
            loader.worker_init_fn = self._worker_init.worker_init_fn
        _drop_cached_iterator(loader)

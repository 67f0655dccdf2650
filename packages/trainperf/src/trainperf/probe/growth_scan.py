"""The epoch-end scan of what a training run keeps, so that memory growth is named by attribute.

It shows what grows, epoch after epoch, in the LightningModule, the DataModule and the callbacks
(the ``memory_creep`` finding). Lightning-free.

Users collect step outputs themselves (Lightning 2 has no ``*_epoch_end(outputs)``), and
``self.losses.append(loss)`` without ``.detach()`` / ``.item()`` keeps every step's autograd graph
(its activations) alive. Resource samples see the process grow; this module names the attribute.

:func:`scan` walks the instance ``__dict__`` of each root object through containers (list, tuple,
dict, deque, set) and plain objects, never into ``nn.Module`` parameters, buffers or submodules,
nor into the trainer, modules, classes or functions. For each attribute (and each container under
it) that holds tensors it measures the length, the tensor count, the bytes of their storages (each
storage counted once per scan, by its data pointer) and whether one holds an autograd graph. The
walk is bounded (the constants below); its cost is recorded with every scan (``scan_ms``,
``items``); it runs at epoch ends only, never per step.

``EpochScanCallback`` writes one scan per training epoch to ``perf/growth.jsonl``;
:func:`trainperf.analysis.memory_growth.attributes.growing` compares them.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import FunctionType, MethodType, ModuleType
from typing import TYPE_CHECKING, Any

from trainperf.records.epoch_scans import GrowthNode, GrowthRecord

if TYPE_CHECKING:
    import torch


#: Levels below a root attribute the walk descends (``self.outputs["train"][0]`` is 3).
MAX_DEPTH = 4
#: Items looked at per container; a bigger one is sampled evenly and its counts extrapolated.
SAMPLE_ITEMS = 64
#: Items looked at in one scan, all roots together; beyond, the scan stops (``truncated``).
MAX_ITEMS = 20_000
#: Paths kept per scan record (those holding the most tensors first).
MAX_NODES = 64

# Types never walked into: code, types, text (torch's modules and optimizers are added in
# _torch_types(); the caller adds the trainer's type).
_OPAQUE: tuple[type, ...] = (ModuleType, type, FunctionType, MethodType, str, bytes, bytearray)


@functools.cache
def _torch_types() -> tuple[type[torch.Tensor], tuple[type, ...], frozenset[str]]:
    """``(Tensor, (Module, Optimizer), names nn.Module keeps in its __dict__)``: imported on
    the first scan, so reading records (the report) does not import torch. Optimizer state
    fills once, in the first steps."""
    import torch

    internals = frozenset(vars(torch.nn.Module()))
    return torch.Tensor, (torch.nn.Module, torch.optim.Optimizer), internals


_CONTAINERS = (list, tuple, dict, deque, set, frozenset)


@dataclass
class _Walk:
    """The state of one scan: the item budget and the storages already counted."""

    max_items: int
    opaque: tuple[type, ...]
    tensor_type: type[torch.Tensor]
    items: int = 0
    truncated: bool = False
    seen_storages: set[tuple[str, int]] = field(default_factory=set)
    nodes: list[GrowthNode] = field(default_factory=list)

    def spend(self) -> bool:
        if self.items >= self.max_items:
            self.truncated = True
            return False
        self.items += 1
        return True

    def tensor(self, t: torch.Tensor, node: GrowthNode) -> None:
        node.tensors += 1
        if t.grad_fn is not None:
            node.graph = True
        device = t.device.type
        if device not in node.devices:
            node.devices.append(device)
        try:
            storage = t.untyped_storage()
            key = (device, storage.data_ptr())
            if key not in self.seen_storages or key[1] == 0:
                self.seen_storages.add(key)
                node.bytes += storage.nbytes()
        except (RuntimeError, NotImplementedError):  # sparse / meta / wrapper subclasses
            node.bytes += t.element_size() * t.nelement()


def _sample(value: Any, n: int) -> tuple[Iterable[Any], float]:
    """Up to :data:`SAMPLE_ITEMS` items of container ``value`` of length ``n``: all of them, or
    evenly spread (sequences) / the first ones (dicts, sets, deques); with the factor that
    extrapolates their counts to the whole container."""
    items: Iterable[Any] = value.values() if isinstance(value, dict) else value
    if n <= SAMPLE_ITEMS:
        return items, 1.0
    if isinstance(value, list | tuple):
        step = n / SAMPLE_ITEMS
        return (value[int(i * step)] for i in range(SAMPLE_ITEMS)), step
    return itertools.islice(items, SAMPLE_ITEMS), n / SAMPLE_ITEMS


def _label(key: Any) -> str:
    """``['train']``, ``[3]``; a key of another type by its type (a tensor's repr costs)."""
    text = repr(key) if isinstance(key, str | int | float | bool) else f"<{type(key).__name__}>"
    return f"[{text if len(text) <= 40 else text[:37] + '...'}]"


def _walk(value: Any, path: str, depth: int, walk: _Walk) -> GrowthNode | None:
    """Stats of ``value`` at ``path`` (``None`` when it holds no tensor); containers holding
    tensors are appended to ``walk.nodes`` on the way."""
    if isinstance(value, walk.tensor_type):
        node = GrowthNode(
            path=path, kind="Tensor", length=int(value.shape[0]) if value.dim() else 1
        )
        walk.tensor(value, node)
        return node
    if isinstance(value, walk.opaque) or depth > MAX_DEPTH:
        return None
    if isinstance(value, _CONTAINERS):
        n = len(value)
        node = GrowthNode(path=path, kind=type(value).__name__, length=n)
        items, factor = _sample(value, n)
        keys: Iterator[Any] = iter(value.keys()) if isinstance(value, dict) else iter(range(n))
        ordered = isinstance(value, dict | list | tuple) and factor == 1.0
        for item in items:
            if not walk.spend():
                break
            child_path = f"{path}{_label(next(keys))}" if ordered else f"{path}[*]"
            if isinstance(item, walk.tensor_type):
                walk.tensor(item, node)
                continue
            child = _walk(item, child_path, depth + 1, walk)
            if child is not None:
                _add(node, child)
        if factor != 1.0:
            node.tensors = round(node.tensors * factor)
            node.bytes = round(node.bytes * factor)
            node.sampled = True
        if node.tensors:
            walk.nodes.append(node)
            return node
        return None
    attrs = getattr(value, "__dict__", None)
    if not isinstance(attrs, dict) or not attrs:
        return None
    node = GrowthNode(path=path, kind=type(value).__name__, length=len(attrs))
    for name, item in list(attrs.items()):
        if not walk.spend():
            break
        child = _walk(item, f"{path}.{name}", depth + 1, walk)
        if child is not None:
            _add(node, child)
    return node if node.tensors else None


def _add(parent: GrowthNode, child: GrowthNode) -> None:
    parent.tensors += child.tensors
    parent.bytes += child.bytes
    parent.graph = parent.graph or child.graph
    parent.sampled = parent.sampled or child.sampled
    parent.devices = sorted(set(parent.devices) | set(child.devices))


def scan(
    roots: Mapping[str, object],
    epoch: int,
    *,
    opaque: tuple[type, ...] = (),
    skip: frozenset[str] = frozenset(),
    max_items: int = MAX_ITEMS,
) -> GrowthRecord:
    """Measure what the objects of ``roots`` (label -> object, e.g. ``{"UserModule": module}``)
    hold in their attributes (see the module doc); ``epoch`` is stamped on the result.

    Args:
        opaque: further types never walked into (the caller's trainer class).
        skip: attribute names of the roots left out (a framework base class's own state);
            ``nn.Module``'s own (parameters, buffers, submodules, hooks) always are.
    """
    t0 = time.perf_counter_ns()
    tensor, torch_opaque, module_internals = _torch_types()
    walk = _Walk(max_items, _OPAQUE + torch_opaque + tuple(opaque), tensor)
    for label, root in roots.items():
        attrs = getattr(root, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for name, value in list(attrs.items()):
            if name in skip or name in module_internals:
                continue
            if not walk.spend():
                break
            node = _walk(value, f"{label}.{name}", 1, walk)
            if node is not None and node.kind not in {c.__name__ for c in _CONTAINERS}:
                walk.nodes.append(node)  # a tensor or an object attribute: a node of its own
    for node in walk.nodes:
        node.devices = sorted(node.devices)
    nodes = sorted(walk.nodes, key=lambda n: (-n.tensors, n.path))[:MAX_NODES]
    return GrowthRecord(
        epoch=epoch,
        nodes=nodes,
        items=walk.items,
        scan_ms=round((time.perf_counter_ns() - t0) / 1e6, 3),
        truncated=walk.truncated,
    )

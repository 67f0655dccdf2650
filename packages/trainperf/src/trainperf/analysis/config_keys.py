"""Finding a setting in the configuration a run's app recorded, by its leaf name.

It finds the key (:func:`find_key`: ``num_workers`` is ``data.num_workers`` in one app,
``loader.workers`` in another), a cache's node (:func:`find_cache_key`) and the optimizer's node
(:func:`optimizer_node`). Advice (:mod:`trainperf.analysis.advice`) and the verdict name the run's
own keys through it, so they never name a key the run does not have."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FUSED_OPTIMIZERS",
    "RUNNER_SECTIONS",
    "ConfigKey",
    "OptimizerNode",
    "find_cache_key",
    "find_key",
    "optimizer_node",
    "walk",
]

# Parents under which a loader setting most likely configures the DataLoader.
_LOADER_PARENTS = ("loader", "dataloader", "data", "datamodule", "dataset")
#: Config sections that most likely hold the training run's own settings (precision, cuDNN's
#: benchmark), by the name configs commonly give them.
RUNNER_SECTIONS = ("trainer", "training", "runner")
# Stage names as config sections use them.
_STAGE_WORDS = {
    "train": ("train", "training"),
    "val": ("val", "valid", "validation"),
    "test": ("test", "testing"),
}


@dataclass(frozen=True)
class ConfigKey:
    """A setting found in a run's configuration: ``path`` is dotted (an override's key),
    ``value`` as recorded (maybe an interpolation string), ``note`` why this key was chosen
    when several matched."""

    path: str
    value: Any
    note: str | None = None


def walk(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (path, value) of a nested mapping, parents before their children."""
    if not isinstance(node, Mapping):
        return
    for key, value in node.items():
        path = (*prefix, str(key))
        yield path, value
        yield from walk(value, path)


def _rank(path: tuple[str, ...], stage: str | None, parents: Sequence[str]) -> tuple[int, ...]:
    """Sort key: a preferred parent first, then the finding's stage, then the shortest path."""
    above = [p.lower() for p in path[:-1]]
    preferred = any(any(word in p for word in parents) for p in above)
    words = _STAGE_WORDS.get(stage or "", ())
    other_stage = any(p in w for s, w in _STAGE_WORDS.items() if s != stage for p in above)
    this_stage = any(p in words for p in above)
    return (0 if preferred else 1, 0 if this_stage else (2 if other_stage else 1), len(path))


def find_key(
    config: Mapping[str, object] | None,
    leaves: Sequence[str],
    *,
    parent: str | None = None,
    stage: str | None = None,
    prefer: Sequence[str] = _LOADER_PARENTS,
    aliases: Sequence[str] = (),
    skip: Sequence[str] = (),
) -> ConfigKey | None:
    """The key of ``config`` whose last component is one of ``leaves`` (and whose parent is
    ``parent`` when given), or, when none is, one of ``aliases`` under a ``prefer``-like parent
    (``loader.workers``: a bare ``workers`` elsewhere may mean something else); the top-level
    sections ``skip`` (a config library's own, ``FrameworkInfo.config_skip``) hold none. Several
    matches: ordered by :func:`_rank`, the note names the others (the candidate's description
    says which key was chosen over which)."""
    if not config:
        return None

    def matches(names: Sequence[str], need_prefer: bool) -> list[tuple[tuple[str, ...], object]]:
        found = []
        for path, value in walk(config):
            # a section is not a setting; a list is (``widths: [16, 32]`` takes an override)
            if path[0] in skip or path[-1] not in names or isinstance(value, Mapping):
                continue
            if parent is not None and (len(path) < 2 or path[-2] != parent):
                continue
            if need_prefer and not any(w in p.lower() for p in path[:-1] for w in prefer):
                continue
            found.append((path, value))
        return found

    found = matches(leaves, False) or matches(aliases, True)
    if not found:
        return None
    found.sort(key=lambda pv: _rank(pv[0], stage, prefer))
    path, value = found[0]
    note = None
    if len(found) > 1:
        others = ", ".join(".".join(p) for p, _ in found[1:4])
        note = f"several keys match; chose `{'.'.join(path)}` over {others}"
    return ConfigKey(".".join(path), value, note)


def find_cache_key(
    config: Mapping[str, object] | None, leaf: str, cache: str | None = None
) -> ConfigKey | None:
    """The ``leaf`` setting (``enabled``, ``max_bytes``) of a cache's config node, by
    convention: the node named ``cache`` (X of the run's ``X_hits`` / ``X_misses`` worker
    counters) when given, else a node whose name ends in ``cache`` (``data.target_cache``)."""
    if cache is not None:
        return find_key(config, (leaf,), parent=cache)
    nodes = sorted({p[-2] for p, _ in walk(config) if len(p) >= 2 and p[-1] == leaf})
    for node in (n for n in nodes if n.lower().endswith("cache")):
        return find_key(config, (leaf,), parent=node)
    return None


#: Optimizers whose constructor takes ``fused=True`` (torch >= 2.4 on CUDA and CPU).
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD")


@dataclass(frozen=True)
class OptimizerNode:
    """The config node that builds the optimizer: its dotted ``path``, the class name of its
    ``_target_`` and its ``fused`` value (``None`` when the key is absent)."""

    path: str
    name: str
    fused: Any
    has_fused_key: bool


def optimizer_node(config: Mapping[str, object] | None) -> OptimizerNode | None:
    """The node whose ``_target_`` is a ``torch.optim`` optimizer class (the shortest path when
    several are), or ``None``."""
    found: list[tuple[int, str, str, Mapping[str, Any]]] = []
    for path, value in walk(config or {}):
        if not isinstance(value, Mapping):
            continue
        target = value.get("_target_")
        if (
            isinstance(target, str)
            and target.startswith("torch.optim.")
            and "lr_scheduler" not in target
        ):
            found.append((len(path), ".".join(path), target.rsplit(".", 1)[-1], value))
    if not found:
        return None
    _, dotted, name, node = min(found, key=lambda t: (t[0], t[1]))
    return OptimizerNode(dotted, name, node.get("fused"), "fused" in node)

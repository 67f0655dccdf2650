"""The user's Python line behind each host-device sync of a trace recorded with ``with_stack=True``.

``torch.profiler.profile(with_stack=True)`` writes ``python_function`` events (one per Python or
built-in call, named ``path(line): function`` or ``<built-in method item of Tensor object at
0x...>``) on the same thread as the operators they call, so the call tree that
:func:`~ocr.perf.trace.load.load_traces` builds from the times (:attr:`EventTable.parent`) puts
``aten::item`` under ``<built-in method item ...>`` under the user's function. The profiler names
a Python frame by the **first line of its function** (``co_firstlineno``, the ``def`` line), not by
the line of the call inside it: a trace names the function; the live
:mod:`ocr.perf.sync_debug` names the exact line.

:func:`sync_sites` walks up from each sync call to the innermost frame of the user's code (a frame
that is not a built-in, not the standard library and not a framework package such as torch or
Lightning) and counts the calls per site and per step. Traces without Python events give no sites.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np

from ocr.perf.trace.table import EventTable, Kind

__all__ = [
    "FRAMEWORK_PACKAGES",
    "SyncCall",
    "SyncSite",
    "is_user_frame",
    "parse_frame",
    "sync_calls",
    "sync_sites",
]

#: Top-level packages whose frames are never "the user's code" (their callers are).
FRAMEWORK_PACKAGES = frozenset(
    {
        "torch",
        "torchvision",
        "torchmetrics",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "lightning_utilities",
        "numpy",
        "hydra",
        "omegaconf",
        "wandb",
        "_pytest",
        "pytest",
        "pluggy",
        "tqdm",
        "rich",
    }
)
_STDLIB = frozenset(sys.stdlib_module_names)
_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.+)$")
_BUILTIN = re.compile(
    r"^<built-in (?:method (?P<meth>\w+) of (?P<cls>\w+) object|function (?P<fn>\w+))"
)
#: Deepest Python stack walked above a sync call (Lightning's loops are ~60 frames deep).
_MAX_DEPTH = 400


@dataclass(frozen=True)
class SyncSite:
    """Sync calls made from one function of the user's code.

    Args:
        file: the source file as the profiler wrote it (relative to its ``sys.path`` entry).
        line: the first line of the function (the trace does not record the calling line).
        function: the function's name.
        calls: sync calls from it in the analysed steps.
        per_step: ``calls`` per step.
        ms_per_step: host time in those calls per step (ms).
        via: what the user's code called that synced (``Tensor.item``, ``torch/_tensor.py:
            __format__`` ...), the most frequent when several.
        ops: the sync operator names (``aten::item``, ``cudaStreamSynchronize`` ...).
    """

    file: str
    line: int
    function: str
    calls: int
    per_step: float
    ms_per_step: float
    via: str
    ops: tuple[str, ...]

    @property
    def where(self) -> str:
        """``file:line function``."""
        return f"{self.file}:{self.line} {self.function}"

    def as_evidence(self) -> dict[str, object]:
        """JSON-ready form for a finding's evidence."""
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "per_step": round(self.per_step, 2),
            "ms_per_step": round(self.ms_per_step, 3),
            "via": self.via,
            "ops": list(self.ops),
        }


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """``(file, line, function)`` of a ``python_function`` event name; ``None`` for built-ins
    and anything else."""
    g = _FRAME.match(name)
    if g is None:
        return None
    return g.group("file"), int(g.group("line")), g.group("func")


def is_user_frame(name: str) -> bool:
    """Whether a ``python_function`` event name is a frame of the user's code: a
    ``file(line): function`` frame outside the standard library, site-packages and
    :data:`FRAMEWORK_PACKAGES`."""
    parsed = parse_frame(name)
    if parsed is None:
        return False
    path = parsed[0].replace("\\", "/")
    if "site-packages/" in path or "dist-packages/" in path or path.startswith("<"):
        return False
    if path.startswith("/") and ("/lib/python3" in path or "/lib64/python3" in path):
        return False
    head = path.split("/", 1)[0]
    top = head[:-3] if head.endswith(".py") else head
    return top not in FRAMEWORK_PACKAGES and top not in _STDLIB


def _via(name: str) -> str:
    g = _BUILTIN.match(name)
    if g is not None:
        if g.group("meth"):
            return f"{g.group('cls')}.{g.group('meth')}"
        return str(g.group("fn"))
    parsed = parse_frame(name)
    if parsed is not None:
        return f"{parsed[0]}: {parsed[2]}"
    return name


@dataclass(frozen=True)
class SyncCall:
    """One sync call with its user frame: the frame's event name, the Python frame just below
    it (``via``, ``None`` where there is none), the call's ns and op name."""

    frame: str
    via: str | None
    dur: int
    op: str


def sync_calls(table: EventTable, sync_idx: np.ndarray) -> list[SyncCall]:
    """The user's function behind each sync call ``sync_idx`` (event indexes, usually the
    outermost sync calls inside the steps); calls with no user frame above them (no Python
    events, or only framework frames) are left out."""
    if sync_idx.size == 0 or not (table.kind == Kind.PYTHON).any():
        return []
    user = table.name_ids(is_user_frame)
    is_py = table.kind == Kind.PYTHON
    found = np.full(sync_idx.size, -1, np.int64)  # the user frame
    below = np.full(sync_idx.size, -1, np.int64)  # the Python frame just below it
    last_py = np.full(sync_idx.size, -1, np.int64)
    anc = table.parent[sync_idx].copy()
    for _ in range(_MAX_DEPTH):
        open_ = (anc >= 0) & (found < 0)
        if not open_.any():
            break
        a = anc[open_]
        hit = is_py[a] & user[table.name[a]]
        rows = np.flatnonzero(open_)
        found[rows[hit]] = a[hit]
        below[rows[hit]] = last_py[rows[hit]]
        py = is_py[a] & ~hit
        last_py[rows[py]] = a[py]
        anc[rows] = np.where(hit, a, table.parent[a])
    names = table.names
    return [
        SyncCall(
            frame=names[table.name[found[k]]],
            via=_via(names[table.name[below[k]]]) if below[k] >= 0 else None,
            dur=int(table.dur[sync_idx[k]]),
            op=names[table.name[sync_idx[k]]],
        )
        for k in np.flatnonzero(found >= 0).tolist()
    ]


def sync_sites(calls: list[SyncCall], n_steps: int) -> list[SyncSite]:
    """The :class:`SyncSite` of each user function among ``calls`` over ``n_steps`` steps, most
    calls first."""
    per = max(n_steps, 1)
    sites: dict[str, list[SyncCall]] = {}
    for call in calls:
        sites.setdefault(call.frame, []).append(call)
    out = []
    for frame, members in sites.items():
        parsed = parse_frame(frame)
        assert parsed is not None  # user frames parse by construction
        vias = [c.via for c in members if c.via is not None]
        via = max(sorted(set(vias)), key=vias.count) if vias else ""
        out.append(
            SyncSite(
                file=parsed[0],
                line=parsed[1],
                function=parsed[2],
                calls=len(members),
                per_step=len(members) / per,
                ms_per_step=float(sum(c.dur for c in members)) / per / 1e6,
                via=via,
                ops=tuple(sorted({c.op for c in members})),
            )
        )
    return sorted(out, key=lambda s: (-s.calls, s.file, s.line))

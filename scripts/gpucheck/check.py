"""One run of the check: its parts in order, each ran, skipped (why, and what a GPU run adds) or
failed (its traceback kept, the check going on)."""

from __future__ import annotations

import platform
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from scripts.gpucheck.preflight import WheelCheck


@dataclass
class Part:
    """One part of the check: ``status`` is ``ran``, ``skipped`` or ``failed``; ``reason`` says
    why it was skipped (and ``adds`` what a GPU run adds) or holds the failure's traceback."""

    name: str
    status: str = "ran"
    reason: str = ""
    adds: str = ""
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Check:
    """Everything one run of the check found, rendered by :func:`render`."""

    argv: list[str]
    cuda: dict[str, Any] | None
    versions: dict[str, Any]
    wheels: WheelCheck
    parts: dict[str, Part] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    started: str = ""
    note: str = ""  # shown at the top of the document (--note)
    host: str = field(default_factory=platform.node)
    #: set when the document is rendered again from a saved ``--json`` (``--render``): that file
    #: and the command that renders it
    rendered_from: str = ""
    render_argv: list[str] = field(default_factory=list)
    #: the arms a GPU run would train and their budgets (shown while no arm has run)
    planned: dict[str, Any] = field(default_factory=dict)

    def run(self, name: str, fn: Callable[[], dict[str, Any] | None]) -> Part:
        """Run part ``name``; a failure keeps its traceback in the part and the check goes on."""
        part = Part(name)
        start = time.perf_counter()
        try:
            part.data = fn() or {}
        except Exception:
            part.status, part.reason = "failed", traceback.format_exc()
            print(f"part {name} failed:\n{part.reason}", file=sys.stderr, flush=True)
        part.seconds = time.perf_counter() - start
        self.parts[name] = part
        return part

    def skip(self, name: str, reason: str, adds: str = "") -> None:
        self.parts[name] = Part(name, "skipped", reason, adds)

    def ok(self, name: str) -> bool:
        part = self.parts.get(name)
        return part is not None and part.status == "ran"

    def as_dict(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "started": self.started,
            "note": self.note,
            "host": self.host,
            "cuda": self.cuda,
            "versions": self.versions,
            "wheels": asdict(self.wheels),
            "commands": self.commands,
            "parts": {name: asdict(part) for name, part in self.parts.items()},
        }


def check_from_dict(data: dict[str, Any]) -> Check:
    """The :class:`Check` a ``--json`` file holds (:meth:`Check.as_dict`); a file written before
    ``host`` was kept has ``host`` empty."""
    try:
        check = Check(
            argv=list(data["argv"]),
            cuda=data["cuda"],
            versions=data["versions"],
            wheels=WheelCheck(**data["wheels"]),
            parts={name: Part(**part) for name, part in data["parts"].items()},
            commands=dict(data.get("commands") or {}),
            started=str(data.get("started") or ""),
            note=str(data.get("note") or ""),
            host=str(data.get("host") or ""),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a gpu_check.py --json file: {exc}") from exc
    return check

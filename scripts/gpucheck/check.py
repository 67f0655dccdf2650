"""One run of the check: its parts in order, each ran, skipped (why, and what a GPU run adds) or
failed (its traceback kept, the check going on)."""

from __future__ import annotations

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
            "cuda": self.cuda,
            "versions": self.versions,
            "wheels": asdict(self.wheels),
            "commands": self.commands,
            "parts": {name: asdict(part) for name, part in self.parts.items()},
        }

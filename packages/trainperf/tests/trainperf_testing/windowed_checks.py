"""A trace analysed whole and in spilled windows, for the windowed analysis' equality tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainperf.analysis.trace import spill, windowed
from trainperf.analysis.trace.analyze import timed_analysis


def _plain(analysis: Any) -> dict[str, Any]:
    d = analysis.as_dict()
    for key in ("timing", "input"):
        d.pop(key, None)
    for s in d["sources"]:
        s.pop("parse_s")
    return d


def _whole_and_windowed(
    path: Path, monkeypatch: pytest.MonkeyPatch, window_events: int
) -> tuple[Any, Any, int]:
    whole = timed_analysis(path, str(path), None)
    windows: list[int] = []
    plan = windowed._plan

    def counting(sp: spill.Spilled, n: int) -> Any:
        p = plan(sp, n)
        windows.append(p.windows)
        return p

    with monkeypatch.context() as m:
        m.setattr(spill, "SPILL_EVENTS", 0)
        m.setattr(spill, "BLOCK_EVENTS", 4096)  # several blocks per pass, too
        m.setattr(windowed, "WINDOW_EVENTS", window_events)
        m.setattr(windowed, "_plan", counting)
        parts = timed_analysis(path, str(path), None)
    assert len(windows) == 1, "the file was not spilled"
    return whole, parts, windows[0]

"""Large traces for memory tests, written fast: a real trace's timed events repeated, shifted in
time (``ProfilerStep`` numbers renumbered), each event serialised once as a template."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_MARK = -987654321.25  # a ts no trace has: where the shifted time goes in the template


def write_replicated(src: Path, dst: Path, target_bytes: int) -> int:
    """Write ``src``'s timed events repeated until ``dst`` holds about ``target_bytes``;
    returns the number of copies."""
    doc = json.loads(src.read_bytes())
    timed = [e for e in doc["traceEvents"] if e.get("ph") != "M" and "ts" in e]
    fixed = [e for e in doc["traceEvents"] if not (e.get("ph") != "M" and "ts" in e)]
    t_lo = min(float(e["ts"]) for e in timed)
    t_hi = max(float(e["ts"]) + float(e.get("dur", 0)) for e in timed)
    period = (t_hi - t_lo) * 1.02
    steps = [int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))]
    n_steps = max(steps) - min(steps) + 1 if steps else 0
    templates: list[tuple[list[str], float, int | None]] = []
    for e in timed:
        m = _STEP.match(str(e.get("name", "")))
        c: dict[str, Any] = dict(e, ts=_MARK)
        if m:
            c["name"] = "ProfilerStep#@STEP@"
        templates.append((json.dumps(c).split(repr(_MARK)), float(e["ts"]), m and int(m.group(1))))
    one_copy = sum(len(t[0][0]) + len(t[0][1]) + 20 for t in templates)
    copies = max(1, round(target_bytes / one_copy))
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    with open(dst, "w") as out:
        out.write(json.dumps(head)[:-1] + (", " if head else "") + '"traceEvents": [')
        out.write(",\n".join(map(json.dumps, fixed)))
        for k in range(copies):
            lines = []
            for (before, after), ts, step in templates:
                text = f"{before}{ts + k * period!r}{after}"
                if step is not None:
                    text = text.replace("@STEP@", str(step + k * n_steps))
                lines.append(text)
            out.write((",\n" if fixed or k else "") + ",\n".join(lines))
        out.write("]}")
    return copies

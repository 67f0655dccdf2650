"""A finding's evidence for people: short, named, numbers rounded.

A finding's ``evidence`` is a dict of figures that its rule measured (``--json`` keeps it whole).
Printed as it is, a sync finding's list of sites with their advice ran to ~1,500 characters of
``key=value`` pairs. Here each figure keeps its name (underscores as spaces), numbers get three
significant digits (thousands separated), a map of numbers shows its largest entries, a list of
records shows each by its name and its numbers (long text such as advice, which the finding's
change already says, is left out), and the whole line stops at :data:`EVIDENCE_CHARS`.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: Characters of one finding's evidence line at most (the rest: ``...``).
EVIDENCE_CHARS = 360

#: Entries of a map or list shown at most (the rest counted: ``+N more``).
_ITEMS = 3

#: Text longer than this inside a record (advice, a sentence) is left out of the record's line.
_TEXT_CHARS = 60

#: A record's fields that name it, joined with ``>`` in this order.
_NAME_FIELDS = ("name", "hook", "op", "function", "kind", "phase", "device", "rank")

# Lightning's action prefix: "[LightningModule]OCRLightningModule.optimizer_step"
_PREFIX = re.compile(r"^\[[A-Za-z_]+\]")


def number(value: float) -> str:
    """``value`` to three significant digits (at least a whole number), thousands separated:
    ``8.513 -> 8.51``, ``59.69 -> 59.7``, ``1598.84 -> 1,599``."""
    if not math.isfinite(value):
        return "-"
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    size = abs(value)
    decimals = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 0.01 else 4
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


#: Key endings that are units: ``gpu_busy_pct 59.69`` reads ``gpu busy 59.7 %``.
_UNITS = (
    ("_pct_of_step", "% of the step"),
    ("_pct_of_core", "% of a core"),
    ("_pct_of_gpu_time", "% of GPU time"),
    ("_pct", "%"),
    ("_ms_per_step", "ms/step"),
    ("_ms_per_batch", "ms/batch"),
    ("_ms_per_sample", "ms/sample"),
    ("_per_step", "/step"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("_gb", "GB"),
    ("_mb", "MB"),
)


def _name(key: object) -> str:
    return str(key).replace("_", " ")


def _figure(key: object, value: Any) -> str:
    """``name value`` of one entry, a numeric key's unit after the number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        name = str(key)
        for end, unit in _UNITS:
            if name == end[1:]:  # the key is the unit: "ms_per_step 8.95" -> "8.95 ms/step"
                return f"{number(float(value))}{'' if unit.startswith('/') else ' '}{unit}"
            if name.endswith(end):
                gap = "" if unit.startswith("/") else " "
                return f"{_name(name[: -len(end)])} {number(float(value))}{gap}{unit}"
    return f"{_name(key)} {value_text(value)}"


def _text(value: str, limit: int = _TEXT_CHARS) -> str:
    value = _PREFIX.sub("", value.strip())
    return value if len(value) <= limit else value[: limit - 3].rstrip() + "..."


def _more(shown: list[str], total: int) -> str:
    return ", ".join(shown) + (f", +{total - len(shown)} more" if total > len(shown) else "")


def _record(item: dict[str, Any]) -> str:
    """One record of a list: its name fields, then its numbers (zeros and long text left out)."""
    names = [
        _text(str(item[k]))
        for k in _NAME_FIELDS
        if isinstance(item.get(k), str | int) and not isinstance(item.get(k), bool)
        if str(item[k]).strip()
    ]
    figures = [
        _figure(k, v)
        for k, v in item.items()
        if k not in _NAME_FIELDS and isinstance(v, int | float) and not isinstance(v, bool) and v
    ][:_ITEMS]
    head = " > ".join(names) or "item"
    return head + (f" ({', '.join(figures)})" if figures else "")


def value_text(value: Any) -> str:
    """One evidence value as people read it (see the module doc)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return number(float(value))
    if isinstance(value, str):
        return _text(value, 2 * _TEXT_CHARS)
    if isinstance(value, dict):
        items = [(k, v) for k, v in value.items() if v is not None]
        if items and all(isinstance(v, int | float) and not isinstance(v, bool) for _, v in items):
            items.sort(key=lambda kv: -abs(float(kv[1])))
        shown = [f"{_text(str(k))} {value_text(v)}" for k, v in items[:_ITEMS]]
        return _more(shown, len(items))
    if isinstance(value, list | tuple):
        items = [v for v in value if v is not None]
        shown = [_record(v) if isinstance(v, dict) else value_text(v) for v in items[:_ITEMS]]
        return _more(shown, len(items))
    return _text(str(value))


def evidence_text(evidence: dict[str, Any], limit: int = EVIDENCE_CHARS) -> str:
    """``evidence`` as one line: ``name value; name value`` (see the module doc), at most
    ``limit`` characters."""
    text = "; ".join(_figure(k, v) for k, v in evidence.items() if v is not None and v != "")
    return text if len(text) <= limit else text[: limit - 3].rstrip(" ;,") + "..."

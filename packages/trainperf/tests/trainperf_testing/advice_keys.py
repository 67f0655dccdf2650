"""Checks that advice names only configuration keys a run has: every dotted, key-looking token
in a finding's title, suggestion and candidates, and every candidate override, must exist in
the run's config (with no config, there must be none at all)."""

from __future__ import annotations

import re
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from trainperf.core.findings import Finding

# A dotted name not preceded by a word, dot, slash or dash (no file paths, no version numbers)
# and not followed by a word character or "(" (a call like model.to(...) is code, not a key).
_DOTTED = re.compile(r"(?<![\w./\-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?![\w(])")
# Dotted names that are Python API paths, not configuration keys.
_MODULES = ("torch.", "ocr.", "np.", "numpy.", "cv2.", "lightning.", "os.", "sys.")
_FILES = (".json", ".jsonl", ".yaml", ".py", ".html", ".gz", ".ckpt", ".md", ".txt")
_ABBREVIATIONS = {"e.g", "i.e"}


def dotted_tokens(text: str) -> set[str]:
    """The key-looking dotted names in ``text``."""
    return {
        t
        for t in _DOTTED.findall(text)
        if not t.startswith(_MODULES) and not t.endswith(_FILES) and t not in _ABBREVIATIONS
    }


def has_key(config: dict[str, Any] | None, dotted: str) -> bool:
    """``dotted`` names a key (of any value, ``None`` included) in ``config``."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def absent_keys(findings: list[Finding], config: dict[str, Any] | None) -> list[str]:
    """``"<finding>: <token>"`` for each key-looking token or override key the config lacks."""
    bad = []
    for f in findings:
        texts = [f.title, f.suggestion, *f.corroboration]
        texts += [c.description for c in f.candidates]
        for text in texts:
            bad += [f"{f.id}: {t}" for t in sorted(dotted_tokens(text)) if not has_key(config, t)]
        for c in f.candidates:
            if c.override is not None:
                key = c.override.split("=", 1)[0]
                if key.startswith("+"):  # Hydra adds the key: its node exists, the key does not
                    node = key[1:].rpartition(".")[0]
                    if not has_key(config, node) or has_key(config, key[1:]):
                        bad.append(f"{f.id}: override {c.override}")
                elif not has_key(config, key):
                    bad.append(f"{f.id}: override {c.override}")
    return bad


def parse_override(text: str) -> tuple[str, Any]:
    """(key, value) of a Hydra override; raises Hydra's own error when it does not parse."""
    (parsed,) = OverridesParser.create().parse_overrides([text])
    return parsed.key_or_group, parsed.value()

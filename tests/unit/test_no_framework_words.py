"""No Lightning, Hydra, Hugging Face or app word below the adapters (issue 39).

The layers below the framework adapters (``core``, ``records``, ``alerts``, ``analysis``,
``probe``, ``present``, ``recording`` and ``errors.py``) know no framework and no app by name:
framework knowledge reaches them as data that adapter territory supplies (Lightning's action
grammar: ``trainperf.frameworks.lightning_grammar``; how each framework writes a change:
``trainperf.frameworks.spellings``, recorded in ``run.json`` by the adapter). Adapter territory
is ``trainperf.lightning``, ``trainperf.loop``, ``trainperf.hf``, ``trainperf.frameworks`` (their
data, importable without the framework) and ``trainperf.cli`` (the commands, beside the
adapters); ``trainperf/__init__.py`` is the composition root that registers the data.

What is checked is code: identifiers and string literals (f-strings included). Docstrings and
comments may name a framework as an example of what the data describes; a word that decides
behaviour or reaches a user may not. :data:`ALLOWED` lists the few exceptions, each with why.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import trainperf

PACKAGE = Path(trainperf.__file__).parent
#: The layers below the adapters (packages of trainperf, and errors.py).
BELOW_ADAPTERS = ("core", "records", "alerts", "analysis", "probe", "present", "recording")
BELOW_MODULES = ("errors.py",)
#: Adapter territory: may name its framework (listed to make the split explicit).
ADAPTERS = ("lightning", "loop", "hf", "frameworks", "cli")

#: The words: Lightning's, Hydra's and OmegaConf's, Hugging Face's, the app's.
WORDS = re.compile(
    r"lightning|\[pl\]|\bpl_module\b|Trainer\(|\btrainer\.|hydra|omegaconf|DictConfig"
    r"|TrainingArguments|transformers|\bocr[-_.]|\bocr\b|receipt[-_]ocr|callbacks=monitoring",
    re.IGNORECASE,
)
#: ``trainer.`` is a word only in lower case (an attribute of Lightning's trainer object).
_CASED = {"trainer.": re.compile(r"\btrainer\.")}

#: (module, word as matched, lower case) -> why it may stay. Each entry is a name the run-folder
#: format or the command line has carried since before the adapters existed: renaming it would
#: make old run folders or users' command lines unreadable.
ALLOWED: dict[tuple[str, str], str] = {
    ("records/schema.py", "receipt-ocr"): (
        "LEGACY_SCHEMA_PREFIX: the schema name of records written before the toolkit was its "
        "own package; read as today's (old run folders)"
    ),
    ("records/run_record.py", "hydra"): (
        "run.json's 'hydra' entry (HydraApp: how try re-runs a config app), a field name of the "
        "run-folder format, filled by trainperf.frameworks.hydra_app; and what an older entry, "
        "recorded before its output override and dropped keys were data, meant (LEGACY_*)"
    ),
    ("records/run_record.py", "lightning"): (
        "run.json's field names 'lightning_module' (the model class, written by the Lightning "
        "adapter) and 'lightning_version' (older folders, read through analysis/legacy_layout)"
    ),
    ("analysis/legacy_layout.py", "hydra"): (
        "the one compatibility module: older folders kept the app's config only in .hydra/"
    ),
    ("analysis/legacy_layout.py", "lightning"): (
        "the one compatibility module: older folders were all recorded by the Lightning "
        "callbacks (their version field, the hints the report gave them)"
    ),
    ("analysis/legacy_layout.py", "trainer."): (
        "the one compatibility module: how an older (Lightning) folder's run is resumed"
    ),
    ("core/knobs.py", "trainer."): (
        "the knob name trainer.precision: a documented command-line identifier "
        "(--candidate knob:trainer.precision=bf16-mixed)"
    ),
}


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return lines


def framework_words(source: str) -> list[tuple[int, str, str]]:
    """``(line, word, token)`` for each framework or app word in ``source``'s code (names,
    attribute reads of a ``trainer`` and string literals outside docstrings; comments left
    out), in line order."""
    tree = ast.parse(source)
    docs = _docstring_lines(tree)
    found: list[tuple[int, str, str]] = [
        (node.lineno, "trainer.", f"trainer.{node.attr}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "trainer"
    ]
    kinds = {tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in kinds or (tok.type == tokenize.STRING and tok.start[0] in docs):
            continue
        for m in WORDS.finditer(tok.string):
            word = m.group(0).lower()
            cased = _CASED.get(word)
            if cased is not None and not cased.search(tok.string):
                continue
            word = "lightning" if "lightning" in word else word
            word = "hydra" if "hydra" in word else word
            found.append((tok.start[0], word, tok.string))
    return sorted(found, key=lambda f: f[0])


def _modules() -> list[Path]:
    files = [PACKAGE / m for m in BELOW_MODULES]
    for package in BELOW_ADAPTERS:
        files += sorted((PACKAGE / package).rglob("*.py"))
    return files


def test_the_split_covers_every_package() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert packages <= set(BELOW_ADAPTERS) | set(ADAPTERS), packages - set(BELOW_ADAPTERS)


def test_no_framework_or_app_word_below_the_adapters() -> None:
    offending = []
    used: set[tuple[str, str]] = set()
    for path in _modules():
        rel = path.relative_to(PACKAGE).as_posix()
        for line, word, token in framework_words(path.read_text(encoding="utf-8")):
            if (rel, word) in ALLOWED:
                used.add((rel, word))
                continue
            offending.append(f"{rel}:{line}: {word!r} in {token[:80]!r}")
    assert not offending, "\n".join(offending)
    # an exception no longer needed goes: the list stays the exact set of exceptions
    assert set(ALLOWED) == used, set(ALLOWED) - used


def test_the_scan_finds_a_planted_word_in_code_not_in_prose() -> None:
    source = '''"""Lightning's words in a docstring are prose."""
# a comment naming Hydra is prose too
LABEL = "Lightning loop (outside hooks)"
def f(trainer):
    """trainer.precision in prose."""
    return trainer.precision, f"with ocr-train: {LABEL}", "DataLoader(num_workers=4)"
'''
    words = [(line, word) for line, word, _ in framework_words(source)]
    assert words == [(3, "lightning"), (6, "trainer."), (6, "ocr-")]

"""Finding ids are spelled in one module only: no ``str`` constant in the toolkit's source equals
a built-in finding id (or its ``trace:`` / ``alert:`` form), and no f-string builds a ``trace:`` /
``alert:`` id by hand, outside :mod:`trainperf.core.finding_ids` (issue 40).

A few words are also another vocabulary's (:data:`OTHER_CONCEPTS`: the phase ``unattributed``,
the epoch-scan record kind ``recompiles``, the step signals' ``straggler`` field, the metric key
suffix ``straggler_rank``, the trace's old phase name ``data_loading``): those are flagged only
where they stand for a finding id (``id=``, a comparison with ``.id``, a call's id argument), so
the phase or the record keeps its word."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import trainperf
from trainperf.core.clock import PHASES
from trainperf.core.finding_ids import (
    ALERT_PREFIX,
    TRACE_PREFIX,
    AlertName,
    FindingId,
    TraceFindingId,
    alert_finding_id,
    in_verdict,
)

SRC = Path(trainperf.__file__).resolve().parent
HOME = SRC / "core" / "finding_ids.py"

#: Every spelling of a built-in id: the plain word, and its ``trace:`` / ``alert:`` forms.
IDS = frozenset(
    {str(i) for i in FindingId}
    | {str(i) for i in TraceFindingId}
    | {in_verdict(i) for i in TraceFindingId}
    | {str(n) for n in AlertName}
    | {alert_finding_id(n) for n in AlertName}
)


#: Ids that are also the words of another concept (see the module doc).
# ``data_loading``: also the trace's phase name before it took the clock's (old records read)
OTHER_CONCEPTS = (
    frozenset(PHASES) | {"recompiles", "straggler", "straggler_rank", "data_loading"}
) & IDS

#: The head of an f-string that builds a prefixed id (``f"trace:{rule}"``); a title that starts
#: with the word (``f"trace: {n} ops"``) is prose.
_HAND_BUILT = re.compile(rf"(?:{re.escape(TRACE_PREFIX)}|{re.escape(ALERT_PREFIX)})\w*")

#: Calls whose first argument is a finding id.
_ID_CALLS = frozenset({"candidates_for", "in_verdict", "alert_finding_id"})


def _id_positions(tree: ast.AST) -> set[int]:
    """ids of the constants that stand where a finding id does: ``id=...``, compared with an
    ``.id`` attribute, or the first argument of :data:`_ID_CALLS`."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            out |= {id(k.value) for k in node.keywords if k.arg == "id"}
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in _ID_CALLS and node.args:
                out.add(id(node.args[0]))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(x, ast.Attribute) and x.attr == "id" for x in sides):
                for x in sides:
                    out.add(id(x))
                    if isinstance(x, ast.Tuple | ast.List | ast.Set):
                        out |= {id(e) for e in x.elts}
    return out


def _not_ids(tree: ast.AST) -> set[int]:
    """ids of the constants that are not data: docstrings (a module's, class's or function's
    first statement) and the names in ``__all__`` (a function may share a word with an id)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            out |= {id(c) for c in ast.walk(node.value)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def literal_hits(path: Path) -> list[str]:
    """``file:line: 'value'`` for each finding-id literal and hand-built prefixed f-string."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = _not_ids(tree)
    id_positions = _id_positions(tree)
    where = path.relative_to(SRC)
    hits: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if (
                isinstance(head, ast.Constant)
                and isinstance(head.value, str)
                and _HAND_BUILT.fullmatch(head.value)
                and len(node.values) > 1
            ):
                hits.append(f"{where}:{node.lineno}: f-string {head.value!r}...")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and node.value in IDS
            and (node.value not in OTHER_CONCEPTS or id(node) in id_positions)
        ):
            hits.append(f"{where}:{node.lineno}: {node.value!r}")
    return hits


def test_the_walk_sees_a_literal_and_a_hand_built_id(tmp_path: Path) -> None:
    planted = SRC / "_planted_for_the_test.py"
    planted.write_text(
        'X = "input_bound"\nY = f"trace:{X}"\nZ = "not an id"\nP = "unattributed"\n'
        'F = Finding(id="unattributed")\n',
        encoding="utf-8",
    )
    try:
        hits = literal_hits(planted)
    finally:
        planted.unlink()
    assert hits == [
        "_planted_for_the_test.py:1: 'input_bound'",
        "_planted_for_the_test.py:2: f-string 'trace:'...",
        "_planted_for_the_test.py:5: 'unattributed'",
    ]


def test_finding_ids_are_spelled_in_finding_ids_only() -> None:
    hits = [h for p in sorted(SRC.rglob("*.py")) if p != HOME for h in literal_hits(p)]
    assert not hits, "finding-id literals outside core/finding_ids.py:\n" + "\n".join(hits)

"""Readable op and kernel names for tables.

C++ kernel names carry their whole template and argument lists
(``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,
at::detail::Array<char*, 1> >(int, ...)``; an embedding kernel of a recommender model has 40
template arguments): in a terminal table one name folds onto dozens of lines. :func:`short_name`
folds each such list into ``<…>`` / ``(…)``. Tables show the short name; the JSON output keeps
the full one, and the HTML report shows it on hover.
"""

from __future__ import annotations

from collections import Counter

__all__ = ["short_name", "short_names"]

#: A list this long or shorter stays as written (``module.py(1501)``, ``Tensor<int>``).
FOLD_MIN_CHARS = 8
#: A list without a comma or a nested list stays as written up to this length
#: (``enumerate(DataLoader)#...``: a single word names something).
FOLD_SINGLE_CHARS = 24
_OPEN = {"<": ">", "(": ")"}
_ELLIPSIS = "…"


def short_name(name: str, keep: int = 0) -> str:
    """``name`` with every template argument list (``<...>``) and function argument list
    (``(...)``) that follows an identifier and holds more than :data:`FOLD_MIN_CHARS`
    characters folded to ``<…>`` / ``(…)``; ``keep`` levels of such lists stay open (their own
    nested lists folded). A kernel's ``void`` return type is dropped.

    Lists that do not follow a name are kept: ``Memcpy HtoD (Pageable -> Device)``,
    ``(anonymous namespace)``, ``<built-in method ...>``; so are ``->`` and ``operator<``-style
    comparisons, and an unbalanced bracket leaves the rest of the name as written.

    >>> short_name("void k<float, float, 4>(int, float*)")
    'k<…>(…)'
    >>> short_name("void k<float, Op<float, float>>(int, float*)", keep=1)
    'void k<float, Op<…>>(…)'
    >>> short_name("aten::add_")
    'aten::add_'
    """
    if "<" not in name and "(" not in name:
        return name
    if keep == 0 and name.startswith("void ") and "(" in name:
        name = name[5:]  # a kernel's return type says nothing
    out: list[str] = []
    i, n = 0, len(name)
    while i < n:
        c = name[i]
        if c in _OPEN and i > 0 and (name[i - 1].isalnum() or name[i - 1] in "_>"):
            end = _closing(name, i)
            if end is not None and _foldable(name[i + 1 : end]):
                if keep and c == "<":
                    out.append(c + short_name(name[i + 1 : end], keep - 1) + ">")
                else:
                    out.append(c + _ELLIPSIS + _OPEN[c])
                i = end + 1
                continue
        out.append(c)
        i += 1
    return "".join(out)


def short_names(names: list[str]) -> list[str]:
    """:func:`short_name` of each of ``names`` (the rows of one table), folded only as far as
    keeps them apart: a name whose short form another name shares keeps one more level of
    template arguments open (up to two), then is shown in full. Two rows never read as one
    op."""
    out: list[str | None] = [None] * len(names)
    pending = list(range(len(names)))
    for keep in range(3):
        cand = {i: short_name(names[i], keep) for i in pending}
        counts = Counter(cand.values())
        counts.update(s for s in out if s is not None)
        for i, s in cand.items():
            if counts[s] == 1:
                out[i] = s
        pending = [i for i in pending if out[i] is None]
    return [names[i] if s is None else s for i, s in enumerate(out)]


def _foldable(inner: str) -> bool:
    """Whether a list with this content is folded: several items, nested lists, or long."""
    if len(inner) <= FOLD_MIN_CHARS:
        return False
    return len(inner) > FOLD_SINGLE_CHARS or any(c in inner for c in ",<(")


def _closing(name: str, start: int) -> int | None:
    """Index of the bracket that closes the one at ``start`` (``None``: unbalanced). Inside,
    ``(`` / ``)`` and ``<`` / ``>`` nest; a ``>`` that closes nothing open (``->``, a
    comparison inside parentheses) is text."""
    stack = [name[start]]
    for j in range(start + 1, len(name)):
        c = name[j]
        if c in _OPEN:
            if c == "<" and stack[-1] == "(":
                continue  # a comparison inside an argument list
            stack.append(c)
        elif c == ">" or c == ")":
            if _OPEN[stack[-1]] != c:
                if c == ")":
                    return None  # ')' while a '<' is open: not a template list after all
                continue  # '->' or a comparison
            if c == ">" and name[j - 1] == "-":
                continue
            stack.pop()
            if not stack:
                return j
    return None

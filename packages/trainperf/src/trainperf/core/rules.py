"""The one rule shape, its registries and the ordered evaluation of a rule list.

The one rule shape: a rule reads one typed context and returns findings; a registry keeps a
domain's default rules, and :func:`evaluate` runs a list of them in the order their declared
dependencies give.

A rule (:class:`Rule`) has a ``name``, the finding ids it may ``emit``, the ids of earlier
findings it ``reads`` and the ids it ``supersedes`` (its finding replaces theirs), and
``evaluate(context) -> findings``. Each domain has its own context type (the verdict's, the trace
rules', the live alerts' window) and its own :class:`Registry` with the default list; a caller
passes a list of rules (``judge(run, rules=[*VERDICT_RULES.default(), MyRule()])``) or registers
one for every run (``VERDICT_RULES.register(MyRule())``).

Order is explicit: a rule that reads or supersedes id X runs after every rule that emits X
(:func:`ordered`; a cycle is a :class:`~trainperf.errors.ConfigError` naming the rules), and a
rule sees only the earlier findings it declared (:class:`Earlier`), so an undeclared dependency
fails loudly instead of silently depending on list order. ``function_rule`` turns a plain
function into a rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, runtime_checkable

from trainperf.core.finding_ids import BUILT_IN_IDS
from trainperf.core.findings import Finding
from trainperf.errors import ConfigError

__all__ = [
    "Earlier",
    "FunctionRule",
    "Registry",
    "Rule",
    "RuleOrderError",
    "evaluate",
    "function_rule",
    "ordered",
]

C = TypeVar("C", contravariant=True)
Ctx = TypeVar("Ctx")


@runtime_checkable
class Rule(Protocol[C]):
    """A rule: ``evaluate(context)`` returns its findings (empty when it has nothing to say)."""

    @property
    def name(self) -> str: ...

    @property
    def emits(self) -> frozenset[str]: ...

    @property
    def reads(self) -> frozenset[str]: ...

    @property
    def supersedes(self) -> frozenset[str]: ...

    def evaluate(self, context: C, /) -> Sequence[Finding]: ...


class RuleOrderError(ConfigError):
    """A rule read an earlier finding it did not declare in ``reads``, or the rules' declared
    dependencies form a cycle."""


class Earlier:
    """The findings the rules before this one returned, readable by the ids the running rule
    declared in ``reads`` (or ``supersedes``) only."""

    def __init__(self) -> None:
        self._found: list[Finding] = []
        self._rule = ""
        self._allowed: frozenset[str] = frozenset()

    def of(self, *ids: str) -> list[Finding]:
        """The earlier findings with one of ``ids``, in the order they were found."""
        undeclared = sorted(set(ids) - self._allowed)
        if undeclared:
            raise RuleOrderError(
                f"rule {self._rule!r} reads finding id(s) {undeclared} it does not declare in "
                "`reads`: declare them so the rules that emit them run first"
            )
        return [f for f in self._found if f.id in ids]

    def first(self, finding_id: str) -> Finding | None:
        """The first earlier finding with ``finding_id``, or ``None``."""
        found = self.of(finding_id)
        return found[0] if found else None

    def has(self, finding_id: str) -> bool:
        """Whether an earlier rule found ``finding_id``."""
        return bool(self.of(finding_id))

    def _enter(self, name: str, allowed: frozenset[str]) -> None:
        self._rule = name
        self._allowed = allowed

    def _add(self, findings: Sequence[Finding]) -> None:
        self._found.extend(findings)

    @property
    def all(self) -> list[Finding]:
        """Every finding so far (for the engine and for a domain's final steps, not rules)."""
        return list(self._found)

    def _replace(self, kept: list[Finding]) -> None:
        self._found = kept


@dataclass(frozen=True)
class FunctionRule(Generic[Ctx]):
    """A plain function ``context -> Finding | Sequence[Finding] | None`` as a :class:`Rule`."""

    name: str
    fn: Callable[[Ctx], Finding | Sequence[Finding] | None]
    emits: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()
    supersedes: frozenset[str] = frozenset()

    def evaluate(self, context: Ctx, /) -> Sequence[Finding]:
        out = self.fn(context)
        if out is None:
            return []
        return [out] if isinstance(out, Finding) else list(out)


def function_rule(
    name: str,
    *,
    emits: Iterable[str] = (),
    reads: Iterable[str] = (),
    supersedes: Iterable[str] = (),
) -> Callable[[Callable[[Ctx], Finding | Sequence[Finding] | None]], FunctionRule[Ctx]]:
    """Decorator: ``@function_rule("slow_io", emits={"myteam:slow_io"})`` over a function of the
    domain's context makes it a rule."""

    def wrap(fn: Callable[[Ctx], Finding | Sequence[Finding] | None]) -> FunctionRule[Ctx]:
        return FunctionRule(
            str(name), fn, frozenset(emits), frozenset(reads), frozenset(supersedes)
        )

    return wrap


def ordered(rules: Sequence[Rule[Ctx]]) -> list[Rule[Ctx]]:
    """``rules`` in list order, except that a rule reading or superseding id X comes after every
    rule that emits X (a stable topological order); a cycle raises :class:`RuleOrderError`."""
    names = [r.name for r in rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RuleOrderError(f"two rules share the name(s) {dupes}: give each rule its own name")
    after: dict[int, set[int]] = {
        i: {
            j
            for j, other in enumerate(rules)
            if j != i and other.emits & (rule.reads | rule.supersedes)
        }
        for i, rule in enumerate(rules)
    }
    done: list[int] = []
    placed: set[int] = set()
    while len(done) < len(rules):
        ready = [i for i in range(len(rules)) if i not in placed and after[i] <= placed]
        if not ready:
            stuck = sorted(rules[i].name for i in range(len(rules)) if i not in placed)
            raise RuleOrderError(f"the rules {stuck} read or supersede each other in a cycle")
        done.append(ready[0])
        placed.add(ready[0])
    return [rules[i] for i in done]


def evaluate(rules: Sequence[Rule[Ctx]], context: Ctx, earlier: Earlier) -> list[Finding]:
    """Run ``rules`` (:func:`ordered`) on ``context``; ``earlier`` is the context's view of the
    findings so far (the context holds it, so a rule reads them through its context). A finding
    whose rule supersedes ids drops the earlier findings with those ids and names them in its
    corroboration (their titles, unless a line of its corroboration already quotes one: the
    rule worded it). Returns every finding, in the order found."""
    for rule in ordered(rules):
        earlier._enter(rule.name, rule.reads | rule.supersedes)
        found = list(rule.evaluate(context))
        if found and rule.supersedes:
            gone = [f for f in earlier.all if f.id in rule.supersedes]
            for f in found:  # unless the rule named them itself, in its own words
                f.corroboration += [
                    g.title for g in gone if not any(g.title in c for c in f.corroboration)
                ]
            earlier._replace([f for f in earlier.all if f.id not in rule.supersedes])
        earlier._add(found)
    return earlier.all


@dataclass
class Registry(Generic[Ctx]):
    """A domain's rules: the built-in ``defaults`` and what callers ``register``; ``default()``
    is the list a run uses when it is given none."""

    domain: str
    _rules: list[Rule[Ctx]] = field(default_factory=list)

    def add_builtin(self, *rules: Rule[Ctx]) -> None:
        """The package's own rules, in their default order (their own ids only)."""
        self._rules.extend(rules)

    def register(self, rule: Rule[Ctx]) -> Rule[Ctx]:
        """Add ``rule`` to the default list of every later run (returns it, so it can decorate).
        Its name must be new and its ids not a built-in rule's."""
        if any(r.name == rule.name for r in self._rules):
            raise ConfigError(f"a {self.domain} rule named {rule.name!r} is already registered")
        clash = sorted(rule.emits & BUILT_IN_IDS)
        if clash:
            raise ConfigError(
                f"{self.domain} rule {rule.name!r} emits built-in finding id(s) {clash}: "
                "name your own (a namespaced id such as 'myteam:slow_io')"
            )
        self._rules.append(rule)
        return rule

    def unregister(self, name: str) -> None:
        """Take the rule named ``name`` out of the default list."""
        kept = [r for r in self._rules if r.name != name]
        if len(kept) == len(self._rules):
            raise ConfigError(f"no {self.domain} rule named {name!r}: {self.names()}")
        self._rules = kept

    def default(self) -> list[Rule[Ctx]]:
        """A copy of the default list (built-ins first, then registered rules)."""
        return list(self._rules)

    def names(self) -> list[str]:
        return [r.name for r in self._rules]

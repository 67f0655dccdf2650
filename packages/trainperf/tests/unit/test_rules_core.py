"""The one rule shape's engine (:mod:`trainperf.core.rules`): order from declared reads and
supersedes, the Earlier view that refuses undeclared reads, superseding, and the registry's
refusals (issue 40)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from trainperf.core.findings import Finding
from trainperf.core.rules import (
    Earlier,
    FunctionRule,
    Registry,
    RuleOrderError,
    evaluate,
    function_rule,
    ordered,
)
from trainperf.errors import ConfigError


@dataclass
class Ctx:
    earlier: Earlier = field(default_factory=Earlier)
    seen: list[str] = field(default_factory=list)


def finding(fid: str, title: str = "") -> Finding:
    return Finding(
        id=fid,
        severity="info",
        score=1.0,
        title=title or fid,
        evidence={},
        threshold={},
        suggestion=".",
    )


def emitter(name: str, fid: str, reads: frozenset[str] = frozenset()) -> FunctionRule[Ctx]:
    def run(ctx: Ctx) -> Finding:
        ctx.seen.append(name)
        for r in sorted(reads):
            ctx.earlier.of(r)
        return finding(fid)

    return FunctionRule(name, run, frozenset({fid}), reads)


def test_readers_run_after_emitters_else_list_order() -> None:
    a = emitter("a", "t:a")
    b = emitter("b", "t:b", frozenset({"t:c"}))
    c = emitter("c", "t:c")
    d = emitter("d", "t:d")
    assert [r.name for r in ordered([a, b, c, d])] == ["a", "c", "b", "d"]
    ctx = Ctx()
    found = evaluate([b, a, c, d], ctx, ctx.earlier)
    assert ctx.seen == ["a", "c", "b", "d"]
    assert [f.id for f in found] == ["t:a", "t:c", "t:b", "t:d"]


def test_cycles_and_duplicate_names_are_refused() -> None:
    x = emitter("x", "t:x", frozenset({"t:y"}))
    y = emitter("y", "t:y", frozenset({"t:x"}))
    with pytest.raises(RuleOrderError, match=r"\['x', 'y'\].*cycle"):
        ordered([x, y])
    with pytest.raises(RuleOrderError, match=r"share the name\(s\) \['x'\]"):
        ordered([x, emitter("x", "t:z")])


def test_an_undeclared_read_names_the_rule_and_the_id() -> None:
    @function_rule("nosy", emits={"t:n"})
    def nosy(ctx: Ctx) -> None:
        ctx.earlier.has("t:a")

    ctx = Ctx()
    with pytest.raises(RuleOrderError, match=r"'nosy' reads finding id\(s\) \['t:a'\]"):
        evaluate([emitter("a", "t:a"), nosy], ctx, ctx.earlier)


def test_a_superseding_finding_replaces_and_names_the_old_one_once() -> None:
    @function_rule("plain", emits={"t:new"}, supersedes={"t:old"})
    def plain(ctx: Ctx) -> Finding:
        return finding("t:new")

    @function_rule("worded", emits={"t:new"}, supersedes={"t:old"})
    def worded(ctx: Ctx) -> Finding:
        f = finding("t:new")
        f.corroboration.append(f"the trace: {ctx.earlier.of('t:old')[0].title}")
        return f

    for rule, expected in ((plain, ["old title"]), (worded, ["the trace: old title"])):
        ctx = Ctx()
        old: FunctionRule[Ctx] = FunctionRule(
            "old", lambda c: finding("t:old", "old title"), frozenset({"t:old"})
        )
        found = evaluate([rule, old], ctx, ctx.earlier)
        assert [f.id for f in found] == ["t:new"]
        assert found[0].corroboration == expected


def test_a_superseding_rule_that_finds_nothing_leaves_the_old_finding() -> None:
    @function_rule("quiet", supersedes={"t:old"})
    def quiet(ctx: Ctx) -> None:
        return None

    ctx = Ctx()
    old: FunctionRule[Ctx] = FunctionRule("old", lambda c: finding("t:old"), frozenset({"t:old"}))
    assert [f.id for f in evaluate([quiet, old], ctx, ctx.earlier)] == ["t:old"]


def test_the_registry_refuses_built_in_ids_and_taken_names() -> None:
    reg: Registry[Ctx] = Registry("test")
    reg.add_builtin(emitter("a", "t:a"))
    mine = reg.register(emitter("mine", "myteam:x"))
    assert reg.names() == ["a", "mine"]
    with pytest.raises(ConfigError, match="already registered"):
        reg.register(emitter("mine", "myteam:y"))
    with pytest.raises(ConfigError, match=r"built-in finding id\(s\) \['input_bound'\]"):
        reg.register(emitter("impostor", "input_bound"))
    reg.unregister(mine.name)
    assert reg.names() == ["a"]
    with pytest.raises(ConfigError, match="no test rule named 'mine'"):
        reg.unregister("mine")
    listed = reg.default()
    listed.clear()
    assert reg.names() == ["a"]  # default() is a copy

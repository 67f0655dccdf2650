"""Trace rules in the one rule shape: a rule written here (its own ``myteam:`` id) joins the
built-in list passed as ``rules=`` and its finding reaches the analysis; ``supersedes`` drops
``optimizer_not_multi_tensor`` beside ``optimizer_host_bound`` whatever the list's order; a rule
that reads an earlier finding runs after the rule that emits it; the registry refuses a built-in
id."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainperf.analysis.trace import TRACE_RULES, TraceContext, analyze_path
from trainperf.analysis.trace.trace_metrics import TraceMetrics
from trainperf.analysis.trace.trace_rules import evaluate
from trainperf.core.finding_ids import TraceFindingId
from trainperf.core.findings import Finding
from trainperf.core.rules import FunctionRule, RuleOrderError, function_rule
from trainperf.errors import ConfigError

from trainperf_testing.synth import make_trace, write

MINE = "myteam:few_steps"


@function_rule("few_steps", emits={MINE})
def few_steps(context: TraceContext) -> Finding | None:
    """Fires on a trace with fewer than 10 profiled steps, naming the count it saw."""
    m = context.metrics
    if m.n_steps >= 10:
        return None
    return Finding(
        id=MINE,
        severity="info",
        score=0.0,
        source="trace",
        title=f"only {m.n_steps} profiled steps",
        evidence={"steps": m.n_steps},
        threshold={"steps": 10.0},
        suggestion="profile more steps",
    )


def test_a_custom_rule_passed_with_the_defaults_reaches_the_analysis(tmp_path: Path) -> None:
    trace = write(make_trace(n_steps=6), tmp_path / "t.json")
    plain = analyze_path(trace)
    mine = analyze_path(trace, rules=[*TRACE_RULES.default(), few_steps])
    assert MINE not in {f.id for f in plain.findings}
    (found,) = [f for f in mine.findings if f.id == MINE]
    assert found.evidence == {"steps": 6}
    # the built-in findings are those of the default list, unchanged
    assert [f.id for f in mine.findings if f.id != MINE] == [f.id for f in plain.findings]
    assert MINE in {f["id"] for f in mine.as_dict()["findings"]}
    # a trace of 12 steps: the rule stays silent
    longer = write(make_trace(n_steps=12), tmp_path / "l.json")
    assert MINE not in {f.id for f in analyze_path(longer, rules=[few_steps]).findings}


def _optimizer_both() -> TraceMetrics:
    """An AdamW that loops on the host with the GPU idle and steps parameter by parameter: both
    optimizer rules' conditions hold."""
    return TraceMetrics(
        has_gpu=True,
        n_steps=10,
        step_wall_ms=1000.0,
        data_wait_pct=0.0,
        optimizer_names=["AdamW"],
        optimizer_ops_per_step=600.0,
        optimizer_params=100,
        optimizer_ops_per_param=6.0,
        optimizer_ms_per_step=40.0,
        optimizer_gpu_ms_per_step=1.0,
        optimizer_blocked_ms_per_step=0.0,
        optimizer_pct=40.0,
        optimizer_steps=10,
    )


def _rule(finding_id: str) -> FunctionRule[TraceContext]:
    (rule,) = [r for r in TRACE_RULES.default() if r.name == finding_id]
    assert isinstance(rule, FunctionRule)
    return rule


def test_optimizer_host_bound_supersedes_the_per_parameter_finding_in_any_order() -> None:
    host_bound = _rule(TraceFindingId.OPTIMIZER_HOST_BOUND)
    per_param = _rule(TraceFindingId.OPTIMIZER_NOT_MULTI_TENSOR)
    assert host_bound.supersedes == {TraceFindingId.OPTIMIZER_NOT_MULTI_TENSOR}
    alone = evaluate(_optimizer_both(), [per_param])
    assert [f.id for f in alone] == [TraceFindingId.OPTIMIZER_NOT_MULTI_TENSOR]
    for order in ([host_bound, per_param], [per_param, host_bound]):
        found = evaluate(_optimizer_both(), order)
        assert [f.id for f in found] == [TraceFindingId.OPTIMIZER_HOST_BOUND]
        # the superseded finding is named where it went
        assert found[0].corroboration == [alone[0].title]
    defaults = {f.id for f in evaluate(_optimizer_both())}
    assert TraceFindingId.OPTIMIZER_HOST_BOUND in defaults
    assert TraceFindingId.OPTIMIZER_NOT_MULTI_TENSOR not in defaults


def test_a_rule_reading_an_earlier_finding_runs_after_it_and_must_declare_it() -> None:
    seen: list[bool] = []

    @function_rule("follows", emits={"myteam:follows"}, reads={TraceFindingId.OPTIMIZER_HOST_BOUND})
    def follows(context: TraceContext) -> None:
        seen.append(context.earlier.has(TraceFindingId.OPTIMIZER_HOST_BOUND))

    # listed first, it runs after the rule that emits what it reads
    evaluate(_optimizer_both(), [follows, _rule(TraceFindingId.OPTIMIZER_HOST_BOUND)])
    assert seen == [True]

    @function_rule("peeks", emits={"myteam:peeks"})
    def peeks(context: TraceContext) -> None:
        context.earlier.has(TraceFindingId.OPTIMIZER_HOST_BOUND)

    with pytest.raises(RuleOrderError, match="peeks"):
        evaluate(_optimizer_both(), [_rule(TraceFindingId.OPTIMIZER_HOST_BOUND), peeks])


def test_the_trace_registry_refuses_a_built_in_id_and_keeps_a_registered_rule() -> None:
    thief: FunctionRule[TraceContext] = function_rule("thief", emits={TraceFindingId.DATA_LOADING})(
        lambda c: None
    )
    with pytest.raises(ConfigError, match="data_loading"):
        TRACE_RULES.register(thief)
    TRACE_RULES.register(few_steps)
    try:
        assert few_steps in TRACE_RULES.default()
        found = evaluate(TraceMetrics(has_gpu=False, n_steps=3, step_wall_ms=30.0, data_wait_pct=0))
        assert MINE in {f.id for f in found}
    finally:
        TRACE_RULES.unregister("few_steps")
    assert "few_steps" not in TRACE_RULES.names()

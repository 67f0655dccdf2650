"""A verdict rule written outside the package (here, in the test) lands in the report's ranking by
the share of the run its change could recover, given as a list (``build_report(run,
rules=[...])``) or registered for every run (``VERDICT_RULES.register``); its declared reads
order it; an undeclared read, a built-in id or a second rule of the same name is refused
(issue 40; ``docs/toolkit/rules.md`` walks through the same example). Nothing in the package
is edited."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from trainperf.analysis.run import load_run
from trainperf.analysis.stages import summarize_stages
from trainperf.analysis.verdict import VERDICT_RULES, VerdictContext, judge
from trainperf.core.findings import Finding
from trainperf.core.rules import RuleOrderError, function_rule
from trainperf.errors import ConfigError
from trainperf.present.report.build import build_report
from trainperf.present.report.writers import to_markdown
from trainperf.records.monitoring import ProfilerWindow

from trainperf_testing.run_lines import write_lines
from trainperf_testing.runs import CONFIG, epoch_record, make_run

#: The planted cause's share of the run (%): between the train stage's input-bound finding
#: (25 %) and its callbacks (12.5 %), so it ranks second.
SLOW_IO_PCT = 18.0


class SlowShardReads:
    """The worked example of docs/toolkit/rules.md: a team's own rule, a class."""

    name = "myteam.slow_shard_reads"
    emits = frozenset({"myteam:slow_shard_reads"})
    reads: frozenset[str] = frozenset()
    supersedes: frozenset[str] = frozenset()

    def evaluate(self, ctx: VerdictContext) -> Sequence[Finding]:
        train = ctx.train
        if train is None:
            return []
        return [
            Finding(
                id="myteam:slow_shard_reads",
                severity="warning",
                score=SLOW_IO_PCT,
                title="shard reads from the network file system are slow",
                evidence={"train_epochs": train.epochs},
                threshold={},
                suggestion="stage the shards on local disk before training.",
                stage=train.stage,
                source="myteam",
            )
        ]


@function_rule("myteam.input_share", emits={"myteam:input_share"}, reads={"input_bound"})
def input_share(ctx: VerdictContext) -> Finding | None:
    """A function rule that reads an earlier finding it declared."""
    bound = ctx.earlier.first("input_bound")
    if bound is None:
        return None
    return Finding(
        id="myteam:input_share",
        severity="info",
        score=0.0,
        title=f"our dashboards: input-bound at {bound.score:.0f} % of the run",
        evidence={"input_bound_score": bound.score},
        threshold={},
        suggestion="see the input-bound finding.",
        source="myteam",
    )


@function_rule("myteam.sneaky", emits={"myteam:sneaky"})
def sneaky(ctx: VerdictContext) -> Finding | None:
    """Reads input_bound without declaring it."""
    ctx.earlier.has("input_bound")
    return None


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    phases = {"data_wait": 3.0, "forward": 2.0, "backward": 2.0, "optimizer": 0.5}
    epochs = [
        epoch_record("train", e, {**phases, "callbacks": 1.5, "unattributed": 1.0})
        for e in range(3)
    ]
    epochs += [
        epoch_record("val", e, {"data_wait": 0.2, "forward": 0.5, "metric": 1.3}) for e in range(3)
    ]
    return make_run(tmp_path / "run", epochs, config=CONFIG)


def _ids(findings: Sequence[Finding]) -> list[str]:
    return [f"{f.id}@{f.stage}" for f in findings]


def test_a_rule_from_a_list_ranks_by_its_recoverable_share(run_dir: Path) -> None:
    plain = build_report(run_dir)
    assert _ids(plain.findings) == [
        "input_bound@train",
        "callback_overhead@train",
        "slow_metric@val",
        "input_bound@val",
    ]
    report = build_report(run_dir, rules=[*VERDICT_RULES.default(), SlowShardReads()])
    assert _ids(report.findings) == [
        "input_bound@train",
        "myteam:slow_shard_reads@train",
        "callback_overhead@train",
        "slow_metric@val",
        "input_bound@val",
    ]
    mine = report.findings[1]
    assert (mine.recoverable_pct, mine.recoverable_from) == (SLOW_IO_PCT, "bound")
    assert mine.severity == "warning"
    markdown = to_markdown(report)
    assert "shard reads from the network file system are slow" in markdown
    assert markdown.index("network file system") < markdown.index("spent in callbacks")
    assert "network file system" not in to_markdown(plain)


def test_a_registered_rule_joins_every_later_run_until_unregistered(run_dir: Path) -> None:
    VERDICT_RULES.register(SlowShardReads())
    try:
        assert "myteam:slow_shard_reads" in [f.id for f in build_report(run_dir).findings]
        assert "myteam:slow_shard_reads" in [f.id for f in judge(load_run(run_dir))]
    finally:
        VERDICT_RULES.unregister("myteam.slow_shard_reads")
    assert "myteam:slow_shard_reads" not in [f.id for f in build_report(run_dir).findings]


def test_declared_reads_order_the_rules_whatever_the_list_order(run_dir: Path) -> None:
    first = build_report(run_dir, rules=[input_share, *VERDICT_RULES.default()])
    last = build_report(run_dir, rules=[*VERDICT_RULES.default(), input_share])
    for report in (first, last):
        (found,) = [f for f in report.findings if f.id == "myteam:input_share"]
        assert found.evidence == {"input_bound_score": 25.0}
    assert _ids(first.findings) == _ids(last.findings)


def test_an_undeclared_read_names_the_rule_and_the_id(run_dir: Path) -> None:
    with pytest.raises(RuleOrderError, match=r"'myteam\.sneaky'.*'input_bound'"):
        build_report(run_dir, rules=[*VERDICT_RULES.default(), sneaky])


def test_registering_a_built_in_id_or_a_taken_name_is_refused() -> None:
    @function_rule("myteam.impostor", emits={"input_bound"})
    def impostor(ctx: VerdictContext) -> None:
        return None

    with pytest.raises(ConfigError, match=r"built-in finding id\(s\) \['input_bound'\]"):
        VERDICT_RULES.register(impostor)
    with pytest.raises(ConfigError, match="already registered"):
        VERDICT_RULES.register(VERDICT_RULES.default()[0])
    assert "myteam.impostor" not in VERDICT_RULES.names()


def _profiled(run_dir: Path) -> Path:
    """``run_dir`` with a profiler window on train epoch 1 whose trace export (1.2 s) the clock
    booked under the callbacks."""
    window = {
        "t": 1.0,
        "stage": "train",
        "epoch": 1,
        "trigger": "epoch",
        "reason": "epoch 1",
        "steps": 3,
        "batches": [0, 3],
        "overhead_s": {"export": 1.2},
        "traces": [],
        "summary": {"findings": [], "top_cpu_ops": [], "dataloader_time_pct": 0.0},
    }
    write_lines(ProfilerWindow.path(run_dir), ProfilerWindow, [window])
    return run_dir


def test_judge_alone_agrees_with_the_report(run_dir: Path, h200_train_run: Path) -> None:
    """``judge(run)`` works out the stage summaries itself, the profiler windows' cost moved
    out of the callbacks as the report does: on a hand-made run with a profiler window (where
    the move changes the callbacks finding) and on the real H200 run folder."""
    profiled = load_run(_profiled(run_dir))
    unmoved = judge(profiled, summarize_stages(profiled.epochs, profiled.recompiles))
    assert judge(profiled) != unmoved  # the move matters on this run
    for run in (profiled, load_run(h200_train_run)):
        assert judge(run) == build_report(run).findings

"""Live alert rules in the one rule shape: an alert rule written here (a subclass outside the
package) fires through the engine on planted values with its hold and hysteresis, its finding
reaches the verdict's alert findings, it satisfies :class:`trainperf.core.rules.Rule` with
``evaluate(window)``, and the catalogue refuses a built-in rule's name."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import pytest
from trainperf.alerts import (
    ALERT_RULES,
    RULES,
    AlertEngine,
    AlertWindow,
    Check,
    JsonlSink,
    Rule,
    RuleContext,
    build_rules,
)
from trainperf.alerts.engine import Setting
from trainperf.core import rules as core_rules
from trainperf.core.finding_ids import AlertName, FindingId
from trainperf.errors import ConfigError
from trainperf.lightning import ResourceMonitorCallback
from trainperf.present.report import build_report
from trainperf.records.schema import PERF_DIRNAME

from trainperf_testing.runs import epoch_record, make_run


class QueueBacklog(Rule):
    """Fires when the planted ``resources/myteam_queue`` stays above ``limit`` for ``hold_s``;
    clears below ``clear``."""

    name = "myteam_queue_backlog"
    risk = True
    corroborates = FindingId.INPUT_BOUND.value
    DEFAULTS: ClassVar[dict[str, Setting]] = {
        "hold_s": 2.0,
        "cooldown_s": 0.0,
        "limit": 100.0,
        "clear": 50.0,
    }

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        depth = values.get("resources/myteam_queue")
        if depth is None:
            return None
        s = self.settings
        return Check(
            breach=depth > s["limit"],
            clear=depth < s["clear"],
            message=f"queue backlog {depth:.0f} items",
            resolve=f"queue drained to {depth:.0f}",
            evidence={"depth": depth},
            threshold={"limit": float(s["limit"])},
            suggestion="drain the queue",
        )


_DEPTHS = [(0.0, 150.0), (1.0, 150.0), (2.0, 150.0), (3.0, 80.0), (4.0, 40.0), (5.0, 40.0)]


def test_a_custom_alert_rule_fires_through_the_engine_and_reaches_the_verdict(
    tmp_path: Path,
) -> None:
    run = make_run(tmp_path, [epoch_record("train", 0, {"forward": 3.0, "backward": 2.0})])
    engine = AlertEngine([QueueBacklog()], [JsonlSink(run / PERF_DIRNAME / "alerts.jsonl")])
    kinds = [
        [e.event for e in engine.update({"resources/myteam_queue": d}, t=t)] for t, d in _DEPTHS
    ]
    engine.close()
    # fires once the breach has held 2 s; 80 is between clear and limit: still firing
    assert kinds == [[], [], ["fired"], [], ["resolved"], []]
    alerts = [f for f in build_report(run).findings if f.id.startswith("alert:")]
    assert [f.id for f in alerts] == ["alert:myteam_queue_backlog"]
    assert alerts[0].title == "alert myteam_queue_backlog: queue backlog 150 items"


def test_an_alert_rule_is_a_rule_of_the_one_shape_with_its_hysteresis() -> None:
    rule: core_rules.Rule[AlertWindow] = QueueBacklog()  # mypy checks the shape statically
    assert isinstance(rule, core_rules.Rule)
    assert rule.emits == {"alert:myteam_queue_backlog"}
    assert rule.reads == {FindingId.INPUT_BOUND}
    found = [rule.evaluate(AlertWindow(t, {"resources/myteam_queue": d})) for t, d in _DEPTHS]
    assert [len(f) for f in found] == [0, 0, 1, 1, 0, 0]
    assert found[2][0].id == "alert:myteam_queue_backlog"
    assert found[2][0].evidence == {"depth": 150.0}
    assert found[3][0].evidence == {"depth": 80.0}  # still firing: the latest figures
    assert rule.evaluate(AlertWindow(9.0, {})) == []  # no input: nothing to say


def test_a_registered_alert_rule_is_built_and_configured_like_a_built_in_one() -> None:
    ALERT_RULES.register(QueueBacklog)
    try:
        assert RULES[QueueBacklog.name] is QueueBacklog  # the old name is the same registry
        built = build_rules({QueueBacklog.name: {"hold_s": 0.0}, "hang": {"enabled": False}})
        (mine,) = [r for r in built if isinstance(r, QueueBacklog)]
        assert mine.settings["hold_s"] == 0.0
        assert AlertName.HANG not in {r.name for r in built}
        events = AlertEngine(built).update({"resources/myteam_queue": 500.0}, t=0.0)
        assert [(e.rule, e.event) for e in events] == [(QueueBacklog.name, "fired")]
        with pytest.raises(ConfigError, match="already registered"):
            ALERT_RULES.register(QueueBacklog)
        # the Lightning callback's per-rule settings reach it (validated when it is made)
        ResourceMonitorCallback(rules={QueueBacklog.name: {"limit": 5.0}})
        with pytest.raises(ConfigError, match="unknown setting"):
            ResourceMonitorCallback(rules={QueueBacklog.name: {"depth": 5.0}})
    finally:
        ALERT_RULES.unregister(QueueBacklog.name)
    assert QueueBacklog.name not in RULES
    with pytest.raises(ConfigError, match="unknown rule"):
        build_rules({QueueBacklog.name: {}})


def test_the_alert_catalogue_refuses_a_built_in_rule_s_name() -> None:
    class FakeHang(QueueBacklog):
        name = AlertName.HANG.value

    with pytest.raises(ConfigError, match="built-in"):
        ALERT_RULES.register(FakeHang)
    assert ALERT_RULES[AlertName.HANG] is not FakeHang
    with pytest.raises(ConfigError, match="not a subclass"):
        ALERT_RULES.register(dict)  # type: ignore[arg-type]

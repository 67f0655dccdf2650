"""The alert rule catalogue is the one place a rule is declared: a rule added to it reaches the
engine, the Hydra config, the profiler's window label and the verdict without another edit."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from trainperf.alerts import RULES, AlertEngine, Check, Rule, RuleContext, build_rules
from trainperf.alerts.engine import Setting
from trainperf.core import triggers
from trainperf.core.findings import threshold
from trainperf.lightning import ProfilerCallback
from trainperf.present.report import build_report
from trainperf.recording.profiler_settings import ProfileSchedule

import ocr.configs
from trainperf_testing.runs import T0, epoch_record, make_run

REPO_ROOT = Path(__file__).resolve().parents[3]


class Overheat(Rule):
    """A rule that exists only in this test's catalogue: critical, a risk, asks for a profile."""

    name = "test_overheat"
    severity = "critical"
    risk = True
    requests_profile = True
    DEFAULTS: ClassVar[dict[str, Setting]] = {"hold_s": 0.0, "cooldown_s": 0.0, "limit": 1.0}

    def check(self, t: float, values: Mapping[str, float], ctx: RuleContext) -> Check | None:
        value = values.get("resources/test_heat")
        if value is None:
            return None
        return Check(
            breach=value > self.settings["limit"],
            clear=value < self.settings["limit"],
            message=f"heat is {value}",
            resolve="heat is back",
            evidence={"heat": value},
            threshold={"limit": float(self.settings["limit"])},
            suggestion="cool it",
        )


@pytest.fixture
def overheat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RULES, Overheat.name, Overheat)
    monkeypatch.setattr(triggers, "_pending", None)


def _fired(rule: str, rank: int = 0, epoch: int = 0) -> dict[str, object]:
    return {
        "t": T0 + 10,
        "rule": rule,
        "event": "fired",
        "severity": "critical",
        "message": "heat is 3",
        "evidence": {"heat": 3.0},
        "threshold": {"limit": 1.0},
        "suggestion": "cool it",
        "step": 5,
        "epoch": epoch,
        "rank": rank,
    }


@pytest.mark.usefixtures("overheat")
def test_a_rule_added_to_the_catalogue_requests_an_alert_labelled_profile() -> None:
    only = {n: {"enabled": False} for n in RULES if n != Overheat.name}
    engine = AlertEngine(build_rules(only), request_profiles=True)
    events = engine.update({"resources/test_heat": 3.0}, t=0.0)
    assert [(e.rule, e.event) for e in events] == [(Overheat.name, "fired")]
    profiler = ProfilerCallback(schedule=ProfileSchedule(on_request=True))
    profiler._poll()
    assert profiler._pending == ("alert", "test_overheat: heat is 3.0")


@pytest.mark.usefixtures("overheat")
def test_the_profiler_labels_a_catalogue_rule_s_request_alert_and_others_request() -> None:
    profiler = ProfilerCallback(schedule=ProfileSchedule(on_request=True))
    triggers.request_profile("test_overheat: heat is 3")
    profiler._poll()
    assert profiler._pending == ("alert", "test_overheat: heat is 3")
    profiler._pending = None
    triggers.request_profile("user code: look at this")
    profiler._poll()
    assert profiler._pending == ("request", "user code: look at this")


@pytest.mark.usefixtures("overheat")
def test_the_verdict_reads_a_new_rule_s_risk_from_the_catalogue(tmp_path: Path) -> None:
    train = {"forward": 3.0, "backward": 2.0, "optimizer": 0.5}
    make_run(tmp_path, [epoch_record("train", 0, train)], alerts=[_fired(Overheat.name)])
    (finding,) = [f for f in build_report(tmp_path).findings if f.id.startswith("alert:")]
    assert finding.id == "alert:test_overheat"
    assert finding.score == threshold("risk_critical_score")  # a risk, not a plain critical
    assert finding.title == "alert test_overheat: heat is 3"


def test_the_hydra_config_offers_every_rule_of_the_catalogue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def rules() -> dict[str, object]:
        importlib.reload(ocr.configs)  # the config node is made from the catalogue
        with initialize_config_module(config_module="ocr.configs", version_base="1.3"):
            cfg = compose(
                config_name="train",
                overrides=[
                    "callbacks=resource_monitor",
                    "callbacks.resource_monitor.rules.hang.enabled=false",
                ],
            )
        out = OmegaConf.to_container(cfg.callbacks.resource_monitor.rules)
        assert isinstance(out, dict)
        return {str(k): v for k, v in out.items()}

    try:
        with monkeypatch.context() as m:
            m.setitem(RULES, Overheat.name, Overheat)
            composed = rules()
            assert composed[Overheat.name] == Overheat.defaults()
            assert composed["hang"] == {**RULES["hang"].defaults(), "enabled": False}
            assert set(composed) == set(RULES)
    finally:
        importlib.reload(ocr.configs)  # the catalogue as it ships


def test_the_yaml_repeats_no_rule_default() -> None:
    raw = OmegaConf.load(REPO_ROOT / "ocr/configs/callbacks/resource_monitor.yaml")
    assert "rules" not in raw.resource_monitor
    composed = build_rules(None)
    assert {r.name for r in composed} == set(RULES)

"""Alert rule state machine and default rules on synthetic time series; sinks; configuration."""

from __future__ import annotations

import logging
import sys
import types
import warnings
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from trainperf.alerts import (
    RULES,
    AlertEngine,
    AlertEvent,
    AlertSink,
    AlertWarning,
    JsonlSink,
    LogSink,
    RuleContext,
    RuleState,
    StragglerSignal,
    WandbSink,
    build_rules,
)
from trainperf.core import triggers

from trainperf_testing.run_lines import read_dicts


def run_series(
    state: RuleState, series: Iterable[tuple[float, tuple[bool | None, bool]]]
) -> list[tuple[float, str]]:
    """Feed ``(t, (breach, clear))`` pairs; return ``(t, event)`` for every event."""
    events = []
    for t, (breach, clear) in series:
        event = state.update(t, breach, clear)
        if event is not None:
            events.append((t, event))
    return events


# -- the state machine ---------------------------------------------------------------------------


def test_fires_once_after_the_hold_time() -> None:
    state = RuleState(hold_s=5.0, cooldown_s=100.0)
    series = [(float(t), (True, False)) for t in range(0, 30)]
    assert run_series(state, series) == [(5.0, "fired")]


def test_hold_restarts_when_the_condition_lapses() -> None:
    state = RuleState(hold_s=3.0, cooldown_s=0.0)
    pattern = [True, True, False, True, True, True, True]
    events = run_series(state, [(float(t), (b, not b)) for t, b in enumerate(pattern)])
    assert events == [(6.0, "fired")]  # the hold starts again at t=3


def test_quiet_during_cooldown_then_fires_again() -> None:
    state = RuleState(hold_s=0.0, cooldown_s=30.0)
    series = [(0.0, (True, False)), (5.0, (False, True))]  # fired, resolved
    series += [(float(t), (True, False)) for t in range(10, 40)]  # breached again at once
    assert run_series(state, series) == [(0.0, "fired"), (5.0, "resolved"), (30.0, "fired")]


def test_no_data_keeps_a_firing_rule_firing_and_resets_a_pending_hold() -> None:
    state = RuleState(hold_s=2.0, cooldown_s=0.0)
    series = [(0.0, (True, False)), (1.0, (None, False)), (2.0, (True, False))]
    assert run_series(state, series) == []  # the gap restarted the hold at t=2
    series = [(3.0, (True, False)), (4.0, (True, False)), (5.0, (None, True))]
    assert run_series(state, series) == [(4.0, "fired")]
    assert state.firing


# -- the default rules ---------------------------------------------------------------------------


def engine_with(name: str, **settings: Any) -> AlertEngine:
    rules = build_rules({n: {"enabled": n == name} for n in RULES if n != name} | {name: settings})
    return AlertEngine(rules)


def feed(
    engine: AlertEngine, samples: Iterable[tuple[float, dict[str, float]]], **ctx: Any
) -> list[AlertEvent]:
    events = []
    for t, values in samples:
        events += engine.update(values, RuleContext(**ctx), t=t)
    return events


def test_starvation_from_data_wait_share_and_hysteresis() -> None:
    engine = engine_with("gpu_starvation", hold_s=2.0)
    shares = [0.1, 0.5, 0.6, 0.7, 0.5, 0.2, 0.1]  # 0.2 is above the 0.15 clear: still firing
    samples = [(float(t), {"resources/data_wait_share": s}) for t, s in enumerate(shares)]
    events = feed(engine, samples, phase="train")
    assert [(e.event, e.step) for e in events] == [("fired", 0), ("resolved", 0)]
    fired = events[0]
    assert fired.rule == "gpu_starvation"
    assert fired.evidence["data_wait_share"] == pytest.approx(0.7)
    assert "70%" in fired.message
    assert "num_workers" in fired.suggestion
    # Outside training the rule has no data and never fires.
    engine = engine_with("gpu_starvation", hold_s=0.0)
    assert feed(engine, [(0.0, {"resources/data_wait_share": 0.9})], phase="val") == []


def test_starvation_from_low_gpu_utilisation() -> None:
    engine = engine_with("gpu_starvation", hold_s=0.0)
    events = feed(engine, [(0.0, {"resources/gpu0_util_percent": 12.0})], phase="train")
    assert [e.event for e in events] == ["fired"]
    assert events[0].evidence["gpu_util_percent"] == 12.0


def test_host_memory_leak_projects_time_to_the_limit() -> None:
    engine = engine_with("host_memory_leak", hold_s=10.0, window_s=60.0, horizon_h=1.0)
    # 2 GiB growing 50 MiB/min with 10 GiB available: 10 GiB / 50 MiB/min ~ 3.4 h > 1 h.
    slow = [
        (
            float(t),
            {
                "resources/process_tree_memory_gb": 2 + t * 50 / 1024 / 60,
                "resources/memory_available_gb": 10.0,
            },
        )
        for t in range(0, 120, 5)
    ]
    assert feed(engine, slow) == []
    # 500 MiB/min: ~20 min to the limit.
    fast = [
        (
            float(t),
            {
                "resources/process_tree_memory_gb": 2 + t * 500 / 1024 / 60,
                "resources/memory_available_gb": 10.0,
            },
        )
        for t in range(200, 320, 5)
    ]
    events = feed(engine, fast)
    assert [e.event for e in events] == ["fired"]
    evidence = events[0].evidence
    assert evidence["growth_mb_per_min"] == pytest.approx(500, rel=0.01)
    assert 10 * 60 < float(evidence["time_to_limit_s"]) < 30 * 60
    # Growth stops: resolves.
    flat = [
        (float(t), {"resources/process_tree_memory_gb": 3.0, "resources/memory_available_gb": 10.0})
        for t in range(400, 480, 5)
    ]
    assert [e.event for e in feed(engine, flat)] == ["resolved"]


def test_throughput_drop_against_the_post_warmup_baseline_requests_a_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(triggers, "_pending", None)
    rules = build_rules(
        {n: {"enabled": False} for n in RULES if n != "throughput_drop"}
        | {"throughput_drop": {"hold_s": 5.0, "warmup_s": 10.0, "baseline_s": 10.0}}
    )
    engine = AlertEngine(rules, request_profiles=True)
    # Warm-up at 2 steps/s (ignored), baseline 10 steps/s, then a 50 % drop.
    rates = [2.0] * 10 + [10.0] * 12 + [9.0] * 5 + [5.0] * 10
    samples = [(float(t), {"resources/train_steps_per_s": r}) for t, r in enumerate(rates)]
    events = feed(engine, samples, phase="train")
    assert [e.event for e in events] == ["fired"]
    assert events[0].evidence["baseline_steps_per_s"] == pytest.approx(10.0)
    assert events[0].evidence["drop"] == pytest.approx(0.5)
    reason = triggers.take_profile_request()
    assert reason is not None
    assert reason.startswith("throughput_drop")


def test_nan_loss_fires_at_once_and_resolves() -> None:
    engine = engine_with("nan_loss")
    flags = [0.0, 1.0, 1.0, 1.0, 0.0]
    samples = [(float(t), {"resources/loss_nonfinite": f}) for t, f in enumerate(flags)]
    events = feed(engine, samples, step=42)
    assert [(e.event, e.severity) for e in events] == [
        ("fired", "critical"),
        ("resolved", "critical"),
    ]
    assert "step 42" in events[0].message


def test_disk_space_counts_the_next_checkpoints() -> None:
    engine = engine_with("disk_space", min_free_gb=1.0, checkpoints_ahead=2.0)
    extra = {"checkpoint_bytes": 2.0 * (1 << 30)}  # 2 GiB each: need 1 + 2 x 2 = 5 GiB
    events = feed(engine, [(0.0, {"resources/checkpoint_dir_free_gb": 6.0})], **extra)
    assert events == []
    events = feed(engine, [(1.0, {"resources/checkpoint_dir_free_gb": 4.0})], **extra)
    assert [e.event for e in events] == ["fired"]
    assert events[0].evidence["needed_gb"] == pytest.approx(5.0)
    events = feed(engine, [(2.0, {"resources/checkpoint_dir_free_gb": 5.2})], **extra)
    assert events == []  # above the need but inside the 10 % clear margin
    events = feed(engine, [(3.0, {"resources/checkpoint_dir_free_gb": 6.0})], **extra)
    assert [e.event for e in events] == ["resolved"]


def test_thermal_throttle_ignores_the_power_cap_by_default() -> None:
    engine = engine_with("thermal_throttle", hold_s=0.0)
    cap_only = {"resources/gpu0_throttle_reasons": float(0x4)}
    assert feed(engine, [(0.0, cap_only)]) == []
    hot = {
        "resources/gpu0_throttle_reasons": float(0x20 | 0x4),
        "resources/gpu0_temperature_c": 91.0,
    }
    events = feed(engine, [(1.0, hot)])
    assert [e.event for e in events] == ["fired"]
    assert events[0].evidence["temperature_c"] == 91.0
    engine = engine_with("thermal_throttle", hold_s=0.0, include_power_cap=True)
    assert [e.event for e in feed(engine, [(0.0, cap_only)])] == ["fired"]


def test_gpu_memory_near_oom_from_fraction_and_allocator_retries() -> None:
    engine = engine_with("gpu_memory_near_oom", hold_s=0.0)
    full = {"resources/gpu0_memory_used_gb": 78.0, "resources/gpu0_memory_total_gb": 80.0}
    assert [e.event for e in feed(engine, [(0.0, full)])] == ["fired"]
    engine = engine_with("gpu_memory_near_oom", hold_s=0.0)
    samples = [
        (
            0.0,
            {
                "resources/cuda_alloc_retries": 3.0,
                "resources/cuda_reserved_gb": 1.0,
                "resources/cuda_total_gb": 80.0,
            },
        ),
        (
            1.0,
            {
                "resources/cuda_alloc_retries": 3.0,
                "resources/cuda_reserved_gb": 1.0,
                "resources/cuda_total_gb": 80.0,
            },
        ),
        (
            2.0,
            {
                "resources/cuda_alloc_retries": 5.0,
                "resources/cuda_reserved_gb": 1.0,
                "resources/cuda_total_gb": 80.0,
            },
        ),
    ]
    events = feed(engine, samples)
    assert [(e.event, e.evidence["alloc_retries_rise"]) for e in events] == [("fired", 2.0)]


def test_straggler_rank_from_the_epoch_gather() -> None:
    engine = engine_with("straggler_rank")
    info = StragglerSignal(rank=3, share=0.4, excess_s=1.2, cause="data_wait", epoch=2)
    events = feed(engine, [(0.0, {}), (1.0, {})], straggler=info)
    assert [e.event for e in events] == ["fired"]  # the same gather seen twice: one event
    assert "Rank 3 is a straggler" in events[0].message
    assert "data_wait" in events[0].message
    assert events[0].evidence["cause"] == "data_wait"
    # Between the thresholds: no change (hysteresis); no straggler named: resolved.
    middle = replace(info, share=0.07)
    assert feed(engine, [(2.0, {})], straggler=middle) == []
    none = StragglerSignal(rank=-1, share=0.0, epoch=3)
    assert [e.event for e in feed(engine, [(3.0, {})], straggler=none)] == ["resolved"]


def test_hang_after_factor_times_the_median_step() -> None:
    engine = engine_with("hang", factor=10.0, min_s=1.0)
    ok = {"resources/last_step_age_s": 0.5, "resources/step_time_median_s": 0.2}
    stuck = {"resources/last_step_age_s": 2.5, "resources/step_time_median_s": 0.2}
    events = feed(engine, [(0.0, ok), (1.0, stuck), (2.0, stuck)], where="x.py:3")
    assert [e.event for e in events] == ["fired"]
    assert events[0].evidence["where"] == "x.py:3"
    assert feed(engine, [(3.0, stuck)], phase="idle") == []  # between fits: not a hang
    assert [e.event for e in feed(engine, [(4.0, ok)])] == ["resolved"]


# -- configuration -------------------------------------------------------------------------------


def test_build_rules_validates_names_settings_and_types() -> None:
    assert {r.name for r in build_rules()} == set(RULES)
    assert "hang" not in {r.name for r in build_rules({"hang": {"enabled": False}})}
    with pytest.raises(ValueError, match=r"unknown rule.*nope"):
        build_rules({"nope": {}})
    with pytest.raises(ValueError, match=r"'gpu_starvation'.*data_wait"):
        build_rules({"gpu_starvation": {"data_wait": 0.2}})
    with pytest.raises(ValueError, match="hold_s must be a number"):
        build_rules({"hang": {"hold_s": "soon"}})
    with pytest.raises(ValueError, match="include_power_cap must be true or false"):
        build_rules({"thermal_throttle": {"include_power_cap": 1}})
    with pytest.raises(ValueError, match=">= 0"):
        build_rules({"nan_loss": {"cooldown_s": -1}})


def test_non_zero_ranks_keep_only_per_rank_rules() -> None:
    engine = AlertEngine(build_rules(), all_rules=False, rank=2)
    assert {r.name for r in engine.rules} == {
        "gpu_starvation",  # the rank's own data wait: a starved rank 1 is seen on rank 1
        "host_memory_leak",
        "gpu_memory_near_oom",
        "thermal_throttle",
    }


# -- sinks ---------------------------------------------------------------------------------------


def nan_event(engine: AlertEngine) -> list[AlertEvent]:
    return engine.update({"resources/loss_nonfinite": 1.0}, RuleContext(step=7, epoch=1), t=0.0)


def test_jsonl_and_log_sinks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "perf" / "alerts.jsonl"
    sink = JsonlSink(path)
    engine = AlertEngine(build_rules({"nan_loss": {}}), [LogSink(), sink], rank=0)
    with caplog.at_level(logging.WARNING, logger="trainperf.alerts"):
        nan_event(engine)
        engine.update({"resources/loss_nonfinite": 0.0}, RuleContext(step=8, epoch=1), t=1.0)
    engine.close()
    records = read_dicts(path, AlertEvent)
    assert [(r["rule"], r["event"], r["step"]) for r in records] == [
        ("nan_loss", "fired", 7),
        ("nan_loss", "resolved", 8),
    ]
    keys = {
        "t",
        "rule",
        "event",
        "severity",
        "message",
        "evidence",
        "threshold",
        "suggestion",
        "step",
        "epoch",
        "rank",
        "schema",
        "v",
    }
    assert set(records[0]) == keys
    assert records[0]["severity"] == "critical"
    assert records[0]["rank"] == 0
    levels = [r.levelno for r in caplog.records if r.name == "trainperf.alerts"]
    assert levels == [logging.ERROR, logging.WARNING]
    assert "nan_loss fired" in caplog.records[0].getMessage()


class _FakeRun:
    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []

    def alert(self, **kwargs: Any) -> None:
        self.alerts.append(kwargs)


def test_wandb_sink_uses_an_active_run_and_is_silent_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = types.ModuleType("wandb")
    fake.run = None  # type: ignore[attr-defined]
    fake.AlertLevel = types.SimpleNamespace(INFO="INFO", WARN="WARN", ERROR="ERROR")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    engine = AlertEngine(build_rules({"nan_loss": {}}), [WandbSink()])
    nan_event(engine)  # no run: nothing, no error
    assert engine.sinks  # still on
    run = _FakeRun()
    fake.run = run  # type: ignore[attr-defined]
    engine = AlertEngine(build_rules({"nan_loss": {}}), [WandbSink()])
    nan_event(engine)
    assert len(run.alerts) == 1
    assert run.alerts[0]["title"] == "nan_loss fired"
    assert run.alerts[0]["level"] == "ERROR"


def test_wandb_sink_with_real_wandb_offline_run(tmp_path: Path) -> None:
    wandb = pytest.importorskip("wandb")
    engine = AlertEngine(build_rules({"nan_loss": {}}), [WandbSink()])
    assert wandb.run is None
    nan_event(engine)  # wandb imported, no run: nothing happens
    run = wandb.init(mode="offline", dir=str(tmp_path), project="receipt-ocr-test")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine = AlertEngine(build_rules({"nan_loss": {}}), [WandbSink()])
            nan_event(engine)
        assert not [w for w in caught if issubclass(w.category, AlertWarning)]
        assert len(engine.sinks) == 1  # the sink did not fail
    finally:
        run.finish()


class _Broken(AlertSink):
    name = "broken"

    def emit(self, event: AlertEvent) -> None:
        raise OSError("disk full")


class _Collect(AlertSink):
    name = "collect"

    def __init__(self) -> None:
        self.events: list[AlertEvent] = []

    def emit(self, event: AlertEvent) -> None:
        self.events.append(event)


def test_a_failing_sink_warns_once_and_the_others_go_on() -> None:
    collect = _Collect()
    engine = AlertEngine(build_rules({"nan_loss": {"cooldown_s": 0.0}}), [_Broken(), collect])
    with pytest.warns(AlertWarning, match="'broken' failed"):
        nan_event(engine)
    engine.update({"resources/loss_nonfinite": 0.0}, t=1.0)
    engine.update({"resources/loss_nonfinite": 1.0}, t=2.0)
    assert [e.event for e in collect.events] == ["fired", "resolved", "fired"]
    assert [s.name for s in engine.sinks] == ["collect"]
    assert engine.fired["nan_loss"] == 2

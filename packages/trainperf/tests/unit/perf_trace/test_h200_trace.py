"""What the first real-GPU trace of this project must report (issue 31): one NVIDIA H200,
torch 2.11, Lightning 2.6.6, ``preset=example`` in 16-mixed with AdamW (foreach) in NCHW, three
profiled steps (``packages/trainperf/tests/fixtures/traces``, where ``scripts/gpu_check.py`` puts
it; read by hand in ``../shared/gpu/h200-2026-11-26/README.md``)."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from trainperf.analysis.trace import analyze_trace
from trainperf.frameworks.lightning_grammar import LOOP_PLACE as LOOP_HOOK

from trainperf_testing.paths import TESTS_ROOT

TRACE = TESTS_ROOT / "fixtures" / "traces" / "dbnet_r18_640_16mixed_nvidia_h200.pt.trace.json.gz"
OPT_HOOK = "[LightningModule]OCRLightningModule.optimizer_step"
BAR_HOOK = "[Callback]PlainProgressBar.on_train_batch_end"


@functools.cache
def _report() -> dict[str, Any]:
    return analyze_trace(TRACE)


@pytest.fixture
def report() -> dict[str, Any]:
    return _report()


def _findings(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in report["findings"]}


def test_sync_points_are_the_blocking_calls_named_in_optimizer_step(report: dict) -> None:
    m = report["metrics"]
    assert report["summary"]["n_steps"] == 3
    # 525 aten::item in the window, 516 of them AdamW's CPU step counters: none is a sync
    assert m["sync_top"] == {"cudaStreamSynchronize": 9}
    # three blocking calls per step: GradScaler's inf check, the progress bar's metrics, and
    # Lightning's loop converting prog_bar metrics; only the first waits for the GPU
    assert m["sync_calls_per_step"] <= 2
    assert m["sync_calls_per_step"] == 1.0  # the one that stalled: GradScaler's inf check
    assert m["sync_idle_calls_per_step"] == 2.0  # found the GPU idle: microseconds each
    sites = {s["hook"]: s for s in m["sync_sites"]}
    assert set(sites) == {OPT_HOOK, BAR_HOOK, LOOP_HOOK}
    waiting = [s for s in m["sync_sites"] if s["waited_per_step"] > 0]
    assert [s["hook"] for s in waiting] == [OPT_HOOK]
    opt = sites[OPT_HOOK]
    assert (opt["op"], opt["per_step"], opt["waited_per_step"]) == ("aten::item", 1.0, 1.0)
    assert 5.0 < opt["ms_per_step"] < 11.0  # 4.7, 9.9 and 10.9 ms
    assert opt["ms_per_step"] > 0.99 * m["sync_ms_per_step"]
    assert sites[BAR_HOOK]["ms_per_step"] < 0.05


def test_breakdown_gives_gpu_idle_and_the_host_blocked(report: dict) -> None:
    m = report["metrics"]
    ps = report["phase_summary"]["train"]
    assert 35.0 < ps["gpu"]["idle"]["pct"] < 45.0  # 32.8 of 81.4 ms
    assert ps["gpu"]["idle"]["mean_ms"] == pytest.approx(m["gpu_idle_ms_per_step"], abs=1e-3)
    assert 55.0 < m["gpu_busy_pct"] < 65.0
    # optimizer: 16.8 ms of host time, of which ~8.5 ms blocked, launching 0.4 ms of GPU work
    assert 15.0 < ps["phases"]["optimizer"]["mean_ms"] < 19.0
    assert 7.0 < ps["blocked"]["optimizer"]["mean_ms"] < 10.0
    assert ps["gpu_phases"]["optimizer"]["mean_ms"] < 1.0
    assert ps["blocked"]["forward"]["mean_ms"] == ps["blocked"]["backward"]["mean_ms"] == 0
    blocked = sum(p["mean_ms"] for p in ps["blocked"].values())
    assert blocked == pytest.approx(m["sync_ms_per_step"], abs=1e-3)
    for step in report["steps"]:
        assert sum(step["blocked_ms"].values()) <= step["wall_ms"]


def test_finding_for_the_optimizer_host_loop(report: dict) -> None:
    found = _findings(report)
    f = found["optimizer_host_bound"]
    ev = f["evidence"]
    assert ev["optimizer"] == ["AdamW"]
    assert 15.0 < ev["optimizer_ms_per_step"] < 19.0
    assert ev["optimizer_gpu_ms_per_step"] < 1.0
    assert 7.0 < ev["optimizer_blocked_ms_per_step"] < 10.0
    loop = ev["optimizer_ms_per_step"] - ev["optimizer_gpu_ms_per_step"]
    loop -= ev["optimizer_blocked_ms_per_step"]
    assert ev["host_loop_ms_per_step"] == pytest.approx(loop, abs=0.01)
    assert f["score"] == pytest.approx(ev["host_loop_pct_of_step"])
    assert 5.0 < f["score"] < 15.0
    assert "fused=True" in f["suggestion"]
    # AdamW's foreach path is multi-tensor: one finding for one optimizer, not two
    assert "optimizer_not_multi_tensor" not in found


def test_finding_fp16_with_a_scaler_on_a_bf16_device(report: dict) -> None:
    f = _findings(report)["fp16_scaler"]
    ev = f["evidence"]
    assert ev["device"] == "NVIDIA H200"
    assert ev["compute_capability"] == "9.0"  # from the trace's deviceProperties
    assert set(ev["scaler_ops"]) == {
        "aten::_amp_foreach_non_finite_check_and_unscale_",
        "aten::_amp_update_scale_",
    }
    assert [s["hook"] for s in ev["sites"]] == [OPT_HOOK]
    assert 8.0 < f["score"] < 14.0  # the blocked time's share of the step
    assert f["severity"] == "warning"
    assert "bf16-mixed" in f["suggestion"]


def test_finding_layout_conversions(report: dict) -> None:
    f = _findings(report)["layout_conversion"]
    ev = f["evidence"]
    assert 17.0 < ev["pct_of_gpu_time"] < 20.0  # 18.4 %
    assert ev["ms_per_step"] == pytest.approx(
        ev["pct_of_gpu_time"] / 100 * ev["gpu_work_ms_per_step"], rel=1e-3
    )
    assert {k.split("<")[0] for k in ev["kernels"]} == {
        "cudnn::engines_precompiled::nchwToNhwcKernel",
        "cudnn::engines_precompiled::nhwcToNchwKernel",
    }
    assert 8.0 < f["score"] < 14.0  # 9 ms of an 81 ms step
    assert "channels_last" in f["suggestion"]


def test_host_sync_names_its_sites_and_low_utilisation_its_causes(report: dict) -> None:
    found = _findings(report)
    sync = found["host_sync"]
    assert OPT_HOOK in sync["title"]
    assert sync["evidence"]["sync_calls_per_step"] == 1.0
    assert sync["evidence"]["sync_idle_calls_per_step"] == 2.0
    changes = {s["hook"]: s["change"] for s in sync["evidence"]["sites"]}
    assert "fp16_scaler" in changes[OPT_HOOK]
    assert "refresh_rate" in changes[BAR_HOOK]
    assert "prog_bar" in changes[LOOP_HOOK]
    low = found["low_gpu_utilisation"]
    assert "host syncs" in low["title"]
    assert "optimizer's host loop" in low["title"]
    assert len(low["title"]) < 120  # one log line
    assert "sync points" in low["suggestion"]  # the figures behind the causes
    assert "optimizer_step" in low["suggestion"]


def test_in_windows_it_is_the_trace_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainperf_testing.windowed_checks import _plain, _whole_and_windowed

    (whole, _), (parts, _), n = _whole_and_windowed(TRACE, monkeypatch, 2000)
    assert n == 3  # one window per step
    assert _plain(parts) == _plain(whole)
    assert parts.metrics.sync_calls_per_step == 1.0


def test_every_finding_title_fits_one_log_line(report: dict) -> None:
    """A log's console is 200 columns wide (COLUMNS unset): "CRITICAL " and the title fit."""
    for f in report["findings"]:
        assert len(f["title"]) <= 190, f["title"]

"""Sync points are blocking CUDA calls: a GPU trace built here from the event shapes a CUDA run
of Lightning records (``cpu_op`` ``aten::item`` > ``aten::_local_scalar_dense`` >
``cuda_runtime`` ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``, kernels joined by
``correlation``, ``[pl][profile]`` hook spans, Kineto ``cuda_sync`` events)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainperf.analysis.trace import analyze_trace
from trainperf.frameworks.lightning_grammar import LOOP_PLACE as LOOP_HOOK

from trainperf_testing.synth import write

PID = TID = 41
STEPS = 3
CPU_ITEMS = 40  # AdamW's step-counter reads: aten::item of a CPU tensor, no runtime call
SYNC_US = 900.0  # the optimizer step's one blocking sync
KERNEL_US = 700.0  # the forward kernel it waits for
OPT_HOOK = "[LightningModule]Module.optimizer_step"
BAR_HOOK = "[Callback]Bar.on_train_batch_end"


class _Trace:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> None:
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur}
        )

    def runtime(self, name: str, ts: float, dur: float) -> int:
        self.corr += 1
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": PID,
                "tid": TID,
                "ts": ts,
                "dur": dur,
                "args": {"cbid": 131, "correlation": self.corr},
            }
        )
        return self.corr

    def device(self, name: str, ts: float, dur: float, corr: int, cat: str = "kernel") -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": ts,
                "dur": dur,
                "args": {"correlation": corr, "device": 0, "stream": 7},
            }
        )

    def item(self, ts: float, wait_us: float | None) -> float:
        """An ``aten::item``; with ``wait_us``, of a device tensor (DtoH copy, then a stream
        sync of that length); else of a CPU tensor. Returns its end."""
        if wait_us is None:
            self.host("aten::item", ts, 4.0)
            self.host("aten::_local_scalar_dense", ts + 1, 2.0)
            return ts + 4.0
        dur = wait_us + 20.0
        self.host("aten::item", ts, dur)
        self.host("aten::_local_scalar_dense", ts + 1, dur - 2)
        corr = self.runtime("cudaMemcpyAsync", ts + 2, 5.0)
        self.device("Memcpy DtoH (Device -> Pinned)", ts + 8 + wait_us - 4, 2.0, corr, "gpu_memcpy")
        self.runtime("cudaStreamSynchronize", ts + 8, wait_us)
        return ts + dur

    def doc(self, **extra: Any) -> dict[str, Any]:
        props = [{"id": 0, "name": "NVIDIA Test", "computeMajor": 9, "computeMinor": 0}]
        return {"schemaVersion": 1, "deviceProperties": props, "traceEvents": self.events, **extra}


def _training_trace(bar_syncs: bool = True, loop_sync: bool = False) -> _Trace:
    """Per step: a forward whose kernel runs long after its launch, then an optimizer step whose
    AdamW reads CPU step tensors and whose one device ``.item()`` blocks until that kernel ends;
    a progress bar that reads a device tensor (``bar_syncs``) and Lightning's loop outside hooks
    (``loop_sync``), each finding the device idle."""
    tr = _Trace()
    t = 1000.0
    for n in range(STEPS):
        start = t
        tr.host(
            "[pl][profile][Strategy]SingleDeviceStrategy.training_step", t, 100, "user_annotation"
        )
        tr.host("aten::conv2d", t + 10, 50)
        corr = tr.runtime("cudaLaunchKernel", t + 20, 10)
        tr.device("conv_kernel", t + 40, KERNEL_US, corr)  # ends during the sync below
        t += 110
        opt_start = t
        t = tr.item(t + 2, SYNC_US - 80)  # GradScaler-like: waits for conv_kernel
        tr.host("Optimizer.step#AdamW.step", t + 2, CPU_ITEMS * 6 + 10, "user_annotation")
        t += 4
        for _ in range(CPU_ITEMS):
            t = tr.item(t, None) + 2
        t += 10
        tr.host(f"[pl][profile]{OPT_HOOK}", opt_start, t - opt_start, "user_annotation")
        t += 40
        if bar_syncs:
            tr.host(f"[pl][profile]{BAR_HOOK}", t, 40, "user_annotation")
            tr.item(t + 2, 5.0)
        t += 45
        if loop_sync:
            tr.item(t, 5.0)
        t += 30
        tr.host(f"ProfilerStep#{n + 1}", start, t - start, "user_annotation")
        t += 5
    return tr


@pytest.fixture
def analysed(tmp_path: Path) -> dict[str, Any]:
    return analyze_trace(write(_training_trace().doc(), tmp_path / "t.json"))


def test_cpu_tensor_items_are_no_syncs_one_blocking_call_is_one(analysed: dict[str, Any]) -> None:
    m = analysed["metrics"]
    assert m["sync_top"] == {"cudaStreamSynchronize": 2 * STEPS}  # optimizer + progress bar
    # the one that waited for queued work: the optimizer step's; the bar's found the GPU idle
    assert m["sync_calls_per_step"] == 1.0
    assert m["sync_idle_calls_per_step"] == 1.0
    sites = {s["hook"]: s for s in m["sync_sites"]}
    assert set(sites) == {OPT_HOOK, BAR_HOOK}
    opt = sites[OPT_HOOK]
    assert (opt["op"], opt["per_step"], opt["waited_per_step"]) == ("aten::item", 1.0, 1.0)
    assert opt["ms_per_step"] == pytest.approx((SYNC_US - 80) / 1e3)
    assert list(opt["ops"]) == ["cudaStreamSynchronize"]
    assert sites[BAR_HOOK]["waited_per_step"] == 0.0
    assert m["sync_sites"][0]["hook"] == OPT_HOOK  # most time blocked first


def test_only_the_blocking_call_without_the_progress_bar(tmp_path: Path) -> None:
    r = analyze_trace(write(_training_trace(bar_syncs=False).doc(), tmp_path / "t.json"))
    assert r["metrics"]["sync_calls_per_step"] == 1.0
    assert r["metrics"]["sync_top"] == {"cudaStreamSynchronize": STEPS}


def test_blocked_time_per_phase_in_the_breakdown(analysed: dict[str, Any]) -> None:
    ps = analysed["phase_summary"]["train"]
    blocked = ps["blocked"]
    assert blocked["optimizer"]["mean_ms"] == pytest.approx((SYNC_US - 80) / 1e3)
    assert blocked["callbacks"]["mean_ms"] == pytest.approx(5.0 / 1e3)
    assert blocked["forward"]["mean_ms"] == 0
    for step in analysed["steps"]:
        assert step["blocked_ms"]["optimizer"] == pytest.approx((SYNC_US - 80) / 1e3)
        # blocked time is part of its phase's time
        assert all(step["blocked_ms"][p] <= step["phases_ms"][p] + 1e-9 for p in step["phases_ms"])
    # the GPU work launched from each phase sits beside it: the conv kernel is forward's
    assert ps["gpu_phases"]["forward"]["mean_ms"] == pytest.approx(KERNEL_US / 1e3)


def test_a_sync_in_a_callback_is_named_by_it_with_its_change(tmp_path: Path) -> None:
    tr = _training_trace()
    # a second, long sync in the progress bar's span: it now costs more than 2 % of the step
    tr.host(f"[pl][profile]{BAR_HOOK}", 50_000.0, 3000.0, "user_annotation")
    tr.item(50_002.0, 2900.0)
    tr.host("ProfilerStep#9", 49_990.0, 3100.0, "user_annotation")
    r = analyze_trace(write(tr.doc(), tmp_path / "t.json"))
    host_sync = {f["id"]: f for f in r["findings"]}["host_sync"]
    bar = [s for s in host_sync["evidence"]["sites"] if s["hook"] == BAR_HOOK]
    assert len(bar) == 1
    assert "refresh_rate" in bar[0]["change"]
    assert "on_step=False" in bar[0]["change"]
    assert "refresh_rate" in host_sync["suggestion"]


def test_lightning_loop_sync_outside_hooks(tmp_path: Path) -> None:
    r = analyze_trace(write(_training_trace(loop_sync=True).doc(), tmp_path / "t.json"))
    hooks = {s["hook"] for s in r["metrics"]["sync_sites"]}
    assert hooks == {OPT_HOOK, BAR_HOOK, LOOP_HOOK}
    assert r["metrics"]["sync_calls_per_step"] == 1.0
    assert r["metrics"]["sync_idle_calls_per_step"] == 2.0


def _cuda_sync(tr: _Trace, name: str, ts: float, dur: float, corr: int) -> None:
    tr.events.append(
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": dur,
            "args": {"cuda_sync_kind": name, "stream": 7, "correlation": corr, "device": 0},
        }
    )


def test_cuda_sync_events_count_once_and_a_device_wait_not_at_all(tmp_path: Path) -> None:
    tr = _training_trace(bar_syncs=False)
    for n, ev in enumerate(e for e in list(tr.events) if e["name"] == "cudaStreamSynchronize"):
        # the event Kineto writes for that call: the same sync, not a second one
        _cuda_sync(tr, "Stream Sync", ev["ts"], ev["dur"], ev["args"]["correlation"])
        # a stream waiting on an event runs on the device: no host sync
        _cuda_sync(tr, "Stream Wait Event", ev["ts"] + 1, 1.0, 90_000 + n)
    steps = {e["name"]: e for e in tr.events if e["name"].startswith("ProfilerStep#")}
    last = steps[f"ProfilerStep#{STEPS}"]
    # a synchronization whose runtime call the trace lacks: counted by itself
    _cuda_sync(tr, "Context Sync", last["ts"] + 10, 50.0, 99_999)
    r = analyze_trace(write(tr.doc(), tmp_path / "t.json"))
    m = r["metrics"]
    assert m["sync_calls_per_step"] == pytest.approx((STEPS + 1) / STEPS)
    assert m["sync_top"] == {"cudaStreamSynchronize": STEPS, "Context Sync": 1}


def test_a_runtime_call_named_by_a_cuda_sync_event_is_a_sync(tmp_path: Path) -> None:
    tr = _training_trace(bar_syncs=False)
    first = next(e for e in tr.events if e["name"] == "ProfilerStep#1")
    at = first["ts"] + first["dur"] - 28  # in the step's last gap, outside every op
    corr = tr.runtime("cudaEventQuery", at, 20.0)  # no sync by its name
    _cuda_sync(tr, "Event Sync", at, 20.0, corr)
    r = analyze_trace(write(tr.doc(), tmp_path / "t.json"))
    assert r["metrics"]["sync_top"] == {"cudaEventQuery": 1, "cudaStreamSynchronize": STEPS}


@pytest.mark.parametrize(
    ("name", "sync"),
    [
        ("cudaMemcpy", True),
        ("cudaMemcpy2D", True),
        ("cudaMemset", True),
        ("cuMemcpyDtoH_v2", True),
        ("cudaDeviceSynchronize", True),
        ("cudaEventSynchronize", True),
        ("cudaMemcpyAsync", False),
        ("cudaMemcpy2DAsync", False),
        ("cudaMemsetAsync", False),
        ("cuMemcpyDtoHAsync_v2", False),
        ("cudaLaunchKernel", False),
        ("cudaStreamWaitEvent", False),
    ],
)
def test_blocking_call_names(name: str, sync: bool) -> None:
    from trainperf.analysis.trace.syncs import is_blocking_call

    assert is_blocking_call(name) is sync

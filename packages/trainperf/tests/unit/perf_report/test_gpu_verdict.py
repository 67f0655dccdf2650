"""The verdict on a GPU from a run folder without a trace (issue 31): the live clock's CUDA
events split each phase into own work and waiting for the GPU; the GPU's busy share classes the
training stage; 16-mixed on a bf16 GPU, a non-fused optimizer's host loop and channels_last off
are named with their candidates; compute-bound needs a busy GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from trainperf.analysis.gpu_wait import gpu_waits
from trainperf.analysis.verdict.gpu_rules import cuda_bf16
from trainperf.analysis.verdict.sources import merge_same_cause
from trainperf.core.findings import Finding
from trainperf.present.report import build_report
from trainperf.present.report.findings_section import headline
from trainperf.records.epochs import EpochRecord
from trainperf.records.run_record import RunRecord

from trainperf_testing.gpu_samples import CONFIG, GPU, HOST, _samples
from trainperf_testing.runs import epoch_record, make_run


def gpu_run(root: Path, util: float = 55.0, **info: Any) -> Path:
    epochs = [
        epoch_record("train", e, HOST, gpu_phases=GPU, device="cuda", batches=100, num_workers=8)
        for e in range(2)
    ]
    run_info = {"cpu_count": 16, "cuda_devices": ["NVIDIA A100-SXM4-80GB"], **info}
    return make_run(root, epochs, config=CONFIG, resources=_samples(util), run_info=run_info)


def test_phase_host_time_splits_into_own_work_and_waiting_for_the_gpu() -> None:
    records = [
        msgspec.convert(epoch_record("train", e, HOST, gpu_phases=GPU, device="cuda"), EpochRecord)
        for e in range(2)
    ]
    records.append(msgspec.convert(epoch_record("val", 0, {"forward": 1.0}), EpochRecord))
    waits = gpu_waits(records)
    assert set(waits) == {"train"}  # no CUDA events, no split
    w = waits["train"]
    opt = w.phases["optimizer"]
    assert (opt.host_s, opt.gpu_s, opt.waiting_s, opt.own_s) == pytest.approx((8.0, 2.0, 6.0, 2.0))
    assert w.phases["backward"].waiting_s == 0.0  # the GPU ran behind: no host wait there
    assert w.top() is opt
    assert w.pct(opt.waiting_s) == pytest.approx(100 * 6.0 / 13.8)


def test_bf16_from_the_recorded_capability_else_likely_from_the_name() -> None:
    def bf16(**fields: Any) -> tuple[bool | None, str]:
        return cuda_bf16(RunRecord(**fields))

    assert bf16(cuda_devices=["Tesla V100-SXM2-16GB"], cuda_capability=["7.0"])[0] is False
    assert bf16(cuda_devices=["NVIDIA H200"], cuda_capability=["9.0"]) == (
        True,
        "compute capability 9.0",
    )
    for name in (
        "NVIDIA H200",
        "NVIDIA A10G",
        "NVIDIA L4",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA RTX A6000",
    ):
        ok, how = bf16(cuda_devices=[name])
        assert ok is True, name
        assert how.startswith("likely")
    assert bf16(cuda_devices=["Tesla T4"]) == (None, "")
    assert bf16(cuda_devices=["Tesla V100-SXM2-16GB"]) == (None, "")


def test_an_idle_gpu_is_classed_by_its_largest_cause_not_called_compute_bound(
    tmp_path: Path,
) -> None:
    report = build_report(gpu_run(tmp_path))
    ids = [f.id for f in report.findings]
    assert "compute_bound" not in ids  # compute phases are 71 % of the host's time, GPU 55 % busy
    top = report.findings[0]
    assert top.id == "gpu_underused"
    assert top.title.startswith("sync-bound: the GPU is idle 45 % of the training step")
    assert "NVML" in top.title
    assert "optimizer_step" in top.title
    assert top.evidence["causes"][:2] == ["fp16_scaler", "optimizer_host_bound"]
    scaler = next(f for f in report.findings if f.id == "fp16_scaler")
    assert scaler.evidence["optimizer_waiting_ms_per_batch"] == pytest.approx(30.0)
    assert "likely" in scaler.evidence["bf16"]
    # its bound: the wait, no more than the GPU's idle time
    assert scaler.recoverable_from == "bound"
    assert scaler.recoverable_pct == pytest.approx(round(100 * 3.0 / 6.9, 1), abs=0.11)
    loop = next(f for f in report.findings if f.id == "optimizer_host_bound")
    assert "AdamW (not fused)" in loop.title
    assert loop.evidence["optimizer_own_ms_per_batch"] == pytest.approx(10.0)
    changes = {c.override for f in report.findings for c in f.candidates}
    assert {
        "trainer.precision=bf16-mixed",
        "+model.optimizer.fused=true",
        "model.channels_last=true",
    } <= changes
    layout = next(f for f in report.findings if f.id == "layout_conversion")
    assert layout.recoverable_from == "unknown"
    sentence = headline(report)
    assert sentence.startswith("sync-bound: the GPU is idle 45 %")
    assert "change: `trainer.precision=bf16-mixed`" in sentence
    assert "could recover up to" in sentence


def test_a_busy_gpu_is_gpu_compute_bound(tmp_path: Path) -> None:
    report = build_report(gpu_run(tmp_path, util=95.0))
    ids = [f.id for f in report.findings]
    assert "gpu_underused" not in ids
    compute = next(f for f in report.findings if f.id == "compute_bound")
    assert compute.title.startswith("GPU-compute-bound: ")
    assert "with the GPU busy 95 %" in compute.title
    assert compute.recoverable_from == "unknown"


def test_a_gpu_without_bf16_gets_a_sync_finding_without_bf16(tmp_path: Path) -> None:
    root = gpu_run(tmp_path, cuda_devices=["Tesla V100-SXM2-16GB"], cuda_capability=["7.0"])
    report = build_report(root)
    ids = [f.id for f in report.findings]
    assert "fp16_scaler" not in ids
    sync = next(f for f in report.findings if f.id == "host_sync")
    assert "GradScaler" in sync.title
    assert [c.family for c in sync.candidates] == ["fused_optimizer"]


def test_a_trace_finding_of_the_same_cause_takes_the_live_clocks_place() -> None:
    def finding(fid: str, title: str) -> Finding:
        return Finding(fid, "warning", 5.0, title, {}, {}, "s")

    live = finding("fp16_scaler", "live wait")
    traced = finding("trace:fp16_scaler", "traced sync")
    other = finding("input_bound", "input")
    merged = merge_same_cause([live, other, traced])
    assert [f.id for f in merged] == ["input_bound", "trace:fp16_scaler"]
    assert merged[1].corroboration == ["live clock: live wait"]
    assert traced.corroboration == []  # a copy gains it: the GPU class previews the merge


def test_compute_bound_on_cuda_without_a_busy_share_says_it_reads_the_host_clock(
    tmp_path: Path,
) -> None:
    """No profiler window, no NVML sample: the compute phases are the host's clock alone (it
    launches ahead and waits in them), so compute-bound is only likely and says why; with a busy
    GPU it is measured."""
    busy = {"forward": 4.0, "backward": 4.0, "optimizer": 1.0, "data_wait": 0.1}
    epochs = [
        epoch_record("train", e, busy, device="cuda", batches=100, num_workers=8) for e in range(2)
    ]
    info = {"cpu_count": 16, "cuda_devices": ["NVIDIA A100-SXM4-80GB"]}
    bare = make_run(tmp_path / "bare", epochs, config=CONFIG, run_info=info)
    found = {f.id: f for f in build_report(bare).findings}
    compute = found["compute_bound"]
    assert compute.confidence == "likely"
    assert "host's clock" in compute.title
    assert "busy share" in compute.suggestion
    sampled = make_run(
        tmp_path / "sampled", epochs, config=CONFIG, resources=_samples(95.0), run_info=info
    )
    measured = {f.id: f for f in build_report(sampled).findings}["compute_bound"]
    assert measured.confidence == "measured"
    assert "host's clock" not in measured.title

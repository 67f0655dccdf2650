"""Compute-bound only where compute is the bound. A tiny model whose steps do almost no
arithmetic (planted: a few kFLOPs per sample against a 100 GFLOP/s peak) is overhead-bound: the
verdict says so, names what cuts a per-op cost (a larger batch, torch.compile, fewer small ops)
and never "a smaller model"; a trace of many tiny ops makes it measured, and alone (no FLOPs)
decides it. channels_last is proposed only for a model with convolutions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainperf.core.findings import Finding
from trainperf.present.report import build_report

from trainperf_testing.runs import CONFIG, epoch_record, make_run
from trainperf_testing.synth import make_op_trace, write

#: 10 batches of 4 per epoch, the compute phases 80 % of the stage.
TRAIN = {"data_wait": 0.1, "forward": 0.2, "backward": 0.15, "optimizer": 0.05}


def _run(
    root: Path,
    *,
    per_sample: float | None,
    model: dict[str, int] | None = None,
    trace: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
) -> Path:
    info: dict[str, Any] = {"cpu_count": 2, "torch_threads": 2}
    if per_sample is not None:
        info["flops"] = {
            "per_sample": {"train": per_sample},
            "peak_flops_per_sec": 1e11,
            "peak": {"device": "cpu", "dtype": "float32", "threads": 2},
        }
    if model is not None:
        info["model"] = model
    epochs = [epoch_record("train", e, TRAIN) for e in range(3)]
    make_run(root, epochs, config=config or CONFIG, run_info=info)
    if trace is not None:
        (root / "profiler_traces").mkdir()
        write(trace, root / "profiler_traces" / "epoch_1.json")
    return root


def _by_id(root: Path) -> dict[str, Finding]:
    return {f.id: f for f in build_report(root).findings}


def test_a_tiny_model_is_overhead_bound_not_compute_bound(tmp_path: Path) -> None:
    # 20 kFLOPs per sample, 40 samples in 0.4 s of compute: 2 MFLOP/s of a 100 GFLOP/s peak
    found = _by_id(_run(tmp_path, per_sample=2e4))
    assert "compute_bound" not in found
    f = found["overhead_bound"]
    assert f.title.startswith(
        "overhead-bound, not compute-bound: forward / backward / optimizer take 80 % of training "
        "wall time at 0.002 % of this host's measured peak"
    )
    assert f.evidence["math_ms_per_batch_at_peak"] < 0.01
    for words in ("a larger `data.batch_size` (now 8)", "torch.compile", "fewer small ops"):
        assert words in f.suggestion
    assert "a smaller model would not be much faster" in f.suggestion
    assert "headroom" not in f.suggestion
    assert f.confidence == "likely"
    assert "from the FLOP rate alone" in f.suggestion
    families = {c.family for c in f.candidates}
    assert {"batch_size", "compile"} <= families
    assert "channels_last" not in families
    # what cutting the overhead could save is bounded by the compute phases' time
    assert f.recoverable_from == "bound"
    assert 0 < (f.recoverable_pct or 0) <= f.score


def test_enough_arithmetic_stays_compute_bound(tmp_path: Path) -> None:
    # 1 GFLOP per sample: 100 GFLOP/s while computing, all of the peak
    found = _by_id(_run(tmp_path, per_sample=1e9))
    assert "overhead_bound" not in found
    assert found["compute_bound"].title.startswith("compute-bound near the machine's limit")


def test_a_trace_of_tiny_ops_makes_it_measured_and_takes_its_finding(tmp_path: Path) -> None:
    trace = make_op_trace(conv=False, gpu=False)
    found = _by_id(_run(tmp_path / "flops", per_sample=2e4, trace=trace))
    f = found["overhead_bound"]
    assert f.confidence == "measured"
    assert "trace: 1100 CPU ops per step, 100 % under 10 µs" in f.title
    assert "trace:dispatch_overhead" not in found  # one cause, one finding
    assert any(c.startswith("profiler trace: ") for c in f.corroboration)
    # without FLOPs the trace alone decides it
    alone = _by_id(_run(tmp_path / "alone", per_sample=None, trace=trace))
    assert "compute_bound" not in alone
    assert alone["overhead_bound"].confidence == "measured"
    assert "compute_mfu_pct" not in alone["overhead_bound"].evidence


def test_channels_last_only_for_a_convolutional_model(tmp_path: Path) -> None:
    # compute-bound with headroom (10 % of the peak): kernel changes are proposed
    transformer = {"parameters": 110_000_000, "conv_parameters": 0, "conv_modules": 0}
    cnn = {"parameters": 25_000_000, "conv_parameters": 23_000_000, "conv_modules": 53}
    cnn["conv2d_modules"] = 53
    plain = _by_id(_run(tmp_path / "bert", per_sample=1e8, model=transformer))["compute_bound"]
    assert "channels_last" not in plain.suggestion
    assert "channels_last" not in {c.family for c in plain.candidates}
    assert "torch.compile" in plain.suggestion
    conv = _by_id(_run(tmp_path / "cnn", per_sample=1e8, model=cnn))["compute_bound"]
    assert "channels_last" in conv.suggestion
    assert "channels_last" in {c.family for c in conv.candidates}
    # an older run folder without the model's layers: unknown, so still proposed
    old = _by_id(_run(tmp_path / "old", per_sample=1e8))["compute_bound"]
    assert "channels_last" in {c.family for c in old.candidates}
    # the trace decides when the layers were not recorded
    bert_trace = make_op_trace(conv=False, gpu=False, ops_per_step=50)
    traced = _by_id(_run(tmp_path / "traced", per_sample=1e8, trace=bert_trace))
    assert "channels_last" not in {c.family for c in traced["compute_bound"].candidates}


def test_too_much_math_for_per_op_costs_is_slow_kernels(tmp_path: Path) -> None:
    # 40 MFLOPs per sample: 1.6 ms of math per batch of 4 at the 100 GFLOP/s peak, 40 ms
    # measured (4 % of the peak): too much math for per-op costs to explain
    found = _by_id(_run(tmp_path, per_sample=4e7))
    assert "compute_bound" not in found
    assert "overhead_bound" not in found
    f = found["slow_kernels"]
    assert f.title.startswith(
        "not compute-bound: forward / backward / optimizer take 80 % of training wall time at "
        "4.0 % of this host's measured peak (1.6 ms of math per batch at the peak, 40 ms "
        "measured)"
    )
    assert "a profiler window names the slowest ops" in f.suggestion
    assert "smaller model" not in f.suggestion
    assert f.recoverable_from == "unknown"

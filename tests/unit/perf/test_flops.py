"""trainperf.probe.flops (FLOPs on the real input shapes), trainperf.probe.peak_flops (the measured,
cached peak)
and trainperf.analysis.mfu (utilisation arithmetic). No wall clock is asserted: FLOPs are exact
counts, the peak is only checked to be positive and cached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from torch import nn
from trainperf.analysis.mfu import epoch_utilisation, stage_utilisation, utilisation
from trainperf.core.stage import Stage
from trainperf.probe import peak_flops as peak_module
from trainperf.probe.flops import batch_size_of, count_flops
from trainperf.probe.peak_flops import dtype_for_precision, measured_peak, spec_peak
from trainperf.records.epochs import EpochRecord
from trainperf.records.run_record import FlopsInfo, RunRecord

from ocr.models.dbnet import DBNet


def small_dbnet() -> DBNet:
    torch.manual_seed(0)
    return DBNet({"depth": None, "layers": [1, 1, 1, 1], "widths": [8, 16, 32, 64]}, 32)


def analytic_conv_flops(model: nn.Module, images: torch.Tensor) -> int:
    """2 * Cin * Cout * k^2 * Hout * Wout / groups per convolution and sample (transposed
    convolutions: per *input* position, each input element reaching Cout * k^2 outputs), with
    the shapes each layer sees in this forward (taken by hooks, not by FlopCounterMode)."""
    total = 0

    def hook(mod: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal total
        assert isinstance(mod, nn.Conv2d | nn.ConvTranspose2d)
        kh, kw = mod.kernel_size
        cin, cout, groups = mod.in_channels, mod.out_channels, mod.groups
        if isinstance(mod, nn.ConvTranspose2d):
            b, _, h, w = inputs[0].shape
        else:
            b, _, h, w = out.shape
        total += 2 * b * cin * cout * kh * kw * h * w // groups

    handles = [
        m.register_forward_hook(hook)
        for m in model.modules()
        if isinstance(m, nn.Conv2d | nn.ConvTranspose2d)
    ]
    try:
        with torch.no_grad():
            model(images)
    finally:
        for h in handles:
            h.remove()
    return total


@pytest.mark.parametrize("training", [False, True])
def test_dbnet_forward_flops_match_an_analytic_count_of_its_convolutions(training: bool) -> None:
    model = small_dbnet().train(training)
    images = torch.randn(2, 3, 64, 96)  # not square: real input shapes, not a default size
    counted = count_flops(model, images, backward=False)
    expected = analytic_conv_flops(model, images)
    assert expected > 0
    # DBNet's counted ops are its convolutions (FlopCounterMode counts no element-wise ops)
    assert counted.forward == pytest.approx(expected, rel=0.05)
    assert counted.batch_size == 2
    assert counted.input_shapes == ((2, 3, 64, 96),)
    assert counted.forward_per_sample == counted.forward / 2
    # Deterministic: a second count is the same number.
    assert count_flops(model, images, backward=False).forward == counted.forward


def test_flops_follow_the_input_shape_and_backward_costs_about_twice_the_forward() -> None:
    model = small_dbnet().train()
    small = count_flops(model, torch.randn(1, 3, 64, 64))
    large = count_flops(model, torch.randn(1, 3, 128, 128))
    assert large.forward == 4 * small.forward  # convolutions scale with the pixels
    assert small.forward_backward is not None
    assert small.train_per_sample is not None
    # Backward: input and weight gradients, ~2x the forward (the stem needs no input grad).
    assert 2.5 * small.forward < small.forward_backward <= 3 * small.forward


def test_counting_changes_no_state() -> None:
    model = small_dbnet().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    count_flops(model, torch.randn(2, 3, 32, 32))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # BN running stats restored
    assert all(p.grad is None for p in model.parameters())
    frozen = nn.Linear(4, 2).requires_grad_(False)
    assert count_flops(frozen, torch.randn(3, 4)).forward_backward is None
    assert count_flops(frozen, torch.randn(3, 4)).forward == 2 * 3 * 4 * 2


def test_example_input_conventions() -> None:
    class Two(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

    a, b = torch.randn(5, 6), torch.randn(6, 7)
    assert count_flops(Two(), (a, b)).forward == 2 * 5 * 6 * 7
    assert count_flops(Two(), {"a": a, "b": b}).forward == 2 * 5 * 6 * 7
    assert batch_size_of({"a": a}) == 5
    assert batch_size_of(torch.tensor(1.0)) == 1


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAINPERF_PEAK_REFRESH", raising=False)
    monkeypatch.setattr(peak_module, "_MEASURE_S", 0.01)  # keep the test fast
    # A quiet host unless a test says otherwise (the real load average varies).
    monkeypatch.setattr(peak_module, "_host_busy", lambda device: False)
    return tmp_path / "cache"


def test_peak_is_measured_once_then_cached(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = measured_peak("cpu", torch.float32)
    assert first.flops_per_sec > 0
    assert not first.cached
    assert first.flops_per_sec == max(first.matmul_flops_per_sec, first.conv_flops_per_sec)
    assert (first.device, first.dtype, first.threads) == ("cpu", "float32", torch.get_num_threads())
    path = cache_dir / "peak_flops.json"
    assert len(json.loads(path.read_text())["entries"]) == 1

    calls: list[Any] = []

    def fake_measure(device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
        calls.append((device, dtype))
        return 3.0e9, 5.0e9

    monkeypatch.setattr(peak_module, "_measure", fake_measure)
    second = measured_peak("cpu", torch.float32)
    assert second.cached
    assert calls == []
    assert second.flops_per_sec == first.flops_per_sec
    # Another dtype is another entry; a refresh measures again and replaces the entry.
    assert measured_peak("cpu", torch.bfloat16).flops_per_sec == 5.0e9
    monkeypatch.setenv("TRAINPERF_PEAK_REFRESH", "1")
    assert measured_peak("cpu", torch.float32).flops_per_sec == 5.0e9
    monkeypatch.delenv("TRAINPERF_PEAK_REFRESH")
    assert measured_peak("cpu", torch.float32).cached
    assert len(calls) == 2
    # A damaged cache is measured again, never an error.
    path.write_text("{not json")
    assert not measured_peak("cpu", torch.float32).cached


def test_spec_sheet_peaks_and_precision_dtypes() -> None:
    assert spec_peak("NVIDIA H100 80GB HBM3", torch.bfloat16) == pytest.approx(989.4e12)
    assert spec_peak("NVIDIA H100 PCIe", "float16") == pytest.approx(756e12)
    assert spec_peak("NVIDIA A100-SXM4-80GB", torch.float32) == pytest.approx(19.5e12)
    assert spec_peak("Tesla T4", torch.bfloat16) is None  # no bf16 tensor cores
    assert spec_peak("Some Future GPU", torch.float16) is None
    assert dtype_for_precision("bf16-mixed") is torch.bfloat16
    assert dtype_for_precision("16-mixed") is torch.float16
    assert dtype_for_precision("32-true") is torch.float32
    assert dtype_for_precision(None) is torch.float32


def test_utilisation_arithmetic() -> None:
    use = utilisation(2e9, 10, 4.0, 10e9, world_size=2, spec_peak_flops_per_sec=20e9)
    assert use is not None
    assert use.flops_per_sec == pytest.approx(5e9)
    assert use.mfu == pytest.approx(0.25)  # over 2 ranks' peaks
    assert use.spec_mfu == pytest.approx(0.125)
    assert utilisation(None, 10, 4.0, 10e9) is None
    assert utilisation(2e9, 0, 4.0, 10e9) is None
    flops = FlopsInfo(per_sample={"train": 3e9, "val": 1e9}, peak_flops_per_sec=1e10)
    info = RunRecord(flops=flops)
    record = EpochRecord(stage=Stage.VAL, samples=8, wall_s=2.0, world_size=1)
    epoch = epoch_utilisation(info, record)
    assert epoch is not None
    assert epoch.mfu == pytest.approx(0.4)
    assert epoch_utilisation(RunRecord(), record) is None
    assert epoch_utilisation(None, record) is None
    records = [
        record,
        msgspec.structs.replace(record, wall_s=6.0),
        EpochRecord(stage=Stage.TRAIN, samples=1, wall_s=1),
    ]
    whole = stage_utilisation(info, records, Stage.VAL)
    assert whole is not None
    assert whole.flops_per_sec == pytest.approx(16e9 / 8.0)


def test_counting_leaves_the_random_stream_alone() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    count_flops(model, torch.ones(2, 4))
    assert torch.equal(torch.rand(3), expected)


def test_a_peak_measured_on_a_busy_host_is_measured_again_keeping_the_higher(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rates = iter([(1e9, 2e9), (1e9, 1e9), (3e9, 1e9)])
    calls: list[torch.dtype] = []

    def fake_measure(device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
        calls.append(dtype)
        return next(rates)

    monkeypatch.setattr(peak_module, "_measure", fake_measure)
    monkeypatch.setattr(peak_module, "_host_busy", lambda device: True)
    busy = measured_peak("cpu", torch.float32)
    assert busy.contended
    assert busy.flops_per_sec == 2e9
    again = measured_peak("cpu", torch.float32)  # contended: measured again, the higher kept
    assert len(calls) == 2
    assert again.flops_per_sec == 2e9
    assert again.contended
    monkeypatch.setattr(peak_module, "_host_busy", lambda device: False)
    quiet = measured_peak("cpu", torch.float32)
    assert quiet.flops_per_sec == 3e9
    assert not quiet.contended
    assert measured_peak("cpu", torch.float32).cached  # quiet: no more measuring
    assert len(calls) == 3

"""channels_last only for convolutional models: a trace measures the convolutions' share of its
op time (and of the kernels' device time); a transformer's trace (linear / matmul / softmax, no
convolution) gets no channels_last advice from any rule, a convolutional one does, on CPU and on
GPU. The real GPU traces of the fixtures are ResNet-class: convolutional."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainperf.analysis.trace import analyze_trace
from trainperf.analysis.trace.measures import is_conv_kernel, is_conv_op

from trainperf_testing.synth import make_op_trace, write


def _analysed(tmp_path: Path, *, conv: bool, gpu: bool) -> dict[str, Any]:
    name = f"{'conv' if conv else 'bert'}_{'gpu' if gpu else 'cpu'}.json"
    return analyze_trace(write(make_op_trace(conv=conv, gpu=gpu), tmp_path / name))


def _advice(r: dict[str, Any]) -> str:
    return " ".join(f["suggestion"] for f in r["findings"])


@pytest.mark.parametrize("gpu", [False, True])
def test_a_transformer_trace_gets_no_channels_last(tmp_path: Path, gpu: bool) -> None:
    r = _analysed(tmp_path, conv=False, gpu=gpu)
    assert r["metrics"]["conv_pct"] == 0.0
    ids = {f["id"] for f in r["findings"]}
    # the rules that used to name channels_last fired, without it
    assert ("low_gpu_utilisation" if gpu else "dispatch_overhead") in ids
    assert "channels_last" not in _advice(r)
    assert "torch.compile" in _advice(r)


@pytest.mark.parametrize("gpu", [False, True])
def test_a_convolutional_trace_keeps_channels_last(tmp_path: Path, gpu: bool) -> None:
    r = _analysed(tmp_path, conv=True, gpu=gpu)
    assert r["metrics"]["conv_pct"] >= 50.0
    assert "channels_last" in _advice(r)


def test_the_real_gpu_traces_are_convolutional(traces_dir: Path) -> None:
    for name in ("gpu_resnet50_2021.pt.trace.json.gz", "gpu_ns_resolution_2024.pt.trace.json.gz"):
        r = analyze_trace(traces_dir / name)
        assert r["metrics"]["conv_pct"] >= 30.0, name


def test_conv_names() -> None:
    assert is_conv_op("aten::cudnn_convolution")
    assert is_conv_op("autograd::engine::evaluate_function: ConvolutionBackward0")
    assert not is_conv_op("aten::_convert_indices_from_coo_to_csr")
    assert not is_conv_op("aten::linear")
    assert is_conv_kernel("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>")
    assert is_conv_kernel("sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc")
    assert not is_conv_kernel("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512>")
    assert not is_conv_kernel("ampere_sgemm_128x64_tn")

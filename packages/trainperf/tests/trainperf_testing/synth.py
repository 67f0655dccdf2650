"""Small synthetic Chrome traces with a known structure (shared by the trace tests)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np


def make_trace(
    n_steps: int = 6,
    conv_us: float = 400.0,
    data_us: float = 100.0,
    jitter: float = 0.01,
    seed: int = 0,
    rank: int | None = None,
    relative: bool = True,
    shuffle: bool = True,
) -> dict[str, Any]:
    """A CPU training trace: per step ``ProfilerStep#N`` > DataLoader, forward conv, backward
    (``autograd::engine`` ops), ``Optimizer.step``. ``conv_us`` sets the forward conv's length,
    so a second trace with a larger value is a planted regression. Times in µs."""
    rng = np.random.default_rng(seed)
    events: list[dict[str, Any]] = []
    t = 1000.0

    def x(name: str, ts: float, dur: float, cat: str = "cpu_op") -> None:
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": 7, "ts": ts, "dur": dur}
        )

    for n in range(n_steps):
        j = 1.0 + jitter * rng.standard_normal()
        data, conv = data_us * j, conv_us * j
        step_start = t
        x(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            t + 1,
            data,
            "user_annotation",
        )
        x("aten::stack", t + 2, data - 2)
        t += data + 2
        x("aten::conv2d", t, conv + 4)
        x("aten::convolution", t + 1, conv + 2)
        x("aten::mkldnn_convolution", t + 2, conv)
        t += conv + 5
        x("aten::relu", t, 20 * j)
        t += 21 * j
        x("autograd::engine::evaluate_function: ConvolutionBackward0", t, 300 * j)
        x("aten::convolution_backward", t + 1, 298 * j)
        t += 301 * j
        x("Optimizer.step#SGD.step", t, 50, "user_annotation")
        x("aten::add_", t + 1, 20)
        x("aten::add_", t + 22, 20)
        t += 52
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{n + 1}",
                "pid": 7,
                "tid": 7,
                "ts": step_start,
                "dur": t - step_start + 1,
            }
        )
        events.append(
            {
                "ph": "i",
                "s": "t",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 7,
                "tid": 7,
                "ts": step_start + 5,
                "args": {
                    "Bytes": 1024 * (n + 1),
                    "Total Allocated": 4096 * (n + 1),
                    "Total Reserved": 0,
                    "Device Type": 0,
                    "Device Id": -1,
                },
            }
        )
        t += 2
    if shuffle:
        rng.shuffle(events)
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": events}
    if relative:
        doc["baseTimeNanoseconds"] = 1_790_000_000_000_000_000
    if rank is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
    return doc


def write(doc: dict[str, Any], path: Path) -> Path:
    """Write ``doc`` as JSON, gzipped when ``path`` ends in ``.gz``."""
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def make_op_trace(
    *, conv: bool, gpu: bool, n_steps: int = 3, ops_per_step: int = 1100
) -> dict[str, Any]:
    """A training trace of many small ops per step (``ProfilerStep#N`` > a short DataLoader
    span, then ``ops_per_step`` flat ops of 4 µs): a transformer's (``aten::linear``,
    ``aten::matmul``, ``aten::softmax``, ``aten::layer_norm``, ...) or, with ``conv``, every
    fourth op an ``aten::conv2d`` of 30 µs. With ``gpu`` each op launches one kernel joined by
    ``correlation`` (cuBLAS GEMMs and element-wise kernels of 3 µs, ``implicit_convolve_sgemm``
    of 12 µs for a convolution), so the GPU idles much of each step. Times in µs."""
    names = ["aten::linear", "aten::matmul", "aten::softmax", "aten::layer_norm", "aten::gelu"]
    kernels = {"aten::linear": "ampere_sgemm_128x64_tn", "aten::matmul": "ampere_sgemm_64x64_nn"}
    events: list[dict[str, Any]] = []
    corr = 0
    t = 1000.0

    def x(name: str, ts: float, dur: float, cat: str = "cpu_op", **more: Any) -> None:
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 9, "tid": 9, "ts": ts, "dur": dur, **more}
        )

    for n in range(n_steps):
        start = t
        x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 20, "user_annotation")
        t += 22
        for i in range(ops_per_step):
            is_conv = conv and i % 4 == 0
            name = "aten::conv2d" if is_conv else names[i % len(names)]
            dur = 30.0 if is_conv else 4.0
            x(name, t, dur)
            if gpu:
                corr += 1
                x("cudaLaunchKernel", t + 0.5, 2.0, "cuda_runtime", args={"correlation": corr})
                kernel = (
                    "implicit_convolve_sgemm<float, float, 128, 6, 7, 3, 3, 5>"
                    if is_conv
                    else kernels.get(name, "vectorized_elementwise_kernel<4, AddFunctor>")
                )
                events.append(
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": kernel,
                        "pid": 0,
                        "tid": 7,
                        "ts": t + 3.0,
                        "dur": 12.0 if is_conv else dur - 1.0,
                        "args": {"correlation": corr, "device": 0, "stream": 7},
                    }
                )
            t += dur + 4.0
        x(f"ProfilerStep#{n + 1}", start, t - start + 1, "user_annotation")
        t += 5
    props = [{"id": 0, "name": "NVIDIA Test", "computeMajor": 8, "computeMinor": 0}] if gpu else []
    return {"schemaVersion": 1, "deviceProperties": props, "traceEvents": events}

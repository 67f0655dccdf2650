"""Sync calls named with the user's function: a real CPU trace recorded here with
``with_stack=True``, where this file's own code calls ``.item()`` each step.

On CPU ``.item()`` is no sync and the trace has no device, so the finding path is tested on the
same real trace with one kernel event added and, inside each ``aten::_local_scalar_dense``, the
blocking ``cudaStreamSynchronize`` that CUDA records there (the trace then reads as a GPU trace
whose ``aten::item`` calls hold the syncs they would on CUDA)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from trainperf.analysis.trace.analyze import analyze_path
from trainperf.analysis.trace.ingest import load_traces
from trainperf.analysis.trace.stacks import is_user_frame, sync_calls, sync_sites
from trainperf.analysis.trace.table import Kind

ITEMS_PER_STEP = 6
STEPS = 3


def read_loss_each_step(model: torch.nn.Module, x: torch.Tensor) -> float:
    total = 0.0
    for _ in range(ITEMS_PER_STEP):
        total += model(x).sum().item()
    return total


def _record(path: Path) -> Path:
    model = torch.nn.Linear(8, 2)
    x = torch.randn(4, 8)

    def save(p: profile) -> None:
        p.export_chrome_trace(str(path))

    with profile(
        activities=[ProfilerActivity.CPU],
        with_stack=True,
        schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1),
        on_trace_ready=save,
    ) as prof:
        for _ in range(STEPS + 1):
            read_loss_each_step(model, x)
            prof.step()
    return path


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _record(tmp_path_factory.mktemp("stacks") / "epoch_0.json")


def _with_one_kernel(src: Path, dst: Path) -> Path:
    data = json.loads(src.read_text())
    host = [e for e in data["traceEvents"] if e.get("cat") == "cpu_op"]
    first = min(host, key=lambda e: e["ts"])
    for k, e in enumerate(h for h in host if h["name"] == "aten::_local_scalar_dense"):
        data["traceEvents"].append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaStreamSynchronize",
                "pid": e["pid"],
                "tid": e["tid"],
                "ts": e["ts"] + 0.1 * e["dur"],
                "dur": 0.5 * e["dur"],
                "args": {"cbid": 131, "correlation": 1000 + k},
            }
        )
    data["traceEvents"].append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "void gemv_kernel<float>()",
            "pid": 0,
            "tid": 7,
            "ts": first["ts"],
            "dur": 1.0,
            "args": {"correlation": 1, "device": 0, "stream": 7},
        }
    )
    dst.write_text(json.dumps(data))
    return dst


_LINE = inspect.getsourcelines(read_loss_each_step)[1]


def test_sync_site_names_this_file_and_function(cpu_trace: Path) -> None:
    table = load_traces(cpu_trace)
    items = table.name_ids(lambda s: s == "aten::item")
    idx = np.flatnonzero(items[table.name] & (table.kind == Kind.CPU_OP))
    assert idx.size == ITEMS_PER_STEP * STEPS
    sites = sync_sites(sync_calls(table, idx), STEPS)
    assert len(sites) == 1
    site = sites[0]
    assert site.file.endswith("unit/perf_trace/test_stacks.py")  # shortened by its sys.path entry
    assert site.function == "read_loss_each_step"
    assert site.line == _LINE
    assert site.per_step == ITEMS_PER_STEP
    assert site.via == "Tensor.item"
    assert site.ops == ("aten::item",)


def test_without_python_events_sites_have_no_frame(cpu_trace: Path, tmp_path: Path) -> None:
    data = json.loads(cpu_trace.read_text())
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "python_function"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    table = load_traces(bare)
    items = table.name_ids(lambda s: s == "aten::item")
    idx = np.flatnonzero(items[table.name] & (table.kind == Kind.CPU_OP))
    assert idx.size == ITEMS_PER_STEP * STEPS
    # named by their operator alone: no frame, no line
    sites = sync_sites(sync_calls(table, idx), STEPS)
    assert [(s.op, s.hook, s.file, s.line, s.per_step) for s in sites] == [
        ("aten::item", None, None, None, ITEMS_PER_STEP)
    ]


def test_host_sync_finding_names_the_line(cpu_trace: Path, tmp_path: Path) -> None:
    trace = _with_one_kernel(cpu_trace, tmp_path / "epoch_0.json")
    analysis = analyze_path(trace)
    sync = [f for f in analysis.findings if f.id == "host_sync"]
    assert len(sync) == 1, [f.id for f in analysis.findings]
    f = sync[0]
    where = f"unit/perf_trace/test_stacks.py:{_LINE} read_loss_each_step"
    assert where in f.title
    assert f"{ITEMS_PER_STEP:.1f}/step" in f.title
    site = f.evidence["sites"][0]
    assert site["function"] == "read_loss_each_step"
    assert site["line"] == _LINE
    assert site["per_step"] == ITEMS_PER_STEP
    assert site["op"] == "aten::item"
    assert site["ops"] == ["cudaStreamSynchronize"]
    # the same trace without the blocking calls: CPU-tensor .item() is no sync
    data = json.loads(trace.read_text())
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "cuda_runtime"]
    plain = tmp_path / "plain" / "epoch_0.json"
    plain.parent.mkdir()
    plain.write_text(json.dumps(data))
    bare = analyze_path(plain)
    assert bare.metrics.sync_calls_per_step == 0
    assert "host_sync" not in {f.id for f in bare.findings}


@pytest.mark.parametrize(
    ("name", "user"),
    [
        ("tests/unit/perf_trace/test_stacks.py(20): step", True),
        ("ocr/lightning_modules/ocr_pl.py(88): training_step", True),
        ("train.py(3): <module>", True),
        ("torch/_tensor.py(1050): __format__", False),
        ("lightning/pytorch/loops/fit_loop.py(200): run", False),
        ("typing.py(359): inner", False),
        ("contextlib.py(141): __exit__", False),
        ("/usr/lib/python3.11/threading.py(10): run", False),
        ("/venv/lib/python3.11/site-packages/foo/bar.py(1): f", False),
        ("<built-in method item of Tensor object at 0x7f>", False),
    ],
)
def test_user_frames(name: str, user: bool) -> None:
    assert is_user_frame(name) is user

"""The typed analysis result and its dict form at the public edge."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
from trainperf.analysis.trace import (
    TraceAnalysis,
    analyze_path,
    analyze_table,
    analyze_trace,
    load_traces,
)
from trainperf.core.findings import Finding

from trainperf_testing.synth import make_trace, write

DOCUMENTED = {"top_cpu_ops", "top_cuda_ops", "memory_peaks", "dataloader_time_pct"}


def test_analyze_table_is_typed_and_findings_are_finding_objects(tmp_path: Path) -> None:
    path = write(make_trace(n_steps=4, data_us=400.0), tmp_path / "t.json")
    analysis = analyze_table(load_traces(path))
    assert isinstance(analysis, TraceAnalysis)
    assert analysis.summary.n_steps == 4
    assert analysis.findings
    assert all(isinstance(f, Finding) for f in analysis.findings)
    assert analysis.findings[0].id == "data_loading"
    assert analysis.steps[0].phases_ms["data_wait"] > 0


def test_the_dict_form_is_the_public_edge(tmp_path: Path) -> None:
    """``analyze_trace`` is the typed analysis's ``as_dict()`` with the documented keys in the
    documented shape (``(op_name, time_us)`` pairs) and the rows beside them."""
    path = write(make_trace(n_steps=4), tmp_path / "t.json")
    public = analyze_trace(path)
    assert set(public) >= DOCUMENTED
    typed = analyze_path(path).as_dict()
    for doc in (public, typed):  # wall-clock figures differ between two runs
        doc.pop("timing")
        for source in doc["sources"]:
            source.pop("parse_s")
    renamed = {"top_cpu_ops": "top_cpu_op_rows", "top_cuda_ops": "top_cuda_op_rows"}
    renamed["memory_peaks"] = "memory_peak_rows"
    assert {renamed.get(k, k): v for k, v in typed.items()} == {
        k: v for k, v in public.items() if k not in renamed
    }
    rows = public["top_cpu_op_rows"]
    assert public["top_cpu_ops"] == [(r["name"], round(r["self_ms"] * 1e3, 3)) for r in rows]
    assert [us for _, us in public["top_cpu_ops"]] == sorted(
        (us for _, us in public["top_cpu_ops"]), reverse=True
    )
    assert public["top_cuda_ops"] == []  # a CPU trace
    # the synthetic trace's [memory] events: step n allocates 4096 * (n + 1) bytes in total
    ((at_us, peak),) = public["memory_peaks"]
    assert peak == 4096 * 4
    assert isinstance(peak, int)
    assert at_us == round(public["memory_peak_rows"][0]["at_ms"] * 1e3, 3)
    assert public["version"] == 1
    # plain builtins only (no numpy scalars): msgspec encodes nothing else (the pairs as lists)
    assert json.loads(msgspec.json.encode(public)) == json.loads(json.dumps(public))
    # phase-named keys speak the clock's vocabulary (data_wait, not data_loading), except the
    # documented dataloader_time_pct
    assert "data_wait_pct" in public["per_rank"][0]
    assert "data_wait_pct" in public["metrics"]
    # optional parts of a CPU trace are left out, as before
    assert "gpu" not in public["phase_summary"]["train"]
    assert "gpu_ms" not in public["steps"][0]


def test_top_k_limits_the_pairs_and_the_rows(tmp_path: Path) -> None:
    path = write(make_trace(n_steps=2), tmp_path / "t.json")
    every = analyze_trace(path, top_k=None)
    two = analyze_trace(path, top_k=2)
    assert len(every["top_cpu_ops"]) > 2
    assert two["top_cpu_ops"] == every["top_cpu_ops"][:2]
    assert len(two["top_cpu_op_rows"]) == 2

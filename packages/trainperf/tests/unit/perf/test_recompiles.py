"""trainperf.probe.recompiles: the seam into torch's compilation metrics (checked on the installed
torch),
reasons normalised with the changing dimension named, the finding's rule, shape counting."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from trainperf.analysis.recompile_rules import (
    RECOMPILE_CHURN,
    recompile_finding,
    recompile_findings,
)
from trainperf.probe.recompiles import CompileWatch, ShapeCounter, normalize_reason, torch_tested
from trainperf.records.epoch_scans import RecompileReason, RecompilesRecord
from trainperf.records.files import RecordWriter

SIZES = (8, 10, 12, 14, 16, 18)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _run(model: torch.nn.Module, sizes: tuple[int, ...], epochs: int) -> list[RecompilesRecord]:
    watch = CompileWatch()
    out = []
    for epoch in range(epochs):
        for s in sizes:
            model(torch.randn(2, 3, s, s))
        out.append(watch.take(epoch))
    return out


def test_seam_torch_surface() -> None:
    """The torch surface the module reads: present on the tested torch, with the fields used."""
    from torch._dynamo import utils

    assert torch_tested(), f"torch {torch.__version__} is outside TESTED_TORCH: check the seam"
    assert callable(utils.get_compilation_metrics)
    fields = set(utils.CompilationMetrics.__dataclass_fields__)
    assert {
        "compile_id",
        "start_time_us",
        "co_name",
        "co_filename",
        "recompile_reason",
        "entire_frame_compile_time_s",
        "fail_type",
        "fail_reason",
        "is_forward",
    } <= fields
    assert hasattr(torch._dynamo.config, "recompile_limit")


def test_varying_sizes_recompile_with_dimension_named() -> None:
    model = torch.compile(torch.nn.Conv2d(3, 4, 3), backend="eager", dynamic=False)
    epochs = _run(model, SIZES, 2)
    first = epochs[0]
    assert first.available
    assert first.compiles == len(SIZES)
    assert first.recompiles == len(SIZES) - 1
    assert not first.limit_hit
    assert first.reasons[0].dimension == "dimension 2 of args[0]"
    assert first.reasons[0].sizes == list(SIZES)
    assert first.compile_s > 0
    assert epochs[1].recompiles == 0  # every shape cached
    finding = recompile_finding(epochs)
    assert finding is not None
    assert "dimension 2 of args[0]" in finding.title
    assert "mark_dynamic" in finding.suggestion
    assert "dynamic=True" in finding.suggestion


def test_recompile_limit_hit_is_recorded() -> None:
    model = torch.compile(torch.nn.Conv2d(3, 4, 3), backend="eager", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=3):
        epochs = _run(model, SIZES, 1)
    assert epochs[0].limit_hit
    assert epochs[0].limit == 3
    finding = recompile_finding(epochs)
    assert finding is not None
    assert "recompile limit (3)" in finding.title


def test_fixed_sizes_no_recompiles_no_finding() -> None:
    model = torch.compile(torch.nn.Conv2d(3, 4, 3), backend="eager", dynamic=False)
    epochs = _run(model, (12,) * 6, 3)
    assert [e.compiles for e in epochs] == [1, 0, 0]
    assert all(e.recompiles == 0 for e in epochs)
    assert recompile_finding(epochs) is None


def test_automatic_dynamic_recompiles_once_no_finding() -> None:
    """Dynamo's default: one recompile, then a graph dynamic in that dimension; no finding."""
    model = torch.compile(torch.nn.Conv2d(3, 4, 3), backend="eager")
    epochs = _run(model, SIZES, 2)
    assert epochs[0].recompiles == 1
    assert epochs[1].recompiles == 0
    assert recompile_finding(epochs) is None


def test_rule_recurring_after_first_epoch() -> None:
    reason = [
        RecompileReason(
            reason="tensor 'x' size mismatch at index 1",
            count=1,
            dimension="dimension 1 of x",
            sizes=[5, 7],
        )
    ]
    epochs = [RecompilesRecord(epoch=0, compiles=2, recompiles=1), RecompilesRecord(epoch=1)]
    assert recompile_finding(epochs) is None
    epochs.append(
        RecompilesRecord(epoch=2, compiles=1, recompiles=1, reasons=reason, compile_s=2.0)
    )
    finding = recompile_finding(epochs, total_s=10.0)
    assert finding is not None
    assert "after the first epoch" in finding.title
    assert finding.score == 20.0  # 2 s compiling of 10 s: the share of wall time
    assert "dimension 1 of x" in finding.title
    churn = [RecompilesRecord(epoch=0, compiles=RECOMPILE_CHURN + 1, recompiles=RECOMPILE_CHURN)]
    assert recompile_finding(churn) is not None
    assert recompile_finding([RecompilesRecord(epoch=0, available=False, note="no dynamo")]) is None


def test_normalize_reason() -> None:
    reason, dim, sizes = normalize_reason(
        "0/3: tensor 'L['x']' size mismatch at index 0. expected 4, actual 6"
    )
    assert reason == "tensor 'L['x']' size mismatch at index 0"
    assert sizes == [4, 6]
    assert dim == "dimension 0 of L['x']"
    reason, dim, _ = normalize_reason("1/2: L['n'] == 5")
    assert reason == "L['n'] == N"
    assert dim is None


def test_shape_counter() -> None:
    counter = ShapeCounter()
    for s in (4, 4, 6):
        counter.note({"images": torch.zeros(2, 3, s), "names": ["a", "b"]})
    counter.note([torch.zeros(1, 2), 3])
    counter.note("no tensor")
    count, examples = counter.take()
    assert count == 3
    assert "2x3x4" in examples
    assert counter.take() == (0, [])


def test_records_round_trip(tmp_path: Path) -> None:
    writer = RecordWriter(RecompilesRecord.path(tmp_path))
    reason = RecompileReason(
        reason="tensor 'x' size mismatch at index 1", count=5, dimension="d 1 of x"
    )
    writer.write(
        RecompilesRecord(epoch=0, compiles=6, recompiles=5, reasons=[reason], batch_shapes=6)
    )
    writer.close()
    found = recompile_findings(tmp_path, total_s=100.0)
    assert len(found) == 1
    assert found[0].evidence["batch_shapes_by_epoch"] == {"0": 6}

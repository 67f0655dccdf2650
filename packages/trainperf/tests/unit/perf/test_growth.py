"""trainperf.probe.growth_scan: the scan measures what attributes hold, growth over the last
epochs names the attribute, and the records round-trip through the run directory."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import torch
from trainperf.analysis.memory_growth.attributes import (
    GROWTH_EPOCHS,
    growing,
    growth_finding,
    growth_findings,
)
from trainperf.probe import growth_scan as growth
from trainperf.probe.growth_scan import scan
from trainperf.records.epoch_scans import GrowthRecord
from trainperf.records.files import RecordWriter


class Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("buf", torch.zeros(100))
        self.losses: list[torch.Tensor] = []
        self.numbers: list[float] = []
        self.outputs: dict[str, list[torch.Tensor]] = {"train": [], "val": []}
        self.window: deque[torch.Tensor] = deque(maxlen=5)

    def step(self) -> None:
        loss = self.lin(torch.randn(8, 4)).sum()
        self.losses.append(loss)
        self.numbers.append(loss.item())
        self.outputs["train"].append(torch.ones(10))
        self.window.append(loss.detach().clone())


def _scans(epochs: int, steps: int = 5) -> list[GrowthRecord]:
    m = Holder()
    out = []
    for epoch in range(epochs):
        for _ in range(steps):
            m.step()
        out.append(scan({"UserModule": m}, epoch))
    return out


def test_scan_measures_containers_not_module_state() -> None:
    s = _scans(1)[0]
    nodes = {n.path: n for n in s.nodes}
    assert "UserModule.losses" in nodes
    assert nodes["UserModule.losses"].graph
    assert nodes["UserModule.losses"].tensors == 5
    assert nodes["UserModule.losses"].length == 5
    assert nodes["UserModule.outputs['train']"].bytes == 5 * 10 * 4
    assert not nodes["UserModule.outputs['train']"].graph
    assert "UserModule.numbers" not in nodes  # no tensors
    assert not any("buf" in p or "lin" in p for p in nodes)  # parameters, buffers, submodules
    assert s.items > 0
    assert s.scan_ms >= 0
    assert not s.truncated


def test_storages_are_counted_once() -> None:
    t = torch.zeros(1000)
    holder = type("H", (), {})()
    holder.views = [t[:10], t[10:20], t]
    s = scan({"H": holder}, 0)
    assert s.nodes[0].bytes == 4000


def test_big_containers_are_sampled_and_extrapolated() -> None:
    holder = type("H", (), {})()
    holder.items = [torch.zeros(2) for _ in range(growth.SAMPLE_ITEMS * 10)]
    s = scan({"H": holder}, 0)
    node = s.nodes[0]
    assert node.sampled
    assert node.tensors == growth.SAMPLE_ITEMS * 10
    assert s.items <= growth.SAMPLE_ITEMS + 1


def test_item_budget_truncates() -> None:
    holder = type("H", (), {})()
    holder.a = [[torch.zeros(1)] for _ in range(50)]
    s = scan({"H": holder}, 0, max_items=20)
    assert s.truncated
    assert s.items == 20


def test_growth_named_with_graph_and_deepest_path() -> None:
    found = growing(_scans(GROWTH_EPOCHS + 1))
    paths = {g.path: g for g in found}
    assert set(paths) == {"UserModule.losses", "UserModule.outputs['train']"}
    assert paths["UserModule.losses"].graph
    assert paths["UserModule.losses"].tensors_per_epoch == 5
    finding = growth_finding(found)
    assert finding is not None
    assert finding.confidence == "measured"
    assert "UserModule.losses" in finding.title
    assert "autograd graph" in finding.title
    assert "detach()" in finding.suggestion
    assert finding.severity == "critical"


def test_no_growth_before_enough_epochs_or_when_bounded() -> None:
    assert growing(_scans(GROWTH_EPOCHS)) == []  # one epoch short
    m = Holder()
    scans = []
    for epoch in range(4):
        for _ in range(5):
            m.step()
        m.losses.clear()
        m.outputs["train"].clear()
        scans.append(scan({"UserModule": m}, epoch))
    assert growing(scans) == []  # the deque is bounded, the lists are cleared
    assert growth_finding([]) is None


def test_records_round_trip_and_verdict_findings(tmp_path: Path) -> None:
    writer = RecordWriter(GrowthRecord.path(tmp_path))
    for s in _scans(3):
        writer.write(s)
    writer.close()
    found = growth_findings(tmp_path)
    assert len(found) == 1
    assert "UserModule.losses" in found[0].title
    assert growth_findings(tmp_path / "absent") == []


def test_malformed_record_names_the_file(tmp_path: Path) -> None:
    import pytest
    from trainperf.records.schema import RunDirError

    line = '{"schema":"receipt-ocr/growth","v":1,"epoch":0,'
    line += '"nodes":[{"path":"M.x","kind":"list","length":"many"}]}\n'
    GrowthRecord.path(tmp_path).parent.mkdir(parents=True)
    GrowthRecord.path(tmp_path).write_text(line)
    with pytest.raises(RunDirError, match=r"growth\.jsonl: line 1: .*length"):
        growth_findings(tmp_path)

"""Worker caches by convention, not by name: any cache X that counts ``X_hits`` / ``X_misses``
(``trainperf.report_count``) gets a hit rate in the baseline figures, the logger metrics, the
epoch table, the report's counter table and the verdict's low-hit-rate finding, named by X; its
config keys are found under a node named X (``enabled`` / ``max_bytes``), and the target-cache
advice under a node whose name ends in ``cache``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from rich.console import Console
from trainperf.analysis.advice import RunFacts, candidates_for
from trainperf.analysis.baseline import load_source
from trainperf.analysis.config_keys import find_cache_key
from trainperf.lightning.performance_profiler import cache_metrics, render_table
from trainperf.present.report import build_report, to_markdown
from trainperf.records.epochs import EpochRecord

from trainperf_testing.runs import epoch_record, make_run

INPUT_VAL = {"data_wait": 6.0, "forward": 1.0, "metric": 0.5, "callbacks": 0.1}
TARGETS = {"fetch": 2.0, "collate": 5.0, "targets": 4.6}
#: A foreign app's config: two caches, neither of them the receipt app's.
CONFIG: dict[str, Any] = {
    "data": {
        "num_workers": 2,
        "image_store": {"enabled": True, "max_bytes": 512},
        "label_cache": {"enabled": False, "max_bytes": 64},
    },
}
COUNTS = {
    "image_store_hits": 3,
    "image_store_misses": 37,
    "image_store_evictions": 5,
    "image_store_corrupt": 2,
    "label_cache_hits": 9,
    "label_cache_misses": 1,
    "decoded_bytes": 100,  # a counter that is no cache
}


def _run(root: Path) -> Path:
    epochs = [
        epoch_record("val", e, INPUT_VAL, worker_s=TARGETS, worker_counts=COUNTS) for e in range(3)
    ]
    return make_run(root, epochs, config=CONFIG)


def test_the_verdict_names_each_cache_and_finds_its_keys_by_its_name(tmp_path: Path) -> None:
    report = build_report(_run(tmp_path))
    misses = [f for f in report.findings if f.id == "cache_misses"]
    assert [f.evidence["cache"] for f in misses] == ["image_store"]  # label_cache hits 90 %
    (low,) = misses
    assert low.title.startswith("image store hits only 8 % of validation lookups")
    assert low.evidence["hit_rate_pct"] == pytest.approx(7.5)
    assert low.evidence["evictions"] == 3 * 5  # every epoch's (the rate skips the first)
    assert "`data.image_store.max_bytes` (now 512)" in low.suggestion
    (corrupt,) = [f for f in report.findings if f.id == "cache_corrupt"]
    assert corrupt.title == "6 corrupt image store entries were read (and recomputed)"
    md = to_markdown(report)
    assert "| stage | epoch | image_store hit rate % | label_cache hit rate % |" in md
    assert "| validation | 1 | 7.5 | 90.0 |" in md


def test_baseline_figures_and_logger_metrics_are_named_by_the_cache(tmp_path: Path) -> None:
    figures = load_source(_run(tmp_path), skip_epochs=0).figures
    assert figures["image_store_hit_rate"].values == (0.075,) * 3
    assert figures["label_cache_hit_rate"].values == (0.9,) * 3
    assert (figures["label_cache_hit_rate"].unit, figures["label_cache_hit_rate"].better) == (
        "fraction",
        "higher",
    )
    assert not any("decoded" in name for name in figures)
    record = msgspec.convert(
        {**epoch_record("val", 1, INPUT_VAL, worker_counts=COUNTS), "worker_counts": COUNTS},
        EpochRecord,
    )
    metrics = cache_metrics(record)
    assert metrics["performance/val_image_store_hit_rate"] == pytest.approx(0.075)
    assert metrics["performance/image_store_hit_rate"] == pytest.approx(0.075)
    assert metrics["performance/val_label_cache_hit_rate"] == pytest.approx(0.9)
    assert metrics["performance/val_image_store_evictions"] == 5.0
    assert metrics["performance/val_label_cache_evictions"] == 0.0  # absent: counted as 0
    assert not any("decoded" in key for key in metrics)
    console = Console(width=120, record=True)
    console.print(render_table(record))
    table = console.export_text()
    for text in ("image store hits", "3/40", "7.5 %", "label cache hits", "9/10"):
        assert text in table


def test_config_keys_of_a_cache_by_convention() -> None:
    assert find_cache_key(CONFIG, "max_bytes", "image_store") is not None
    key = find_cache_key(CONFIG, "enabled")  # no cache named: a node whose name ends in cache
    assert key is not None
    assert key.path == "data.label_cache.enabled"
    assert find_cache_key({"data": {"num_workers": 2}}, "enabled") is None
    facts = RunFacts(config=CONFIG, cpu_count=8, stage="val", num_workers=2)
    first = candidates_for("input_bound", facts, part="targets")[0]
    assert (first.family, first.override) == ("cache", "data.label_cache.enabled=true")

"""A run folder written before the toolkit left the app (commit b376b2e: ``receipt-ocr/...``
schema tags, ``ocr.perf`` callbacks) still reports and checks.

The fixture is that run trimmed to what the toolkit reads (``perf/*.jsonl`` with every eighth
resource sample, ``perf/run.json``, ``.hydra/``): ``ocr-train experiment=synthetic_debug
callbacks=monitoring trainer.max_epochs=4 trainer.limit_train_batches=3
data.polygon_cache.enabled=true`` with ``PYTHONPATH`` on a worktree of b376b2e. It ran on the
shared 2-core machine while other jobs held most of its CPUs (the report says so), so it is
several times slower than the committed baseline: checked against that baseline it is a
regression (exit 1), which shows both old files were read and compared; checked against a
baseline made today from the old folder itself (``trainperf/`` tags), it passes (exit 0)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from trainperf.analysis.baseline import load_source
from trainperf.cli.main import main as perf_main
from trainperf.present.report import build_report
from trainperf.records.epoch_scans import GrowthRecord, RecompilesRecord
from trainperf.records.epochs import EpochRecord
from trainperf.records.files import read_records, read_run_record
from trainperf.records.monitoring import ResourceSample
from trainperf.records.schema import LEGACY_SCHEMA_PREFIX

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "legacy_run_b376b2e"
BASELINE = REPO / "tests" / "performance" / "baselines" / "synthetic_debug_val.json"


@pytest.fixture
def legacy_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)  # report and check must not write into the repository
    return run


def test_the_fixture_is_written_with_the_legacy_tags() -> None:
    first = json.loads((FIXTURE / "perf" / "epochs.jsonl").read_text().splitlines()[0])
    assert first["schema"].startswith(LEGACY_SCHEMA_PREFIX)
    assert json.loads((FIXTURE / "perf" / "run.json").read_text())["schema"].startswith(
        LEGACY_SCHEMA_PREFIX
    )


def test_every_record_of_the_old_folder_is_read(legacy_run: Path) -> None:
    epochs = read_records(EpochRecord.path(legacy_run), EpochRecord)
    assert [(str(e.stage), e.epoch) for e in epochs] == [
        (stage, epoch) for epoch in range(4) for stage in ("val", "train")
    ]
    assert all(e.worker_counts.get("polygon_cache_hits") for e in epochs if e.stage == "val")
    assert len(read_records(GrowthRecord.path(legacy_run), GrowthRecord)) == 4
    assert len(read_records(RecompilesRecord.path(legacy_run), RecompilesRecord)) == 4
    assert read_records(ResourceSample.path(legacy_run), ResourceSample)
    info = read_run_record(legacy_run)
    assert info.module_class == "OCRLightningModule"
    assert info.eval is None  # recorded before the app recorded its evaluation command
    figures = load_source(legacy_run).figures
    assert figures["polygon_cache_hit_rate"].values == (1.0, 1.0, 1.0)
    report = build_report(legacy_run)
    # recorded on a contended host, far below its measured peak: not called compute-bound
    assert {f.id for f in report.findings} >= {"slow_kernels", "slow_postprocess"}


def test_report_and_check_exit_0_on_the_old_folder(
    legacy_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert perf_main(["report", str(legacy_run), "-o", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert "Verdict" in out
    assert "validation" in out
    # the old folder against the committed (legacy-tagged) baseline: read, compared, slower
    against_old = tmp_path / "check_old.json"
    code = perf_main(["check", str(BASELINE), str(legacy_run), "--json", str(against_old)])
    doc = json.loads(against_old.read_text())
    assert (code, doc["verdict"]) == (1, "regression"), capsys.readouterr().out
    rows = {row["figure"]: row for row in doc["rows"]}
    assert rows["polygon_cache_hit_rate"]["status"] == "no significant change"
    assert "epoch_wall_s" in rows
    # a baseline written today from the old folder (new tags) passes it
    baseline = tmp_path / "baseline.json"
    assert perf_main(["baseline", str(legacy_run), "-o", str(baseline)]) == 0
    assert json.loads(baseline.read_text())["schema"].startswith("trainperf/")
    result = tmp_path / "check.json"
    code = perf_main(["check", str(baseline), str(legacy_run), "--json", str(result)])
    assert code == 0, capsys.readouterr().out
    assert json.loads(result.read_text())["verdict"] == "pass"

"""DataLoader workers are capped at the usable cores, with one warning saying so."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from ocr.data import datamodule
from ocr.data.datamodule import ReceiptDataModule, capped_num_workers, usable_cores


def test_usable_cores_is_the_affinity_mask() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))


def test_more_workers_than_cores_are_capped_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setattr(datamodule, "usable_cores", lambda: 2)
    with caplog.at_level(logging.WARNING, logger="ocr.data.datamodule"):
        dm = ReceiptDataModule(dataset_dir=tmp_path, num_workers=8)
    assert dm.num_workers == 2
    (record,) = caplog.records
    assert "data.num_workers=8 exceeds the 2 usable CPU core(s)" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ocr.data.datamodule"):
        assert capped_num_workers(2) == 2
        assert capped_num_workers(0) == 0
    assert caplog.records == []

"""The collate's maps, produced by the real data pipeline (annotations -> EXIF-aware decode ->
canvas transform -> ReceiptDataset -> DBCollateFN), against the plain oracle kept in the tests:
0 differing pixels, on real receipts and on synthetic ones; for compact batches on the maps the
LightningModule's ``on_after_batch_transfer`` expands on the device (the CPU here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ocr.data.collate import DBCollateFN
from ocr.data.dataset import ReceiptDataset
from ocr.data.synth import generate_dataset
from ocr.data.transforms import ReceiptTransform
from ocr.lightning_modules.ocr_pl import OCRLightningModule
from ocr.models.dbnet import DBNet
from tests.reference_targets import reference_db_targets

MAPS = {
    "prob_maps": "prob_map",
    "prob_masks": "prob_mask",
    "thresh_maps": "thresh_map",
    "thresh_masks": "thresh_mask",
}


def _expand_on_device(batch: dict) -> dict:
    """The batch as the model sees it: through the module's on_after_batch_transfer."""
    net = DBNet({"layers": [1, 1, 1, 1], "widths": [8, 16, 32, 64]}, neck_channels=16)
    return OCRLightningModule(net).on_after_batch_transfer(batch, 0)


def _assert_batch_matches_oracle(dataset: ReceiptDataset) -> int:
    items = [dataset[i] for i in range(len(dataset))]
    batch = _expand_on_device(DBCollateFN()(items))
    size = batch["images"].shape[-1]
    words = 0
    for b, item in enumerate(items):
        want = reference_db_targets(item["polygons"], size, size)
        for key, name in MAPS.items():
            got = batch[key][b].numpy()
            differing = int(np.count_nonzero(got != want[name]))
            assert differing == 0, f"{item['filename']} {key}: {differing} pixels differ"
        words += len(item["polygons"])
        assert batch["prob_maps"][b].sum() > 0, item["filename"]
    return words


@pytest.mark.parametrize("compact", [True, False])
def test_real_receipts_collate_equals_oracle(receipts_dir: Path, compact: bool) -> None:
    dataset = ReceiptDataset(
        receipts_dir / "images",
        receipts_dir / "annotations.json",
        ReceiptTransform(canvas_size=640, compact=compact),
    )
    assert _assert_batch_matches_oracle(dataset) == 86


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("canvas", [256, 384])
def test_synthetic_receipts_collate_equals_oracle(
    tmp_path: Path, canvas: int, compact: bool
) -> None:
    generate_dataset(tmp_path, splits={"val": 2}, seed=11)
    dataset = ReceiptDataset(
        tmp_path / "images" / "val",
        tmp_path / "jsons" / "val.json",
        ReceiptTransform(canvas_size=canvas, compact=compact),
    )
    assert _assert_batch_matches_oracle(dataset) > 40

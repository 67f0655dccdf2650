"""The two dataset layouts (``ocr.data.layout``): the competition's split layout and the flat
layout people keep receipts in (``images/`` + one ``annotations.json``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from ocr.data.annotations import write_annotations
from ocr.data.datamodule import ReceiptDataModule
from ocr.data.layout import DatasetLayoutError, flat_split, split_source
from ocr.errors import InputError


def _flat(root: Path, n: int, *, name: str = "annotations.json") -> Path:
    (root / "images").mkdir(parents=True)
    images = {}
    for i in range(n):
        file_name = f"r{i:02d}.png"
        cv2.imwrite(str(root / "images" / file_name), np.full((64, 48, 3), 255, np.uint8))
        images[file_name] = {"0001": [[4, 4], [30, 4], [30, 14], [4, 14]]}
    write_annotations(root / name, images)
    return root


def test_flat_split_is_seeded_disjoint_and_complete(tmp_path: Path) -> None:
    ann = _flat(tmp_path, 10) / "annotations.json"
    train, val = flat_split(ann, val_fraction=0.2, seed=0)
    assert len(val) == 2
    assert len(train) == 8
    assert not train & val
    assert train | val == {f"r{i:02d}.png" for i in range(10)}
    # The same images every run; another seed draws others.
    assert flat_split(ann, val_fraction=0.2, seed=0) == (train, val)
    others = {flat_split(ann, val_fraction=0.2, seed=s)[1] for s in range(1, 6)}
    assert others - {val}


def test_flat_layout_splits_for_training_and_whole_for_test(tmp_path: Path) -> None:
    root = _flat(tmp_path, 5)
    dm = ReceiptDataModule(dataset_dir=root, canvas_size=64, num_workers=0, val_fraction=0.4)
    dm.setup("fit")
    train = {dm.datasets["train"][i]["filename"] for i in range(len(dm.datasets["train"]))}
    val = {dm.datasets["val"][i]["filename"] for i in range(len(dm.datasets["val"]))}
    assert (len(train), len(val)) == (3, 2)
    assert not train & val
    dm.setup("test")
    assert len(dm.datasets["test"]) == 5


def test_flat_layout_of_the_real_receipts(receipts_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "receipts"
    shutil.copytree(receipts_dir, copy)
    source = split_source(copy, "test", val_fraction=0.2, seed=0)
    assert source.annotation_file == copy / "annotations.json"
    assert source.file_names is None
    train = split_source(copy, "train", val_fraction=0.2, seed=0).file_names
    val = split_source(copy, "val", val_fraction=0.2, seed=0).file_names
    assert train is not None
    assert val is not None
    assert (len(train), len(val)) == (1, 1)
    assert train | val == {"1.jpeg", "2.jpeg"}


def test_split_layout_is_unchanged(tmp_path: Path) -> None:
    (tmp_path / "images" / "val").mkdir(parents=True)
    (tmp_path / "jsons").mkdir()
    (tmp_path / "jsons" / "val.json").write_text('{"images": {}}')
    source = split_source(tmp_path, "val", val_fraction=0.2, seed=0)
    assert source.image_dir == tmp_path / "images" / "val"
    assert source.annotation_file == tmp_path / "jsons" / "val.json"
    assert source.file_names is None
    with pytest.raises(DatasetLayoutError, match="split 'test' \\(used as the predict split\\)"):
        split_source(tmp_path, "test", val_fraction=0.2, seed=0, used_as="predict")


def test_a_folder_in_neither_layout_names_what_it_holds_and_the_layouts_that_work(
    tmp_path: Path,
) -> None:
    (tmp_path / "photos").mkdir()
    (tmp_path / "labels.csv").write_text("x")
    with pytest.raises(InputError) as info:
        split_source(tmp_path, "train", val_fraction=0.2, seed=0)
    message = str(info.value)
    assert "labels.csv, photos/" in message
    assert "split layout" in message
    assert "flat layout" in message
    assert "annotations.json" in message


def test_flat_layout_errors_name_the_problem(tmp_path: Path) -> None:
    root = _flat(tmp_path / "a", 1, name="one.json")
    # the only *.json at the top is taken; one image cannot be split for training
    assert split_source(root, "test", val_fraction=0.2, seed=0).annotation_file.name == "one.json"
    with pytest.raises(DatasetLayoutError, match="needs at least 2"):
        split_source(root, "train", val_fraction=0.2, seed=0)
    with pytest.raises(DatasetLayoutError, match="has the splits train, val, test"):
        split_source(root, "holdout", val_fraction=0.2, seed=0)
    (root / "two.json").write_text("{}")
    with pytest.raises(DatasetLayoutError, match=r"one\.json, two\.json"):
        split_source(root, "test", val_fraction=0.2, seed=0)


def test_val_fraction_out_of_range_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"data\.val_fraction must be in \(0, 1\), got 1\.0"):
        ReceiptDataModule(dataset_dir=tmp_path, val_fraction=1.0)

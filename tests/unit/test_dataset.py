"""ocr.data.dataset.ReceiptDataset: construction checks, items, EXIF, inverse mapping, RNG."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from ocr.data.annotations import AnnotationError, load_annotations, write_annotations
from ocr.data.dataset import ReceiptDataset
from ocr.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageLoadError,
    ReceiptTransform,
    apply_matrix,
)

ITEM_KEYS = {"image", "polygons", "word_ids", "filename", "inverse_matrix", "raw_size"}
RED = (220, 30, 40)
GREY = (128, 128, 128)


def _to_pixels(tensor: torch.Tensor) -> np.ndarray:
    mean = np.array(IMAGENET_MEAN) * 255
    std = np.array(IMAGENET_STD) * 255
    return tensor.permute(1, 2, 0).numpy().astype(np.float64) * std + mean


def _interior(polygon: np.ndarray, size: int, erode: int) -> np.ndarray:
    mask = np.zeros((size, size), np.uint8)
    cv2.fillPoly(mask, [np.round((polygon - 0.5) * 16).astype(np.int32)], 1, shift=4)
    return cv2.erode(mask, np.ones((2 * erode + 1, 2 * erode + 1), np.uint8)).astype(bool)


def _box(x0: float, y0: float, x1: float, y1: float) -> list[list[float]]:
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def _image(path: Path, size: tuple[int, int] = (90, 60), orientation: int | None = None) -> Path:
    """A grey (width, height) image with a red rectangle at _box(20, 10, 70, 30)."""
    w, h = size
    array = np.full((h, w, 3), GREY, np.uint8)
    array[10:30, 20:70] = RED
    img = Image.fromarray(array)
    exif = img.getexif()
    if orientation is not None:
        exif[0x0112] = orientation
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, exif=exif, quality=95)
    return path


@pytest.fixture
def split(tmp_path: Path) -> tuple[Path, Path]:
    """A two-image split: (image_dir, annotation file)."""
    images = tmp_path / "images"
    _image(images / "a.png")
    _image(images / "b.png")
    ann = tmp_path / "train.json"
    write_annotations(
        ann,
        {
            "a.png": {"0001": _box(20, 10, 70, 30), "0002": _box(5, 40, 30, 55)},
            "b.png": {"0001": _box(20, 10, 70, 30)},
        },
    )
    return images, ann


# -- real receipts --------------------------------------------------------------------------------


@pytest.mark.parametrize("train", [False, True])
def test_fixture_receipts(receipts_dir: Path, train: bool) -> None:
    transform = ReceiptTransform(128, train=train)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean split emits no warning
        ds = ReceiptDataset(
            receipts_dir / "images",
            receipts_dir / "annotations.json",
            transform,
            require_words=True,
        )
    assert len(ds) == 2
    assert ds.num_words == 86
    assert ds.skipped == {}
    annotations = {a.file_name: a for a in load_annotations(receipts_dir / "annotations.json")}
    torch.manual_seed(0)
    for i in range(len(ds)):
        item = ds[i]
        assert set(item) == ITEM_KEYS
        assert item["image"].shape == (3, 128, 128)
        assert item["image"].dtype == torch.float32
        assert item["inverse_matrix"].dtype == np.float64
        assert item["inverse_matrix"].shape == (3, 3)
        ann = annotations[item["filename"]]
        assert item["word_ids"] == [w.word_id for w in ann.words]
        with Image.open(receipts_dir / "images" / item["filename"]) as img:
            assert item["raw_size"] == img.size
        for poly, word in zip(item["polygons"], ann.words, strict=True):
            assert poly.dtype == np.float32
            assert poly.shape == word.points.shape
            np.testing.assert_allclose(
                apply_matrix(item["inverse_matrix"], poly), word.points, atol=1e-2
            )


# -- construction errors -------------------------------------------------------------------------


def test_missing_image_is_an_error(split: tuple[Path, Path]) -> None:
    images, ann = split
    (images / "b.png").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"train.json: 1 of 2 images not found in .*'b.png'"
    ):
        ReceiptDataset(images, ann, ReceiptTransform(64))


def test_missing_image_dir(tmp_path: Path, split: tuple[Path, Path]) -> None:
    with pytest.raises(FileNotFoundError, match="image folder not found"):
        ReceiptDataset(tmp_path / "nope", split[1], ReceiptTransform(64))


def test_unreadable_image_header_at_construction(split: tuple[Path, Path]) -> None:
    images, ann = split
    (images / "b.png").write_bytes(b"not a png")
    with pytest.raises(ImageLoadError, match=r"cannot read image header of .*b\.png"):
        ReceiptDataset(images, ann, ReceiptTransform(64))


def test_truncated_image_raises_at_getitem(split: tuple[Path, Path]) -> None:
    images, ann = split
    data = (images / "b.png").read_bytes()
    (images / "b.png").write_bytes(data[: len(data) - 40])  # header intact, pixel data cut
    ds = ReceiptDataset(images, ann, ReceiptTransform(64))
    assert ds[0]["filename"] == "a.png"
    with pytest.raises(ImageLoadError, match=r"cannot decode image .*b\.png"):
        ds[1]


@pytest.mark.parametrize("name", ["../x.png", "/abs/x.png"])
def test_file_name_escaping_image_dir(split: tuple[Path, Path], name: str) -> None:
    images, ann = split
    _image(images.parent / "x.png")  # exists, but outside the image folder
    doc = json.loads(ann.read_text())
    doc["images"][name] = {"words": {}}
    ann.write_text(json.dumps(doc))
    with pytest.raises(AnnotationError, match=rf"train.json: image '{name}': .*escapes"):
        ReceiptDataset(images, ann, ReceiptTransform(64))


def test_empty_split(split: tuple[Path, Path]) -> None:
    images, ann = split
    ann.write_text('{"images": {}}')
    with pytest.raises(AnnotationError, match=r"train.json: empty split"):
        ReceiptDataset(images, ann, ReceiptTransform(64))


def test_malformed_annotations_surface(split: tuple[Path, Path]) -> None:
    images, ann = split
    ann.write_text('{"images": {"a.png": {"words": {"0001": {"points": [[1, 2], [3')
    with pytest.raises(AnnotationError, match=r"train\.json: file is truncated"):
        ReceiptDataset(images, ann, ReceiptTransform(64))


# -- skipped words ---------------------------------------------------------------------------------


def test_bad_words_are_skipped_counted_and_warned_once(split: tuple[Path, Path]) -> None:
    images, ann = split
    nan, inf = float("nan"), float("inf")
    words = {
        "0001": {"points": _box(20, 10, 70, 30)},
        "0002": {"points": [[1, 1], [5, 5]]},  # < 3 points
        "0003": {"points": [[1, 1], [nan, 5], [5, 9]]},
        "0004": {"points": [[1, 1], [inf, 5], [5, 9]]},
        "0005": {"points": [[1, 1], [5, 1], [9, 1]]},  # zero area
        "0006": {"points": [[0, 0], [10, 10], [10, 0], [0, 10]]},  # bow-tie
        "0007": {"points": _box(20, 10, 200, 30)},  # 110 px past a 90 px wide image
        "0008": {"points": [*_box(5, 40, 30, 55), [5, 40]]},  # closed ring: normalised, kept
    }
    ann.write_text(
        json.dumps({"images": {"a.png": {"words": words}, "b.png": {"words": {}}}}),
        encoding="utf-8",
    )
    with pytest.warns(UserWarning, match="skipped") as record:
        ds = ReceiptDataset(images, ann, ReceiptTransform(64), require_words=True)
    assert len(record) == 1
    msg = str(record[0].message)
    assert msg.startswith("train.json: skipped 6 of 8 words: ")
    for part in (
        "too_few_points=1 (e.g. 'a.png' word '0002')",
        "non_finite=2 (e.g. 'a.png' word '0003', 'a.png' word '0004')",
        "zero_area=1 (e.g. 'a.png' word '0005')",
        "self_intersecting=1 (e.g. 'a.png' word '0006')",
        "outside_image=1 (e.g. 'a.png' word '0007')",
    ):
        assert part in msg
    assert ds.skipped == {
        "too_few_points": 1,
        "non_finite": 2,
        "zero_area": 1,
        "self_intersecting": 1,
        "outside_image": 1,
    }
    assert ds.num_words == 2
    item = ds[0]
    assert item["word_ids"] == ["0001", "0008"]
    assert item["polygons"][1].shape == (4, 2)


def test_max_outside_frac_is_configurable(split: tuple[Path, Path]) -> None:
    images, ann = split
    write_annotations(ann, {"a.png": {"0001": _box(20, 10, 140, 30)}})  # 50 px past 90 px
    with pytest.warns(UserWarning, match="outside_image=1"):
        ReceiptDataset(images, ann, ReceiptTransform(64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = ReceiptDataset(images, ann, ReceiptTransform(64), max_outside_frac=1.0)
    assert ds.num_words == 1


def test_training_split_without_usable_words_is_an_error(split: tuple[Path, Path]) -> None:
    images, ann = split
    write_annotations(ann, {"a.png": {"0001": [[0, 0], [10, 10], [10, 0], [0, 10]]}})
    with (
        pytest.warns(UserWarning, match="self_intersecting=1"),
        pytest.raises(AnnotationError, match=r"train\.json: no usable word in the split"),
    ):
        ReceiptDataset(images, ann, ReceiptTransform(64), require_words=True)


def test_test_split_without_words(split: tuple[Path, Path]) -> None:
    images, _ = split
    ann = images.parent / "test.json"
    ann.write_text('{"images": {"a.png": {}, "b.png": {"words": {}}}}')
    ds = ReceiptDataset(images, ann, ReceiptTransform(64))
    assert (len(ds), ds.num_words, ds.skipped) == (2, 0, {})
    item = ds[0]
    assert item["polygons"] == []
    assert item["word_ids"] == []
    assert item["image"].shape == (3, 64, 64)
    with pytest.raises(AnnotationError, match=r"test\.json: image 'a\.png': no 'words'"):
        ReceiptDataset(images, ann, ReceiptTransform(64), require_words=True)


# -- geometry: EXIF, inverse mapping, augmentation --------------------------------------------


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_polygons_stay_on_content(tmp_path: Path, orientation: int, suffix: str) -> None:
    """The raw image has a red rectangle under the annotated polygon; after EXIF orientation,
    letterboxing (and, for the 180x120 JPEG, a reduced-scale decode), the canvas pixels under
    the item's polygon are still red, and the inverse matrix gives back the raw annotation."""
    name = f"r{suffix}"
    size = (180, 120) if suffix == ".jpg" else (90, 60)
    scale = size[0] // 90
    _image_scaled(tmp_path / "images" / name, size, scale, orientation)
    box = np.array(_box(20, 10, 70, 30)) * scale
    ann = tmp_path / "train.json"
    write_annotations(ann, {name: {"0001": box}})
    ds = ReceiptDataset(tmp_path / "images", ann, ReceiptTransform(64))
    item = ds[0]
    assert item["raw_size"] == size
    poly = item["polygons"][0]
    inside = _interior(poly, 64, erode=1)
    assert inside.sum() > 30
    pixels = _to_pixels(item["image"])
    assert np.abs(pixels[inside] - RED).max() < 30
    # The rest of the content is grey: the polygon is not merely overlapping some red.
    content = _interior(apply_matrix(np.linalg.inv(item["inverse_matrix"]), _full(size)), 64, 1)
    grey = content & ~_dilated(poly, 2)
    assert grey.sum() > 100
    assert np.abs(pixels[grey] - GREY).max() < 30
    np.testing.assert_allclose(apply_matrix(item["inverse_matrix"], poly), box, atol=1e-3)


def _image_scaled(path: Path, size: tuple[int, int], scale: int, orientation: int) -> None:
    w, h = size
    array = np.full((h, w, 3), GREY, np.uint8)
    array[10 * scale : 30 * scale, 20 * scale : 70 * scale] = RED
    img = Image.fromarray(array)
    exif = img.getexif()
    exif[0x0112] = orientation
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, exif=exif, quality=95)


def _full(size: tuple[int, int]) -> np.ndarray:
    return np.array(_box(0, 0, size[0], size[1]))


def _dilated(polygon: np.ndarray, r: int) -> np.ndarray:
    mask = _interior(polygon, 64, erode=0).astype(np.uint8)
    return cv2.dilate(mask, np.ones((2 * r + 1, 2 * r + 1), np.uint8)).astype(bool)


def test_train_items_keep_polygons_on_content_and_invert(split: tuple[Path, Path]) -> None:
    images, ann = split
    transform = ReceiptTransform(64, train=True, rotate_deg=8, color_jitter=0.0)
    ds = ReceiptDataset(images, ann, transform)
    torch.manual_seed(3)
    for _ in range(4):
        item = ds[1]  # one word on the red rectangle
        # Two pixels in: resampling (INTER_AREA shrink + bilinear warp) blends the border.
        inside = _interior(item["polygons"][0], 64, erode=2)
        assert inside.sum() > 20
        assert np.abs(_to_pixels(item["image"])[inside] - RED).max() < 10
        np.testing.assert_allclose(
            apply_matrix(item["inverse_matrix"], item["polygons"][0]),
            _box(20, 10, 70, 30),
            atol=1e-3,
        )


def test_train_randomness_follows_torch_seed(split: tuple[Path, Path]) -> None:
    images, ann = split
    ds = ReceiptDataset(images, ann, ReceiptTransform(64, train=True))
    torch.manual_seed(7)
    a = ds[0]
    torch.manual_seed(7)
    b = ds[0]
    c = ds[0]  # RNG advanced
    assert torch.equal(a["image"], b["image"])
    np.testing.assert_array_equal(a["inverse_matrix"], b["inverse_matrix"])
    assert not np.allclose(a["inverse_matrix"], c["inverse_matrix"])


def test_eval_items_do_not_consume_torch_rng(split: tuple[Path, Path]) -> None:
    images, ann = split
    ds = ReceiptDataset(images, ann, ReceiptTransform(64))
    torch.manual_seed(1)
    before = torch.get_rng_state()
    first = ds[0]
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(first["image"], ds[0]["image"])


def test_picklable_and_worker_seeding(split: tuple[Path, Path]) -> None:
    images, ann = split
    ds = ReceiptDataset(images, ann, ReceiptTransform(64, train=True))
    clone = pickle.loads(pickle.dumps(ds))
    assert (len(clone), clone.num_words, clone.skipped) == (2, 3, {})

    def run() -> list[np.ndarray]:
        loader = DataLoader(
            ds,
            batch_size=None,
            sampler=[0, 0, 0, 0],
            num_workers=2,
            generator=torch.Generator().manual_seed(11),
        )
        return [item["inverse_matrix"] for item in loader]

    first, second = run(), run()
    for x, y in zip(first, second, strict=True):
        np.testing.assert_array_equal(x, y)  # reproducible from the loader's seed
    # Items 0 and 1 come from different workers: different augmentations.
    assert not np.allclose(first[0], first[1])

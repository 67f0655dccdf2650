"""ocr.data.transforms: EXIF matrices, image decoding and the canvas transform."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from ocr.data.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageLoadError,
    ReceiptTransform,
    apply_matrix,
    exif_orientation_matrix,
    load_image,
)

RED = (220, 30, 40)


def _to_pixels(tensor: torch.Tensor) -> np.ndarray:
    """Undo the normalisation: (3, S, S) -> float (S, S, 3) on 0..255."""
    mean = np.array(IMAGENET_MEAN) * 255
    std = np.array(IMAGENET_STD) * 255
    return tensor.permute(1, 2, 0).numpy().astype(np.float64) * std + mean


def _interior_mask(polygon: np.ndarray, size: tuple[int, int], erode: int) -> np.ndarray:
    """Pixels well inside ``polygon`` (continuous coordinates) on an (h, w) grid."""
    mask = np.zeros(size, np.uint8)
    # fillPoly takes pixel-centre coordinates: shift by half a pixel; x16 for sub-pixel accuracy.
    pts = np.round((polygon - 0.5) * 16).astype(np.int32)
    cv2.fillPoly(mask, [pts], 1, shift=4)
    if erode:
        return cv2.erode(mask, np.ones((2 * erode + 1, 2 * erode + 1), np.uint8)).astype(bool)
    return mask.astype(bool)


def _save(path: Path, array: np.ndarray, orientation: int | None = None, **kw: Any) -> Path:
    img = Image.fromarray(array)
    exif = img.getexif()
    if orientation is not None:
        exif[0x0112] = orientation
    img.save(path, exif=exif, **kw)
    return path


# -- EXIF ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_matrix_matches_pil(tmp_path: Path, orientation: int) -> None:
    width, height = 7, 4  # asymmetric: every transposition is distinguishable
    raw = np.zeros((height, width, 3), np.uint8)
    marked = (5, 1)  # (x, y) pixel
    raw[marked[1], marked[0]] = 255
    path = _save(tmp_path / "o.png", raw, orientation)

    expected = np.asarray(ImageOps.exif_transpose(Image.open(path)))
    centre = np.array([[marked[0] + 0.5, marked[1] + 0.5]])
    x, y = apply_matrix(exif_orientation_matrix(orientation, width, height), centre)[0]
    assert expected[int(y), int(x), 0] == 255
    assert expected[..., 0].sum() == 255  # and only there

    image, matrix, raw_size = load_image(path)
    np.testing.assert_array_equal(image, expected)
    np.testing.assert_array_equal(matrix, exif_orientation_matrix(orientation, width, height))
    assert raw_size == (width, height)


@pytest.mark.parametrize("orientation", [0, 9, -1])
def test_exif_matrix_rejects_unknown_tags(orientation: int) -> None:
    with pytest.raises(ValueError, match=f"EXIF orientation must be 1..8, got {orientation}"):
        exif_orientation_matrix(orientation, 4, 3)


def test_load_image_ignores_invalid_orientation_like_pil(tmp_path: Path) -> None:
    raw = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    image, matrix, _ = load_image(_save(tmp_path / "x.png", raw, orientation=9))
    np.testing.assert_array_equal(image, raw)
    np.testing.assert_array_equal(matrix, np.eye(3))


# -- decoding ------------------------------------------------------------------------------------


def test_load_image_converts_modes_to_rgb(tmp_path: Path) -> None:
    gray = np.full((5, 8), 77, np.uint8)
    Image.fromarray(gray).save(tmp_path / "g.png")
    rgba = np.zeros((5, 8, 4), np.uint8)
    rgba[..., 1] = 200
    Image.fromarray(rgba).save(tmp_path / "a.png")
    g, _, g_size = load_image(tmp_path / "g.png")
    a, _, _ = load_image(tmp_path / "a.png")
    assert g.shape == (5, 8, 3)
    assert g.dtype == np.uint8
    assert (g == 77).all()
    assert a.shape == (5, 8, 3)
    assert (a[..., 1] == 200).all()
    assert g_size == (8, 5)


def test_load_image_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"image not found: .*nope\.jpg"):
        load_image(tmp_path / "nope.jpg")


def test_load_image_not_an_image(tmp_path: Path) -> None:
    path = tmp_path / "garbage.jpg"
    path.write_bytes(b"this is not a JPEG at all" * 10)
    with pytest.raises(ImageLoadError, match=r"cannot decode image .*garbage\.jpg"):
        load_image(path)


def test_load_image_truncated(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    full = _save(tmp_path / "full.jpg", rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))
    data = full.read_bytes()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageLoadError, match=r"cannot decode image .*cut\.jpg: .*truncated"):
        load_image(cut)


@pytest.mark.parametrize("orientation", [1, 6, 7])
def test_reduced_jpeg_decode_keeps_geometry(tmp_path: Path, orientation: int) -> None:
    raw = np.full((240, 320, 3), 255, np.uint8)
    raw[40:120, 200:300] = RED
    path = _save(tmp_path / "r.jpg", raw, orientation, quality=95)
    box = np.array([[200, 40], [300, 40], [300, 120], [200, 120]], np.float64)

    full, full_matrix, size = load_image(path)
    small, matrix, small_size = load_image(path, min_longest_side=80)
    assert size == small_size == (320, 240)
    assert max(small.shape[:2]) == 80  # 1/4 scale: longest side 80 >= 80, 1/8 would be 40
    for image, m in ((full, full_matrix), (small, matrix)):
        mask = _interior_mask(apply_matrix(m, box), image.shape[:2], erode=2)
        assert mask.sum() > 100
        assert np.abs(image[mask].astype(int) - RED).max() < 25
        outside = ~_dilate(_interior_mask(apply_matrix(m, box), image.shape[:2], erode=0), 2)
        assert np.abs(image[outside].astype(int) - 255).max() < 25
    # Without a bound, or when the image is already small, nothing is reduced.
    assert load_image(path, min_longest_side=400)[0].shape == full.shape


# -- ReceiptTransform ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, -32, 100, 640.0, True, "640"])
def test_canvas_size_must_be_positive_multiple_of_32(size: object) -> None:
    with pytest.raises(ValueError, match="canvas_size must be a positive multiple of 32"):
        ReceiptTransform(canvas_size=size)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scale_range": (1.1, 0.8)}, "scale_range"),
        ({"scale_range": (0.0, 1.0)}, "scale_range"),
        ({"rotate_deg": -1}, "rotate_deg"),
        ({"translate_frac": 1.5}, "translate_frac"),
        ({"color_jitter": 1.0}, "color_jitter"),
        ({"std": (0.2, 0.0, 0.2)}, "std"),
    ],
)
def test_bad_augment_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ReceiptTransform(canvas_size=64, train=True, **kwargs)  # type: ignore[arg-type]


def test_rejects_bad_image() -> None:
    t = ReceiptTransform(64)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"RGB uint8 array \(H, W, 3\), got float32"):
        t(np.zeros((8, 8, 3), np.float32), [], rng)
    with pytest.raises(ValueError, match=r"got uint8 \(8, 8\)"):
        t(np.zeros((8, 8), np.uint8), [], rng)


@pytest.mark.parametrize(("h", "w"), [(300, 150), (150, 300), (40, 24), (64, 64)])
def test_eval_letterbox(h: int, w: int) -> None:
    size = 64
    image = np.full((h, w, 3), 200, np.uint8)
    poly = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    tensor, polys, matrix = ReceiptTransform(size)(image, [poly], np.random.default_rng(0))

    assert tensor.shape == (3, size, size)
    assert tensor.dtype == torch.float32
    assert tensor.is_contiguous()
    s = size / max(h, w)
    nw, nh = round(w * s), round(h * s)
    # A pure scale, top-left anchored; the content box becomes the resized extent exactly.
    np.testing.assert_allclose(matrix, np.diag([nw / w, nh / h, 1.0]))
    np.testing.assert_allclose(polys[0], [[0, 0], [nw, 0], [nw, nh], [0, nh]], atol=1e-5)
    assert polys[0].dtype == np.float32
    pixels = _to_pixels(tensor)
    np.testing.assert_allclose(pixels[:nh, :nw], 200, atol=1e-3)
    np.testing.assert_allclose(pixels[nh:], 0, atol=1e-3)  # black padding, right and bottom
    np.testing.assert_allclose(pixels[:, nw:], 0, atol=1e-3)


def test_eval_polygons_follow_content() -> None:
    image = np.zeros((300, 200, 3), np.uint8)
    box = np.array([[50.0, 120.0], [150.0, 120.0], [150.0, 180.0], [50.0, 180.0]])
    image[120:180, 50:150] = RED
    tensor, polys, _ = ReceiptTransform(96)(image, [box], np.random.default_rng(0))
    pixels = _to_pixels(tensor)
    inside = _interior_mask(polys[0], (96, 96), erode=1)
    outside = ~_dilate(_interior_mask(polys[0], (96, 96), erode=0), 2)
    assert inside.sum() > 100
    np.testing.assert_allclose(pixels[inside], np.broadcast_to(RED, (inside.sum(), 3)), atol=1)
    assert pixels[outside].max() < 1


def _dilate(mask: np.ndarray, r: int) -> np.ndarray:
    return cv2.dilate(mask.astype(np.uint8), np.ones((2 * r + 1, 2 * r + 1), np.uint8)).astype(bool)


@pytest.mark.parametrize("shape", [(120, 90), (600, 450)])  # direct warp / INTER_AREA pre-shrink
def test_train_augmentation_keeps_polygons_on_content(shape: tuple[int, int]) -> None:
    h, w = shape
    rng = np.random.default_rng(1)
    image = rng.integers(0, 60, (h, w, 3), dtype=np.uint8)  # dark noise background
    boxes = []
    for fx, fy in ((0.2, 0.3), (0.55, 0.6)):
        x0, y0, bw, bh = int(fx * w), int(fy * h), int(0.3 * w), int(0.15 * h)
        image[y0 : y0 + bh, x0 : x0 + bw] = RED
        boxes.append(np.array([[x0, y0], [x0 + bw, y0], [x0 + bw, y0 + bh], [x0, y0 + bh]], float))
    t = ReceiptTransform(96, train=True, rotate_deg=10, scale_range=(0.7, 1.2), color_jitter=0.0)
    for seed in range(6):
        tensor, polys, matrix = t(image, boxes, np.random.default_rng(seed))
        pixels = _to_pixels(tensor)
        for box, poly in zip(boxes, polys, strict=True):
            np.testing.assert_allclose(poly, apply_matrix(matrix, box), atol=1e-4)
            inside = _interior_mask(poly, (96, 96), erode=2)
            assert inside.sum() > 20
            assert np.abs(pixels[inside] - RED).max() < 8, f"seed {seed}"


def test_train_is_random_and_reproducible() -> None:
    image = np.random.default_rng(0).integers(0, 255, (80, 60, 3), dtype=np.uint8)
    box = [np.array([[10.0, 10.0], [40.0, 10.0], [40.0, 30.0], [10.0, 30.0]])]
    t = ReceiptTransform(64, train=True)
    a = t(image, box, np.random.default_rng(5))
    b = t(image, box, np.random.default_rng(5))
    c = t(image, box, np.random.default_rng(6))
    assert torch.equal(a[0], b[0])
    np.testing.assert_array_equal(a[2], b[2])
    assert not np.allclose(a[2], c[2])
    # Photometric jitter changes intensities but not geometry: same seed without jitter.
    d = ReceiptTransform(64, train=True, color_jitter=0.0)(image, box, np.random.default_rng(5))
    np.testing.assert_array_equal(a[2], d[2])
    assert not torch.equal(a[0], d[0])


def test_eval_ignores_rng_and_min_source_side() -> None:
    image = np.zeros((50, 40, 3), np.uint8)
    t = ReceiptTransform(64)
    a = t(image, [], np.random.default_rng(1))
    b = t(image, [], np.random.default_rng(2))
    assert torch.equal(a[0], b[0])
    assert a[1] == []
    assert t.min_source_side == 64
    assert ReceiptTransform(64, train=True, scale_range=(0.5, 1.5)).min_source_side == 96


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("shape", [(120, 90), (600, 450), (50, 40)])  # warp, pre-shrink, enlarge
def test_subpixel_alignment(shape: tuple[int, int], train: bool) -> None:
    """The centroid of the drawn content equals the transformed polygon's, to a tenth of a pixel:
    this catches half-pixel convention mistakes between cv2.resize, warpAffine and the matrix."""
    h, w = shape
    image = np.zeros((h, w, 3), np.uint8)
    x0, y0, x1, y1 = int(0.3 * w), int(0.4 * h), int(0.7 * w), int(0.55 * h)
    image[y0:y1, x0:x1] = 255
    box = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)
    t = ReceiptTransform(96, train=train, rotate_deg=10, color_jitter=0.0)
    ys, xs = np.mgrid[:96, :96] + 0.5  # pixel centres in continuous coordinates
    for seed in range(3):
        tensor, polys, _ = t(image, [box], np.random.default_rng(seed))
        weight = _to_pixels(tensor)[..., 0]
        centroid = np.array([(weight * xs).sum(), (weight * ys).sum()]) / weight.sum()
        p = polys[0].astype(np.float64)
        # Centroid of a polygon (shoelace), independent of the code under test.
        cross = p[:, 0] * np.roll(p[:, 1], -1) - np.roll(p[:, 0], -1) * p[:, 1]
        area = cross.sum() / 2
        expected = np.array(
            [
                ((p[:, 0] + np.roll(p[:, 0], -1)) * cross).sum(),
                ((p[:, 1] + np.roll(p[:, 1], -1)) * cross).sum(),
            ]
        ) / (6 * area)
        np.testing.assert_allclose(centroid, expected, atol=0.1)
        assert weight.sum() / 255 == pytest.approx(abs(area), rel=0.01)

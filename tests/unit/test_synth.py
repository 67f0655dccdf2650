"""Tests of the synthetic receipt generator (ocr.data.synth)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from ocr.data import synth
from ocr.data.annotations import SkipReport, clean_words, load_annotations
from ocr.data.synth import (
    ReceiptParams,
    dataset_is_complete,
    dataset_params,
    generate_dataset,
    generate_receipt,
    main,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL = {"train": 3, "val": 2}


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("synth") / "ds", splits=SMALL, seed=7)


# --------------------------------------------------------------------------------------------
# generate_receipt


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_receipt_image_and_polygon_geometry(seed: int) -> None:
    image, polygons = generate_receipt(np.random.default_rng(seed))
    assert image.dtype == np.uint8
    assert image.ndim == 3
    assert image.shape[2] == 3
    h, w = image.shape[:2]
    # Compact enough for a 384 px canvas, as the brief asks (paper 320-480 wide + margins).
    assert 300 <= h <= 1000
    assert 300 <= w <= 650
    assert len(polygons) >= 20
    for poly in polygons:
        assert poly.dtype == np.float64
        assert poly.shape == (4, 2)
        assert (poly >= 0).all()
        assert (poly[:, 0] <= w).all()
        assert (poly[:, 1] <= h).all()
        x, y = poly[:, 0], poly[:, 1]
        # Shoelace with y pointing down: positive means clockwise as seen on screen.
        signed_area = 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))
        assert signed_area > 20.0
        # The first vertex is the top-left one (slight rotation keeps it the min of x + y).
        assert int(np.argmin(x + y)) == 0


def test_same_rng_state_same_receipt_and_different_seed_differs() -> None:
    img_a, polys_a = generate_receipt(np.random.default_rng(11))
    img_b, polys_b = generate_receipt(np.random.default_rng(11))
    img_c, _ = generate_receipt(np.random.default_rng(12))
    assert np.array_equal(img_a, img_b)
    assert len(polys_a) == len(polys_b)
    assert all(np.array_equal(a, b) for a, b in zip(polys_a, polys_b, strict=True))
    assert img_a.shape != img_c.shape or not np.array_equal(img_a, img_c)


def _poly_mask(poly: np.ndarray, shape: tuple[int, ...], origin: np.ndarray) -> np.ndarray:
    """Pixels whose centres lie in ``poly`` (continuous coordinates) within a crop at ``origin``."""
    mask = np.zeros(shape[:2], np.uint8)
    pts = np.round((poly - origin - 0.5) * 16).astype(np.int32)  # 4 fractional bits
    cv2.fillPoly(mask, [pts], 1, lineType=cv2.LINE_8, shift=4)
    return mask.astype(bool)


def _ink_stats(image: np.ndarray, polygons: list[np.ndarray]) -> np.ndarray:
    """Per word: (inside contrast, weakest inner-edge ink, strongest outer-edge ink), in grey
    levels of darkness above the local paper (median of a ring around the word that excludes
    every word box)."""
    dark = 255.0 - cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float64)
    h, w = dark.shape
    rows = []
    for k, poly in enumerate(polygons):
        x0, y0 = np.maximum(np.floor(poly.min(0)).astype(int) - 8, 0)
        x1, y1 = np.minimum(np.ceil(poly.max(0)).astype(int) + 8, [w, h])
        roi, origin = dark[y0:y1, x0:x1], np.array([x0, y0], np.float64)
        inside = _poly_mask(poly, roi.shape, origin)
        others = np.zeros(roi.shape, bool)
        for j, other in enumerate(polygons):
            if j != k and (other.max(0) >= [x0, y0]).all() and (other.min(0) <= [x1, y1]).all():
                others |= _poly_mask(other, roi.shape, origin)
        near = cv2.dilate(inside.astype(np.uint8), np.ones((9, 9), np.uint8)).astype(bool)
        boxes = cv2.dilate((inside | others).astype(np.uint8), np.ones((3, 3), np.uint8))
        paper = float(np.median(roi[near & ~boxes.astype(bool)]))
        tl, tr, br, bl = poly

        def unit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return (b - a) / np.linalg.norm(b - a)

        inner, outer = [], []
        for a, b, na, nb in (
            (tl, tr, unit(tl, bl), unit(tr, br)),
            (tr, br, unit(tr, tl), unit(br, bl)),
            (br, bl, unit(br, tr), unit(bl, tl)),
            (bl, tl, unit(bl, br), unit(tl, tr)),
        ):
            # A 2 px strip just inside each side must hold ink (the box is not loose) ...
            strip_in = _poly_mask(np.array([a, b, b + 2 * nb, a + 2 * na]), roi.shape, origin)
            inner.append(roi[strip_in & inside].max() - paper)
            # ... and a 2 px strip 1.5 px outside must be nearly blank (the box cuts no ink).
            out_quad = np.array([a - 1.5 * na, b - 1.5 * nb, b - 3.5 * nb, a - 3.5 * na])
            strip_out = _poly_mask(out_quad, roi.shape, origin) & ~others
            outer.append(roi[strip_out].mean() - paper if strip_out.any() else 0.0)
        rows.append((roi[inside].mean() - paper, min(inner), max(outer)))
    return np.array(rows)


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_word_boxes_are_tight_around_ink(seed: int) -> None:
    image, polygons = generate_receipt(np.random.default_rng(seed))
    stats = _ink_stats(image, polygons)
    contrast, inner, outer = stats[:, 0], stats[:, 1], stats[:, 2]
    # Measured over 1,900 words: contrast >= 24, inner >= 46, outer <= 9.2. Boxes grown by 3 px
    # fail `inner` for every word; boxes moved by 3 px fail `outer` for most.
    assert contrast.min() > 15.0
    assert inner.min() > 30.0
    assert outer.max() < 15.0


def test_check_detects_loose_and_shifted_boxes() -> None:
    """The tightness check itself can fail: it rejects boxes that are 3 px too big or off."""
    image, polygons = generate_receipt(np.random.default_rng(21))
    centres = [p.mean(0) for p in polygons]
    grown = [p + 3 * np.sign(p - c) for p, c in zip(polygons, centres, strict=True)]
    shifted = [p + np.array([0.0, 3.0]) for p in polygons]
    assert _ink_stats(image, grown)[:, 1].min() < 30.0
    assert _ink_stats(image, shifted)[:, 2].max() > 15.0


def test_separators_are_not_words() -> None:
    for seed in range(6):
        _, polygons = generate_receipt(
            np.random.default_rng(seed), paper_width=(400, 400), max_rotation=0.0
        )
        widths = np.array([p[:, 0].max() - p[:, 0].min() for p in polygons])
        # A separator spans the printable width (>= 400 - 2 * 24 px); no single word comes close.
        assert widths.max() < 300


@pytest.mark.parametrize("n_lines", [6, 11, 22])
def test_num_lines_is_the_number_of_text_rows(n_lines: int) -> None:
    for seed in range(3):
        _, polygons = generate_receipt(
            np.random.default_rng(seed),
            num_lines=(n_lines, n_lines),
            max_rotation=0.0,
            max_perspective=0.0,
        )
        centres = np.sort([p[:, 1].mean() for p in polygons])
        # Rows are >= 19 px apart (pitch >= 1.2 x 16 px); words of one row within a few px.
        assert int((np.diff(centres) > 8).sum()) + 1 == n_lines


def test_receipt_parameters_shape_the_output() -> None:
    image, polygons = generate_receipt(
        np.random.default_rng(3),
        paper_width=(400, 400),
        margin=(10, 10),
        max_rotation=0.0,
        max_perspective=0.0,
        max_blur=0.0,
    )
    # No rotation or warp: the paper is an axis-aligned 400 px rectangle with 10 px around it.
    assert image.shape[1] == 420
    for poly in polygons:
        assert np.allclose(poly[0, 1], poly[1, 1])
        assert np.allclose(poly[0, 0], poly[3, 0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"font_size": (30, 16)}, "font_size: min 30 is greater than max 16"),
        ({"num_lines": (2, 5)}, "num_lines must lie within"),
        ({"paper_width": (320,)}, "paper_width must be a (min, max) pair"),
        ({"paper_width": (100.5, 200)}, "paper_width must be a (min, max) pair of integers"),
        ({"paper_width": (150, 200), "font_size": (24, 30)}, "too narrow"),
        ({"max_rotation": -1.0}, "max_rotation must be in"),
        ({"max_blur": "x"}, "max_blur must be a number"),
    ],
)
def test_bad_receipt_parameters_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        generate_receipt(np.random.default_rng(0), **kwargs)


# --------------------------------------------------------------------------------------------
# generate_dataset


def test_dataset_layout_and_annotations_round_trip(small_dataset: Path) -> None:
    for split, count in SMALL.items():
        names = sorted(p.name for p in (small_dataset / "images" / split).iterdir())
        assert names == [f"{split}_{i:05d}.jpg" for i in range(count)]
        images = load_annotations(small_dataset / "jsons" / f"{split}.json", require_words=True)
        assert [a.file_name for a in images] == names
        report = SkipReport()
        for ann in images:
            with Image.open(small_dataset / "images" / split / ann.file_name) as im:
                size = im.size
                assert im.format == "JPEG"
            assert [w.word_id for w in ann.words] == [
                f"{k:04d}" for k in range(1, len(ann.words) + 1)
            ]
            assert len(ann.words) >= 20
            assert len(clean_words(ann, size, report).words) == len(ann.words)
        assert report.total == 0
    manifest = json.loads((small_dataset / "manifest.json").read_text())
    assert manifest["images"] == SMALL
    assert manifest["params"] == dataset_params(splits=SMALL, seed=7)


def test_dataset_matches_generate_receipt(small_dataset: Path) -> None:
    """Stored boxes are the generator's polygons; the stored JPEG is the generator's image."""
    image, polygons = generate_receipt(synth._image_rng(7, "val", 1))
    ann = load_annotations(small_dataset / "jsons" / "val.json")[1]
    assert len(ann.words) == len(polygons)
    assert all(np.array_equal(w.points, p) for w, p in zip(ann.words, polygons, strict=True))
    stored = np.asarray(Image.open(small_dataset / "images" / "val" / "val_00001.jpg"))
    assert stored.shape == image.shape
    assert np.abs(stored.astype(int) - image.astype(int)).mean() < 4.0  # JPEG q90


def test_dataset_is_byte_identical_across_runs_and_workers(
    small_dataset: Path, tmp_path: Path
) -> None:
    again = generate_dataset(tmp_path / "w2", splits=SMALL, seed=7, workers=2)
    assert _files(again) == _files(small_dataset)


def test_image_depends_only_on_seed_split_and_index(small_dataset: Path, tmp_path: Path) -> None:
    only_val = generate_dataset(tmp_path / "val", splits={"val": 2}, seed=7)
    reference = _files(small_dataset)
    for name, data in _files(only_val).items():
        if name != "manifest.json":
            assert reference[name] == data
    other_seed = generate_dataset(tmp_path / "seed8", splits={"val": 2}, seed=8)
    for i in range(2):
        name = f"images/val/val_{i:05d}.jpg"
        assert (other_seed / name).read_bytes() != reference[name]
    assert (other_seed / "jsons/val.json").read_bytes() != reference["jsons/val.json"]


def test_regeneration_removes_stale_images_and_keeps_other_files(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    generate_dataset(out, splits={"val": 3}, seed=0)
    (out / "images" / "val" / "notes.txt").write_text("mine")
    generate_dataset(out, splits={"val": 1}, seed=0)
    assert sorted(p.name for p in (out / "images" / "val").iterdir()) == [
        "notes.txt",
        "val_00000.jpg",
    ]
    assert len(load_annotations(out / "jsons" / "val.json")) == 1


def test_manifest_check(small_dataset: Path, tmp_path: Path) -> None:
    spec = {"splits": SMALL, "seed": 7}
    assert dataset_is_complete(small_dataset, spec)
    assert dataset_is_complete(small_dataset, {**spec, "workers": 4})  # workers never matter
    assert dataset_is_complete(small_dataset, {**spec, "font_size": [16, 30]})  # the default
    assert not dataset_is_complete(small_dataset, {**spec, "seed": 8})
    assert not dataset_is_complete(small_dataset, {**spec, "splits": {"train": 3, "val": 3}})
    assert not dataset_is_complete(small_dataset, {**spec, "font_size": (18, 30)})
    assert not dataset_is_complete(tmp_path / "nothing-here", spec)
    with pytest.raises(TypeError, match="unknown receipt parameter"):
        dataset_is_complete(small_dataset, {**spec, "font": 3})

    copy = tmp_path / "copy"
    generate_dataset(copy, splits={"val": 2}, seed=1)
    spec = {"splits": {"val": 2}, "seed": 1}
    assert dataset_is_complete(copy, spec)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["params"]["generator_version"] = synth.GENERATOR_VERSION - 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert not dataset_is_complete(copy, spec)  # made by an older generator
    (copy / "manifest.json").write_text('{"params": ')
    assert not dataset_is_complete(copy, spec)  # truncated manifest
    (copy / "manifest.json").unlink()
    assert not dataset_is_complete(copy, spec)  # interrupted run


def test_manifest_check_accepts_a_hydra_config(small_dataset: Path) -> None:
    """ReceiptDataModule passes the Hydra node: nested DictConfig / ListConfig values."""
    from omegaconf import OmegaConf

    spec = OmegaConf.create({"splits": SMALL, "seed": 7, "workers": 2, "font_size": [16, 30]})
    assert dataset_is_complete(small_dataset, dict(spec))
    assert not dataset_is_complete(small_dataset, {**dict(spec), "num_lines": [10, 20]})


def test_missing_image_means_incomplete(tmp_path: Path) -> None:
    out = generate_dataset(tmp_path / "ds", splits={"val": 2}, seed=0)
    (out / "images" / "val" / "val_00001.jpg").unlink()
    assert not dataset_is_complete(out, {"splits": {"val": 2}, "seed": 0})


def test_generation_removes_an_old_manifest_first(tmp_path: Path, monkeypatch) -> None:
    out = generate_dataset(tmp_path / "ds", splits={"val": 1}, seed=0)

    def crash(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(synth, "write_annotations", crash)
    with pytest.raises(RuntimeError, match="interrupted"):
        generate_dataset(out, splits={"val": 1}, seed=0)
    assert not (out / "manifest.json").exists()
    assert not dataset_is_complete(out, {"splits": {"val": 1}, "seed": 0})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"splits": {"train": -1}}, "count must be a non-negative integer"),
        ({"splits": {"train": 0, "val": 0}}, "no images at all"),
        ({"splits": {"../x": 1}}, "split name"),
        ({"splits": {"val": 1}, "seed": -3}, "seed must be a non-negative integer"),
        ({"splits": {"val": 1}, "workers": 0}, "workers must be a positive integer"),
    ],
)
def test_bad_dataset_arguments(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_dataset(tmp_path / "ds", **kwargs)
    assert not (tmp_path / "ds").exists()


# --------------------------------------------------------------------------------------------
# CLI


def test_cli_writes_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    argv = ["--out", str(out), "--train", "2", "--val", "1", "--test", "0", "--seed", "3"]
    rc = main([*argv, "--font-size", "18,26"])
    assert rc == 0
    assert sorted(p.name for p in (out / "jsons").iterdir()) == ["train.json", "val.json"]
    assert len(list((out / "images" / "train").glob("*.jpg"))) == 2
    summary = capsys.readouterr().out.strip()
    assert summary.startswith("ocr-synth: 3 images, ")
    assert str(out) in summary
    assert dataset_is_complete(
        out, {"splits": {"train": 2, "val": 1}, "seed": 3, "font_size": (18, 26)}
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--train", "-1"],
        ["--train", "0", "--val", "0", "--test", "0"],
        ["--seed", "-1"],
        ["--workers", "0"],
        ["--font-size", "30,16"],
        ["--paper-width", "wide"],
        [],  # --out missing
    ],
)
def test_cli_bad_arguments_exit_2(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    full = argv if argv == [] else ["--out", str(tmp_path / "x"), *argv]
    with pytest.raises(SystemExit) as exc:
        main(full)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_python_dash_m_with_worker_pool(tmp_path: Path) -> None:
    """``python -m ocr.data.synth`` works, including spawned workers re-importing __main__."""
    out = tmp_path / "m"
    cmd = [sys.executable, "-m", "ocr.data.synth", "--out", str(out)]
    cmd += ["--train", "2", "--val", "0", "--test", "0", "--workers", "2"]
    proc = subprocess.run(
        cmd,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 images" in proc.stdout
    assert dataset_is_complete(out, {"splits": {"train": 2}, "seed": 0})


def test_receipt_params_defaults_match_generate_receipt_signature() -> None:
    import inspect

    signature = inspect.signature(generate_receipt)
    defaults = ReceiptParams()
    for name in ReceiptParams.__dataclass_fields__:
        assert signature.parameters[name].default == getattr(defaults, name)


# --------------------------------------------------------------------------------------------
# output folder ownership: a user's own data is never written into


def _hashes(root: Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _user_dataset(root: Path) -> Path:
    """A real-looking dataset the user made: own images and annotations, no generator manifest."""
    (root / "images" / "train").mkdir(parents=True)
    (root / "jsons").mkdir()
    Image.new("RGB", (40, 30), "white").save(root / "images" / "train" / "train_00000.jpg")
    (root / "jsons" / "train.json").write_text('{"images": {"train_00000.jpg": {"words": {}}}}')
    # Another tool's manifest does not make the folder the generator's.
    (root / "manifest.json").write_text('{"generator": "labelling-tool"}')
    return root


def test_generation_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    user = _user_dataset(tmp_path / "mine")
    before = _hashes(user)
    with pytest.raises(synth.OutputFolderError, match="not made by ocr-synth") as exc:
        generate_dataset(user, splits={"train": 2}, seed=0)
    assert str(user) in str(exc.value)
    assert exc.value.folder == user
    assert _hashes(user) == before
    with pytest.raises(synth.OutputFolderError, match="not a folder"):
        generate_dataset(user / "manifest.json", splits={"train": 1}, seed=0)


def test_generation_into_new_empty_and_own_folders(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    generate_dataset(empty, splits={"val": 1}, seed=0)
    assert dataset_is_complete(empty, {"splits": {"val": 1}, "seed": 0})
    # Its own folder, also after an interrupted run (marker written, manifest not yet).
    (empty / "manifest.json").unlink()
    generate_dataset(empty, splits={"val": 2}, seed=0)
    assert dataset_is_complete(empty, {"splits": {"val": 2}, "seed": 0})
    # A folder made by a generator from before the marker existed: recognised by its manifest.
    (empty / ".ocr-synth.json").unlink()
    generate_dataset(empty, splits={"val": 1}, seed=1)
    assert dataset_is_complete(empty, {"splits": {"val": 1}, "seed": 1})


def test_cli_refuses_a_non_empty_folder_and_leaves_it_byte_identical(tmp_path: Path) -> None:
    user = _user_dataset(tmp_path / "mine")
    before = _hashes(user)
    cmd = [sys.executable, "-m", "ocr.data.synth", "--out", str(user)]
    cmd += ["--train", "2", "--val", "0", "--test", "0"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"--out {user}" in proc.stderr
    assert "Choose a new or empty output folder" in proc.stderr
    assert _hashes(user) == before
    # An empty folder works, and so does generating again into the folder it made.
    empty = tmp_path / "empty"
    empty.mkdir()
    for _ in range(2):
        cmd[cmd.index("--out") + 1] = str(empty)
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert dataset_is_complete(empty, {"splits": {"train": 2}, "seed": 0})

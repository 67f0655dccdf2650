"""ocr.data.annotations: reading, validating and writing the receipt competition JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ocr.data.annotations import (
    SKIP_REASONS,
    AnnotationError,
    ImageAnnotation,
    SkipReport,
    WordAnnotation,
    check_file_name,
    clean_words,
    load_annotations,
    normalize_polygon,
    polygon_problem,
    write_annotations,
)

BOX = [[10.0, 10.0], [50.0, 10.0], [50.0, 30.0], [10.0, 30.0]]


def _write_text(tmp_path: Path, text: str, name: str = "train.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _write_doc(tmp_path: Path, doc: object, name: str = "train.json") -> Path:
    return _write_text(tmp_path, json.dumps(doc), name)


# -- writing / round trip ------------------------------------------------------------------------


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "train.json"  # parents are created
    images: dict[str, dict[str, Any]] = {
        "b.jpg": {"0002": np.array(BOX) + 0.25, "0001": BOX},
        "sub/a.png": {"0001": [[0, 0], [5, 0], [5, 5]]},
        "Kassenbon-ß.jpg": {},
    }
    write_annotations(path, images)

    loaded = load_annotations(path)
    assert [a.file_name for a in loaded] == ["b.jpg", "sub/a.png", "Kassenbon-ß.jpg"]
    assert [w.word_id for w in loaded[0].words] == ["0002", "0001"]  # file order kept
    np.testing.assert_array_equal(loaded[0].words[0].points, np.array(BOX) + 0.25)
    assert loaded[0].words[0].points.dtype == np.float64
    assert loaded[1].words[0].points.shape == (3, 2)
    assert loaded[2].words == ()
    # Plain JSON: float lists, UTF-8, no temp file left behind.
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["images"]["sub/a.png"]["words"]["0001"]["points"][1] == [5.0, 0.0]
    assert sorted(p.name for p in path.parent.iterdir()) == ["train.json"]


def test_write_replaces_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "val.json"
    write_annotations(path, {"a.jpg": {"0001": BOX}})
    write_annotations(path, {"b.jpg": {"0001": BOX}})
    assert [a.file_name for a in load_annotations(path)] == ["b.jpg"]


def test_write_rejects_bad_points_shape_and_names(tmp_path: Path) -> None:
    with pytest.raises(
        AnnotationError, match=r"image 'a.jpg', word '0001': points must have shape"
    ):
        write_annotations(tmp_path / "t.json", {"a.jpg": {"0001": [1.0, 2.0, 3.0]}})
    with pytest.raises(AnnotationError, match="escapes the image folder"):
        write_annotations(tmp_path / "t.json", {"../a.jpg": {"0001": BOX}})
    nan_box = np.array(BOX)
    nan_box[1, 0] = np.nan
    with pytest.raises(AnnotationError, match="word '0001': points must be finite"):
        write_annotations(tmp_path / "t.json", {"a.jpg": {"0001": nan_box}})
    assert not (tmp_path / "t.json").exists()
    assert list(tmp_path.iterdir()) == []  # the failed write left no temp file


def test_word_annotation_is_immutable() -> None:
    source = np.array(BOX)
    word = WordAnnotation("0001", source)
    source[0, 0] = 999.0  # the caller's array is copied
    assert word.points[0, 0] == 10.0
    with pytest.raises(ValueError, match="read-only"):
        word.points[0, 0] = 1.0
    image = ImageAnnotation("a.jpg", (word,))
    with pytest.raises(AttributeError):
        image.file_name = "b.jpg"  # type: ignore[misc]


# -- structural errors ---------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"annotation file not found: .*nope\.json"):
        load_annotations(tmp_path / "nope.json")


def test_malformed_json_reports_line_and_column(tmp_path: Path) -> None:
    path = _write_text(tmp_path, '{"images": {\n  "a.jpg": {"words": {}},,\n}}')
    with pytest.raises(
        AnnotationError,
        match=r"train.json: malformed JSON at line 2, column 26: Expecting property name",
    ):
        load_annotations(path)


@pytest.mark.parametrize("cut", [10, 35, 60, -3])
def test_truncated_file(tmp_path: Path, cut: int) -> None:
    full = json.dumps({"images": {"a.jpg": {"words": {"0001": {"points": BOX}}}}})
    path = _write_text(tmp_path, full[:cut])
    with pytest.raises(AnnotationError, match=r"train.json: file is truncated \(JSON ends"):
        load_annotations(path)


def test_empty_and_non_utf8_file(tmp_path: Path) -> None:
    with pytest.raises(AnnotationError, match=r"train\.json: file is empty"):
        load_annotations(_write_text(tmp_path, "  \n"))
    path = tmp_path / "val.json"
    path.write_bytes(b'{"images": {"\xff.jpg": {}}}')
    with pytest.raises(AnnotationError, match=r"val\.json: not UTF-8"):
        load_annotations(path)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([1, 2], "top level must be an object, got list"),
        ({"imgs": {}}, "no 'images' key at the top level"),
        ({"images": []}, "'images' must be an object, got list"),
        ({"images": {"a.jpg": []}}, "image 'a.jpg': entry must be an object, got list"),
        ({"images": {"a.jpg": {"words": []}}}, "image 'a.jpg': 'words' must be an object"),
        (
            {"images": {"a.jpg": {"words": {"0003": [1, 2]}}}},
            "image 'a.jpg', word '0003': entry must be an object",
        ),
        ({"images": {"a.jpg": {"words": {"0003": {}}}}}, "word '0003': no 'points'"),
        (
            {"images": {"a.jpg": {"words": {"0003": {"points": [[1, 2, 3]]}}}}},
            r"word '0003': points must be a list of \[x, y\] pairs, got \[\[1, 2, 3\]\]",
        ),
        (
            {"images": {"a.jpg": {"words": {"0003": {"points": [["1", "2"]]}}}}},
            "word '0003': points must be a list of",
        ),
        (
            {"images": {"a.jpg": {"words": {"0003": {"points": [[True, 2]]}}}}},
            "word '0003': points must be a list of",
        ),
        (
            {"images": {"a.jpg": {"words": {"0003": {"points": "10,10,20,20"}}}}},
            "word '0003': points must be a list of",
        ),
    ],
)
def test_wrong_structure(tmp_path: Path, doc: object, message: str) -> None:
    with pytest.raises(AnnotationError, match=rf"^train.json: .*{message}"):
        load_annotations(_write_doc(tmp_path, doc))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"images": {"a.jpg": {}, "a.jpg": {}}}', r"train.json: 'images': duplicate key 'a.jpg'"),
        (
            '{"images": {"a.jpg": {"words": {"0001": {"points": [[0,0],[1,0],[1,1]]},'
            ' "0001": {"points": [[0,0],[2,0],[2,2]]}}}}}',
            r"image 'a.jpg', 'words': duplicate key '0001'",
        ),
        (
            '{"images": {"a.jpg": {}}, "images": {"b.jpg": {}}}',
            "train.json: duplicate key 'images'",
        ),
        (
            '{"images": {"a.jpg": {"words": {"0001": {"points": [], "points": [[0,0]]}}}}}',
            r"word '0001': duplicate key 'points'",
        ),
    ],
)
def test_duplicate_keys(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(AnnotationError, match=message):
        load_annotations(_write_text(tmp_path, text))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../x.jpg", "escapes the image folder"),
        ("a/../../x.jpg", "escapes the image folder"),
        ("/etc/x.jpg", "escapes the image folder"),
        ("C:x.jpg", "escapes the image folder"),
        ("..\\x.jpg", "backslash"),
        ("", "empty file name"),
        ("   ", "empty file name"),
        ("dir/", "is a folder"),
    ],
)
def test_unsafe_file_names(tmp_path: Path, name: str, message: str) -> None:
    path = _write_doc(tmp_path, {"images": {name: {"words": {}}}})
    with pytest.raises(
        AnnotationError, match=rf"train.json: image {re.escape(repr(name))}: .*{message}"
    ):
        load_annotations(path)


def test_safe_file_names_pass() -> None:
    for name in ("a.jpg", "sub/dir/a.jpg", "./a.jpg", "a..b.jpg", "12:30.jpg"):
        check_file_name(name)  # no exception


def test_empty_split(tmp_path: Path) -> None:
    with pytest.raises(AnnotationError, match=r"train.json: empty split \(no images\)"):
        load_annotations(_write_doc(tmp_path, {"images": {}}))


def test_test_split_without_words(tmp_path: Path) -> None:
    path = _write_doc(tmp_path, {"images": {"a.jpg": {}, "b.jpg": {"words": {}}}}, "test.json")
    loaded = load_annotations(path)
    assert [(a.file_name, a.words) for a in loaded] == [("a.jpg", ()), ("b.jpg", ())]
    with pytest.raises(AnnotationError, match=r"test.json: image 'a.jpg': no 'words'"):
        load_annotations(path, require_words=True)


def test_extra_keys_are_ignored(tmp_path: Path) -> None:
    doc = {
        "images": {
            "a.jpg": {
                "img_w": 100,
                "words": {"0001": {"points": BOX, "transcription": "TOTAL", "orientation": 0}},
            }
        },
        "info": {"version": 2},
    }
    loaded = load_annotations(_write_doc(tmp_path, doc))
    assert loaded[0].words[0].word_id == "0001"


# -- geometry ------------------------------------------------------------------------------------


def test_normalize_polygon_drops_repeats_and_closing_point() -> None:
    pts: list[list[float]] = [[0, 0], [0, 0], [10, 0], [10, 5], [10, 5], [0, 5], [0, 0], [0, 0]]
    np.testing.assert_array_equal(normalize_polygon(pts), [[0, 0], [10, 0], [10, 5], [0, 5]])
    # Only exact repeats are removed; near-duplicates are geometry.
    assert len(normalize_polygon(np.array([[0, 0], [1e-9, 0], [10, 0], [10, 5]]))) == 4


@pytest.mark.parametrize(
    ("points", "reason"),
    [
        ([[0, 0], [10, 0]], "too_few_points"),
        ([[0, 0], [10, 0], [10, 0], [0, 0]], "too_few_points"),  # 2 distinct after normalising
        ([[0, 0], [10, np.nan], [10, 10]], "non_finite"),
        ([[0, 0], [np.inf, 0], [10, 10]], "non_finite"),
        ([[0, 0], [10, 0], [20, 0], [5, 0]], "zero_area"),  # collinear
        ([[0, 0], [10, 0], [10, 1e-9], [0, 1e-9]], "zero_area"),  # ~0 px²
        ([[0, 0], [10, 10], [10, 0], [0, 10]], "self_intersecting"),  # bow-tie
        ([[0, 0], [10, 0], [10, 10], [5, -5], [0, 10]], "self_intersecting"),
        ([[10, 10], [50, 10], [50, 30], [10, 30]], None),
    ],
)
def test_polygon_problem(points: list[list[float]], reason: str | None) -> None:
    assert polygon_problem(normalize_polygon(points), (100, 80)) == reason
    assert reason is None or reason in SKIP_REASONS


def test_outside_image_tolerance() -> None:
    size = (100, 80)  # 25% tolerance: 25 px in x, 20 px in y
    slightly_out = [[-20, 10], [50, 10], [50, 30], [-20, 30]]
    far_out = [[-30, 10], [50, 10], [50, 30], [-30, 30]]
    below = [[10, 70], [50, 70], [50, 101], [10, 101]]
    disjoint = [[101, 10], [120, 10], [120, 30], [101, 30]]  # within the margin, but no overlap
    assert polygon_problem(slightly_out, size) is None
    assert polygon_problem(far_out, size) == "outside_image"
    assert polygon_problem(below, size) == "outside_image"
    assert polygon_problem(disjoint, size) == "outside_image"
    assert polygon_problem(far_out, size, max_outside_frac=0.5) is None
    assert polygon_problem(far_out, size, max_outside_frac=None) is None
    assert polygon_problem(far_out) is None  # size unknown: not checked
    assert polygon_problem(disjoint, size, max_outside_frac=None) == "outside_image"


def test_clean_words_skips_and_counts(tmp_path: Path) -> None:
    # NaN / Infinity literals are accepted by Python's json: they are a geometry skip, not an error.
    text = json.dumps(
        {
            "images": {
                "a.jpg": {
                    "words": {
                        "0001": {"points": [*BOX, BOX[0]]},  # closed ring: normalised, kept
                        "0002": {"points": [[0, 0], [1, 1]]},
                        "0003": {"points": [[0, 0], [10, 10], [10, 0], [0, 10]]},
                        "0004": {"points": [[0, 0], [float("nan"), 0], [5, 5]]},
                        "0005": {"points": [[0, 0], [float("inf"), 0], [5, 5]]},
                    }
                },
                "b.jpg": {"words": {"0001": {"points": [[0, 0], [10, 10], [10, 0], [0, 10]]}}},
            }
        }
    )
    assert "NaN" in text
    loaded = load_annotations(_write_text(tmp_path, text))
    report = SkipReport(max_examples=1)
    cleaned = [clean_words(a, (100, 80), report) for a in loaded]
    assert [w.word_id for w in cleaned[0].words] == ["0001"]
    assert cleaned[0].words[0].points.shape == (4, 2)
    assert cleaned[1].words == ()
    assert report.counts == {"too_few_points": 1, "self_intersecting": 2, "non_finite": 2}
    assert report.total == 5
    assert report.examples["self_intersecting"] == [("a.jpg", "0003")]
    msg = report.message("train.json", 6)
    assert msg.startswith("train.json: skipped 5 of 6 words: ")
    assert "self_intersecting=2 (e.g. 'a.jpg' word '0003', ...)" in msg
    assert "too_few_points=1 (e.g. 'a.jpg' word '0002')" in msg


def test_fixture_annotations_load_clean(receipts_dir: Path) -> None:
    loaded = load_annotations(receipts_dir / "annotations.json", require_words=True)
    assert sum(len(a.words) for a in loaded) == 86
    report = SkipReport()
    for image in loaded:
        clean_words(image, None, report)
    assert report.counts == {}

"""DB targets: production (ocr.data.targets) against the oracle (tests/reference_targets.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from ocr.data.targets import (
    DBTargets,
    border_values,
    make_db_targets,
    normalize_polygon,
    polygon_geometry,
)
from tests.reference_targets import db_distance, reference_db_targets

MAPS = ("prob_map", "prob_mask", "thresh_map", "thresh_mask")


def rect(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)


def check_properties(targets: DBTargets, thresh_min: float = 0.3, thresh_max: float = 0.7) -> None:
    for name in MAPS:
        arr = getattr(targets, name)
        assert arr.dtype == np.float32, name
        assert np.isfinite(arr).all(), name
    for name in ("prob_map", "prob_mask", "thresh_mask"):
        assert set(np.unique(getattr(targets, name)).tolist()) <= {0.0, 1.0}, name
    assert targets.thresh_map.min() >= np.float32(thresh_min)
    assert targets.thresh_map.max() <= np.float32(thresh_max)


def assert_matches_oracle(polygons, height: int, width: int, **params) -> DBTargets:
    got = make_db_targets(polygons, height, width, **params)
    want = reference_db_targets(polygons, height, width, **params)
    for name in MAPS:
        diff = int(np.count_nonzero(getattr(got, name) != want[name]))
        assert diff == 0, f"{name}: {diff} differing pixels"
        assert np.array_equal(getattr(got, name), want[name]), name
    check_properties(got, params.get("thresh_min", 0.3), params.get("thresh_max", 0.7))
    return got


def rotated_box(rng: np.random.Generator, cx: float, cy: float, w: float, h: float) -> np.ndarray:
    angle = rng.uniform(-0.6, 0.6)
    corners = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return (corners @ rot.T + [cx, cy]).astype(np.float32)


def dumbbell(rng: np.random.Generator, cx: float, cy: float) -> np.ndarray:
    """Two blocks joined by a thin neck: its shrink usually splits into two paths."""
    w, h = rng.uniform(10, 25), rng.uniform(10, 20)
    neck, gap = rng.uniform(1, 4), rng.uniform(4, 15)
    half = w + gap / 2
    pts = np.array(
        [
            [-half, -h / 2], [-gap / 2, -h / 2], [-gap / 2, -neck / 2], [gap / 2, -neck / 2],
            [gap / 2, -h / 2], [half, -h / 2], [half, h / 2], [gap / 2, h / 2],
            [gap / 2, neck / 2], [-gap / 2, neck / 2], [-gap / 2, h / 2], [-half, h / 2],
        ]
    )  # fmt: skip
    angle = rng.uniform(-0.6, 0.6)
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return (pts @ rot.T + [cx, cy]).astype(np.float32)


def synthetic_receipt(seed: int, height: int, width: int, words: int) -> list[np.ndarray]:
    """Rotated word boxes, some tiny (ignored), overlapping, off-canvas, concave or split."""
    rng = np.random.default_rng(seed)
    polys = []
    for _ in range(words):
        cx, cy = rng.uniform(-15, width + 15), rng.uniform(-10, height + 10)
        kind = rng.random()
        if kind < 0.2:  # thin: D >= 0.5 px but no kernel left
            polys.append(rotated_box(rng, cx, cy, rng.uniform(3, 8), rng.uniform(1.2, 2.2)))
        elif kind < 0.7:
            polys.append(rotated_box(rng, cx, cy, rng.uniform(4, 70), rng.uniform(3, 22)))
        elif kind < 0.85:  # star-ish polygon with 6-12 vertices, often concave
            n = int(rng.integers(6, 13))
            theta = np.sort(rng.uniform(0, 2 * math.pi, n))
            radius = rng.uniform(4, 25, n)
            pts = np.stack([cx + radius * np.cos(theta), cy + radius * np.sin(theta)], axis=1)
            polys.append(pts.astype(np.float32))
        else:
            polys.append(dumbbell(rng, cx, cy))
    return polys


# -- hand-made cases ---------------------------------------------------------------------------


def test_overlapping_polygons_leave_no_even_odd_holes():
    polys = [rect(5, 5, 60, 30), rect(30, 12, 90, 40)]
    got = assert_matches_oracle(polys, 48, 96)
    kernels = []
    for p in polys:
        geometry = polygon_geometry(p, 0.4)
        assert geometry is not None
        assert len(geometry.shrunk) == 1
        kernels.append(geometry.shrunk[0])
    masks = [cv2.fillPoly(np.zeros((48, 96), np.uint8), [k], 1) for k in kernels]
    overlap = cv2.erode(masks[0] & masks[1], np.ones((3, 3), np.uint8)).astype(bool)
    assert overlap.sum() > 20
    # A single fillPoly with both kernels would leave the overlap empty (even-odd).
    evenodd = cv2.fillPoly(np.zeros((48, 96), np.float32), kernels, 1.0)
    assert (evenodd[overlap] == 0).all()
    assert (got.prob_map[overlap] == 1).all()


def test_polygon_partly_off_canvas():
    polys = [rect(-25, 4, 20, 20), rect(50, 30, 80, 55), rect(-40, -40, -20, -30)]
    got = assert_matches_oracle(polys, 40, 64)
    assert got.prob_map[:, 0].any()
    assert got.thresh_mask[:, 0].any()
    assert got.prob_map[-1].any()
    assert got.thresh_mask[-1, -1] == 1
    assert got.thresh_map[4, 0] == np.float32(0.7)  # on the top edge, left of the canvas start


def test_tiny_word_is_ignored_in_prob_mask():
    tiny = rect(10, 10, 13, 12)  # D = 0.504 px: pyclipper returns no kernel
    geometry = polygon_geometry(tiny, 0.4)
    assert geometry is not None
    assert geometry.ignored
    assert geometry.dilated == []
    got = assert_matches_oracle([tiny, rect(20, 5, 40, 15)], 24, 48)
    assert got.prob_mask[10:13, 10:14].max() == 0
    assert np.count_nonzero(got.prob_mask == 0) == 12
    assert got.prob_map[:, :15].max() == 0
    assert got.thresh_mask[:, :14].max() == 0
    assert got.thresh_map[:, :14].max() == np.float32(0.3)


def test_concave_polygon_whose_shrink_splits_in_two():
    corners = [
        (0, 0),
        (40, 0),
        (40, 18),
        (60, 18),
        (60, 0),
        (100, 0),
        (100, 40),
        (60, 40),
        (60, 22),
    ]
    corners += [(40, 22), (40, 40), (0, 40)]
    dumbbell = np.array([(x + 4, y + 4) for x, y in corners], dtype=np.float32)
    geometry = polygon_geometry(dumbbell, 0.4)
    assert geometry is not None
    assert len(geometry.shrunk) == 2
    got = assert_matches_oracle([dumbbell], 48, 110)
    assert got.prob_map[24, 20] == 1
    assert got.prob_map[24, 88] == 1
    assert got.prob_map[24, 54] == 0  # the neck has no kernel


def test_vertex_exactly_on_pixel_centre():
    polys = [
        np.array([[10, 10], [40, 12], [20, 35]], np.float32),
        np.array([[50, 5], [60, 15], [50, 25], [40, 15]], np.float32),
    ]
    got = assert_matches_oracle(polys, 40, 64)
    for x, y in [(10, 10), (40, 12), (20, 35), (50, 5), (60, 15)]:
        assert got.thresh_map[y, x] == np.float32(0.7)


def test_pixel_on_edge_line_with_rounding_gives_zero_distance():
    a, b = (9.4, 16.6), (15.8, 18.2)  # pixel (15, 18) lies on this edge
    d1 = (15 - a[0]) ** 2 + (18 - a[1]) ** 2
    d2 = (15 - b[0]) ** 2 + (18 - b[1]) ** 2
    d = (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2
    cosin = ((d - d1) - d2) / (2 * math.sqrt(d1 * d2))
    assert (1 - cosin * cosin) < 0  # the unclamped formula would take sqrt of a negative: NaN
    triangle = np.array([a, b, (12.0, 30.0)])
    value = border_values(triangle, 5.0, np.array([15.0]), np.array([18.0]))
    assert value.dtype == np.float32
    assert value[0, 0] == 1.0
    assert db_distance(15.0, 18.0, a, b) == 0.0
    assert_matches_oracle([triangle + 2], 40, 30)


def test_border_values_on_vertex_is_finite():
    square = np.array([[2.0, 2.0], [8.0, 2.0], [8.0, 8.0], [2.0, 8.0]])
    grid = np.arange(11, dtype=np.float64)
    values = border_values(square, 3.0, grid, grid)
    assert np.isfinite(values).all()
    assert values[2, 2] == 1.0
    assert values[5, 2] == 1.0
    assert values[5, 5] == 0.0  # centre: 3 px from every edge = D


def test_duplicate_vertices_equal_deduplicated_polygon():
    clean = np.array([[10, 5], [50, 7], [48, 25], [12, 22]], np.float32)
    noisy = np.array(
        [[10, 5], [10, 5], [50, 7], [48, 25], [48, 25], [48, 25], [12, 22], [10, 5]], np.float32
    )
    normal = normalize_polygon(noisy)
    assert normal is not None
    assert np.array_equal(normal, clean.astype(np.float64))
    got = assert_matches_oracle([noisy], 32, 64)
    ref = make_db_targets([clean], 32, 64)
    for name in MAPS:
        assert np.array_equal(getattr(got, name), getattr(ref, name)), name


def test_degenerate_polygons_are_skipped():
    polys = [
        np.zeros((0, 2), np.float32),
        np.array([[1, 1], [5, 5]], np.float32),
        np.array([[1, 1], [5, 5], [1, 1]], np.float32),
        np.array([[1, 1], [5, 5], [9, 9]], np.float32),  # collinear: zero area
        np.array([[3, 3], [3, 3], [3, 3]], np.float32),
    ]
    got = assert_matches_oracle(polys, 16, 16)
    assert (got.prob_map == 0).all()
    assert (got.prob_mask == 1).all()
    assert (got.thresh_mask == 0).all()
    assert (got.thresh_map == np.float32(0.3)).all()


def test_half_integer_vertices_round_half_to_even():
    polys = [rect(2.5, 3.5, 20.5, 11.5), rect(24.5, 0.5, 30.5, 5.5)]
    geometry = polygon_geometry(polys[0], 0.4)
    assert geometry is not None
    assert geometry.rounded.tolist() == [[2, 4], [20, 4], [20, 12], [2, 12]]
    assert_matches_oracle(polys, 16, 36)


# -- random and real receipts ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_random_synthetic_receipts_match_oracle(seed):
    polys = synthetic_receipt(seed, 160, 200, words=25)
    geometries = [polygon_geometry(p, 0.4) for p in polys]
    # The generator really exercises ignored words and kernels that split in two.
    assert any(g is not None and g.ignored for g in geometries)
    assert any(g is not None and len(g.shrunk) > 1 for g in geometries)
    got = assert_matches_oracle(polys, 160, 200)
    assert (got.prob_mask == 0).any()
    assert got.prob_map.any()
    assert got.thresh_mask.any()


def test_other_parameters_match_oracle():
    polys = synthetic_receipt(11, 96, 128, words=12)
    assert_matches_oracle(polys, 96, 128, shrink_ratio=0.25, thresh_min=0.1, thresh_max=0.9)


@pytest.mark.parametrize(("seed", "canvas"), [(0, 256), (1, 384)])
def test_synth_receipts_match_oracle(seed, canvas):
    from ocr.data.synth import generate_receipt

    image, polygons = generate_receipt(np.random.default_rng(seed))
    scale = canvas / max(image.shape[:2])
    scaled = [np.asarray(p, np.float64) * scale for p in polygons]
    assert len(scaled) > 10
    got = assert_matches_oracle(scaled, canvas, canvas)
    assert got.prob_map.any()


def load_real_receipts(receipts_dir: Path, canvas: int) -> dict[str, list[np.ndarray]]:
    annotations = json.loads((receipts_dir / "annotations.json").read_text())
    result = {}
    for name, entry in annotations["images"].items():
        with Image.open(receipts_dir / "images" / name) as image:
            width, height = image.size
        scale = canvas / max(width, height)
        result[name] = [
            np.asarray(w["points"], np.float64) * scale for w in entry["words"].values()
        ]
    return result


def test_real_receipts_match_oracle(receipts_dir):
    receipts = load_real_receipts(receipts_dir, 640)
    assert {name: len(p) for name, p in receipts.items()} == {"1.jpeg": 60, "2.jpeg": 26}
    for polys in receipts.values():
        got = assert_matches_oracle(polys, 640, 640)
        assert got.prob_map.sum() > 1000


# -- API ---------------------------------------------------------------------------------------


def test_out_arrays_are_filled_in_place():
    polys = synthetic_receipt(3, 48, 64, words=6)
    batch = np.full((4, 48, 64), 7.0, np.float32)
    views = DBTargets(batch[0], batch[1], batch[2], batch[3])
    result = make_db_targets(polys, 48, 64, out=views)
    assert result is views
    fresh = make_db_targets(polys, 48, 64)
    for k, name in enumerate(MAPS):
        assert np.array_equal(batch[k], getattr(fresh, name)), name


def test_out_arrays_are_validated():
    bad = DBTargets(*(np.zeros((8, 8), np.float32) for _ in range(3)), np.zeros((8, 8), np.float64))
    with pytest.raises(ValueError, match=r"out\.thresh_mask"):
        make_db_targets([], 8, 8, out=bad)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shrink_ratio": 0.0}, "shrink_ratio"),
        ({"shrink_ratio": 1.0}, "shrink_ratio"),
        ({"thresh_min": 0.7, "thresh_max": 0.7}, "thresh_min"),
        ({"thresh_min": -0.1}, "thresh_min"),
        ({"thresh_max": 1.5}, "thresh_max"),
        ({"height": 0}, "height"),
        ({"width": -3}, "width"),
        ({"height": 2.5}, "height"),
    ],
)
def test_argument_validation(kwargs, match):
    args = {"height": 8, "width": 8, **kwargs}
    height, width = args.pop("height"), args.pop("width")
    with pytest.raises(ValueError, match=match):
        make_db_targets([], height, width, **args)


def test_bad_polygons_raise_with_index():
    with pytest.raises(ValueError, match=r"polygon 1: expected an \(N, 2\)"):
        make_db_targets([rect(1, 1, 5, 5), np.zeros((4, 3))], 8, 8)
    with pytest.raises(ValueError, match="polygon 0: non-finite"):
        make_db_targets([np.array([[0, 0], [4, np.nan], [4, 4]])], 8, 8)
    with pytest.raises(ValueError, match="polygon 0: coordinates beyond"):
        make_db_targets([np.array([[0, 0], [4e12, 0], [4, 4]])], 8, 8)


def test_empty_polygon_list_gives_initial_maps():
    got = make_db_targets([], 5, 7)
    check_properties(got)
    assert got.prob_map.shape == (5, 7)
    assert (got.prob_mask == 1).all()
    assert (got.thresh_map == np.float32(0.3)).all()

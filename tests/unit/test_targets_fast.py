"""The compiled DB targets (ocr.data.targets + ocr.data._targets_kernel): bit for bit against the
per-pixel oracle (tests/reference_targets.py) and the numpy reference algorithm
(tests/reference_targets_numpy.py), and numba's compile/cache behaviour."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ocr.data import _targets_kernel as kernel
from ocr.data.targets import DBTargets, border_values, make_db_targets, polygon_geometry, warm_up
from tests.reference_targets import reference_db_targets
from tests.reference_targets_numpy import _edge_distance, reference_numpy_db_targets

MAPS = ("prob_map", "prob_mask", "thresh_map", "thresh_mask")
REPO_ROOT = Path(__file__).resolve().parents[2]


def assert_same_maps(got: DBTargets, want: dict[str, np.ndarray], label: str) -> None:
    for name in MAPS:
        differing = int(np.count_nonzero(getattr(got, name) != want[name]))
        assert differing == 0, f"{label} {name}: {differing} pixels differ"
        assert np.array_equal(getattr(got, name), want[name]), f"{label} {name}"


def rotated_box(cx: float, cy: float, w: float, h: float, angle: float) -> np.ndarray:
    corners = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return corners @ rot.T + [cx, cy]


def receipt(seed: int, canvas: int, words: int) -> list[np.ndarray]:
    """Word boxes in text lines on a slightly rotated page (sizes as on real receipts at 640 px,
    scaled with the canvas), with skewed quadrilaterals, a few star-shaped words, words too thin
    to keep a kernel (ignored) and words hanging over the canvas edge."""
    rng = np.random.default_rng(seed)
    scale = canvas / 640
    page = rng.normal(0.0, 0.04)
    polygons: list[np.ndarray] = []
    y = rng.uniform(0, 10) * scale
    line = 0
    while len(polygons) < words:
        x = rng.uniform(-20, 30) * scale
        height = rng.uniform(9, 24) * scale
        first = True
        while len(polygons) < words and x < canvas + 10 * scale:
            width = float(np.clip(rng.lognormal(math.log(40), 0.7), 6, 240)) * scale
            cx, cy = x + width / 2, y + height / 2
            # Every third line starts with a thin word, others come at random.
            kind = 0.0 if first and line % 3 == 0 else rng.random()
            first = False
            if kind < 0.12:  # thin: D >= 0.5 px, often no kernel left
                poly = rotated_box(cx, cy, rng.uniform(5, 10), rng.uniform(1.2, 2.0), page)
            elif kind < 0.18:  # star-shaped, often concave
                n = int(rng.integers(5, 11))
                theta = np.sort(rng.uniform(0, 2 * math.pi, n))
                radius = rng.uniform(4, 14, n) * scale
                poly = np.stack([cx + radius * np.cos(theta), cy + radius * np.sin(theta)], 1)
            else:
                poly = rotated_box(cx, cy, width, height, page + rng.normal(0, 0.02))
                if kind < 0.3:
                    poly += rng.uniform(-2, 2, (4, 2)) * scale
            polygons.append(poly.astype(np.float32))
            x += width + rng.uniform(5, 20) * scale
        y += height + rng.uniform(2, 10) * scale
        line += 1
        if y > canvas:
            y = rng.uniform(0, 10) * scale  # page full: further lines overlap earlier ones
    return polygons


def random_shapes(seed: int, height: int, width: int, count: int) -> list[np.ndarray]:
    """Awkward inputs: concave and self-touching shapes, dumbbells whose shrink splits, repeated
    and closing vertices, half-integer and integer vertices, far off-canvas and canvas-sized
    polygons, nearly horizontal or vertical edges, very short edges."""
    rng = np.random.default_rng(seed)
    shapes: list[np.ndarray] = []
    for _ in range(count):
        cx, cy = rng.uniform(-30, width + 30), rng.uniform(-30, height + 30)
        kind = int(rng.integers(0, 8))
        if kind == 0:  # random simple-ish polygon
            n = int(rng.integers(3, 14))
            theta = np.sort(rng.uniform(0, 2 * math.pi, n))
            radius = rng.uniform(2, 40, n)
            poly = np.stack([cx + radius * np.cos(theta), cy + radius * np.sin(theta)], 1)
        elif kind == 1:  # dumbbell
            w, h, neck = rng.uniform(8, 30), rng.uniform(8, 24), rng.uniform(1, 5)
            gap = rng.uniform(4, 16)
            half = w + gap / 2
            poly = np.array(
                [
                    [-half, -h / 2], [-gap / 2, -h / 2], [-gap / 2, -neck / 2],
                    [gap / 2, -neck / 2], [gap / 2, -h / 2], [half, -h / 2], [half, h / 2],
                    [gap / 2, h / 2], [gap / 2, neck / 2], [-gap / 2, neck / 2],
                    [-gap / 2, h / 2], [-half, h / 2],
                ]
            )  # fmt: skip
            angle = rng.uniform(-math.pi, math.pi)
            rot = np.array(
                [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]]
            )
            poly = poly @ rot.T + [cx, cy]
        elif kind == 2:  # integer / half-integer vertices, repeated and closing vertices
            poly = np.round(rotated_box(cx, cy, rng.uniform(4, 60), rng.uniform(3, 20), 0.3) * 2)
            poly = np.concatenate([poly[:1], poly, poly[2:3], poly[:1]]) / 2
        elif kind == 3:  # nearly axis-parallel box
            tilt = rng.choice([0.0, 1e-9, -1e-7, math.pi / 2 + 1e-9])
            poly = rotated_box(cx, cy, rng.uniform(5, 80), rng.uniform(3, 25), tilt)
        elif kind == 4:  # a very short edge
            poly = rotated_box(cx, cy, rng.uniform(10, 50), rng.uniform(6, 20), rng.uniform(-1, 1))
            poly = np.insert(poly, 1, poly[0] + rng.uniform(-1, 1, 2) * 1e-6, axis=0)
        elif kind == 5:  # larger than the canvas
            poly = rotated_box(
                width / 2, height / 2, 1.5 * width, 1.3 * height, rng.uniform(-0.3, 0.3)
            )
        elif kind == 6:  # tiny or thin: ignored or barely kept
            poly = rotated_box(cx, cy, rng.uniform(1, 6), rng.uniform(0.5, 3), rng.uniform(-1, 1))
        else:  # triangle
            poly = np.array(
                [[cx, cy], [cx + rng.uniform(3, 40), cy], [cx, cy + rng.uniform(3, 40)]]
            )
        shapes.append(poly)
    return shapes


# -- bit-exact against the per-pixel oracle ---------------------------------------------------


@pytest.mark.parametrize("canvas", [640, 1024])
@pytest.mark.parametrize("words", [50, 100, 200])
def test_synthetic_receipts_match_oracle(canvas: int, words: int) -> None:
    polygons = receipt(canvas + words, canvas, words)
    geometries = [polygon_geometry(p, 0.4) for p in polygons]
    assert sum(g is not None and g.ignored for g in geometries) > 0  # exercises prob_mask
    assert any(g is not None and not g.ignored for g in geometries)
    got = make_db_targets(polygons, canvas, canvas)
    assert_same_maps(got, reference_db_targets(polygons, canvas, canvas), f"{canvas}/{words}")
    assert np.float32(0.69) < got.thresh_map.max() <= np.float32(0.7)
    assert got.prob_map.sum() > 20 * words


def load_real_receipts(receipts_dir: Path, canvas: int) -> dict[str, list[np.ndarray]]:
    annotations = json.loads((receipts_dir / "annotations.json").read_text())
    result = {}
    for name, entry in annotations["images"].items():
        with Image.open(receipts_dir / "images" / name) as image:
            scale = canvas / max(image.size)
        result[name] = [
            np.asarray(word["points"], np.float64) * scale for word in entry["words"].values()
        ]
    return result


def test_real_receipts_match_oracle_and_reference(receipts_dir: Path) -> None:
    receipts = load_real_receipts(receipts_dir, 896)
    assert sorted(receipts) == ["1.jpeg", "2.jpeg"]
    for name, polygons in receipts.items():
        got = make_db_targets(polygons, 896, 896)
        assert_same_maps(got, reference_db_targets(polygons, 896, 896), f"{name} oracle")
        # Mirrored and upside-down pages: other edge directions, the same word geometry.
        for label, flip in (("mirrored", [-1, 1]), ("upside down", [-1, -1])):
            moved = [p * flip + (np.array(flip) < 0) * 895 for p in polygons]
            got = make_db_targets(moved, 896, 896)
            assert_same_maps(got, reference_numpy_db_targets(moved, 896, 896), f"{name} {label}")


# -- bit-exact against the numpy reference algorithm (cheap: many cases) ---------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_shapes_match_numpy_reference(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    height, width = int(rng.integers(40, 200)), int(rng.integers(40, 200))
    shrink = float(rng.choice([0.4, rng.uniform(0.05, 0.95)]))
    low = float(rng.uniform(0.0, 0.5))
    high = float(rng.choice([0.7, 1.0, rng.uniform(low + 0.01, 1.0)]))
    polygons = random_shapes(seed, height, width, count=int(rng.integers(5, 40)))
    params = {"shrink_ratio": shrink, "thresh_min": low, "thresh_max": high}
    got = make_db_targets(polygons, height, width, **params)
    want = reference_numpy_db_targets(polygons, height, width, **params)
    assert_same_maps(got, want, f"seed {seed}")


def test_numpy_reference_matches_oracle() -> None:
    """The reference algorithm itself follows the contract (it is the benchmark's baseline)."""
    for seed in range(3):
        polygons = random_shapes(seed, 72, 96, count=12)
        got = reference_numpy_db_targets(polygons, 72, 96)
        want = reference_db_targets(polygons, 72, 96)
        for name in MAPS:
            assert np.array_equal(got[name], want[name]), (seed, name)


@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (0.4, 0.7), (0.1, 0.2)])
def test_threshold_scaling_matches_oracle(low: float, high: float) -> None:
    """Step 6 is fused into the kernel; 0.4f + 0.3f overshoots 0.7f by an ulp before the clip."""
    polygons = receipt(7, 160, 12)
    got = make_db_targets(polygons, 160, 160, thresh_min=low, thresh_max=high)
    want = reference_db_targets(polygons, 160, 160, thresh_min=low, thresh_max=high)
    assert_same_maps(got, want, f"[{low}, {high}]")
    assert got.thresh_map.min() == np.float32(low)
    assert low + 0.99 * (high - low) < got.thresh_map.max() <= np.float32(high)


def numpy_border(
    polygon: np.ndarray, distance: float, xs: np.ndarray, ys: np.ndarray
) -> np.ndarray:
    """The contract's step 5 values with the reference's per-edge arrays (NaN kept)."""
    grid_x, grid_y = np.meshgrid(xs, ys)
    n = len(polygon)
    with np.errstate(invalid="ignore", divide="ignore"):
        edges = [
            np.clip(
                _edge_distance(grid_x, grid_y, polygon[k], polygon[(k + 1) % n]) / distance, 0, 1
            )
            for k in range(n)
        ]
    return (1 - np.min(edges, axis=0)).astype(np.float32)


@pytest.mark.parametrize(
    ("polygon", "distance", "offset"),
    [
        ([[2.0, 3.0], [40.0, 5.0], [38.5, 20.25], [1.0, 17.0]], 4.1, 0.0),
        ([[2.0, 3.0], [40.0, 3.0], [40.0, 20.0], [2.0, 20.0]], 3.0, 0.0),  # axis-parallel
        ([[2.0, 3.0], [40.0, 3.0 + 1e-9], [40.0, 20.0], [2.0, 20.0]], 3.0, 0.0),  # almost
        ([[5.0, 5.0], [5.0 + 1e-7, 5.0], [30.0, 9.0], [6.0, 25.0]], 2.5, 0.0),  # short edge
        ([[3.0, 4.0], [30.0, 6.0], [12.0, 28.0]], 1e-3, 0.0),  # tiny D: narrow bands
        ([[3.0, 4.0], [30.0, 6.0], [12.0, 28.0]], 80.0, 0.0),  # D larger than the grid
        ([[3.0, 4.0], [30.0, 6.0], [12.0, 28.0]], 5.0, 3e6),  # large coordinates
        ([[3.0, 4.0], [30.0, 6.0], [12.0, 28.0]], 5.0, 2e9),  # beyond the bands' guards
        ([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 10.0]], 2.0, -1e-300),  # subnormal shift
        # The closing edge's length underflows (d = 0): NaN at (0, 0), which must propagate.
        ([[1e-170, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 10.0], [0.0, 0.0]], 2.0, 0.0),
    ],
)
def test_border_values_match_numpy_formula(polygon, distance: float, offset: float) -> None:
    """The kernel, with its bands (edges skipped where they cannot matter), on awkward input."""
    poly = np.asarray(polygon) + offset
    xs = np.arange(-3.0, 46.0) + offset
    ys = np.arange(-2.0, 33.0) + offset
    got = border_values(poly, distance, xs, ys)
    want = numpy_border(poly, distance, xs, ys)
    assert got.dtype == np.float32
    assert np.array_equal(got, want, equal_nan=True)
    assert np.isnan(got).any() == (poly[0, 0] == 1e-170)
    # A reversed grid has no uniform step: no bands, every edge evaluated everywhere.
    unbanded = border_values(poly, distance, xs[::-1].copy(), ys)[:, ::-1]
    assert np.array_equal(got, unbanded, equal_nan=True)


def test_bands_apply_only_on_unit_step_grids() -> None:
    """The comparison above is meaningful: on a unit-step grid edges do get bands."""
    poly = np.array([[2.0, 3.0], [40.0, 5.0], [38.5, 20.25], [1.0, 17.0]])
    edge = ((poly - np.roll(poly, -1, axis=0)) ** 2).sum(axis=1)
    band = np.full((4, 5), np.nan)
    xs, ys = np.arange(-3.0, 46.0), np.arange(-2.0, 33.0)
    kernel._band_geometry(poly, 4.1, xs, ys, edge, band)
    assert (band[:, 0] == 2.0).all()  # every edge banded (none is horizontal)
    assert band[1, 3] < 8.0  # the steep edges: about D + 1 px either side of the line
    assert band[3, 3] < 8.0
    columns = kernel._band_columns.py_func
    lo, hi = columns(band, 0, xs[0], 1.0, 56)  # the top edge, a row next to it
    assert hi - lo >= 40
    lo, hi = columns(band, 0, xs[0], 30.0, 56)  # ... a row far below it
    assert lo == hi
    lo, hi = columns(band, 1, xs[0], 10.0, 56)  # a steep edge
    assert 0 < hi - lo <= 24
    kernel._band_geometry(poly, 4.1, xs[::-1].copy(), ys, edge, band)
    assert (band[:, 0] == 0.0).all()


# -- API behaviour of the batched path -------------------------------------------------------


def test_input_forms_give_identical_maps() -> None:
    polygons = receipt(3, 128, 15)
    reference = make_db_targets(polygons, 128, 128)
    variants = {
        "float64": [p.astype(np.float64) for p in polygons],
        "lists": [p.tolist() for p in polygons],
        "object arrays": [p.astype(object) for p in polygons],
        "mixed": [p.tolist() if k % 2 else p for k, p in enumerate(polygons)],
    }
    for label, polys in variants.items():
        got = make_db_targets(polys, 128, 128)
        for name in MAPS:
            assert np.array_equal(getattr(got, name), getattr(reference, name)), (label, name)


def test_out_with_garbage_equals_fresh_maps() -> None:
    polygons = receipt(5, 96, 10)
    fresh = make_db_targets(polygons, 96, 96)
    block = np.full((4, 96, 96), np.nan, np.float32)
    out = DBTargets(*block)
    assert make_db_targets(polygons, 96, 96, out=out) is out
    for k, name in enumerate(MAPS):
        assert np.array_equal(block[k], getattr(fresh, name)), name


def test_first_bad_polygon_is_reported() -> None:
    good = np.array([[0.0, 0.0], [9.0, 0.0], [9.0, 6.0]])
    with pytest.raises(ValueError, match="polygon 1: non-finite"):
        make_db_targets([good, [[0, 0], [5, np.inf], [5, 5]], np.zeros((3, 3))], 8, 8)
    with pytest.raises(ValueError, match=r"polygon 2: expected an \(N, 2\)"):
        make_db_targets([good, good, np.zeros((3, 3)), [[0, 0], [5, np.nan], [5, 5]]], 8, 8)
    with pytest.raises(ValueError, match="polygon 0: coordinates beyond"):
        make_db_targets([np.array([[0.0, 0.0], [3e9, 0.0], [1.0, 1.0]], np.float32)], 8, 8)


# -- compilation and numba's disk cache ------------------------------------------------------


def test_warm_up_covers_the_run_time_argument_types() -> None:
    """After warm_up no call compiles again (a new specialisation would stall a batch)."""
    warm_up()
    entry_points = (kernel.normalize_flat, kernel.border_grid, kernel.draw_borders)
    before = [list(dispatcher.signatures) for dispatcher in entry_points]
    assert all(len(signatures) == 1 for signatures in before)
    polygons = receipt(9, 64, 8)
    make_db_targets(polygons, 64, 64)
    make_db_targets([p.tolist() for p in polygons], 64, 48, thresh_min=0.0, thresh_max=1.0)
    block = np.zeros((4, 64, 64), np.float32)
    make_db_targets([p.astype(np.float64) for p in polygons], 64, 64, out=DBTargets(*block))
    border_values(polygons[0], 2.0, np.arange(5), np.arange(4, dtype=np.float32))
    assert [list(dispatcher.signatures) for dispatcher in entry_points] == before


CHILD = """
import hashlib, json, sys, warnings
import numpy as np
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from ocr.data import _targets_kernel as kernel
    from ocr.data.targets import make_db_targets
    polygons = [np.asarray(p) for p in json.loads(sys.argv[1])]
    maps = make_db_targets(polygons, 96, 96)
digest = hashlib.sha256(b"".join(getattr(maps, n).tobytes() for n in
                                 ("prob_map", "prob_mask", "thresh_map", "thresh_mask")))
hits = sum(sum(getattr(kernel, n).stats.cache_hits.values())
           for n in ("normalize_flat", "draw_borders"))
print(json.dumps({"digest": digest.hexdigest(), "hits": hits,
                  "warnings": [str(w.message) for w in caught if w.category is RuntimeWarning]}))
"""


def run_child(polygons: list[np.ndarray], **env: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps([p.tolist() for p in polygons])],
        env={**os.environ, **env},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_disk_cache_is_written_reloaded_and_survives_damage(tmp_path: Path) -> None:
    polygons = receipt(11, 96, 12)
    maps = make_db_targets(polygons, 96, 96)
    digest = hashlib.sha256(b"".join(getattr(maps, n).tobytes() for n in MAPS)).hexdigest()
    cache = tmp_path / "numba-cache"

    first = run_child(polygons, NUMBA_CACHE_DIR=str(cache))
    assert first == {"digest": digest, "hits": 0, "warnings": []}
    indexes = sorted(cache.rglob("*.nbi"))
    assert {p.name.split("-")[0] for p in indexes} >= {
        "_targets_kernel.normalize_flat",
        "_targets_kernel.border_grid",
        "_targets_kernel.draw_borders",
    }

    second = run_child(polygons, NUMBA_CACHE_DIR=str(cache))  # a spawned worker, a later run
    assert second["digest"] == digest
    assert second["hits"] >= 2  # loaded, not compiled
    assert second["warnings"] == []

    for index in indexes:  # a damaged cache: one warning, compiled anew, same maps
        index.write_bytes(b"not a pickle")
    damaged = run_child(polygons, NUMBA_CACHE_DIR=str(cache))
    assert damaged["digest"] == digest
    assert len(damaged["warnings"]) == 1
    assert "disk cache is unusable" in damaged["warnings"][0]


def test_unwritable_cache_location_warns_once(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    polygons = receipt(12, 96, 10)
    maps = make_db_targets(polygons, 96, 96)
    digest = hashlib.sha256(b"".join(getattr(maps, n).tobytes() for n in MAPS)).hexdigest()
    # Only the NUMBA_CACHE_DIR locator, pointing below a regular file (unwritable even for root).
    result = run_child(
        polygons,
        NUMBA_CACHE_DIR=str(blocker / "cache"),
        NUMBA_CACHE_LOCATOR_CLASSES="UserProvidedCacheLocator",
    )
    assert result["digest"] == digest
    assert result["hits"] == 0
    assert len(result["warnings"]) == 1
    assert "disk cache is unusable" in result["warnings"][0]

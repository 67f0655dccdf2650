"""Reference *algorithm* for the DB targets: the MhLiao/DB-style numpy implementation.

This is how the project this grew from computed the maps (and what ``ocr.data.targets`` did before
its border map moved into a compiled kernel): per polygon a shapely ``Polygon`` for area/length, a
``PyclipperOffset`` for both offsets, and for the border map, per edge, a full ``(h, w)`` float64
distance array over the whole dilated box, then ``np.min`` over the edges. It follows *our*
contract (the module docstring of ``ocr.data.targets``, step by step), so it yields the same maps
bit for bit; unlike the per-pixel oracle in ``tests/reference_targets.py`` it is fast enough for
large canvases, which makes it both the baseline of ``benchmarks/targets_speed.py`` and a cheap
second oracle for randomized tests. Written independently of the production module (never
imports it).

Contract details that differ from the original MhLiao/DB code (and are why this is "adapted"):
the subject is rounded half to even (not truncated), the distance map stays float64 until
``float32(1 - m)``, ``square_sin`` is clamped with ``fmax(., 0)`` (NaN and rounding negatives -> 0,
where MhLiao's ``nan_to_num`` lets a rounding negative become NaN), and every shrunk/dilated path
is used (not just the first).
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import pyclipper
from shapely.geometry import Polygon


def _normalize(points: np.ndarray) -> np.ndarray | None:
    """Float64 vertices without consecutive duplicates or a closing duplicate; None if < 3."""
    poly = np.array(points, dtype=np.float64).reshape(-1, 2)
    if len(poly) > 1:
        keep = np.concatenate([[True], np.any(poly[1:] != poly[:-1], axis=1)])
        poly = poly[keep]
        if len(poly) > 1 and np.array_equal(poly[-1], poly[0]):
            poly = poly[:-1]
    return poly if len(poly) >= 3 else None


def _edge_distance(
    xs: np.ndarray, ys: np.ndarray, point_1: np.ndarray, point_2: np.ndarray
) -> np.ndarray:
    """MhLiao/DB ``SegDetector.distance``: full ``(h, w)`` arrays for one edge."""
    square_distance_1 = np.square(xs - point_1[0]) + np.square(ys - point_1[1])
    square_distance_2 = np.square(xs - point_2[0]) + np.square(ys - point_2[1])
    square_distance = np.square(point_1[0] - point_2[0]) + np.square(point_1[1] - point_2[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        cosin = (square_distance - square_distance_1 - square_distance_2) / (
            2 * np.sqrt(square_distance_1 * square_distance_2)
        )
    square_sin = np.fmax(1 - np.square(cosin), 0.0)
    result = np.sqrt(square_distance_1 * square_distance_2 * square_sin / square_distance)
    acute = cosin < 0
    result[acute] = np.sqrt(np.fmin(square_distance_1, square_distance_2))[acute]
    return result


def _draw_border_map(
    polygon: np.ndarray,
    distance: float,
    path: np.ndarray,
    thresh_map: np.ndarray,
    thresh_mask: np.ndarray,
) -> None:
    cv2.fillPoly(thresh_mask, [path.astype(np.int32)], 1.0)
    xmin, xmax = int(path[:, 0].min()), int(path[:, 0].max())
    ymin, ymax = int(path[:, 1].min()), int(path[:, 1].max())
    box_w, box_h = xmax - xmin + 1, ymax - ymin + 1
    local = polygon.copy()
    local[:, 0] = local[:, 0] - xmin
    local[:, 1] = local[:, 1] - ymin
    xs = np.broadcast_to(np.arange(box_w, dtype=np.float64).reshape(1, box_w), (box_h, box_w))
    ys = np.broadcast_to(np.arange(box_h, dtype=np.float64).reshape(box_h, 1), (box_h, box_w))
    distance_map = np.zeros((len(local), box_h, box_w), dtype=np.float64)
    for i in range(len(local)):
        j = (i + 1) % len(local)
        distance_map[i] = np.clip(_edge_distance(xs, ys, local[i], local[j]) / distance, 0, 1)
    nearest = distance_map.min(axis=0)
    height, width = thresh_map.shape
    x0, x1 = max(xmin, 0), min(xmax, width - 1)
    y0, y1 = max(ymin, 0), min(ymax, height - 1)
    if x0 > x1 or y0 > y1:
        return
    values = (1 - nearest[y0 - ymin : y1 - ymin + 1, x0 - xmin : x1 - xmin + 1]).astype(np.float32)
    region = thresh_map[y0 : y1 + 1, x0 : x1 + 1]
    region[...] = np.fmax(values, region)


def reference_numpy_db_targets(
    polygons: Sequence[np.ndarray],
    height: int,
    width: int,
    shrink_ratio: float = 0.4,
    thresh_min: float = 0.3,
    thresh_max: float = 0.7,
) -> dict[str, np.ndarray]:
    """The four DB maps (float32 ``(height, width)``), keyed like ``DBTargets``' fields."""
    prob_map = np.zeros((height, width), np.float32)
    prob_mask = np.ones((height, width), np.float32)
    thresh_map = np.zeros((height, width), np.float32)
    thresh_mask = np.zeros((height, width), np.float32)

    for points in polygons:
        polygon = _normalize(points)
        if polygon is None:
            continue
        shape = Polygon(polygon)
        if shape.area <= 0:
            continue
        distance = shape.area * (1 - shrink_ratio**2) / shape.length
        subject = np.round(polygon).astype(np.int64)
        padding = pyclipper.PyclipperOffset()
        padding.AddPath(
            [tuple(v) for v in subject.tolist()], pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON
        )
        shrunk = padding.Execute(-distance)
        if not shrunk:
            cv2.fillPoly(prob_mask, [subject.astype(np.int32)], 0.0)
            continue
        for path in shrunk:
            cv2.fillPoly(prob_map, [np.array(path, dtype=np.int32)], 1.0)
        for path in padding.Execute(distance):
            _draw_border_map(polygon, distance, np.array(path), thresh_map, thresh_mask)

    thresh_map = thresh_map * np.float32(thresh_max - thresh_min) + np.float32(thresh_min)
    thresh_map = np.clip(thresh_map, np.float32(thresh_min), np.float32(thresh_max))
    return {
        "prob_map": prob_map,
        "prob_mask": prob_mask,
        "thresh_map": thresh_map,
        "thresh_mask": thresh_mask,
    }

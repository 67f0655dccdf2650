"""Oracle for ``ocr.data.targets``: a plain, deliberately slow implementation of the DB targets.

Written independently of the production module (which it must never import): per-pixel Python loops
with ``math`` in float64, lists of tuples instead of arrays. Only the parts that *define* the
semantics are shared libraries: shapely (area/length), pyclipper (offsets) and ``cv2.fillPoly``
(rasterisation). Contract, step by step (see the production module docstring for the rationale):

1. drop consecutive duplicate vertices and a closing duplicate; < 3 vertices or area <= 0: skip;
2. ``D = A * (1 - r**2) / L``;
3. pyclipper subject = vertices rounded half-to-even to ints (``round`` on a float does that);
4. ``Execute(-D)`` empty: fill the rounded polygon with 0 in ``prob_mask``, nothing else; otherwise
   fill each shrunk path with 1 in ``prob_map`` (one ``fillPoly`` call per path);
5. for each ``Execute(+D)`` path: fill it with 1 in ``thresh_mask``; for every on-canvas pixel of
   its integer bounding box, ``value = float32(1 - min over edges of clip(dist / D, 0, 1))`` with
   the MhLiao/DB "distance" below, in box-relative coordinates; keep the larger
   of value and the map;
6. ``thresh_map * f32(max - min) + f32(min)`` in float32, clipped to ``[f32(min), f32(max)]``.

Slow (~1-2 µs per pixel and edge): use it on small canvases or a few dozen words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np
import pyclipper
from shapely.geometry import Polygon

Point = tuple[float, float]


def _clean_vertices(points: np.ndarray) -> list[Point]:
    vertices: list[Point] = []
    for x, y in np.asarray(points, dtype=np.float64).tolist():
        if not vertices or vertices[-1] != (x, y):
            vertices.append((x, y))
    if len(vertices) > 1 and vertices[-1] == vertices[0]:
        vertices.pop()
    return vertices


def db_distance(x: float, y: float, a: Point, b: Point) -> float:
    """MhLiao/DB border "distance" from pixel (x, y) to edge a-b (not point-to-segment)."""
    d1 = (x - a[0]) * (x - a[0]) + (y - a[1]) * (y - a[1])
    d2 = (x - b[0]) * (x - b[0]) + (y - b[1]) * (y - b[1])
    d = (a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1])
    if d1 == 0.0 or d2 == 0.0:
        # On a vertex the cosine is 0/0; the reference's nan_to_num makes the result 0.
        return 0.0
    cosin = (d - d1 - d2) / (2.0 * math.sqrt(d1 * d2))
    if cosin < 0.0:
        # Acute angle at the pixel: distance to the nearer end point.
        return math.sqrt(min(d1, d2))
    square_sin = 1.0 - cosin * cosin
    if square_sin < 0.0:
        # On the edge's line |cosin| can round to just above 1.
        square_sin = 0.0
    return math.sqrt(d1 * d2 * square_sin / d)


def reference_db_targets(
    polygons: Sequence[np.ndarray],
    height: int,
    width: int,
    shrink_ratio: float = 0.4,
    thresh_min: float = 0.3,
    thresh_max: float = 0.7,
) -> dict[str, np.ndarray]:
    """The four DB maps (float32 ``(height, width)``) by the contract, keyed like ``DBTargets``."""
    prob_map = np.zeros((height, width), np.float32)
    prob_mask = np.ones((height, width), np.float32)
    thresh_map = np.zeros((height, width), np.float32)
    thresh_mask = np.zeros((height, width), np.float32)

    for points in polygons:
        vertices = _clean_vertices(points)
        if len(vertices) < 3:
            continue
        shape = Polygon(vertices)
        if shape.area <= 0:
            continue
        dist_d = shape.area * (1 - shrink_ratio**2) / shape.length
        subject = [(round(x), round(y)) for x, y in vertices]

        clipper = pyclipper.PyclipperOffset()
        clipper.AddPath(subject, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
        shrunk = clipper.Execute(-dist_d)
        if not shrunk:
            cv2.fillPoly(prob_mask, [np.array(subject, dtype=np.int32)], 0.0)
            continue
        for path in shrunk:
            cv2.fillPoly(prob_map, [np.array(path, dtype=np.int32)], 1.0)

        for path in clipper.Execute(dist_d):
            cv2.fillPoly(thresh_mask, [np.array(path, dtype=np.int32)], 1.0)
            xmin = min(p[0] for p in path)
            xmax = max(p[0] for p in path)
            ymin = min(p[1] for p in path)
            ymax = max(p[1] for p in path)
            local = [(x - xmin, y - ymin) for x, y in vertices]
            edges = [(local[k], local[(k + 1) % len(local)]) for k in range(len(local))]
            for y in range(max(ymin, 0), min(ymax, height - 1) + 1):
                for x in range(max(xmin, 0), min(xmax, width - 1) + 1):
                    px, py = float(x - xmin), float(y - ymin)
                    nearest = 1.0
                    for a, b in edges:
                        nearest = min(
                            nearest, min(max(db_distance(px, py, a, b) / dist_d, 0.0), 1.0)
                        )
                    value = np.float32(1.0 - nearest)
                    assert math.isfinite(value), (x, y, vertices)
                    if value > thresh_map[y, x]:
                        thresh_map[y, x] = value

    span, low, high = (
        np.float32(thresh_max - thresh_min),
        np.float32(thresh_min),
        np.float32(thresh_max),
    )
    scaled = np.empty_like(thresh_map)
    for i in range(height):
        # Row by row in float32: product rounded to float32, then the sum rounded to float32.
        row = (thresh_map[i] * span).astype(np.float32)
        scaled[i] = np.minimum(np.maximum((row + low).astype(np.float32), low), high)
    return {
        "prob_map": prob_map,
        "prob_mask": prob_mask,
        "thresh_map": scaled,
        "thresh_mask": thresh_mask,
    }

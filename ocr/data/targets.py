"""DB (Differentiable Binarization) training targets: shrink (probability) and border maps.

Semantics follow MhLiao/DB as used by the project this grew from, made exact so that an
independent oracle (``tests/reference_targets.py``) reproduces every pixel. Canvas height ``H``,
width ``W``; pixel ``(row i, column j)`` has coordinates ``(x, y) = (j, i)``. Maps start as
``prob_map = 0``, ``prob_mask = 1``, ``thresh_map = 0``, ``thresh_mask = 0`` (all float32), and each
polygon ``P`` (float ``(N, 2)``, ``(x, y)`` canvas pixels) is applied in order:

1. **Normalise** to float64, drop consecutive duplicate vertices and a closing vertex equal to the
   first. Fewer than 3 vertices left, or shapely area ``<= 0``: the polygon is skipped (upstream
   validation should already have removed it). Non-finite coordinates, or beyond ``+-2**30`` px
   (``cv2.fillPoly`` takes int32), are an error.
2. ``D = A * (1 - r**2) / L`` in float64, with ``A``/``L`` the shapely area/perimeter of the
   *unrounded* normalised polygon.
3. **Rounding #1**: the pyclipper subject is ``np.round(P)`` (round half to even) as int tuples;
   one ``PyclipperOffset`` (``JT_ROUND``, ``ET_CLOSEDPOLYGON``, default arc tolerance) serves both
   offsets below. Pyclipper itself returns integer paths (**rounding #2**, inside Clipper).
4. ``shrunk = Execute(-D)``. Empty: the word has no kernel and is *ignored*:
   ``fillPoly(prob_mask, np.round(P) as int32, 0)``; step 5 is skipped for it. Otherwise every
   returned path is filled into ``prob_map`` with its own ``fillPoly`` call (one call with several
   overlapping paths would fill even-odd and punch holes).
5. ``dilated = Execute(+D)``. Per returned path ``Q``: ``fillPoly(thresh_mask, Q, 1)``; the box is
   ``Q``'s integer extents; the polygon is shifted to box-relative float64 coordinates
   ``P - (xmin, ymin)`` and box pixel ``(i, j)`` sits at ``(x, y) = (j, i)`` (exact integers).
   For each edge ``(p1, p2)`` of ``P`` the MhLiao/DB "distance" is evaluated in float64, with
   exactly this operation order (so that any IEEE-754 implementation agrees bit for bit)::

       d1 = (x - p1x)*(x - p1x) + (y - p1y)*(y - p1y)       # likewise d2 for p2
       d  = (p1x - p2x)*(p1x - p2x) + (p1y - p2y)*(p1y - p2y)
       cosin = ((d - d1) - d2) / (2 * sqrt(d1 * d2))
       square_sin = 1 - cosin*cosin, NaN -> 0, negative -> 0
       dist = sqrt(((d1 * d2) * square_sin) / d);  where cosin < 0: dist = sqrt(min(d1, d2))

   This is *not* the exact point-to-segment distance: where the angle at the pixel is acute
   (``cosin < 0``) it is the distance to the nearer end point, elsewhere the distance to the
   edge's line. A pixel on a vertex gives ``0/0`` and gets ``dist = 0``; a pixel on the edge's
   line can give a ``square_sin`` a rounding error below zero, which is clamped to 0 (the numpy
   reference would produce NaN there and silently drop the pixel). ``m = min_k clip(dist_k / D,
   0, 1)``; **rounding #3**: ``value = float32(1 - m)``; ``thresh_map = fmax(thresh_map, value)`` on
   the part of the box that lies on the canvas.
6. After all polygons, **rounding #4**: ``thresh_map = thresh_map * f32(thresh_max - thresh_min) +
   f32(thresh_min)`` in float32 arithmetic (each operation rounded to float32, as numpy does for a
   float32 array and Python float scalars), then clipped to ``[f32(thresh_min), f32(thresh_max)]``:
   the float32 sum can overshoot by one ulp (``0.4f + 0.3f == 0.70000005f``), and the clip keeps the
   documented range exact.

The per-polygon geometry (steps 1-4: :func:`normalize_polygon`, :func:`offset_distance`,
:func:`offset_polygon`) is kept in small functions so that a compiled border kernel can reuse it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt
import pyclipper
from shapely.geometry import Polygon

__all__ = [
    "DBTargets",
    "PolygonGeometry",
    "border_values",
    "make_db_targets",
    "normalize_polygon",
    "offset_distance",
    "offset_polygon",
    "polygon_geometry",
    "validate_target_params",
]

FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]

MAX_COORDINATE = 2**30  # |x|, |y| limit in pixels; rounded vertices and offsets stay in int32


@dataclass(frozen=True, slots=True)
class DBTargets:
    """The four DB target maps of one canvas, each float32 ``(H, W)``.

    Args:
        prob_map: 1 inside the shrunk text kernels, else 0.
        prob_mask: 0 where a word too small to have a kernel is ignored, else 1.
        thresh_map: border map scaled to ``[thresh_min, thresh_max]``.
        thresh_mask: 1 inside the dilated polygons (where the border loss applies), else 0.
    """

    prob_map: Float32Array
    prob_mask: Float32Array
    thresh_map: Float32Array
    thresh_mask: Float32Array


@dataclass(frozen=True, slots=True)
class PolygonGeometry:
    """Per-polygon geometry shared by every border-map kernel (steps 1-4 of the module docstring).

    Args:
        polygon: normalised vertices, float64 ``(N, 2)``, ``N >= 3``, canvas pixels.
        distance: offset distance ``D`` in pixels (``> 0``).
        rounded: ``np.round(polygon)`` as int32 ``(N, 2)``: the pyclipper subject and the shape
            filled into ``prob_mask`` when the word is ignored.
        shrunk: paths of the ``-D`` offset, int32 ``(M, 2)`` each; empty when the word is ignored.
        dilated: paths of the ``+D`` offset (int32); empty when the word is ignored (not computed).
    """

    polygon: FloatArray
    distance: float
    rounded: IntArray
    shrunk: list[IntArray]
    dilated: list[IntArray]

    @property
    def ignored(self) -> bool:
        """True when the shrink is empty: the word is masked out of the probability loss."""
        return not self.shrunk


def validate_target_params(shrink_ratio: float, thresh_min: float, thresh_max: float) -> None:
    """``ValueError`` unless ``0 < shrink_ratio < 1`` and ``0 <= thresh_min < thresh_max <= 1``."""
    if not 0.0 < shrink_ratio < 1.0:
        raise ValueError(f"shrink_ratio must be in (0, 1), got {shrink_ratio!r}")
    if not 0.0 <= thresh_min < thresh_max <= 1.0:
        raise ValueError(
            "thresholds must satisfy 0 <= thresh_min < thresh_max <= 1, got "
            f"thresh_min={thresh_min!r}, thresh_max={thresh_max!r}"
        )


def normalize_polygon(points: npt.ArrayLike, index: int = 0) -> FloatArray | None:
    """Float64 ``(N, 2)`` copy without consecutive duplicates or a closing copy of the first vertex.

    Returns ``None`` when fewer than 3 distinct vertices remain. ``index`` only names the polygon in
    errors: a wrong shape or a non-finite coordinate raises ``ValueError``.
    """
    poly = np.array(points, dtype=np.float64)
    if poly.ndim != 2 or poly.shape[1] != 2:
        raise ValueError(
            f"polygon {index}: expected an (N, 2) array of (x, y), got shape {poly.shape}"
        )
    if not np.isfinite(poly).all():
        raise ValueError(f"polygon {index}: non-finite coordinates {poly.tolist()}")
    if poly.size and np.abs(poly).max() > MAX_COORDINATE:
        # cv2.fillPoly takes int32 points: refuse rather than wrap around silently.
        raise ValueError(
            f"polygon {index}: coordinates beyond +-{MAX_COORDINATE} px {poly.tolist()}"
        )
    if len(poly) > 1:
        keep = np.empty(len(poly), dtype=bool)
        keep[0] = True
        np.any(poly[1:] != poly[:-1], axis=1, out=keep[1:])
        poly = poly[keep]
        # With consecutive duplicates gone, at most one trailing vertex can equal the first.
        if len(poly) > 1 and (poly[-1] == poly[0]).all():
            poly = poly[:-1]
    return poly if len(poly) >= 3 else None


def offset_distance(polygon: FloatArray, shrink_ratio: float) -> float | None:
    """``D = A * (1 - r**2) / L`` of a normalised polygon; ``None`` when its area is not > 0."""
    shape = Polygon(polygon)
    area = float(shape.area)
    if not area > 0.0:
        return None
    return area * (1.0 - shrink_ratio**2) / float(shape.length)


def offset_polygon(rounded: IntArray, distance: float) -> tuple[list[IntArray], list[IntArray]]:
    """``(shrunk, dilated)``: pyclipper ``JT_ROUND`` offsets of an integer polygon by ``-D``/``+D``.

    ``dilated`` is left empty when the shrink is empty: an ignored word gets no border.
    """
    offset = pyclipper.PyclipperOffset()
    offset.AddPath(
        [(int(x), int(y)) for x, y in rounded.tolist()],
        pyclipper.JT_ROUND,
        pyclipper.ET_CLOSEDPOLYGON,
    )
    shrunk = [np.asarray(path, dtype=np.int32) for path in offset.Execute(-distance)]
    dilated: list[IntArray] = []
    if shrunk:
        dilated = [np.asarray(path, dtype=np.int32) for path in offset.Execute(distance)]
    return shrunk, dilated


def polygon_geometry(
    points: npt.ArrayLike, shrink_ratio: float, index: int = 0
) -> PolygonGeometry | None:
    """Steps 1-4 for one polygon; ``None`` for a degenerate polygon (skipped entirely)."""
    polygon = normalize_polygon(points, index)
    if polygon is None:
        return None
    distance = offset_distance(polygon, shrink_ratio)
    if distance is None:
        return None
    rounded = np.round(polygon).astype(np.int32)
    shrunk, dilated = offset_polygon(rounded, distance)
    return PolygonGeometry(polygon, distance, rounded, shrunk, dilated)


def border_values(
    polygon: FloatArray, distance: float, xs: FloatArray, ys: FloatArray
) -> Float32Array:
    """``float32(1 - min_k clip(dist_k / D, 0, 1))`` on the grid ``ys x xs``, shape ``(h, w)``.

    ``polygon`` and the grid are in the same (box-relative) float64 frame; see step 5 of the module
    docstring for the exact arithmetic. All edges are evaluated at once as ``(E, h, w)`` arrays.
    """
    p1 = polygon
    p2 = np.roll(polygon, -1, axis=0)
    # Squared coordinate differences are separable: (E, w) and (E, h), broadcast to (E, h, w).
    dx1 = xs[None, :] - p1[:, 0:1]
    dy1 = ys[None, :] - p1[:, 1:2]
    dx2 = xs[None, :] - p2[:, 0:1]
    dy2 = ys[None, :] - p2[:, 1:2]
    d1 = (dx1 * dx1)[:, None, :] + (dy1 * dy1)[:, :, None]
    d2 = (dx2 * dx2)[:, None, :] + (dy2 * dy2)[:, :, None]
    ex = p1[:, 0] - p2[:, 0]
    ey = p1[:, 1] - p2[:, 1]
    d = (ex * ex + ey * ey)[:, None, None]
    prod = d1 * d2
    # In-place ufuncs: the same operations in the same order, without a temporary per step.
    # prod == 0 only on a vertex, where cosin is 0/0 = NaN; fmax maps NaN and rounding negatives
    # (pixels on an edge line) to 0.
    cosin = d - d1
    cosin -= d2
    with np.errstate(invalid="ignore", divide="ignore"):
        cosin /= 2.0 * np.sqrt(prod)
    dist = cosin * cosin
    np.subtract(1.0, dist, out=dist)
    np.fmax(dist, 0.0, out=dist)
    dist *= prod
    dist /= d
    np.sqrt(dist, out=dist)
    # Acute angle at the pixel (cosin < 0; NaN compares False): distance to the nearer end point.
    nearer = np.minimum(d1, d2, out=d1)
    np.copyto(dist, np.sqrt(nearer, out=nearer), where=cosin < 0.0)
    dist /= distance
    nearest = np.clip(dist, 0.0, 1.0, out=dist).min(axis=0)
    return (1.0 - nearest).astype(np.float32)


def _check_out(out: DBTargets, height: int, width: int) -> None:
    for name in ("prob_map", "prob_mask", "thresh_map", "thresh_mask"):
        arr = getattr(out, name)
        if (
            not isinstance(arr, np.ndarray)
            or arr.shape != (height, width)
            or arr.dtype != np.float32
            or not arr.flags.c_contiguous
            or not arr.flags.writeable
        ):
            raise ValueError(
                f"out.{name} must be a writeable C-contiguous float32 array of shape "
                f"{(height, width)}, got {getattr(arr, 'dtype', type(arr))} "
                f"{getattr(arr, 'shape', '')}"
            )


def make_db_targets(
    polygons: Sequence[npt.ArrayLike],
    height: int,
    width: int,
    *,
    shrink_ratio: float = 0.4,
    thresh_min: float = 0.3,
    thresh_max: float = 0.7,
    out: DBTargets | None = None,
) -> DBTargets:
    """DB targets of one ``height x width`` canvas (semantics and rounding: module docstring).

    Args:
        polygons: word polygons, each ``(N, 2)`` float ``(x, y)`` in canvas pixels; may extend
            past the canvas. Degenerate ones (< 3 distinct vertices, zero area) are skipped.
        height: canvas height in pixels (``> 0``).
        width: canvas width in pixels (``> 0``).
        shrink_ratio: ``r`` in ``D = A(1 - r^2)/L``, in ``(0, 1)``. Default 0.4.
        thresh_min: threshold-map value far from any border. Default 0.3.
        thresh_max: threshold-map value on a border. Default 0.7.
        out: optional preallocated maps to fill in place (e.g. views into a batch array, so the
            collate function needs no copy); overwritten entirely.

    Returns:
        The four maps (``out`` itself when given).
    """
    if isinstance(height, bool) or int(height) != height or height <= 0:
        raise ValueError(f"height must be a positive integer, got {height!r}")
    if isinstance(width, bool) or int(width) != width or width <= 0:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    height, width = int(height), int(width)
    validate_target_params(shrink_ratio, thresh_min, thresh_max)
    if out is None:
        out = DBTargets(
            prob_map=np.zeros((height, width), np.float32),
            prob_mask=np.ones((height, width), np.float32),
            thresh_map=np.zeros((height, width), np.float32),
            thresh_mask=np.zeros((height, width), np.float32),
        )
    else:
        _check_out(out, height, width)
        out.prob_map.fill(0.0)
        out.prob_mask.fill(1.0)
        out.thresh_map.fill(0.0)
        out.thresh_mask.fill(0.0)

    for index, points in enumerate(polygons):
        geometry = polygon_geometry(points, shrink_ratio, index)
        if geometry is None:
            continue
        if geometry.ignored:
            cv2.fillPoly(out.prob_mask, [geometry.rounded], 0.0)
            continue
        for path in geometry.shrunk:
            cv2.fillPoly(out.prob_map, [path], 1.0)
        for path in geometry.dilated:
            _draw_border(out, geometry, path, height, width)

    scaled = out.thresh_map
    scaled *= np.float32(thresh_max - thresh_min)
    scaled += np.float32(thresh_min)
    np.clip(scaled, np.float32(thresh_min), np.float32(thresh_max), out=scaled)
    return out


def _draw_border(
    out: DBTargets, geometry: PolygonGeometry, path: IntArray, height: int, width: int
) -> None:
    """Step 5 for one dilated path: fill ``thresh_mask``, fmax border values into ``thresh_map``."""
    cv2.fillPoly(out.thresh_mask, [path], 1.0)
    xmin, ymin = (int(v) for v in path.min(axis=0))
    xmax, ymax = (int(v) for v in path.max(axis=0))
    # Only the on-canvas part of the box is evaluated.
    x0, x1 = max(xmin, 0), min(xmax, width - 1)
    y0, y1 = max(ymin, 0), min(ymax, height - 1)
    if x0 > x1 or y0 > y1:
        return
    relative = geometry.polygon - np.array([xmin, ymin], dtype=np.float64)
    xs = np.arange(x0 - xmin, x1 - xmin + 1, dtype=np.float64)
    ys = np.arange(y0 - ymin, y1 - ymin + 1, dtype=np.float64)
    values = border_values(relative, geometry.distance, xs, ys)
    region = out.thresh_map[y0 : y1 + 1, x0 : x1 + 1]
    np.fmax(values, region, out=region)

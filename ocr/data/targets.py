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

Implementation (same maps, faster): :func:`make_db_targets` runs steps 1-2 for all polygons at once
(one float64 conversion, one compiled pass, shapely's vectorised area/length: the same GEOS
computation as ``Polygon(P).area``), pyclipper and ``cv2.fillPoly`` per polygon and path, and step 5
in a compiled numba kernel (``ocr/data/_targets_kernel.py``: all edges fused per pixel, only where
an edge can matter) that also applies step 6 as it goes: the scaling is monotonic, so ``fmax`` of
scaled values equals the scaled ``fmax`` and ``thresh_map`` can start at ``f32(thresh_min)``. The
kernels compile on first use or in :func:`warm_up`, and numba caches them on disk. The
single-polygon functions (:func:`normalize_polygon`, :func:`offset_distance`,
:func:`offset_polygon`, :func:`polygon_geometry`) spell out steps 1-4 for one polygon.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

import cv2
import numpy as np
import numpy.typing as npt
import pyclipper
import shapely
from shapely.geometry import Polygon

from ocr.errors import ConfigError

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
    "warm_up",
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
        raise ConfigError(f"shrink_ratio must be in (0, 1), got {shrink_ratio!r}")
    if not 0.0 <= thresh_min < thresh_max <= 1.0:
        raise ConfigError(
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
    shrunk, dilated = _offset_paths(rounded.tolist(), distance)
    return (
        [np.asarray(path, dtype=np.int32) for path in shrunk],
        [np.asarray(path, dtype=np.int32) for path in dilated],
    )


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
    docstring for the exact arithmetic. Runs the compiled kernel that :func:`make_db_targets` uses.
    """
    kernel = _kernel()
    return kernel.border_grid(
        np.ascontiguousarray(polygon, dtype=np.float64),
        float(distance),
        np.ascontiguousarray(xs, dtype=np.float64),
        np.ascontiguousarray(ys, dtype=np.float64),
    )


def _check_out(out: DBTargets, height: int, width: int) -> None:
    for name in ("prob_map", "prob_mask", "thresh_map", "thresh_mask"):
        arr = getattr(out, name)
        # The 0/1 maps may be uint8 (a compact batch packs them into bits); thresh_map not.
        dtypes = (np.float32,) if name == "thresh_map" else (np.float32, np.uint8)
        if (
            not isinstance(arr, np.ndarray)
            or arr.shape != (height, width)
            or arr.dtype not in dtypes
            or not arr.flags.c_contiguous
            or not arr.flags.writeable
        ):
            kind = "float32" if name == "thresh_map" else "float32 or uint8"
            raise ValueError(
                f"out.{name} must be a writeable C-contiguous {kind} array of shape "
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
            collate function needs no copy); overwritten entirely. The three 0/1 maps may be
            uint8 there (same values).

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
        # One zeroed block for the four maps: one allocation instead of four, which numpy
        # (>= 4 MiB) backs with huge pages, and fresh zero pages need no fill.
        block = np.zeros((4, height, width), np.float32)
        out = DBTargets(block[0], block[1], block[2], block[3])
    else:
        _check_out(out, height, width)
        out.prob_map.fill(0.0)
        out.thresh_mask.fill(0.0)
    out.prob_mask.fill(1.0)
    low = np.float32(thresh_min)  # the scaled 0: the kernel fmaxes scaled values into it
    out.thresh_map.fill(low)

    prepared = _prepare_polygons(polygons, shrink_ratio)
    kernel = _kernel()
    # Paths are kept as flat coordinate lists (ints are not tracked by the garbage collector;
    # holding pyclipper's nested lists would trigger collections) plus their lengths.
    shrunk = _FlatPaths()
    dilated = _FlatPaths()
    owners: list[int] = []
    ignored: list[int] = []
    offset = pyclipper.PyclipperOffset()  # reused: Clear() is cheaper than a new instance
    starts = prepared.starts.tolist()
    for k, distance in enumerate(prepared.distances.tolist()):
        subject = prepared.subjects[starts[k] : starts[k + 1]]
        shrunk_k, dilated_k = _offset_paths(subject, distance, offset)
        if not shrunk_k:
            ignored.append(k)
            continue
        shrunk.add(shrunk_k)
        dilated.add(dilated_k)
        owners += [k] * len(dilated_k)

    # Every fill of one map writes the same constant, so they can be grouped by map; each path
    # still gets its own fillPoly call (one call with several paths would fill even-odd).
    for k in ignored:
        cv2.fillPoly(out.prob_mask, [prepared.rounded[starts[k] : starts[k + 1]]], 0.0)
    points, path_starts = shrunk.arrays()
    for begin, end in itertools.pairwise(path_starts.tolist()):
        cv2.fillPoly(out.prob_map, [points[begin:end]], 1.0)
    points, path_starts = dilated.arrays()
    for begin, end in itertools.pairwise(path_starts.tolist()):
        cv2.fillPoly(out.thresh_mask, [points[begin:end]], 1.0)
    if owners:
        kernel.draw_borders(
            out.thresh_map,
            prepared.vertices,
            prepared.starts,
            prepared.distances,
            points,
            path_starts,
            np.array(owners, dtype=np.int64),
            np.float32(thresh_max - thresh_min),
            low,
            np.float32(thresh_max),
        )
    return out


@dataclass(frozen=True, slots=True)
class _Prepared:
    """Steps 1-2 and the rounding of step 3 for every kept polygon, stored back to back.

    Args:
        vertices: normalised vertices, float64 ``(T, 2)``; polygon ``k`` is rows
            ``starts[k]:starts[k + 1]``.
        starts: int64 ``(K + 1,)`` row offsets into ``vertices``.
        distances: offset distance ``D`` per polygon, float64 ``(K,)``.
        rounded: ``np.round(vertices)`` as int32 ``(T, 2)``.
        subjects: ``rounded`` as a list of ``[x, y]`` int lists (pyclipper's input).
    """

    vertices: FloatArray
    starts: npt.NDArray[np.int64]
    distances: FloatArray
    rounded: IntArray
    subjects: list[list[int]]


def _prepare_polygons(polygons: Sequence[npt.ArrayLike], shrink_ratio: float) -> _Prepared:
    """:func:`normalize_polygon` and :func:`offset_distance` for all polygons in a few array calls.

    Degenerate polygons are dropped. Any invalid input is re-checked polygon by polygon so that
    the error is the one :func:`normalize_polygon` raises for the first bad polygon.
    """
    counts: list[int] = []
    try:
        if all(
            type(points) is np.ndarray
            and points.ndim == 2
            and points.shape[1] == 2
            and points.dtype.kind in "biuf"
            for points in polygons
        ):
            # Usual case, (N, 2) arrays: one conversion for all (a third of one per polygon).
            stacked = cast("list[npt.NDArray[Any]]", polygons)
            counts = [len(points) for points in stacked]
            flat = np.concatenate(stacked, dtype=np.float64) if counts else np.empty((0, 2))
        else:
            arrays = [np.asarray(points, dtype=np.float64) for points in polygons]
            if any(poly.ndim != 2 or poly.shape[1] != 2 for poly in arrays):
                raise ValueError
            counts = [len(poly) for poly in arrays]
            flat = np.concatenate(arrays)
        if not np.isfinite(flat).all() or (flat.size and np.abs(flat).max() > MAX_COORDINATE):
            raise ValueError
    except (ValueError, TypeError):
        for index, points in enumerate(polygons):
            normalize_polygon(points, index)
        raise  # not reached: normalize_polygon raised for the same input
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    vertices, starts = _kernel().normalize_flat(np.ascontiguousarray(flat), starts)
    sizes = np.diff(starts)
    enough = sizes >= 3
    if not enough.all():
        vertices = vertices[np.repeat(enough, sizes)]
        sizes = sizes[enough]
    # shapely's area and length, vectorised: the same GEOS computation as Polygon(p).area/.length.
    shapes = shapely.polygons(
        shapely.linearrings(vertices, indices=np.repeat(np.arange(len(sizes)), sizes))
    )
    area = shapely.area(shapes)
    distances = area * (1.0 - shrink_ratio**2) / shapely.length(shapes)
    positive = area > 0.0
    if not positive.all():
        vertices = vertices[np.repeat(positive, sizes)]
        sizes = sizes[positive]
        distances = distances[positive]
    starts = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    rounded = np.round(vertices).astype(np.int32)
    return _Prepared(np.ascontiguousarray(vertices), starts, distances, rounded, rounded.tolist())


def _offset_paths(
    subject: list[list[int]], distance: float, offset: pyclipper.PyclipperOffset | None = None
) -> tuple[list[list[list[int]]], list[list[list[int]]]]:
    """pyclipper ``(Execute(-D), Execute(+D))`` of one integer polygon; no dilation if no shrink.

    ``offset``: an instance to reuse (cleared here; its arc tolerance must be the default).
    """
    if offset is None:
        offset = pyclipper.PyclipperOffset()
    else:
        offset.Clear()
    offset.AddPath(subject, pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    shrunk = offset.Execute(-distance)
    return shrunk, (offset.Execute(distance) if shrunk else [])


class _FlatPaths:
    """Integer paths collected back to back: flat ``x, y, x, y, ...`` ints and path lengths."""

    __slots__ = ("coordinates", "lengths")

    def __init__(self) -> None:
        self.coordinates: list[int] = []
        self.lengths: list[int] = []

    def add(self, paths: list[list[list[int]]]) -> None:
        for path in paths:
            self.lengths.append(len(path))
            self.coordinates += itertools.chain.from_iterable(path)

    def arrays(self) -> tuple[IntArray, npt.NDArray[np.int64]]:
        """int32 ``(T, 2)`` points and int64 row offsets ``(paths + 1,)``."""
        starts = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=starts[1:])
        return np.array(self.coordinates, dtype=np.int32).reshape(-1, 2), starts


def _kernel() -> ModuleType:
    """The compiled kernels, imported and compiled (or loaded from numba's cache) on first use:
    inference never pays for numba's import."""
    from ocr.data import _targets_kernel

    _targets_kernel.warm_up()  # a flag check once done
    return _targets_kernel


def warm_up() -> None:
    """Compile the target kernels now (or load them from numba's disk cache).

    Call in the main process before DataLoader workers start (forked workers then inherit the
    machine code); otherwise the first call of :func:`make_db_targets` in each process does it.
    """
    _kernel()

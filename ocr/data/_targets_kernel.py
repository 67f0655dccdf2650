"""Compiled (numba) kernels behind :mod:`ocr.data.targets`.

Bit-exactness rules (the maps must equal the oracle's to the last bit):

- No ``fastmath``: every floating-point operation is the plain IEEE-754 one, in the order written in
  the docstring of :mod:`ocr.data.targets` (no reassociation, no FMA contraction, which LLVM only
  does with fast-math flags).
- ``error_model="numpy"``: a division by zero gives inf/NaN as in numpy instead of raising.
- NaN and clamping behave like the numpy ufuncs of the contract (``fmax``, ``clip``, ``min``),
  spelled out with comparisons because numba's ``min``/``max`` builtins treat NaN differently.
- Per pixel, ``sqrt`` and the division by ``D`` are applied once to the smallest squared distance
  instead of once per edge: both are correctly rounded, hence monotonically non-decreasing, so
  ``min_k clip(sqrt(q_k) / D, 0, 1) == clip(sqrt(min_k q_k) / D, 0, 1)`` bit for bit (a NaN
  propagates through both forms; with ``D == 0`` the smallest ``q`` decides between NaN and inf in
  both). The per-edge ``cosin`` is still computed exactly as written.
- An edge is evaluated only in a band around its line; outside it, a rounding-error bound proves
  that the edge cannot change the pixel (see :func:`_band_geometry`). No other shortcut is taken.
- Step 6 (scaling to ``[thresh_min, thresh_max]``) is monotonic, so it is applied to each value
  before the ``fmax`` instead of to the whole map afterwards: the same float32 operations, one
  pass fewer.

Compiled with ``cache=True``: numba writes the machine code to ``NUMBA_CACHE_DIR`` if set, else to
``__pycache__`` next to this file, else to the user's cache directory, so spawned DataLoader
workers and later runs load it instead of compiling. If no location is writable, or a cache file is
damaged, the kernels are compiled per process instead, with one warning (:func:`warm_up`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

__all__ = ["border_grid", "draw_borders", "normalize_flat", "warm_up"]

# fastmath stays off (see the module docstring); nogil lets a thread pool run kernels in parallel.
_OPTIONS: dict[str, Any] = {"error_model": "numpy", "nogil": True}
_LANES = 8  # float64 lanes of an AVX-512 register (a multiple of narrower vector widths)
_KERNELS: list[str] = []  # names of the functions compiled by _jit (with the disk cache)
_uncached_warned = False
_ready = False


def _warn_uncached(reason: str) -> None:
    """One warning per process: the kernels work, but each process compiles them anew."""
    global _uncached_warned
    if not _uncached_warned:
        _uncached_warned = True
        warnings.warn(
            f"ocr.data.targets: numba's disk cache is unusable ({reason}); the target kernels are "
            "compiled in every process instead (a few seconds). Point NUMBA_CACHE_DIR at a "
            "writable directory (or delete a damaged cache there or in ocr/data/__pycache__).",
            RuntimeWarning,
            stacklevel=3,
        )


def _jit(func: Callable[..., Any]) -> Any:
    """``numba.njit(cache=True)``, or without the disk cache when no location is writable."""
    _KERNELS.append(func.__name__)
    try:
        return numba.njit(cache=True, **_OPTIONS)(func)
    except RuntimeError as err:  # numba: "cannot cache function ...: no locator available"
        _warn_uncached(str(err))
        return numba.njit(cache=False, **_OPTIONS)(func)


@_jit
def normalize_flat(points, starts):
    """Step 1 for many polygons stored back to back: float64 ``points (T, 2)``, polygon ``k`` at
    rows ``starts[k]:starts[k + 1]``. Drops consecutive duplicate vertices and a last vertex equal
    to the first; returns ``(clean (T', 2), clean_starts (K + 1,))`` (a polygon may end up with
    fewer than 3 vertices: the caller skips it)."""
    count = starts.shape[0] - 1
    clean = np.empty_like(points)
    clean_starts = np.empty_like(starts)
    n = 0
    for k in range(count):
        clean_starts[k] = n
        first = n
        for t in range(starts[k], starts[k + 1]):
            x = points[t, 0]
            y = points[t, 1]
            if n > first and clean[n - 1, 0] == x and clean[n - 1, 1] == y:
                continue
            clean[n, 0] = x
            clean[n, 1] = y
            n += 1
        if (
            n - first > 1
            and clean[n - 1, 0] == clean[first, 0]
            and clean[n - 1, 1] == clean[first, 1]
        ):
            n -= 1
    clean_starts[count] = n
    return clean[:n].copy(), clean_starts


def _inline(func: Callable[..., Any]) -> Any:
    """A helper inlined into the kernels at numba IR level (so that loops around it vectorise)."""
    return numba.njit(inline="always", **_OPTIONS)(func)


@_inline
def _edge_sq(d1, d2, d):
    """Squared MhLiao/DB "distance" of one pixel to one edge, exactly as the contract spells it:
    ``sqrt`` of this (then ``/ D``) is ``dist``. ``d1``/``d2``: squared distances to the end
    points, ``d``: squared edge length. Branch-free (both sides, then a select)."""
    prod = d1 * d2
    cosin = ((d - d1) - d2) / (2.0 * math.sqrt(prod))
    square_sin = 1.0 - cosin * cosin
    # np.fmax(., 0): NaN (0/0, pixel on a vertex) and rounding negatives (on the line) -> 0.
    square_sin = square_sin if square_sin > 0.0 else 0.0
    obtuse = (prod * square_sin) / d
    acute = d1 if d1 < d2 else d2  # np.minimum; no NaN can occur here
    return acute if cosin < 0.0 else obtuse


@_inline
def _min_into(nearest, j, q):
    """``nearest[j] = min(nearest[j], q)`` with np.min's NaN propagation (a NaN wins)."""
    m = nearest[j]
    nearest[j] = q if (q < m or q != q) else m


@_jit
def _band_geometry(rel, distance, xs, ys, edge, band):
    """Per edge, the band around its line outside which it cannot change a pixel's value, as a
    row ``(kind, x1, y1, half, slope)`` of ``band (N, 5)``. ``kind`` 0: no band (the bound below
    is not established; the edge is evaluated everywhere); 1: horizontal edge, a row at ``y`` is
    in the band iff ``|y - y1| < half``; 2: the band meets the row at ``y`` in
    ``x1 + (y - y1) * slope +- half``. ``half`` is already widened by a pixel.

    Why skipping is exact: the value is ``F(min_k q_k)`` with ``F(q) = float32(1 - clip(
    sqrt(q) / D, 0, 1))`` non-increasing, ``>= 0`` and ``0`` for ``q >= T = D^2 (1 + 1e-6)``
    (the rounded ``sqrt`` and ``/ D`` are then ``>= 1``). An edge whose ``q >= T`` at a pixel thus
    never raises the pixel's value above 0, and a value of 0 never changes ``thresh_map`` (all
    values are ``>= 0``); a skipped ``q`` is finite (no NaN to propagate) because ``d > 0`` and
    ``d1 * d2`` is finite. Rounding analysis of :func:`_edge_sq` (``u = 2**-53``, ``W = d + d1 +
    d2``, ``g`` the exact distance from the pixel to the edge's line): the obtuse side gives
    ``q >= g^2 (1 - 16u) - 16u W^2 / d`` (the cancellation in ``d - d1 - d2`` is what ``W^2 / d``
    accounts for), the acute side ``min(d1, d2) >= g^2 (1 - 4u)``. So ``g^2 >= G = T (1 + 1e-9) +
    1e-13 W^2 / d`` (50x the error term) implies ``q >= T``; ``R`` adds a relative 1e-6 and the
    row loop a whole pixel to cover the rounding of the band's own arithmetic. The guards keep
    every quantity far from overflow, underflow and precision loss; outside them nothing is
    skipped.
    """
    n = rel.shape[0]
    band[:] = 0.0
    w = xs.shape[0]
    if w == 0 or ys.shape[0] == 0 or not (1e-50 < distance < 1e50):
        return
    for j in range(w):  # _band_columns maps column j to x = xs[0] + j
        if xs[j] != xs[0] + j:
            return
    span = max(abs(xs[0]), abs(xs[w - 1]))  # largest coordinate magnitude in the frame
    for i in range(ys.shape[0]):
        span = max(span, abs(ys[i]))
    for k in range(n):
        span = max(span, abs(rel[k, 0]), abs(rel[k, 1]))
    threshold = distance * distance * (1.0 + 1e-6)
    if not (span <= 1e7 and span <= 1e8 * math.sqrt(threshold)):
        return
    bound_w = 24.0 * span * span  # >= d + d1 + d2 anywhere in the frame
    for k in range(n):
        d = edge[k]
        if not d > 1e-200:
            continue
        k2 = k + 1 if k + 1 < n else 0
        g2 = threshold * (1.0 + 1e-9) + 1e-13 * bound_w * bound_w / d
        radius = math.sqrt(g2) * math.sqrt(d) * (1.0 + 1e-6) + 1e-6  # in |cross| units
        ex = rel[k2, 0] - rel[k, 0]
        ey = rel[k2, 1] - rel[k, 1]
        band[k, 1] = rel[k, 0]
        band[k, 2] = rel[k, 1]
        if ey == 0.0:
            # cross = -(y - y1) * ex: in the band iff |y - y1| < radius / |ex| (a pixel wider).
            band[k, 0] = 1.0
            band[k, 3] = radius / abs(ex) * (1.0 + 1e-6) + 1.0
            continue
        half = radius / abs(ey) + 1.0
        slope = ex / ey
        if half < 1e12 and abs(slope) * span < 1e12:  # centre and half accurate to << 1 pixel
            band[k, 0] = 2.0
            band[k, 3] = half
            band[k, 4] = slope


@_inline
def _band_columns(band, k, x0, y, wp):
    """Columns ``[lo, hi)`` (whole vectors) of the row at ``y`` that may lie in edge ``k``'s
    band (``band[k]`` from :func:`_band_geometry`); the other columns are a pixel further out."""
    kind = band[k, 0]
    if kind == 0.0:  # no band: evaluate everywhere
        return 0, wp
    if kind == 1.0:  # horizontal edge: the whole row is in or out
        return (0, wp) if abs(y - band[k, 2]) < band[k, 3] else (0, 0)
    centre = band[k, 1] + (y - band[k, 2]) * band[k, 4]
    lo = math.floor(centre - band[k, 3] - x0)
    hi = math.ceil(centre + band[k, 3] - x0) + 1
    lo = min(max(lo, 0), wp) // _LANES * _LANES
    hi = min(max(hi, lo), wp)
    return lo, min((hi + _LANES - 1) // _LANES * _LANES, wp)


@_jit
def _accumulate(rel, distance, xs, ys, out, row0, col0, keep_max, span, low, high, scratch):
    """Border values of the box-relative polygon ``rel (N, 2)`` on the grid ``ys x xs`` into
    ``out[row0 + i, col0 + j]``: overwrite with the raw values, or (``keep_max``) ``fmax`` the
    values scaled as in step 6 (``min(max(v * span + low, low), high)`` in float32) with what is
    there. Scaling is monotonic, so ``fmax`` of scaled values is the scaled ``fmax``: the map can
    start at ``low`` and needs no separate scaling pass. ``scratch``: float64 buffer of at least
    :func:`_scratch_size` elements (allocated once per call of the caller, not per box).

    Row by row: the squared distances of the row's pixels to every vertex, then per edge the
    branch-free formula, which LLVM vectorises, over the columns of the edge's band (see
    :func:`_band_geometry`: elsewhere the edge cannot change the value). Restricting the formula to
    the circle with the edge as diameter (where ``cosin >= 0``) measured slower.
    """
    n = rel.shape[0]
    w = xs.shape[0]
    h = ys.shape[0]
    # Row buffers are padded to whole vectors so that no loop ends in a scalar remainder (which
    # would evaluate the full formula one pixel at a time); pad columns repeat the last one.
    wp = (w + _LANES - 1) // _LANES * _LANES
    # Squared coordinate differences per vertex are separable: (N, w) and (N, h), not (N, h, w).
    used = 0
    xsq = scratch[used : used + n * wp].reshape((n, wp))
    used += n * wp
    vertex_sq = scratch[used : used + n * wp].reshape((n, wp))  # per row: pixel to each vertex
    used += n * wp
    ysq = scratch[used : used + n * h].reshape((n, h))
    used += n * h
    nearest = scratch[used : used + wp]  # per row: smallest squared "distance" over the edges
    used += wp
    edge = scratch[used : used + n]
    used += n
    band = scratch[used : used + 5 * n].reshape((n, 5))
    for k in range(n):
        for j in range(wp):
            dx = xs[min(j, w - 1)] - rel[k, 0]
            xsq[k, j] = dx * dx
        for i in range(h):
            dy = ys[i] - rel[k, 1]
            ysq[k, i] = dy * dy
    for k in range(n):
        k2 = k + 1 if k + 1 < n else 0
        ex = rel[k, 0] - rel[k2, 0]
        ey = rel[k, 1] - rel[k2, 1]
        edge[k] = ex * ex + ey * ey
    _band_geometry(rel, distance, xs, ys, edge, band)
    x0 = xs[0] if w > 0 else 0.0
    for i in range(h):
        for k in range(n):
            yk = ysq[k, i]
            xk = xsq[k]
            vk = vertex_sq[k]
            for j in range(wp):
                vk[j] = xk[j] + yk
        nearest[:] = np.inf
        for k in range(n):
            k2 = k + 1 if k + 1 < n else 0
            lo, hi = _band_columns(band, k, x0, ys[i], wp)
            d = edge[k]
            # Slices indexed from 0: numba's negative-index wraparound then folds away, which
            # LLVM needs in order to vectorise the loop.
            first = vertex_sq[k, lo:hi]
            second = vertex_sq[k2, lo:hi]
            near = nearest[lo:hi]
            for j in range(hi - lo):
                _min_into(near, j, _edge_sq(first[j], second[j], d))
        for j in range(wp):
            dist = math.sqrt(nearest[j]) / distance
            # np.clip(., 0, 1): dist >= 0 here, or NaN, which stays NaN.
            nearest[j] = 1.0 if dist > 1.0 else (0.0 if dist < 0.0 else dist)
        row = out[row0 + i, col0 : col0 + w]
        if keep_max:
            for j in range(w):
                value = np.float32(1.0 - nearest[j]) * span + low  # float32 operations
                value = low if value < low else (high if value > high else value)  # NaN stays
                old = row[j]
                row[j] = value if (value > old or old != old) else old  # np.fmax
        else:
            for j in range(w):
                row[j] = np.float32(1.0 - nearest[j])


@_jit
def _scratch_size(n, w, h):
    """float64 elements of scratch that :func:`_accumulate` needs for ``n`` vertices, ``h x w``."""
    wp = (w + _LANES - 1) // _LANES * _LANES
    return n * (2 * wp + h + 6) + wp


@_jit
def border_grid(rel, distance, xs, ys):
    """``float32 (len(ys), len(xs))`` border values of ``rel`` (same frame as the grid)."""
    h = ys.shape[0]
    w = xs.shape[0]
    out = np.empty((h, w), dtype=np.float32)
    scratch = np.empty(_scratch_size(rel.shape[0], w, h))
    one = np.float32(1.0)
    _accumulate(rel, distance, xs, ys, out, 0, 0, False, one, np.float32(0.0), one, scratch)
    return out


@_jit
def draw_borders(
    thresh_map, vertices, starts, distances, path_points, path_starts, path_owner, span, low, high
):
    """Steps 5 and 6 for every dilated path: ``fmax`` the border values, scaled by the float32
    ``span``, ``low`` and ``high`` of step 6, into ``thresh_map (H, W)`` float32, which must
    start at ``low`` (the scaled 0).

    Path ``q`` is ``path_points[path_starts[q]:path_starts[q + 1]]`` (int32 ``(x, y)``), dilated
    from polygon ``path_owner[q]``: ``vertices[starts[o]:starts[o + 1]]`` with offset distance
    ``distances[o]``. Only the on-canvas part of each path's integer bounding box is evaluated.
    """
    height, width = thresh_map.shape
    count = path_owner.shape[0]
    # Clipped boxes first, to size the buffers once for all paths.
    boxes = np.empty((count, 6), dtype=np.int64)  # xmin, ymin, x0, x1, y0, y1
    largest = 0
    most_vertices = 0
    widest = 0
    tallest = 0
    for q in range(count):
        a = path_starts[q]
        b = path_starts[q + 1]
        xmin = int(path_points[a, 0])
        xmax = xmin
        ymin = int(path_points[a, 1])
        ymax = ymin
        for t in range(a + 1, b):
            x = int(path_points[t, 0])
            y = int(path_points[t, 1])
            xmin = min(xmin, x)
            xmax = max(xmax, x)
            ymin = min(ymin, y)
            ymax = max(ymax, y)
        boxes[q, 0] = xmin
        boxes[q, 1] = ymin
        boxes[q, 2] = max(xmin, 0)
        boxes[q, 3] = min(xmax, width - 1)
        boxes[q, 4] = max(ymin, 0)
        boxes[q, 5] = min(ymax, height - 1)
        w = boxes[q, 3] - boxes[q, 2] + 1
        h = boxes[q, 5] - boxes[q, 4] + 1
        if w > 0 and h > 0:
            n = starts[path_owner[q] + 1] - starts[path_owner[q]]
            largest = max(largest, _scratch_size(n, w, h))
            most_vertices = max(most_vertices, n)
            widest = max(widest, w)
            tallest = max(tallest, h)
    scratch = np.empty(largest)
    rel_buffer = np.empty((most_vertices, 2))
    xs_buffer = np.empty(widest)
    ys_buffer = np.empty(tallest)
    for q in range(count):
        xmin, ymin, x0, x1, y0, y1 = boxes[q]
        if x0 > x1 or y0 > y1:  # entirely off the canvas
            continue
        owner = path_owner[q]
        s = starts[owner]
        n = starts[owner + 1] - s
        rel = rel_buffer[:n]
        for k in range(n):
            rel[k, 0] = vertices[s + k, 0] - np.float64(xmin)
            rel[k, 1] = vertices[s + k, 1] - np.float64(ymin)
        xs = xs_buffer[: x1 - x0 + 1]
        for j in range(x1 - x0 + 1):
            xs[j] = np.float64(x0 - xmin + j)
        ys = ys_buffer[: y1 - y0 + 1]
        for i in range(y1 - y0 + 1):
            ys[i] = np.float64(y0 - ymin + i)
        _accumulate(
            rel, distances[owner], xs, ys, thresh_map, y0, x0, True, span, low, high, scratch
        )


def _exercise() -> None:
    """Call every kernel once with the argument types that :mod:`ocr.data.targets` passes."""
    square = np.array([[1.0, 1.0], [6.0, 1.0], [6.0, 5.0], [1.0, 5.0], [6.0, 5.0]])
    clean, starts = normalize_flat(square, np.array([0, 5], dtype=np.int64))
    grid = np.arange(8, dtype=np.float64)
    border_grid(clean, 2.0, grid, grid)
    thresh_map = np.full((8, 8), 0.3, dtype=np.float32)
    path = np.array([[0, 0], [7, 0], [7, 6], [0, 6]], dtype=np.int32)
    draw_borders(
        thresh_map,
        clean,
        starts,
        np.array([2.0]),
        path,
        np.array([0, 4], dtype=np.int64),
        np.array([0], dtype=np.int64),
        np.float32(0.4),
        np.float32(0.3),
        np.float32(0.7),
    )


def warm_up() -> None:
    """Compile (or load from the disk cache) every kernel for the argument types used at run time.

    Idempotent and cheap once done. In the main process before DataLoader workers start, forked
    workers inherit the machine code, so the first batches do not wait for the compiler. A cache
    that cannot be read (a damaged file) costs one warning and an uncached compilation, never an
    error.
    """
    global _ready
    if _ready:
        return
    try:
        _exercise()
    except Exception as err:  # numba raises whatever unpickling a damaged cache file raises
        # Rebind every kernel uncached; callers look kernels up in this module's globals, so
        # they compile against the new ones. If that fails too, the error is not the cache's.
        module = globals()
        for name in _KERNELS:
            module[name] = numba.njit(cache=False, **_OPTIONS)(module[name].py_func)
        _exercise()
        _warn_uncached(f"{type(err).__name__}: {err}")
    _ready = True

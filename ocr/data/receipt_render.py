"""Rendering one synthetic receipt photo (:mod:`ocr.data.synth`): the receipt's knobs
(:class:`ReceiptParams`), the layout of its lines (:mod:`ocr.data.receipt_content`) on paper,
word boxes from the rendered ink, the paper and background textures, the perspective warp,
blur, noise and JPEG round trip. :func:`generate_receipt` is the public entry; the dataset
writer calls :func:`render_receipt` with validated parameters.

Only Pillow's built-in scalable font is used (``ImageFont.load_default(size=N)``), so nothing is
downloaded or read from system paths.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ocr.data.receipt_content import MIN_LINES, Line, pick, receipt_lines
from ocr.errors import ConfigError

__all__ = ["ReceiptParams", "generate_receipt", "render_receipt"]

# Coverage >= 25 % counts as ink for word boxes: the faint anti-aliasing fringe beyond it is
# invisible after compositing and blur, and boxes should hug what a reader sees.
_INK_MIN = 64


@dataclass(frozen=True)
class ReceiptParams:
    """Size, layout and distortion knobs of :func:`generate_receipt` (ranges are inclusive).

    Args:
        paper_width: (min, max) width of the paper in pixels, before rotation. Default (320, 480).
        paper_height: (min, max) target height of the paper in pixels: the base font size is
            chosen so the lines fill a height drawn from this range, then clipped to
            ``font_size``, so the real height can fall outside it. Default (460, 740).
        num_lines: (min, max) number of text lines (separators and barcode not counted); at least
            6, the fixed parts of a receipt. Default (10, 22).
        font_size: (min, max) font size (em height) of any line in pixels; the store name and
            TOTAL lines use larger sizes within this range. Default (16, 30).
        margin: (min, max) background visible around the paper on each side, in pixels.
            Default (8, 32).
        max_rotation: largest in-plane rotation of the paper in degrees (uniform in ±this).
            Default 3.0.
        max_perspective: largest displacement of each paper corner, as a fraction of the paper's
            width (x) and height (y), for the perspective warp. Default 0.02.
        max_blur: largest Gaussian blur sigma in pixels (0 disables blur). Default 0.8.
    """

    paper_width: tuple[int, int] = (320, 480)
    paper_height: tuple[int, int] = (460, 740)
    num_lines: tuple[int, int] = (10, 22)
    font_size: tuple[int, int] = (16, 30)
    margin: tuple[int, int] = (8, 32)
    max_rotation: float = 3.0
    max_perspective: float = 0.02
    max_blur: float = 0.8

    def __post_init__(self) -> None:
        limits = {
            "paper_width": (120, 4000),
            "paper_height": (120, 8000),
            "num_lines": (MIN_LINES, 200),
            "font_size": (8, 120),
            "margin": (0, 1000),
        }
        for name, (lo_ok, hi_ok) in limits.items():
            object.__setattr__(self, name, _int_range(name, getattr(self, name), lo_ok, hi_ok))
        # Words must fit: the longest fixed word ("SUBTOTAL", ~5.5 em) at the smallest size.
        if self.paper_width[0] < 8 * self.font_size[0]:
            raise ConfigError(
                f"paper_width minimum {self.paper_width[0]} px is too narrow for font_size "
                f"minimum {self.font_size[0]} px (need at least 8 x font size)"
            )
        for name, upper in (("max_rotation", 45.0), ("max_perspective", 0.2), ("max_blur", 5.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{name} must be a number, got {value!r}")
            if not 0.0 <= float(value) <= upper:
                raise ConfigError(f"{name} must be in [0, {upper}], got {value!r}")
            object.__setattr__(self, name, float(value))


def _int_range(name: str, value: Any, lo_ok: int, hi_ok: int) -> tuple[int, int]:
    """Validate a (min, max) pair of integers (any 2-item sequence, e.g. a Hydra ListConfig)."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | Iterable):
        raise ConfigError(f"{name} must be a (min, max) pair, got {value!r}")
    items = list(value)
    if len(items) != 2 or not all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) for v in items
    ):
        raise ConfigError(f"{name} must be a (min, max) pair of integers, got {value!r}")
    lo, hi = int(items[0]), int(items[1])
    if lo > hi:
        raise ConfigError(f"{name}: min {lo} is greater than max {hi}")
    if lo < lo_ok or hi > hi_ok:
        raise ConfigError(f"{name} must lie within [{lo_ok}, {hi_ok}], got ({lo}, {hi})")
    return lo, hi


# --------------------------------------------------------------------------------------------
# rendering


@functools.lru_cache(maxsize=256)
def _font(size: int) -> ImageFont.FreeTypeFont:
    font = ImageFont.load_default(size=size)
    if not isinstance(font, ImageFont.FreeTypeFont):
        # Without FreeType Pillow falls back to a fixed 11 px bitmap font: sizes would be ignored.
        raise RuntimeError(
            "ocr.data.synth needs Pillow >= 10.1 built with FreeType "
            "(ImageFont.load_default(size=N) returned a bitmap font)"
        )
    return font


@dataclass
class _Placed:
    """A laid-out line: its font size and each word with the x of its origin (paper pixels)."""

    size: int
    words: list[tuple[str, int]]  # (word, x of its origin in paper pixels)


def _layout_line(
    line: Line, size: int, x0: int, usable: int, gap_em: float, stroke: int
) -> _Placed | None:
    """Place the words of ``line`` at ``size`` or return None when segments collide / overflow."""
    font = _font(size)
    gap = max(1, round(font.getlength(" ") * gap_em))
    min_gap = max(gap, round(0.5 * size))  # between segments: clearly more than a word gap
    placed: list[tuple[str, int]] = []
    spans: list[tuple[int, int]] = []
    for seg in line.segments:
        widths = [round(font.getlength(w)) + 2 * stroke for w in seg.words]
        total = sum(widths) + gap * (len(widths) - 1)
        anchor = x0 + seg.anchor * usable
        if seg.align == "left":
            start = round(anchor)
        elif seg.align == "right":
            start = round(anchor - total)
        else:
            start = round(anchor - total / 2)
        x = start
        for word, width in zip(seg.words, widths, strict=True):
            placed.append((word, x + stroke))
            x += width + gap
        spans.append((start, start + total))
    ordered = sorted(spans)
    if ordered[0][0] < x0 or ordered[-1][1] > x0 + usable:
        return None
    if any(b[0] - a[1] < min_gap for a, b in itertools.pairwise(ordered)):
        return None
    return _Placed(size, placed)


def _fit_line(
    line: Line, size: int, min_size: int, x0: int, usable: int, gap_em: float, stroke: int
) -> _Placed:
    """Lay out a line at the largest size <= ``size`` that fits; shorten it as a last resort."""
    while True:
        for s in range(size, min_size - 1, -1):
            placed = _layout_line(line, s, x0, usable, gap_em, stroke)
            if placed is not None:
                return placed
        # Too long even at the smallest size: drop the last word of the longest segment, or
        # shorten a lone word (only reachable with extreme parameters).
        seg = max(line.segments, key=lambda s: sum(map(len, s.words)))
        if len(seg.words) > 1:
            seg.words.pop()
        elif len(seg.words[0]) > 1:
            seg.words[0] = seg.words[0][:-1]
        else:
            line.segments.remove(seg)
            if not line.segments:
                return _Placed(min_size, [])
        size = min_size


def _render_word(
    ink: Image.Image, word: str, x: int, y: int, font: ImageFont.FreeTypeFont, stroke: int
) -> tuple[int, int, int, int] | None:
    """Draw ``word`` with its origin at (x, y) into ``ink`` ('L', 255 = ink); return its ink box.

    The box (x0, y0, x1, y1) bounds the pixels of at least 25 % coverage in continuous pixel
    coordinates. It is measured on the glyph bitmap because ``getbbox`` uses advance widths,
    which overshoot the ink by up to a third of a narrow glyph.
    """
    bbox = font.getbbox(word, stroke_width=stroke)
    left, top = math.floor(bbox[0]), math.floor(bbox[1])
    right, bottom = math.ceil(bbox[2]), math.ceil(bbox[3])
    pad = 2 + stroke
    w, h = right - left + 2 * pad, bottom - top + 2 * pad
    tile = Image.new("L", (w, h), 0)
    ImageDraw.Draw(tile).text(
        (pad - left, pad - top), word, font=font, fill=255, stroke_width=stroke, stroke_fill=255
    )
    ox, oy = x + left - pad, y + top - pad
    ink.paste(255, (ox, oy, ox + w, oy + h), mask=tile)
    covered = np.asarray(tile) >= _INK_MIN
    cols, rows = np.flatnonzero(covered.any(axis=0)), np.flatnonzero(covered.any(axis=1))
    if not len(cols):
        return None
    return ox + int(cols[0]), oy + int(rows[0]), ox + int(cols[-1]) + 1, oy + int(rows[-1]) + 1


def _separator_word(line: Line, size: int, usable: int) -> str:
    font = _font(size)
    return line.separator * max(1, int(usable // max(1.0, font.getlength(line.separator))))


def _smooth_field(rng: np.random.Generator, shape: tuple[int, int], cells: int) -> np.ndarray:
    """Low-frequency random field in [-1, 1] (float32): a coarse grid, bicubically upsampled."""
    h, w = shape
    gh = max(2, round(cells * h / max(h, w)))
    gw = max(2, round(cells * w / max(h, w)))
    grid = rng.uniform(-1.0, 1.0, size=(gh, gw)).astype(np.float32)
    return cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC)


def _noise(rng: np.random.Generator, shape: tuple[int, int], amplitude: float) -> np.ndarray:
    """Zero-mean grain in [-amplitude, amplitude] (float32). Uniform rather than Gaussian: it looks
    the same at these amplitudes and costs a fifth of ``standard_normal``."""
    noise = rng.random(shape, dtype=np.float32)
    noise -= np.float32(0.5)
    noise *= np.float32(2.0 * amplitude)
    return noise


def _paper(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Off-white paper texture, float32 (h, w, 3) in [0, 255]."""
    tint = rng.uniform(232, 252) + rng.uniform(-6, 4, size=3)  # slight warm/cool tint
    # One grey-level field (uneven lighting + grain) shared by the channels: colour noise on
    # paper looks wrong, and one channel is a third of the work.
    gray = _smooth_field(rng, (h, w), 4)
    gray *= np.float32(rng.uniform(3, 10))
    gray += _noise(rng, (h, w), rng.uniform(2.0, 6.0))
    # Faint printer-head / roller streaks: thin vertical bands a few grey levels darker.
    for _ in range(int(rng.integers(0, 4))):
        x = int(rng.integers(0, w))
        gray[:, x : x + int(rng.integers(1, 4))] -= np.float32(rng.uniform(3, 9))
    if rng.random() < 0.3:  # a fold across the paper
        y = int(rng.integers(h // 4, 3 * h // 4))
        gray[y : y + 2] -= np.float32(rng.uniform(4, 10))
    return gray[..., None] + tint.astype(np.float32)


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Darker textured surface (desk, wood, cloth), float32 (h, w, 3) in [0, 255]."""
    surfaces = ((110, 80, 55), (70, 70, 75), (40, 45, 60), (120, 110, 95), (60, 50, 40))
    color = np.asarray(pick(rng, surfaces), dtype=np.float32) * np.float32(rng.uniform(0.7, 1.2))
    gray = _smooth_field(rng, (h, w), 6)
    gray *= np.float32(rng.uniform(8, 20))
    # Grain running in one direction (wood or brushed surfaces): a random 1-D profile.
    if rng.random() < 0.5:
        profile = rng.standard_normal((1, w)).astype(np.float32)
        gray += cv2.GaussianBlur(profile, (0, 0), 1.5) * np.float32(rng.uniform(4, 10))
    gray += _noise(rng, (h, w), rng.uniform(3, 9))
    return gray[..., None] + color


def generate_receipt(
    rng: np.random.Generator,
    *,
    paper_width: tuple[int, int] = ReceiptParams.paper_width,
    paper_height: tuple[int, int] = ReceiptParams.paper_height,
    num_lines: tuple[int, int] = ReceiptParams.num_lines,
    font_size: tuple[int, int] = ReceiptParams.font_size,
    margin: tuple[int, int] = ReceiptParams.margin,
    max_rotation: float = ReceiptParams.max_rotation,
    max_perspective: float = ReceiptParams.max_perspective,
    max_blur: float = ReceiptParams.max_blur,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Render one synthetic receipt photo.

    Args:
        rng: the only source of randomness; the same generator state gives the same output.
        paper_width, paper_height, num_lines, font_size, margin, max_rotation, max_perspective,
            max_blur: see :class:`ReceiptParams` (units and defaults there).

    Returns:
        ``(image, polygons)``: an RGB uint8 (H, W, 3) image and one float64 (4, 2) polygon per
        word, clockwise from the top-left, in continuous pixel coordinates inside
        ``[0, W] x [0, H]``. Separators and barcodes are ink but not words.
    """
    p = ReceiptParams(
        paper_width=paper_width,
        paper_height=paper_height,
        num_lines=num_lines,
        font_size=font_size,
        margin=margin,
        max_rotation=max_rotation,
        max_perspective=max_perspective,
        max_blur=max_blur,
    )
    return render_receipt(rng, p)


def render_receipt(
    rng: np.random.Generator, p: ReceiptParams
) -> tuple[np.ndarray, list[np.ndarray]]:
    n_lines = int(rng.integers(p.num_lines[0], p.num_lines[1] + 1))
    lines = receipt_lines(rng, n_lines)

    # -- layout in paper coordinates -----------------------------------------------------------
    width = int(rng.integers(p.paper_width[0], p.paper_width[1] + 1))
    pad_x = int(rng.integers(10, 25))
    pad_top, pad_bottom = int(rng.integers(14, 34)), int(rng.integers(14, 34))
    usable = width - 2 * pad_x
    spacing = rng.uniform(1.2, 1.5)  # line pitch / font size
    gap_em = rng.uniform(1.0, 2.2)  # word gap in spaces (the built-in font's space is narrow)
    barcode_h = int(rng.integers(28, 46)) if rng.random() < 0.25 else 0
    target_h = rng.uniform(p.paper_height[0], p.paper_height[1])
    pitch_units = sum(line.rel_size for line in lines) * spacing
    fixed = pad_top + pad_bottom + (barcode_h + 12 if barcode_h else 0)
    base = (target_h - fixed) / pitch_units
    lo, hi = p.font_size

    placed: list[_Placed] = []
    for line in lines:
        size = int(np.clip(round(base * line.rel_size), lo, hi))
        if line.separator:
            placed.append(_Placed(size, [(_separator_word(line, size, usable), pad_x)]))
            continue
        stroke = 1 if line.bold else 0
        placed.append(_fit_line(line, size, lo, pad_x, usable, gap_em, stroke))
    pitches = [round(pl.size * spacing) for pl in placed]
    height = pad_top + sum(pitches) + (barcode_h + 12 if barcode_h else 0) + pad_bottom

    # -- ink layer and word boxes ----------------------------------------------------------------
    ink = Image.new("L", (width, height), 0)
    boxes: list[tuple[int, int, int, int]] = []
    y = pad_top
    for line, pl, pitch in zip(lines, placed, pitches, strict=True):
        font = _font(pl.size)
        # Centre the em box (origin at the ascender line) in the line pitch.
        y_text = y + (pitch - pl.size) // 2
        if line.separator:
            ImageDraw.Draw(ink).text((pad_x, y_text), pl.words[0][0], font=font, fill=255)
        else:
            stroke = 1 if line.bold else 0
            for word, x in pl.words:
                box = _render_word(ink, word, x, y_text, font, stroke)
                if box is not None:
                    boxes.append(box)
        y += pitch
    if barcode_h:
        y += 6
        bars = rng.integers(1, 4, size=usable // 2)
        x = pad_x + usable // 6
        draw = ImageDraw.Draw(ink)
        for i, bw in enumerate(bars):
            if x + bw > width - pad_x - usable // 6:
                break
            if i % 2 == 0:
                draw.rectangle((x, y, x + int(bw) - 1, y + barcode_h - 1), fill=255)
            x += int(bw)

    # -- compose the paper -----------------------------------------------------------------------
    paper = _paper(rng, height, width)
    alpha = np.asarray(ink, dtype=np.float32) * np.float32(rng.uniform(0.8, 0.97) / 255.0)
    # Thermal print fades unevenly; keep it >= ~0.75 so every word stays readable.
    fade = _smooth_field(rng, (height, width), 3)
    alpha *= np.float32(0.875) - np.float32(0.125) * fade
    ink_rgb = rng.uniform(15, 60) + rng.uniform(-8, 8, size=3)
    ink_img = np.empty_like(paper)
    ink_img[:] = ink_rgb.astype(np.float32)
    # blendLinear computes (w1*a + w2*b) / (w1 + w2) in one pass (numpy broadcasting needs four).
    paper = cv2.blendLinear(paper, ink_img, np.float32(1.0) - alpha, alpha)

    # -- geometry: rotate, warp, place on the background -------------------------------------
    corners = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float64)
    theta = math.radians(rng.uniform(-p.max_rotation, p.max_rotation))
    rot = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    centre = np.array([width / 2, height / 2])
    dst = (corners - centre) @ rot.T
    dst += rng.uniform(-p.max_perspective, p.max_perspective, size=(4, 2)) * [width, height]
    m_lo = rng.integers(p.margin[0], p.margin[1] + 1, size=2)
    m_hi = rng.integers(p.margin[0], p.margin[1] + 1, size=2)
    dst -= dst.min(axis=0) - m_lo
    out_w, out_h = (np.ceil(dst.max(axis=0)).astype(int) + m_hi).tolist()
    # Continuous coordinates (pixel i spans [i, i+1]) -> OpenCV's pixel-centre convention.
    matrix = cv2.getPerspectiveTransform(
        (corners - 0.5).astype(np.float32), (dst - 0.5).astype(np.float32)
    )
    warped = cv2.warpPerspective(paper, matrix, (out_w, out_h), flags=cv2.INTER_LINEAR)
    mask = cv2.warpPerspective(
        np.ones((height, width), np.float32), matrix, (out_w, out_h), flags=cv2.INTER_LINEAR
    )
    image = _background(rng, out_h, out_w)
    # Soft shadow under the paper, offset towards a random side.
    blurred = cv2.GaussianBlur(mask, (0, 0), rng.uniform(3, 7))
    shift = rng.integers(-4, 5, size=2)
    offset = np.roll(blurred, (int(shift[1]), int(shift[0])), axis=(0, 1))
    image *= (1.0 - rng.uniform(0.2, 0.45) * offset)[..., None]
    image = cv2.blendLinear(warped, image, mask, np.float32(1.0) - mask)

    # -- camera: blur, noise, JPEG ---------------------------------------------------------------
    if p.max_blur > 0 and rng.random() < 0.7:
        image = cv2.GaussianBlur(image, (0, 0), rng.uniform(0.3, max(0.3, p.max_blur)))
    image += _noise(rng, (out_h, out_w), rng.uniform(2.0, 6.0))[..., None]
    out = np.clip(image, 0, 255).astype(np.uint8)
    if rng.random() < 0.3:
        quality = int(rng.integers(45, 80))
        ok, buf = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, quality])
        decoded = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED) if ok else None
        if decoded is not None:
            out = np.asarray(decoded, dtype=np.uint8)

    # -- word polygons in image coordinates ----------------------------------------------------
    polygons: list[np.ndarray] = []
    if boxes:
        b = np.asarray(boxes, dtype=np.float64)
        quads = np.stack(
            [b[:, [0, 1]], b[:, [2, 1]], b[:, [2, 3]], b[:, [0, 3]]], axis=1
        )  # (N, 4, 2) clockwise from top-left in paper coordinates
        mapped = cv2.perspectiveTransform((quads - 0.5).reshape(-1, 1, 2), matrix) + 0.5
        mapped = np.round(mapped.reshape(-1, 4, 2), 2)
        mapped[..., 0] = np.clip(mapped[..., 0], 0.0, out_w)
        mapped[..., 1] = np.clip(mapped[..., 1], 0.0, out_h)
        polygons = [q.copy() for q in mapped]
    return np.ascontiguousarray(out), polygons

"""Deterministic synthetic receipts with word boxes (``ocr-synth``).

Feeds the demo and the tests: a tiny DBNet must learn to find WORDS on these images in minutes,
so they look like photographed thermal receipts but stay learnable:

* content: a centred store header (name in a larger font, address, phone), a date/time line,
  item lines ``NAME  QTY  PRICE`` with right-aligned prices, dashed separators (ink but *not*
  words, like the real datasets), SUBTOTAL / TAX / TOTAL, payment lines, a footer and sometimes a
  barcode (also not words). Font sizes vary per line; only Pillow's built-in scalable font is used
  (``ImageFont.load_default(size=N)``), so nothing is downloaded or read from system paths.
* boxes: one quadrilateral per word, tight around the word's rendered ink (computed from the
  glyph bitmap, not from advance widths, which are loose by a few pixels), mapped through exactly
  the perspective transform applied to the paper. Words are separated by at least one space.
* look: off-white paper with grain, shading and faint printer streaks, slightly faded ink, on a
  darker textured background, rotated a little (±3° by default) with a slight perspective warp,
  then mild blur, sensor noise and sometimes a JPEG round trip.

Points follow :mod:`ocr.data.annotations`: continuous pixel coordinates (pixel ``(i, j)`` covers
``[i, i + 1] x [j, j + 1]``), clockwise from the top-left corner, rounded to 0.01 px.

Determinism: every image's random stream comes from ``SeedSequence(seed, spawn_key=(crc32(split),
index))``, so a file's bytes depend only on (seed, split, index, parameters, library versions),
never on the worker count or on which other splits are generated.

Output layout (the receipt competition's, read by ``ReceiptDataModule``)::

    out_dir/images/{split}/{split}_{i:05d}.jpg
    out_dir/jsons/{split}.json
    out_dir/manifest.json          written last: its presence means the set is complete
    out_dir/.ocr-synth.json        written first: the generator made this folder

Only a new or empty folder, or one this generator made (its ``.ocr-synth.json`` or
``manifest.json``), is written into: anything else raises :class:`OutputFolderError` before a
single file is touched, so a user's own dataset is never overwritten.

CLI: ``ocr-synth --out data/synth --train 200 --val 40 --test 20 --workers 2``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import multiprocessing
import os
import re
import sys
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ocr.data.annotations import write_annotations, write_json_atomic
from ocr.errors import ConfigError, InputError

__all__ = [
    "DEFAULT_SPLITS",
    "GENERATOR_VERSION",
    "OutputFolderError",
    "ReceiptParams",
    "check_output_folder",
    "dataset_is_complete",
    "dataset_params",
    "generate_dataset",
    "generate_receipt",
    "main",
]

#: Bumped whenever the same parameters would produce different images or boxes, so cached
#: datasets made by an older generator are not reused.
GENERATOR_VERSION = 1

DEFAULT_SPLITS: Mapping[str, int] = {"train": 200, "val": 40, "test": 20}

MANIFEST_NAME = "manifest.json"
# Written before anything else, so a folder whose generation was interrupted (no manifest yet)
# is still recognised as the generator's own and can be generated into again.
OWNER_MARKER_NAME = ".ocr-synth.json"
GENERATOR_ID = "ocr.data.synth"
JPEG_QUALITY = 90

# Coverage >= 25 % counts as ink for word boxes: the faint anti-aliasing fringe beyond it is
# invisible after compositing and blur, and boxes should hug what a reader sees.
_INK_MIN = 64

_SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


# --------------------------------------------------------------------------------------------
# parameters


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
            "num_lines": (_MIN_LINES, 200),
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
# content

_STORE_A = (
    "GREEN", "SUNNY", "CITY", "CORNER", "FRESH", "BLUE", "MAPLE", "GOLDEN", "HAPPY", "NORTH",
    "RIVER", "OAK", "PINE", "STAR", "LUCKY", "METRO", "VALLEY", "HARBOR", "URBAN", "FAMILY",
)  # fmt: skip
_STORE_B = (
    "MARKET", "GROCERY", "MART", "FOODS", "DELI", "BAKERY", "CAFE", "PHARMACY", "HARDWARE",
    "SUPERSTORE", "DINER", "KITCHEN", "OUTLET", "BISTRO", "STORE", "DEPOT", "EXPRESS",
)  # fmt: skip
_STORE_C = ("CO.", "INC", "LLC", "#12", "#207", "PLUS", "24H")
_STREETS = (
    "MAPLE", "OAK", "MAIN", "ELM", "PARK", "LAKE", "HILL", "CEDAR", "WASHINGTON", "SUNSET",
    "RIVERSIDE", "HIGHLAND", "MILL", "CHURCH", "MARKET", "SPRING", "BROAD", "FOREST",
)  # fmt: skip
_STREET_KIND = ("ST", "AVE", "RD", "BLVD", "DR", "LN", "WAY", "PKWY", "CT")
_CITIES = (
    "SPRINGFIELD", "RIVERTON", "FAIRVIEW", "GREENVILLE", "MADISON", "CLINTON", "SALEM",
    "BRISTOL", "OAKLAND", "DAYTON", "AUBURN", "FRANKLIN", "GEORGETOWN", "ARLINGTON",
)  # fmt: skip
_STATES = ("CA", "NY", "TX", "WA", "OR", "IL", "MA", "OH", "GA", "NC", "AZ", "CO", "FL", "MI")
_ITEMS = (
    "MILK", "BREAD", "EGGS", "BANANAS", "APPLES", "COFFEE", "TEA", "BUTTER", "CHEESE", "YOGURT",
    "RICE", "PASTA", "TOMATOES", "ONIONS", "POTATOES", "CHICKEN", "BEEF", "SALMON", "TUNA",
    "CEREAL", "OATS", "HONEY", "JUICE", "WATER", "SODA", "CHIPS", "COOKIES", "CRACKERS",
    "SOAP", "SHAMPOO", "TISSUE", "BATTERIES", "LEMONS", "AVOCADO", "SPINACH", "CARROTS",
    "GRAPES", "BAGELS", "MUFFIN", "LATTE", "SANDWICH", "SALAD", "SOUP", "NOODLES", "FLOUR",
    "SUGAR", "PEPPER", "OLIVES", "PICKLES", "TOFU",
)  # fmt: skip
_ITEM_MODS = (
    "ORG", "LG", "SM", "FRESH", "FROZEN", "WHOLE", "LOWFAT", "WHITE", "BROWN", "RED", "GREEN",
    "SLICED", "GREEK", "DARK", "SWEET", "SPICY", "MINI", "FAMILY", "DELUXE", "CLASSIC",
)  # fmt: skip
_ITEM_SIZES = ("12OZ", "1LB", "500G", "2L", "1GAL", "6PK", "12CT", "250ML", "2KG", "16OZ")
_CASHIERS = ("ANNA", "MIKE", "JOSE", "LINDA", "SAM", "PRIYA", "KEVIN", "MARIA", "TOM", "LEE")
_FOOTERS = (
    ("THANK", "YOU"),
    ("THANK", "YOU!"),
    ("THANK", "YOU", "FOR", "SHOPPING"),
    ("PLEASE", "COME", "AGAIN"),
    ("ENJOY", "YOUR", "DAY"),
    ("SEE", "YOU", "SOON"),
    ("Thank", "you!"),
    ("Thank", "you", "for", "visiting"),
)
_FOOTERS_2 = (
    ("RETURNS", "WITHIN", "30", "DAYS"),
    ("KEEP", "YOUR", "RECEIPT"),
    ("WWW.STORE.COM",),
    ("CUSTOMER", "COPY"),
    ("NO", "REFUND", "WITHOUT", "RECEIPT"),
)
_CARDS = ("VISA", "MASTERCARD", "AMEX", "DEBIT")

_MIN_LINES = 6  # store name, date, one item, TOTAL, footer, plus one more item

Align = Literal["left", "right", "center"]


@dataclass
class _Segment:
    """Words placed together: left-aligned at ``anchor``, right-aligned ending at ``anchor`` or
    centred on ``anchor`` (a fraction of the usable width)."""

    words: list[str]
    align: Align
    anchor: float


@dataclass
class _Line:
    """One printed line: text segments (words) or a separator of repeated symbols (not words)."""

    segments: list[_Segment] = field(default_factory=list)
    rel_size: float = 1.0
    bold: bool = False
    separator: str = ""


def _price(value: float, dollar: bool) -> str:
    return f"${value:.2f}" if dollar else f"{value:.2f}"


def _text_line(*segments: _Segment, rel: float = 1.0, bold: bool = False) -> _Line:
    return _Line(segments=list(segments), rel_size=rel, bold=bold)


def _left(words: Sequence[str]) -> _Segment:
    return _Segment(list(words), "left", 0.0)


def _right(words: Sequence[str], anchor: float = 1.0) -> _Segment:
    return _Segment(list(words), "right", anchor)


def _center(words: Sequence[str]) -> _Segment:
    return _Segment(list(words), "center", 0.5)


def _pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def _receipt_content(rng: np.random.Generator, n_lines: int) -> list[_Line]:
    """The lines of one receipt, top to bottom, with exactly ``n_lines`` text lines."""
    dollar = rng.random() < 0.4
    title_items = rng.random() < 0.25
    sep_char = _pick(rng, ("-", "-", "=", "*"))

    store = [_pick(rng, _STORE_A), _pick(rng, _STORE_B)]
    if rng.random() < 0.3:
        store.append(_pick(rng, _STORE_C))
    header = [_text_line(_center(store), rel=rng.uniform(1.3, 1.6), bold=rng.random() < 0.5)]
    optional_header = [
        _text_line(
            _center(
                [
                    str(int(rng.integers(10, 9999))),
                    _pick(rng, _STREETS),
                    _pick(rng, _STREET_KIND),
                ]
            ),
            rel=rng.uniform(0.85, 1.0),
        ),
        _text_line(
            _center(
                [
                    _pick(rng, _CITIES) + ",",
                    _pick(rng, _STATES),
                    f"{int(rng.integers(10000, 99999)):05d}",
                ]
            ),
            rel=rng.uniform(0.85, 1.0),
        ),
        _text_line(
            _center(
                (["TEL"] if rng.random() < 0.5 else [])
                + [
                    f"({int(rng.integers(200, 999))})",
                    f"{int(rng.integers(200, 999))}-{int(rng.integers(0, 9999)):04d}",
                ]
            ),
            rel=rng.uniform(0.85, 1.0),
        ),
    ]

    month, day = int(rng.integers(1, 13)), int(rng.integers(1, 29))
    year, hour, minute = (
        int(rng.integers(2018, 2026)),
        int(rng.integers(0, 24)),
        int(rng.integers(60)),
    )
    date_formats = (f"{month:02d}/{day:02d}/{year}", f"{year}-{month:02d}-{day:02d}")
    date = _pick(rng, (*date_formats, f"{day:02d}.{month:02d}.{year}"))
    if rng.random() < 0.5:
        date_line = _text_line(
            _left(["DATE:", date]), _right(["TIME:", f"{hour:02d}:{minute:02d}"])
        )
    else:
        date_line = _text_line(
            _left([date]), _right([f"{hour:02d}:{minute:02d}:{int(rng.integers(60)):02d}"])
        )
    date_line.rel_size = rng.uniform(0.9, 1.0)
    optional_meta = [
        _text_line(
            _left(["CASHIER:", _pick(rng, _CASHIERS)]),
            _right(["REG", f"{int(rng.integers(1, 20)):02d}"]),
            rel=rng.uniform(0.85, 0.95),
        )
    ]

    footer = [_text_line(_center(_pick(rng, _FOOTERS)), rel=rng.uniform(1.0, 1.2))]
    optional_footer = [_text_line(_center(_pick(rng, _FOOTERS_2)), rel=rng.uniform(0.85, 1.0))]

    # Always printed: store name, date, TOTAL, footer. Optional lines are dropped from the end
    # of this list until at least two item lines fit into the line budget; items fill the rest.
    optional = [
        ("address", 1),
        ("city", 1),
        ("phone", 1),
        ("cashier", 1),
        ("subtotal_tax", 2),
        ("payment", 1 + int(rng.random() < 0.6)),
        ("footer2", 1),
    ]
    enabled = {name: rng.random() < 0.85 for name, _ in optional}
    mandatory = 4  # store name, date, TOTAL, footer
    for name, _ in reversed(optional):
        used = mandatory + sum(c for n, c in optional if enabled[n])
        if n_lines - used >= 2:
            break
        enabled[name] = False
    used = mandatory + sum(c for n, c in optional if enabled[n])
    n_items = n_lines - used

    qty_style = _pick(rng, ("none", "{}x", "x{}", "{}pc"))
    qty_col = rng.uniform(0.58, 0.72)
    items: list[_Line] = []
    subtotal = 0.0
    for _ in range(n_items):
        words = [_pick(rng, _ITEMS)]
        if rng.random() < 0.5:
            words.insert(0, _pick(rng, _ITEM_MODS))
        if rng.random() < 0.3:
            words.append(_pick(rng, _ITEM_SIZES))
        if title_items:
            words = [w.title() if w.isalpha() else w for w in words]
        qty = 1 if rng.random() < 0.6 else int(rng.integers(2, 10))
        unit = float(np.round(rng.uniform(0.49, 19.99), 2))
        amount = round(qty * unit, 2)
        subtotal += amount
        segments = [_left(words)]
        if qty_style != "none":
            segments.append(_right([qty_style.format(qty)], qty_col))
        segments.append(_right([_price(amount, dollar)]))
        items.append(_text_line(*segments, rel=rng.uniform(0.92, 1.08)))

    tax_rate = float(np.round(rng.uniform(0.0, 0.1), 4))
    tax = round(subtotal * tax_rate, 2)
    total = round(subtotal + tax, 2)
    totals: list[_Line] = []
    if enabled["subtotal_tax"]:
        totals.append(_text_line(_left(["SUBTOTAL"]), _right([_price(subtotal, dollar)])))
        tax_words = ["TAX", f"{tax_rate * 100:.2f}%"] if rng.random() < 0.5 else ["TAX"]
        totals.append(_text_line(_left(tax_words), _right([_price(tax, dollar)])))
    totals.append(
        _text_line(
            _left(["TOTAL"]),
            _right([_price(total, dollar)]),
            rel=rng.uniform(1.1, 1.3),
            bold=rng.random() < 0.5,
        )
    )
    payment: list[_Line] = []
    if enabled["payment"]:
        n_pay = next(c for n, c in optional if n == "payment")
        if n_pay == 2:
            cash = float(math.ceil(total / 10.0) * 10.0 + 10.0 * int(rng.integers(0, 3)))
            payment.append(_text_line(_left(["CASH"]), _right([_price(cash, dollar)])))
            payment.append(_text_line(_left(["CHANGE"]), _right([_price(cash - total, dollar)])))
        else:
            card = [_pick(rng, _CARDS), f"XXXX{int(rng.integers(0, 9999)):04d}"]
            payment.append(_text_line(_left(card), _right([_price(total, dollar)])))

    def sep() -> list[_Line]:
        return [_Line(separator=sep_char, rel_size=0.9)] if rng.random() < 0.8 else []

    header += [
        line for (name, _), line in zip(optional[:3], optional_header, strict=True) if enabled[name]
    ]
    meta = [date_line] + (optional_meta if enabled["cashier"] else [])
    lines = header + sep() + meta + sep() + items + sep() + totals + payment + sep() + footer
    if enabled["footer2"]:
        lines += optional_footer
    return lines


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
    line: _Line, size: int, x0: int, usable: int, gap_em: float, stroke: int
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
    line: _Line, size: int, min_size: int, x0: int, usable: int, gap_em: float, stroke: int
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


def _separator_word(line: _Line, size: int, usable: int) -> str:
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
    color = np.asarray(_pick(rng, surfaces), dtype=np.float32) * np.float32(rng.uniform(0.7, 1.2))
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
    return _render(rng, p)


def _render(rng: np.random.Generator, p: ReceiptParams) -> tuple[np.ndarray, list[np.ndarray]]:
    n_lines = int(rng.integers(p.num_lines[0], p.num_lines[1] + 1))
    lines = _receipt_content(rng, n_lines)

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


# --------------------------------------------------------------------------------------------
# datasets


def _validate_splits(splits: Mapping[str, int]) -> dict[str, int]:
    if not isinstance(splits, Mapping) or not splits:
        raise ConfigError(
            f"splits must be a non-empty mapping of split name -> count, got {splits!r}"
        )
    out: dict[str, int] = {}
    for name, count in splits.items():
        if not isinstance(name, str) or not _SPLIT_NAME_RE.match(name):
            raise ConfigError(f"split name {name!r} must be letters, digits, '_' or '-'")
        if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
            raise ConfigError(
                f"split {name!r}: count must be a non-negative integer, got {count!r}"
            )
        out[name] = int(count)
    if sum(out.values()) == 0:
        raise ConfigError(f"splits request no images at all: {out}")
    return out


def _validate_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def dataset_params(
    *,
    splits: Mapping[str, int] = DEFAULT_SPLITS,
    seed: int = 0,
    workers: int = 1,
    **receipt_kwargs: Any,
) -> dict[str, Any]:
    """Everything that determines a dataset's bytes, normalised to plain JSON types.

    Takes the keyword arguments of :func:`generate_dataset` (``workers`` is accepted and ignored:
    it never changes the output). This is what the manifest records and what
    :func:`dataset_is_complete` compares.

    Raises:
        ValueError: a bad split, seed or receipt parameter (named in the message).
        TypeError: an unknown receipt parameter.
    """
    del workers
    try:
        receipt = ReceiptParams(**receipt_kwargs)
    except TypeError:
        known = sorted(ReceiptParams.__dataclass_fields__)
        unknown = sorted(set(receipt_kwargs) - set(known))
        raise TypeError(f"unknown receipt parameter(s) {unknown}; known: {known}") from None
    params = {
        "generator_version": GENERATOR_VERSION,
        "seed": _validate_seed(seed),
        "splits": _validate_splits(splits),
        "receipt": asdict(receipt),
    }
    return json.loads(json.dumps(params))  # tuples -> lists, as read back from the manifest


def _image_rng(seed: int, split: str, index: int) -> np.random.Generator:
    # crc32 is stable across processes and Python versions (hash() of a str is salted).
    return np.random.default_rng(
        np.random.SeedSequence(seed, spawn_key=(zlib.crc32(split.encode("utf-8")), index))
    )


def _file_name(split: str, index: int) -> str:
    return f"{split}_{index:05d}.jpg"


@dataclass(frozen=True)
class _Task:
    out_dir: str
    seed: int
    split: str
    index: int
    params: ReceiptParams


def _render_task(task: _Task) -> tuple[str, int, list[np.ndarray]]:
    """Generate and write one image (runs in a pool worker); return (split, index, polygons)."""
    rng = _image_rng(task.seed, task.split, task.index)
    image, polygons = _render(rng, task.params)
    path = Path(task.out_dir) / "images" / task.split / _file_name(task.split, task.index)
    Image.fromarray(image).save(path, format="JPEG", quality=JPEG_QUALITY)
    return task.split, task.index, polygons


def _worker_init() -> None:
    # One process per core already: OpenCV's own thread pool would only oversubscribe.
    cv2.setNumThreads(1)


def _run_tasks(tasks: list[_Task], workers: int) -> Iterator[tuple[str, int, list[np.ndarray]]]:
    if workers <= 1 or len(tasks) <= 1:
        yield from map(_render_task, tasks)
        return
    # spawn, not fork: the caller may be a training process with live threads (torch, OpenMP),
    # which fork can deadlock. Workers only import numpy, OpenCV and Pillow.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(workers, len(tasks)), initializer=_worker_init) as pool:
        yield from pool.imap_unordered(_render_task, tasks, chunksize=4)


class OutputFolderError(InputError, ValueError):
    """The output folder holds files the generator did not make: nothing was written into it.

    Attributes:
        folder: the refused folder.
        entries: a few of the names found in it (sorted), for the message.
    """

    def __init__(self, folder: Path, entries: Sequence[str], reason: str) -> None:
        self.folder = folder
        self.entries = list(entries)
        super().__init__(f"{folder}: {reason}")


def _read_json_object(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _made_by_generator(out: Path) -> bool:
    """The folder carries this generator's marker or manifest (a ``manifest.json`` of another
    tool, or a file merely named like ours, does not count)."""
    for name in (OWNER_MARKER_NAME, MANIFEST_NAME):
        doc = _read_json_object(out / name)
        if doc is not None and doc.get("generator") == GENERATOR_ID:
            return True
    return False


def check_output_folder(out_dir: str | os.PathLike[str]) -> Path:
    """Make sure generating into ``out_dir`` cannot touch anything the user owns.

    Accepted: a folder that does not exist yet, an empty folder, or a folder this generator made
    (its ``.ocr-synth.json`` or ``manifest.json``). Reads only; writes nothing.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        OutputFolderError: ``out_dir`` is a file, or a non-empty folder the generator did not
            make (e.g. a real dataset with its own ``jsons/`` and ``images/``).
    """
    out = Path(out_dir)
    if not out.exists():
        return out
    if not out.is_dir():
        raise OutputFolderError(out, [], "exists and is not a folder; choose a new folder")
    if _made_by_generator(out):
        return out
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return out
    shown = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
    raise OutputFolderError(
        out,
        entries,
        f"not empty ({shown}) and not made by ocr-synth (no {MANIFEST_NAME} or "
        f"{OWNER_MARKER_NAME} of {GENERATOR_ID}): synthetic data is written only into a new or "
        "empty folder or one ocr-synth made, so nothing in this folder was changed. "
        "Choose a new or empty output folder",
    )


def generate_dataset(
    out_dir: str | os.PathLike[str],
    *,
    splits: Mapping[str, int] = DEFAULT_SPLITS,
    seed: int = 0,
    workers: int = 1,
    **receipt_kwargs: Any,
) -> Path:
    """Write a synthetic receipt dataset in the competition layout (see the module docstring).

    Args:
        out_dir: output folder (created): new, empty, or made by this generator (see
            :func:`check_output_folder`). In a folder it made, the manifest is removed first, so
            an interrupted run is never mistaken for a complete one, annotation files are
            replaced and stale ``{split}_NNNNN.jpg`` files beyond the requested counts are
            deleted. Other files are left alone.
        splits: split name -> number of images. Default train 200, val 40, test 20.
        seed: non-negative base seed; image ``i`` of split ``s`` uses (seed, s, i) only.
        workers: processes generating images (1 = in this process). Output does not depend on it.
        **receipt_kwargs: :class:`ReceiptParams` fields (``paper_width``, ``font_size``, ...).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        OutputFolderError: ``out_dir`` holds files the generator did not make (nothing written).
        ValueError / TypeError: a bad split, seed, worker count or receipt parameter.
    """
    if isinstance(workers, bool) or not isinstance(workers, int | np.integer) or workers < 1:
        raise ConfigError(f"workers must be a positive integer, got {workers!r}")
    params = dataset_params(splits=splits, seed=seed, **receipt_kwargs)
    receipt = ReceiptParams(**receipt_kwargs)
    out = check_output_folder(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / OWNER_MARKER_NAME, {"generator": GENERATOR_ID}, indent=2)
    (out / MANIFEST_NAME).unlink(missing_ok=True)
    split_counts: dict[str, int] = params["splits"]
    for split in split_counts:
        (out / "images" / split).mkdir(parents=True, exist_ok=True)
    (out / "jsons").mkdir(exist_ok=True)

    tasks = [
        _Task(str(out), params["seed"], split, i, receipt)
        for split, count in split_counts.items()
        for i in range(count)
    ]
    results: dict[str, dict[int, list[np.ndarray]]] = {s: {} for s in split_counts}
    for split, index, polygons in _run_tasks(tasks, int(workers)):
        results[split][index] = polygons

    word_counts: dict[str, int] = {}
    for split, count in split_counts.items():
        images = {
            _file_name(split, i): {f"{k + 1:04d}": poly for k, poly in enumerate(results[split][i])}
            for i in range(count)
        }
        word_counts[split] = sum(len(words) for words in images.values())
        if count:
            write_annotations(out / "jsons" / f"{split}.json", images)
        else:
            (out / "jsons" / f"{split}.json").unlink(missing_ok=True)
        pattern = re.compile(rf"^{re.escape(split)}_(\d{{5}})\.jpg$")
        for path in (out / "images" / split).iterdir():
            match = pattern.match(path.name)
            if match and int(match.group(1)) >= count:
                path.unlink()

    manifest = {
        "generator": GENERATOR_ID,
        "params": params,
        "images": dict(split_counts),
        "words": word_counts,
    }
    write_json_atomic(out / MANIFEST_NAME, manifest, indent=2, sort_keys=True)
    return out


def dataset_is_complete(
    out_dir: str | os.PathLike[str], expected_params: Mapping[str, Any]
) -> bool:
    """True when ``out_dir`` holds a finished dataset generated with ``expected_params``.

    Args:
        out_dir: the dataset folder.
        expected_params: the keyword arguments that were (or would be) given to
            :func:`generate_dataset` (``splits``, ``seed``, receipt parameters; ``workers`` is
            ignored); missing keys take their defaults.

    Returns:
        False when the manifest is missing, unreadable, from another generator version or made
        with other parameters, or when an annotation file or image it lists is missing.

    Raises:
        ValueError / TypeError: ``expected_params`` itself is invalid (a caller bug, not a cache
            miss).
    """
    expected = dataset_params(**dict(expected_params))
    out = Path(out_dir)
    try:
        manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or manifest.get("params") != expected:
        return False
    for split, count in expected["splits"].items():
        if count == 0:
            continue
        if not (out / "jsons" / f"{split}.json").is_file():
            return False
        image_dir = out / "images" / split
        if not all((image_dir / _file_name(split, i)).is_file() for i in range(count)):
            return False
    return True


# --------------------------------------------------------------------------------------------
# CLI


def _range_arg(text: str) -> tuple[int, int]:
    """``320,480`` or ``320-480`` or ``400`` (min = max)."""
    parts = re.split(r"[,:]|(?<=\d)-", text.strip())
    try:
        values = [int(v) for v in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX integers, got {text!r}") from None
    if len(values) == 1:
        values *= 2
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX integers, got {text!r}")
    return values[0], values[1]


def _build_parser() -> argparse.ArgumentParser:
    defaults = ReceiptParams()
    parser = argparse.ArgumentParser(
        prog="ocr-synth",
        description="Generate a deterministic synthetic receipt text-detection dataset "
        "(images/{split}/*.jpg, jsons/{split}.json, manifest.json).",
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    for split, count in DEFAULT_SPLITS.items():
        parser.add_argument(
            f"--{split}",
            type=int,
            default=count,
            metavar="N",
            help=f"images in the {split} split (default {count})",
        )
    parser.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    size = parser.add_argument_group("receipt size (ranges as MIN,MAX in pixels or lines)")
    for name in ("paper_width", "paper_height", "num_lines", "font_size", "margin"):
        lo, hi = getattr(defaults, name)
        size.add_argument(
            f"--{name.replace('_', '-')}",
            type=_range_arg,
            default=(lo, hi),
            metavar="MIN,MAX",
            help=f"default {lo},{hi}",
        )
    for flag, metavar, what in (
        ("max_rotation", "DEG", "largest rotation in degrees"),
        ("max_perspective", "FRAC", "largest corner shift / side length"),
        ("max_blur", "SIGMA", "largest blur sigma in pixels"),
    ):
        value = getattr(defaults, flag)
        size.add_argument(
            f"--{flag.replace('_', '-')}",
            type=float,
            default=value,
            metavar=metavar,
            help=f"{what} (default {value})",
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    """``ocr-synth`` entry point; returns the exit code (2 for bad arguments)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    splits = {s: getattr(args, s) for s in DEFAULT_SPLITS}
    for split, count in splits.items():
        if count < 0:
            parser.error(f"--{split} must be >= 0, got {count}")
    if not any(splits.values()):
        parser.error("--train, --val and --test are all 0: nothing to generate")
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    receipt_kwargs = {name: getattr(args, name) for name in ReceiptParams.__dataclass_fields__}
    try:
        ReceiptParams(**receipt_kwargs)
    except ValueError as exc:
        parser.error(str(exc))

    try:
        check_output_folder(args.out)
    except OutputFolderError as exc:
        parser.error(f"--out {exc}")
    start = time.perf_counter()
    from ocr.cli_errors import expected_errors

    with expected_errors("ocr-synth"):  # an unusable --out: one message, exit 2
        out = generate_dataset(
            args.out,
            splits={s: c for s, c in splits.items() if c > 0},
            seed=args.seed,
            workers=args.workers,
            **receipt_kwargs,
        )
    seconds = time.perf_counter() - start
    manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    n_images, n_words = sum(manifest["images"].values()), sum(manifest["words"].values())
    per_split = ", ".join(f"{s} {c}" for s, c in splits.items() if c > 0)
    print(
        f"ocr-synth: {n_images} images, {n_words} words in {seconds:.1f} s ({per_split}) -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The words and lines of one synthetic receipt (:mod:`ocr.data.synth`): a centred store header,
a date / time line, item lines ``NAME  QTY  PRICE`` with right-aligned prices, separators (ink,
not words), SUBTOTAL / TAX / TOTAL, payment lines and a footer. Text only: where the words go
and how they look is :mod:`ocr.data.receipt_render`'s.

Every choice is drawn from the generator passed in, in a fixed order: the same generator state
gives the same lines (the generated datasets' bytes depend on it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = ["MIN_LINES", "Align", "Line", "Segment", "pick", "receipt_lines"]

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

MIN_LINES = 6  # store name, date, one item, TOTAL, footer, plus one more item

Align = Literal["left", "right", "center"]


@dataclass
class Segment:
    """Words placed together: left-aligned at ``anchor``, right-aligned ending at ``anchor`` or
    centred on ``anchor`` (a fraction of the usable width)."""

    words: list[str]
    align: Align
    anchor: float


@dataclass
class Line:
    """One printed line: text segments (words) or a separator of repeated symbols (not words)."""

    segments: list[Segment] = field(default_factory=list)
    rel_size: float = 1.0
    bold: bool = False
    separator: str = ""


def _price(value: float, dollar: bool) -> str:
    return f"${value:.2f}" if dollar else f"{value:.2f}"


def _text_line(*segments: Segment, rel: float = 1.0, bold: bool = False) -> Line:
    return Line(segments=list(segments), rel_size=rel, bold=bold)


def _left(words: Sequence[str]) -> Segment:
    return Segment(list(words), "left", 0.0)


def _right(words: Sequence[str], anchor: float = 1.0) -> Segment:
    return Segment(list(words), "right", anchor)


def _center(words: Sequence[str]) -> Segment:
    return Segment(list(words), "center", 0.5)


def pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def receipt_lines(rng: np.random.Generator, n_lines: int) -> list[Line]:
    """The lines of one receipt, top to bottom, with exactly ``n_lines`` text lines."""
    dollar = rng.random() < 0.4
    title_items = rng.random() < 0.25
    sep_char = pick(rng, ("-", "-", "=", "*"))

    store = [pick(rng, _STORE_A), pick(rng, _STORE_B)]
    if rng.random() < 0.3:
        store.append(pick(rng, _STORE_C))
    header = [_text_line(_center(store), rel=rng.uniform(1.3, 1.6), bold=rng.random() < 0.5)]
    optional_header = [
        _text_line(
            _center(
                [
                    str(int(rng.integers(10, 9999))),
                    pick(rng, _STREETS),
                    pick(rng, _STREET_KIND),
                ]
            ),
            rel=rng.uniform(0.85, 1.0),
        ),
        _text_line(
            _center(
                [
                    pick(rng, _CITIES) + ",",
                    pick(rng, _STATES),
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
    date = pick(rng, (*date_formats, f"{day:02d}.{month:02d}.{year}"))
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
            _left(["CASHIER:", pick(rng, _CASHIERS)]),
            _right(["REG", f"{int(rng.integers(1, 20)):02d}"]),
            rel=rng.uniform(0.85, 0.95),
        )
    ]

    footer = [_text_line(_center(pick(rng, _FOOTERS)), rel=rng.uniform(1.0, 1.2))]
    optional_footer = [_text_line(_center(pick(rng, _FOOTERS_2)), rel=rng.uniform(0.85, 1.0))]

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

    qty_style = pick(rng, ("none", "{}x", "x{}", "{}pc"))
    qty_col = rng.uniform(0.58, 0.72)
    items: list[Line] = []
    subtotal = 0.0
    for _ in range(n_items):
        words = [pick(rng, _ITEMS)]
        if rng.random() < 0.5:
            words.insert(0, pick(rng, _ITEM_MODS))
        if rng.random() < 0.3:
            words.append(pick(rng, _ITEM_SIZES))
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
    totals: list[Line] = []
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
    payment: list[Line] = []
    if enabled["payment"]:
        n_pay = next(c for n, c in optional if n == "payment")
        if n_pay == 2:
            cash = float(math.ceil(total / 10.0) * 10.0 + 10.0 * int(rng.integers(0, 3)))
            payment.append(_text_line(_left(["CASH"]), _right([_price(cash, dollar)])))
            payment.append(_text_line(_left(["CHANGE"]), _right([_price(cash - total, dollar)])))
        else:
            card = [pick(rng, _CARDS), f"XXXX{int(rng.integers(0, 9999)):04d}"]
            payment.append(_text_line(_left(card), _right([_price(total, dollar)])))

    def sep() -> list[Line]:
        return [Line(separator=sep_char, rel_size=0.9)] if rng.random() < 0.8 else []

    header += [
        line for (name, _), line in zip(optional[:3], optional_header, strict=True) if enabled[name]
    ]
    meta = [date_line] + (optional_meta if enabled["cashier"] else [])
    lines = header + sep() + meta + sep() + items + sep() + totals + payment + sep() + footer
    if enabled["footer2"]:
        lines += optional_footer
    return lines

"""Read, validate and write receipt annotations (the receipt competition JSON format).

One file per split (``train.json``, ``val.json``, ``test.json``)::

    {"images": {"<file name>": {"words": {"0001": {"points": [[x, y], ...]}, ...}}}}

Points are in the *stored* pixel frame of the image (before any EXIF orientation), in continuous
pixel coordinates: pixel ``(i, j)`` covers ``[i, i + 1] x [j, j + 1]``, so the image spans
``[0, width] x [0, height]``. Extra keys in an image or word entry (transcriptions, tags) are
ignored. A test split may carry no words: an image entry ``{}`` or ``{"words": {}}``.

Decisions per bad input. *Error* raises :class:`AnnotationError` (or ``FileNotFoundError``)
naming the file, image and word: the file cannot be trusted as a whole. *Skip* drops one word,
counts it under the reason shown, and the caller (``ReceiptDataset``) emits one warning per split
with the counts and the first few ``(file, word id)`` examples: the rest of the split is fine.

==========================================================  ========  ====================
Case                                                        Decision  Reason key
==========================================================  ========  ====================
annotation file missing                                     error     FileNotFoundError
file empty, not UTF-8, malformed or truncated JSON          error     (line/col in message)
top level not an object, no ``"images"`` object             error
no images at all (empty split)                              error
duplicate key in any object (json keeps only the last)      error
file name empty, absolute, ``..``, backslash, drive, NUL    error     (escapes image dir)
image entry not an object                                   error
``"words"`` missing (only with ``require_words=True``)      error
``"words"`` not an object, word entry not an object         error
``"points"`` missing / not a list of numeric [x, y] pairs   error
no usable word left in the split (``require_words=True``)   error     (raised by the dataset)
image file missing / header unreadable                      error     (dataset, at start)
image data corrupt or truncated                             error     (``ImageLoadError``, item)
consecutive duplicate vertices, closing point == first      fixed     (normalisation)
NaN or infinite coordinate                                  skip      ``non_finite``
fewer than 3 distinct vertices                              skip      ``too_few_points``
area below 1e-6 px² (collinear / degenerate)                skip      ``zero_area``
self-intersecting or self-touching ring (bow-tie)           skip      ``self_intersecting``
a vertex more than ``max_outside_frac`` of the image        skip      ``outside_image``
dimension outside, or no overlap with the image at all
==========================================================  ========  ====================

``max_outside_frac`` defaults to 0.25: boxes that spill a little over the border (common when a
receipt is cut at the edge) are kept and later clipped by target generation; a vertex more than a
quarter of the image width/height outside is an annotation in the wrong frame or a typo.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import shapely
from numpy.typing import ArrayLike

from ocr.errors import InputError, MissingPathError

__all__ = [
    "MIN_AREA_PX2",
    "SKIP_REASONS",
    "AnnotationError",
    "ImageAnnotation",
    "SkipReport",
    "WordAnnotation",
    "check_file_name",
    "clean_words",
    "load_annotations",
    "normalize_polygon",
    "polygon_problem",
    "write_annotations",
]

#: Skip reasons, in the order the checks run.
SKIP_REASONS = ("non_finite", "too_few_points", "zero_area", "self_intersecting", "outside_image")

_DRIVE = re.compile(r"^[A-Za-z]:")

#: Polygons with an area below this (px²) are degenerate.
MIN_AREA_PX2 = 1e-6


class AnnotationError(InputError, ValueError):
    """A structural problem in an annotation file; the message names file, image and word."""


@dataclass(frozen=True, eq=False)
class WordAnnotation:
    """One annotated word (compared by identity: it holds an array).

    Args:
        word_id: the key of the word in the file (e.g. ``"0001"``).
        points: (N, 2) (x, y) vertices in the stored pixel frame; stored as a read-only float64
            copy so the frozen object really cannot change.
    """

    word_id: str
    points: np.ndarray

    def __post_init__(self) -> None:
        pts = np.array(self.points, dtype=np.float64).reshape(-1, 2)
        pts.setflags(write=False)
        object.__setattr__(self, "points", pts)


@dataclass(frozen=True, eq=False)
class ImageAnnotation:
    """The words of one image, in file order.

    Args:
        file_name: the image key, a relative path inside the split's image folder.
        words: the words of the image (empty for an unannotated test image).
    """

    file_name: str
    words: tuple[WordAnnotation, ...]


# --------------------------------------------------------------------------------------------
# writing


def write_annotations(
    path: str | os.PathLike[str], images: Mapping[str, Mapping[str, ArrayLike]]
) -> None:
    """Write a split file atomically: ``images`` maps file name -> word id -> points (N, 2).

    The file is written to a temporary file in the target folder and moved into place with
    ``os.replace``, so a reader never sees a half-written file. Parent folders are created.
    Points are written as plain float lists; file names are checked like :func:`load_annotations`
    does, so a written file always loads.
    """
    path = Path(path)
    doc: dict[str, Any] = {"images": {}}
    for file_name, words in images.items():
        check_file_name(file_name, source=path.name)
        entry: dict[str, Any] = {}
        for word_id, points in words.items():
            arr = np.asarray(points, dtype=np.float64)
            if arr.ndim != 2 or arr.shape[1] != 2:
                raise AnnotationError(
                    f"{path.name}: image {file_name!r}, word {str(word_id)!r}: points must have "
                    f"shape (N, 2), got {arr.shape}"
                )
            if not np.isfinite(arr).all():
                raise AnnotationError(
                    f"{path.name}: image {file_name!r}, word {str(word_id)!r}: points must be "
                    "finite (NaN/Infinity are not JSON)"
                )
            entry[str(word_id)] = {"points": arr.tolist()}
        doc["images"][file_name] = {"words": entry}
    write_json_atomic(path, doc, ensure_ascii=False, allow_nan=False)


def write_json_atomic(path: str | os.PathLike[str], doc: Any, **dump_kwargs: Any) -> None:
    """Write JSON through a temporary file in the same folder + ``os.replace``: a reader never
    sees a half-written file, and an interrupted write leaves the old file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, **dump_kwargs)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------
# reading


class _DupDict(dict[str, Any]):
    """A JSON object that remembers keys that occurred more than once."""

    duplicates: list[str]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = _DupDict()
    dups = []
    for key, value in pairs:
        if key in obj:
            dups.append(key)
        obj[key] = value
    obj.duplicates = dups
    return obj


def _check_unique(obj: Any, where: str) -> None:
    dups = getattr(obj, "duplicates", None)
    if dups:
        raise AnnotationError(
            f"{where}: duplicate key {dups[0]!r} (JSON would silently keep only the last value)"
        )


def check_file_name(file_name: str, *, source: str = "") -> None:
    """Raise :class:`AnnotationError` unless ``file_name`` is a relative path that stays inside
    the image folder (no ``..``, no absolute path or drive, no backslash, not empty)."""
    where = f"{source}: image {file_name!r}" if source else f"image {file_name!r}"
    if not isinstance(file_name, str) or not file_name.strip():
        raise AnnotationError(f"{where}: empty file name")
    if "\\" in file_name or "\x00" in file_name:
        # A backslash is a separator on Windows ("..\\x.jpg"); no real receipt name needs one.
        raise AnnotationError(f"{where}: file name contains a backslash or NUL character")
    parts = PurePosixPath(file_name).parts
    # "C:x.jpg" is drive-relative on Windows; a colon elsewhere ("12:30.jpg") is a plain name.
    if file_name.startswith("/") or _DRIVE.match(file_name) or ".." in parts:
        raise AnnotationError(f"{where}: file name escapes the image folder")
    if file_name.endswith("/"):
        raise AnnotationError(f"{where}: file name is a folder")


def _json_error(source: str, text: str, exc: json.JSONDecodeError) -> AnnotationError:
    # json reports an unterminated string at its opening quote, so the rest is not empty there.
    if not text[exc.pos :].strip() or exc.msg.startswith("Unterminated string"):
        return AnnotationError(
            f"{source}: file is truncated (JSON ends unexpectedly at line {exc.lineno}, "
            f"column {exc.colno}: {exc.msg})"
        )
    return AnnotationError(
        f"{source}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    )


def _is_number(value: Any) -> bool:
    # bool is an int subclass in Python; `true` is not a coordinate.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_points(raw: Any, where: str) -> np.ndarray:
    if not isinstance(raw, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(map(_is_number, p)) for p in raw
    ):
        shown = repr(raw)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise AnnotationError(f"{where}: points must be a list of [x, y] pairs, got {shown}")
    return np.asarray(raw, dtype=np.float64).reshape(-1, 2)


def load_annotations(
    path: str | os.PathLike[str], *, require_words: bool = False
) -> list[ImageAnnotation]:
    """Load a split file, checking its structure; geometry is checked by :func:`polygon_problem`.

    Args:
        path: the JSON file.
        require_words: every image entry must have a ``"words"`` object (train/val splits). When
            false (test splits) an image entry ``{}`` means no words.

    Returns:
        One :class:`ImageAnnotation` per image, in file order; points are float64 as written.

    Raises:
        FileNotFoundError: the file does not exist.
        AnnotationError: any structural problem (see the module docstring table).
    """
    path = Path(path)
    source = path.name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MissingPathError(f"annotation file not found: {path}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AnnotationError(f"{source}: not UTF-8 text ({exc})") from None
    if not text.strip():
        raise AnnotationError(f"{source}: file is empty")
    try:
        doc = json.loads(text, object_pairs_hook=_pairs_hook)
    except json.JSONDecodeError as exc:
        raise _json_error(source, text, exc) from None
    except RecursionError:
        raise AnnotationError(f"{source}: JSON nested too deeply") from None

    if not isinstance(doc, dict):
        raise AnnotationError(f"{source}: top level must be an object, got {type(doc).__name__}")
    _check_unique(doc, source)
    images = doc.get("images")
    if images is None:
        raise AnnotationError(f"{source}: no 'images' key at the top level (keys: {sorted(doc)})")
    if not isinstance(images, dict):
        raise AnnotationError(f"{source}: 'images' must be an object, got {type(images).__name__}")
    _check_unique(images, f"{source}: 'images'")
    if not images:
        raise AnnotationError(f"{source}: empty split (no images)")

    result = []
    for file_name, entry in images.items():
        check_file_name(file_name, source=source)
        where = f"{source}: image {file_name!r}"
        if not isinstance(entry, dict):
            raise AnnotationError(f"{where}: entry must be an object, got {type(entry).__name__}")
        _check_unique(entry, where)
        if "words" not in entry:
            if require_words:
                raise AnnotationError(f"{where}: no 'words' (required for this split)")
            result.append(ImageAnnotation(file_name, ()))
            continue
        words = entry["words"]
        if not isinstance(words, dict):
            raise AnnotationError(f"{where}: 'words' must be an object, got {type(words).__name__}")
        _check_unique(words, f"{where}, 'words'")
        parsed = []
        for word_id, word in words.items():
            wwhere = f"{where}, word {word_id!r}"
            if not isinstance(word, dict):
                raise AnnotationError(
                    f"{wwhere}: entry must be an object, got {type(word).__name__}"
                )
            _check_unique(word, wwhere)
            if "points" not in word:
                raise AnnotationError(f"{wwhere}: no 'points'")
            parsed.append(WordAnnotation(word_id, _parse_points(word["points"], wwhere)))
        result.append(ImageAnnotation(file_name, tuple(parsed)))
    return result


# --------------------------------------------------------------------------------------------
# geometry


def normalize_polygon(points: ArrayLike) -> np.ndarray:
    """Drop consecutive duplicate vertices and closing points equal to the first (float64 (N, 2)).

    Exact comparison: annotation tools repeat a vertex verbatim; near-duplicates are real geometry.
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if len(pts) > 1:
        keep = np.ones(len(pts), dtype=bool)
        keep[1:] = np.any(pts[1:] != pts[:-1], axis=1)
        pts = pts[keep]
    while len(pts) > 1 and np.array_equal(pts[-1], pts[0]):
        pts = pts[:-1]
    return pts


def polygon_problem(
    points: ArrayLike,
    image_size: tuple[int, int] | None = None,
    *,
    max_outside_frac: float | None = 0.25,
) -> str | None:
    """Why a word polygon cannot be used as a target (a key of :data:`SKIP_REASONS`), or None.

    Args:
        points: (N, 2) vertices, already passed through :func:`normalize_polygon`.
        image_size: (width, height) of the stored image in pixels; None skips the
            outside-the-image check.
        max_outside_frac: how far (fraction of the image width/height) a vertex may lie outside
            the image before the word is rejected; None disables the vertex check (the word must
            still overlap the image). Default 0.25.
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    if not np.isfinite(pts).all():
        return "non_finite"
    if len(pts) < 3:
        return "too_few_points"
    # Convex hull area tells degenerate (collinear) input apart from a bow-tie, whose signed area
    # can also be ~0 but whose hull is not.
    if shapely.MultiPoint(pts).convex_hull.area < MIN_AREA_PX2:
        return "zero_area"
    poly = shapely.Polygon(pts)
    if not poly.is_valid:
        return "self_intersecting"
    if image_size is not None:
        width, height = image_size
        if max_outside_frac is not None:
            mx, my = max_outside_frac * width, max_outside_frac * height
            x, y = pts[:, 0], pts[:, 1]
            if (
                (x < -mx).any()
                or (x > width + mx).any()
                or (y < -my).any()
                or (y > height + my).any()
            ):
                return "outside_image"
        if poly.intersection(shapely.box(0, 0, width, height)).area < MIN_AREA_PX2:
            return "outside_image"
    return None


@dataclass
class SkipReport:
    """Counts of skipped words per reason, with the first few ``(file, word id)`` examples.

    Args:
        max_examples: examples kept per reason. Default 3.
    """

    max_examples: int = 3
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def add(self, reason: str, file_name: str, word_id: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < self.max_examples:
            ex.append((file_name, word_id))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def message(self, source: str, total_words: int) -> str:
        """One warning line: ``source: skipped K of N words: reason=count (e.g. ...); ...``."""
        parts = []
        for reason in sorted(self.counts, key=lambda r: (-self.counts[r], r)):
            examples = ", ".join(f"{f!r} word {w!r}" for f, w in self.examples[reason])
            more = "" if self.counts[reason] <= len(self.examples[reason]) else ", ..."
            parts.append(f"{reason}={self.counts[reason]} (e.g. {examples}{more})")
        return f"{source}: skipped {self.total} of {total_words} words: " + "; ".join(parts)


def clean_words(
    image: ImageAnnotation,
    image_size: tuple[int, int] | None,
    report: SkipReport,
    *,
    max_outside_frac: float | None = 0.25,
) -> ImageAnnotation:
    """Normalise every word of ``image`` and drop (and count in ``report``) the unusable ones."""
    kept = []
    for word in image.words:
        pts = normalize_polygon(word.points)
        reason = polygon_problem(pts, image_size, max_outside_frac=max_outside_frac)
        if reason is None:
            kept.append(WordAnnotation(word.word_id, pts))
        else:
            report.add(reason, image.file_name, word.word_id)
    return ImageAnnotation(image.file_name, tuple(kept))

"""``ReceiptDataset``: one split of receipt images with word polygons, ready for DB targets."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from trainperf.probe.worker import report_part

from ocr.data.annotations import (
    AnnotationError,
    SkipReport,
    clean_words,
    load_annotations,
)
from ocr.data.transforms import ImageLoadError, ReceiptTransform, apply_matrix, load_image
from ocr.errors import MissingPathError

__all__ = ["ReceiptDataset"]

# How many missing image names an error lists before "... and N more".
_MAX_LISTED = 5


@dataclass(frozen=True, eq=False)
class _Sample:
    file_name: str
    path: Path
    raw_size: tuple[int, int]
    word_ids: tuple[str, ...]
    polygons: tuple[np.ndarray, ...]  # float64 (N, 2), raw stored-pixel frame


class ReceiptDataset(Dataset[dict[str, Any]]):
    """One split: images of ``image_dir`` annotated by ``annotation_file``.

    At construction the annotations are loaded and checked, every image's stored size is read
    from its header (cheap, no decode), and unusable words are skipped and reported in ONE
    ``UserWarning`` for the split (see ``ocr.data.annotations`` for the error/skip table). A
    missing image is an error, not a skip: the split would silently shrink otherwise.

    Args:
        image_dir: folder the annotation's file names are relative to.
        annotation_file: the split's JSON file.
        transform: turns an oriented image and its polygons into the model input
            (its ``train`` flag decides whether items are augmented).
        require_words: train/val splits: every image entry must have ``"words"``, and a split
            left without a single usable word is an error. Default False (test splits).
        max_outside_frac: a word with a vertex farther outside the image than this fraction of
            the image width/height is skipped; ``None`` keeps any word overlapping the image.
            Default 0.25.
        file_names: only these images of the file (a flat-layout folder's train or val part);
            ``None`` = every image.

    Attributes:
        skipped: skip reason -> number of words skipped for it.
        num_words: number of words kept.

    Items are dicts with exactly: ``image`` (float32 (3, S, S), normalised), ``polygons``
    (list of float32 (N, 2) canvas pixel (x, y)), ``word_ids`` (list of str, parallel),
    ``filename`` (the annotation key), ``inverse_matrix`` (float64 (3, 3): canvas -> raw
    stored-pixel frame, where predictions are written) and ``raw_size`` ((width, height) of the
    stored image). Training randomness comes from torch's RNG, so DataLoader worker seeding
    (and ``seed_everything(workers=True)``) makes it reproducible and distinct per worker.
    """

    def __init__(
        self,
        image_dir: str | os.PathLike[str],
        annotation_file: str | os.PathLike[str],
        transform: ReceiptTransform,
        *,
        require_words: bool = False,
        max_outside_frac: float | None = 0.25,
        file_names: Collection[str] | None = None,
    ) -> None:
        self.image_dir = Path(image_dir)
        self.annotation_file = Path(annotation_file)
        self.transform = transform
        source = self.annotation_file.name
        if not self.image_dir.is_dir():
            raise MissingPathError(f"{source}: image folder not found: {self.image_dir}")
        images = load_annotations(self.annotation_file, require_words=require_words)
        if file_names is not None:
            images = [image for image in images if image.file_name in file_names]

        root = os.path.normpath(os.path.abspath(self.image_dir))
        missing: list[str] = []
        report = SkipReport()
        total_words = 0
        samples: list[_Sample] = []
        for image in images:
            # File names were checked by load_annotations; this guards the joined path as well.
            path = Path(os.path.normpath(os.path.join(root, image.file_name)))
            if os.path.commonpath([root, str(path)]) != root:
                raise AnnotationError(f"{source}: image {image.file_name!r} escapes {root}")
            if not path.is_file():
                missing.append(image.file_name)
                continue
            raw_size = _header_size(path)
            total_words += len(image.words)
            clean = clean_words(image, raw_size, report, max_outside_frac=max_outside_frac)
            samples.append(
                _Sample(
                    file_name=image.file_name,
                    path=path,
                    raw_size=raw_size,
                    word_ids=tuple(w.word_id for w in clean.words),
                    polygons=tuple(w.points for w in clean.words),
                )
            )
        if missing:
            listed = ", ".join(repr(m) for m in missing[:_MAX_LISTED])
            more = f" and {len(missing) - _MAX_LISTED} more" if len(missing) > _MAX_LISTED else ""
            raise MissingPathError(
                f"{source}: {len(missing)} of {len(images)} images not found in "
                f"{self.image_dir}: {listed}{more}"
            )
        self._samples = samples
        self.skipped: dict[str, int] = dict(report.counts)
        self.num_words = total_words - report.total
        if report.total:
            warnings.warn(report.message(source, total_words), UserWarning, stacklevel=2)
        if require_words and self.num_words == 0:
            raise AnnotationError(
                f"{source}: no usable word in the split ({total_words} annotated, "
                f"{report.total} skipped); training on it would learn 'no text anywhere'"
            )

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        sample = self._samples[index]
        decode_start = time.perf_counter_ns()
        image, raw_to_image, raw_size = load_image(
            sample.path, min_longest_side=self.transform.min_source_side
        )
        report_part("decode", time.perf_counter_ns() - decode_start)
        if raw_size != sample.raw_size:
            raise ImageLoadError(
                f"image {sample.path} changed since the dataset was built: "
                f"size {raw_size}, expected {sample.raw_size}"
            )
        if self.transform.train:
            # Drawn from torch's RNG: worker seeding makes it reproducible and per-worker.
            seed = int(torch.randint(0, 2**63 - 1, (1,), dtype=torch.int64).item())
            rng = np.random.default_rng(seed)
        else:
            rng = np.random.default_rng(0)  # unused: evaluation is deterministic
        polygons = [apply_matrix(raw_to_image, p) for p in sample.polygons]
        transform_start = time.perf_counter_ns()
        tensor, canvas_polygons, image_to_canvas = self.transform(image, polygons, rng)
        report_part("transform", time.perf_counter_ns() - transform_start)
        inverse = np.linalg.inv(image_to_canvas @ raw_to_image)
        return {
            "image": tensor,
            "polygons": canvas_polygons,
            "word_ids": list(sample.word_ids),
            "filename": sample.file_name,
            "inverse_matrix": inverse,
            "raw_size": sample.raw_size,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.annotation_file.name}: {len(self)} images, "
            f"{self.num_words} words, skipped={self.skipped})"
        )


def _header_size(path: Path) -> tuple[int, int]:
    """Stored (width, height) from the header only: PIL's open is lazy and decodes nothing."""
    try:
        with Image.open(path) as img:
            width, height = img.size
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as exc:
        raise ImageLoadError(f"cannot read image header of {path}: {exc}") from exc
    return int(width), int(height)

"""Where a dataset folder keeps its images and annotations: the two layouts ``ocr-train`` and
``ocr-test`` read, and which images of it make each split.

- **split layout** (the receipt competition's): ``images/<split>/`` and ``jsons/<split>.json``
  per split (``train``, ``val``, ``test``);
- **flat layout** (receipts as people keep them): ``images/`` and one annotation file at the
  top of the folder (``annotations.json``, or the only ``*.json`` there). Training splits it
  into ``train`` and ``val`` by a seeded ratio (``data.val_fraction``, ``data.split_seed``),
  the same images every run; ``test`` (``ocr-test``'s default) is every image.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from ocr.data.annotations import load_annotations
from ocr.errors import MissingPathError

#: The layouts that work, shown in every error about a folder that is neither.
LAYOUTS_HELP = (
    "layouts that work: split layout <dir>/images/{train,val,test}/ + "
    "<dir>/jsons/{train,val,test}.json; flat layout <dir>/images/ + one annotation file "
    "<dir>/annotations.json (train/val split by data.val_fraction and data.split_seed; "
    "ocr-test uses every image)"
)
FLAT_SPLITS = ("train", "val", "test")
_FLAT_ANNOTATION = "annotations.json"


class DatasetLayoutError(MissingPathError):
    """A dataset folder in neither layout; the message says what it holds and what works."""


@dataclass(frozen=True)
class SplitSource:
    """The images of one split: a folder, the annotation file naming them, and which of the
    file's images belong to the split (``None``: all of them)."""

    image_dir: Path
    annotation_file: Path
    file_names: frozenset[str] | None = None


def _flat_annotation_file(dataset_dir: Path) -> Path | None:
    """The flat layout's annotation file, or ``None`` when the folder is not in it."""
    if not (dataset_dir / "images").is_dir():
        return None
    if (dataset_dir / _FLAT_ANNOTATION).is_file():
        return dataset_dir / _FLAT_ANNOTATION
    found = sorted(p for p in dataset_dir.glob("*.json") if p.is_file())
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise DatasetLayoutError(
            f"data.dataset_dir={dataset_dir}: images/ and {len(found)} annotation files "
            f"({names}); the flat layout takes one, named {_FLAT_ANNOTATION} when there are "
            f"several; {LAYOUTS_HELP}"
        )
    return found[0] if found else None


def _describe(dataset_dir: Path) -> str:
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in dataset_dir.iterdir())
    shown = ", ".join(entries[:8]) + (f" and {len(entries) - 8} more" if len(entries) > 8 else "")
    return f"it holds {shown}" if entries else "it is empty"


def split_source(
    dataset_dir: Path, split: str, *, val_fraction: float, seed: int, used_as: str = ""
) -> SplitSource:
    """Where the images of ``split`` are in ``dataset_dir`` (either layout).

    ``used_as`` names the stage the split serves when it differs (``ocr-test split=val``), for
    error messages. Raises :class:`MissingPathError` for a missing folder and
    :class:`DatasetLayoutError` for a folder in neither layout or without the split.
    """
    role = f"split {split!r}" + (f" (used as the {used_as} split)" if used_as else "")
    if not dataset_dir.is_dir():
        raise MissingPathError(
            f"data.dataset_dir: no such folder: {dataset_dir} (or experiment=synthetic_debug "
            f"for generated data); {LAYOUTS_HELP}"
        )
    split_ann = dataset_dir / "jsons" / f"{split}.json"
    if (dataset_dir / "jsons").is_dir():
        if not split_ann.is_file():
            raise DatasetLayoutError(
                f"annotation file for {role} not found: {split_ann} "
                f"(data.dataset_dir={dataset_dir}); {LAYOUTS_HELP}"
            )
        return SplitSource(dataset_dir / "images" / split, split_ann)
    annotation_file = _flat_annotation_file(dataset_dir)
    if annotation_file is None:
        raise DatasetLayoutError(
            f"data.dataset_dir={dataset_dir} is in neither layout ({_describe(dataset_dir)}); "
            f"{LAYOUTS_HELP}"
        )
    if split not in FLAT_SPLITS:
        raise DatasetLayoutError(
            f"{role}: a flat-layout folder ({annotation_file}) has the splits "
            f"{', '.join(FLAT_SPLITS)} (train/val by data.val_fraction, test = every image)"
        )
    image_dir = dataset_dir / "images"
    if split == "test":
        return SplitSource(image_dir, annotation_file)
    train, val = flat_split(annotation_file, val_fraction=val_fraction, seed=seed)
    return SplitSource(image_dir, annotation_file, train if split == "train" else val)


def flat_split(
    annotation_file: Path, *, val_fraction: float, seed: int
) -> tuple[frozenset[str], frozenset[str]]:
    """(train, val) image names of a flat-layout file: the names sorted, shuffled by ``seed``,
    the first ``round(n * val_fraction)`` (at least one, at most n − 1) for validation."""
    names = sorted(image.file_name for image in load_annotations(annotation_file))
    if len(names) < 2:
        raise DatasetLayoutError(
            f"{annotation_file}: {len(names)} image; training on a flat-layout folder needs at "
            "least 2 (one for training, one for validation)"
        )
    random.Random(seed).shuffle(names)
    n_val = min(max(1, round(len(names) * val_fraction)), len(names) - 1)
    return frozenset(names[n_val:]), frozenset(names[:n_val])

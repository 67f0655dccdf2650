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

Files, by job: :mod:`ocr.data.receipt_content` writes a receipt's words and lines,
:mod:`ocr.data.receipt_render` lays them out and renders the photo (:class:`ReceiptParams`,
:func:`generate_receipt`), and this module writes datasets (splits, seeds, worker processes,
the output folder's safety, the manifest) and is the ``ocr-synth`` command.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from ocr.cli_errors import expected_errors
from ocr.data.annotations import write_annotations, write_json_atomic
from ocr.data.receipt_render import ReceiptParams, generate_receipt, render_receipt
from ocr.errors import ConfigError, InputError

__all__ = [
    "DEFAULT_SPLITS",
    "GENERATOR_VERSION",
    "OutputFolderError",
    "ReceiptParams",
    "UnknownParameterError",
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

_SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


class UnknownParameterError(InputError, TypeError):
    """A receipt parameter :class:`ReceiptParams` does not have (a ``TypeError``, as for an
    unexpected keyword argument)."""


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
        ConfigError: a bad split, seed or receipt parameter (named in the message).
        UnknownParameterError: an unknown receipt parameter (a ``TypeError``).
    """
    del workers
    try:
        receipt = ReceiptParams(**receipt_kwargs)
    except TypeError:
        known = sorted(ReceiptParams.__dataclass_fields__)
        unknown = sorted(set(receipt_kwargs) - set(known))
        raise UnknownParameterError(
            f"unknown receipt parameter(s) {unknown}; known: {known}"
        ) from None
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
    image, polygons = render_receipt(rng, task.params)
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

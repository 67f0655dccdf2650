"""Batch collation with DB target generation (runs inside DataLoader workers)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from trainperf.probe.worker import report_part

from ocr.data.compact import flag_bytes, pack_flags, sample_bytes, sample_views
from ocr.data.targets import DBTargets, make_db_targets, validate_target_params, warm_up
from ocr.data.transforms import IMAGENET_MEAN, IMAGENET_STD, normalization_constants

if TYPE_CHECKING:
    from ocr.data.cache import PolygonCache

ITEM_KEYS = frozenset({"image", "polygons", "word_ids", "filename", "inverse_matrix", "raw_size"})
MAP_KEYS = ("prob_maps", "prob_masks", "thresh_maps", "thresh_masks")


class DBCollateFN:
    """Stack dataset items into a batch and, for training/validation, build the DB target maps.

    Each item is a dict with exactly the keys ``image`` (float32 tensor ``(3, H, W)``, or uint8
    ``(H, W, 3)`` from a compact transform), ``polygons``
    (list of float ``(N, 2)`` arrays in canvas pixels), ``word_ids`` (list of str, one per polygon),
    ``filename`` (str), ``inverse_matrix`` (float64 ``(3, 3)``: canvas -> raw image) and
    ``raw_size`` (``(w, h)`` of the raw image). The batch holds ``images`` ``(B, 3, H, W)``,
    ``prob_maps``/``prob_masks``/``thresh_maps``/``thresh_masks`` float32 ``(B, H, W)`` (not in
    inference mode), ``polygons`` and ``word_ids`` (lists of the items' lists, unchanged),
    ``filenames``, ``inverse_matrices`` float64 ``(B, 3, 3)`` and ``raw_sizes`` (list of
    ``(w, h)``).
    Items with uint8 images make a *compact* batch instead (:mod:`ocr.data.compact`: uint8
    ``images`` ``(B, H, W, 3)`` with their ``normalization``, the four maps packed into one uint8
    ``targets`` tensor, ``inverse_matrices`` a float64 numpy array), which the LightningModule
    expands on the device into exactly the batch above.
    Picklable, so DataLoader workers can use it.

    Args:
        shrink_ratio: DB shrink ratio ``r`` (offset ``D = A(1 - r^2)/L`` pixels), in ``(0, 1)``.
            Default 0.4.
        thresh_min: threshold-map value away from text borders, in ``[0, thresh_max)``. Default 0.3.
        thresh_max: threshold-map value on text borders, in ``(thresh_min, 1]``. Default 0.7.
        inference_mode: skip target generation entirely (test/predict: no loss). Default False.
        cache: a :class:`~ocr.data.cache.PolygonCache` to read the maps from and store them in
            (shared by all workers through its folder); ``None`` computes every map. Default None.
        mean, std: the normalisation of the transform that made the items (RGB, [0, 1] scale):
            a compact batch carries it for the device. Default ImageNet's.
    """

    def __init__(
        self,
        shrink_ratio: float = 0.4,
        thresh_min: float = 0.3,
        thresh_max: float = 0.7,
        inference_mode: bool = False,
        cache: PolygonCache | None = None,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
    ) -> None:
        validate_target_params(shrink_ratio, thresh_min, thresh_max)
        self.normalization = normalization_constants(mean, std)
        self.shrink_ratio = float(shrink_ratio)
        self.thresh_min = float(thresh_min)
        self.thresh_max = float(thresh_max)
        self.inference_mode = bool(inference_mode)
        self.cache = cache
        if not self.inference_mode:
            # Compile (or load from numba's disk cache) the target kernels here, in the main
            # process before DataLoader workers fork, so no worker stalls on its first batch.
            warm_up()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(shrink_ratio={self.shrink_ratio}, "
            f"thresh_min={self.thresh_min}, thresh_max={self.thresh_max}, "
            f"inference_mode={self.inference_mode}, cache={self.cache!r})"
        )

    def __call__(self, batch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if len(batch) == 0:
            raise ValueError("DBCollateFN got an empty batch")
        for index, item in enumerate(batch):
            _check_item(item, index)
        filenames = [str(item["filename"]) for item in batch]
        shapes = [(str(item["image"].dtype), *item["image"].shape) for item in batch]
        if len(set(shapes)) != 1:
            listing = ", ".join(
                f"{name} {shape}" for name, shape in zip(filenames, shapes, strict=True)
            )
            raise ValueError(
                f"images in one batch must have the same size and dtype, got: {listing}"
            )
        if isinstance(batch[0]["image"], torch.Tensor) and batch[0]["image"].dtype == torch.uint8:
            return self._compact(batch, filenames)
        _, _, height, width = shapes[0]

        out: dict[str, Any] = {
            "images": _stack([item["image"] for item in batch]),
            "polygons": [item["polygons"] for item in batch],
            "word_ids": [item["word_ids"] for item in batch],
            "filenames": filenames,
            "inverse_matrices": torch.from_numpy(
                np.stack([np.asarray(item["inverse_matrix"], dtype=np.float64) for item in batch])
            ),
            "raw_sizes": [(int(item["raw_size"][0]), int(item["raw_size"][1])) for item in batch],
        }
        if self.inference_mode:
            return out

        targets_start = time.perf_counter_ns()
        # One (B, H, W) tensor per map, filled in place per sample through its numpy view.
        tensors = {key: _empty_shared((len(batch), height, width)) for key in MAP_KEYS}
        maps = {key: t.numpy() for key, t in tensors.items()}
        for b, item in enumerate(batch):
            self._make(item, filenames[b], DBTargets(*(maps[key][b] for key in MAP_KEYS)))
        out.update(tensors)
        report_part("targets", time.perf_counter_ns() - targets_start)
        return out

    def _make(self, item: Mapping[str, Any], filename: str, views: DBTargets) -> None:
        """The DB maps of ``item`` written into ``views`` (computed, or read from the cache); a
        bad polygon's ``ValueError`` names the image."""
        make = make_db_targets if self.cache is None else self.cache.get_or_make
        height, width = views.prob_map.shape
        try:
            make(
                item["polygons"],
                height,
                width,
                shrink_ratio=self.shrink_ratio,
                thresh_min=self.thresh_min,
                thresh_max=self.thresh_max,
                out=views,
            )
        except ValueError as err:
            raise ValueError(f"{filename}: {err}") from err

    def _compact(self, batch: Sequence[Mapping[str, Any]], filenames: list[str]) -> dict[str, Any]:
        """A compact batch (:mod:`ocr.data.compact`) of items with uint8 ``(H, W, 3)`` images."""
        height, width, _ = batch[0]["image"].shape
        out: dict[str, Any] = {
            "images": _stack([item["image"] for item in batch]),
            "normalization": self.normalization,
            "polygons": [item["polygons"] for item in batch],
            "word_ids": [item["word_ids"] for item in batch],
            "filenames": filenames,
            "inverse_matrices": np.stack(
                [np.asarray(item["inverse_matrix"], dtype=np.float64) for item in batch]
            ),
            "raw_sizes": [(int(item["raw_size"][0]), int(item["raw_size"][1])) for item in batch],
        }
        if self.inference_mode:
            return out
        targets_start = time.perf_counter_ns()
        targets = _empty_shared((len(batch), sample_bytes(height, width)), torch.uint8)
        rows = targets.numpy()
        rows[:, height * width : flag_bytes(height, width)] = 0  # the padding: no stale bytes
        binary = np.empty((3, height, width), np.uint8)  # the 0/1 maps, then packed into bits
        for b, item in enumerate(batch):
            flags, thresh = sample_views(rows[b], height, width)
            views = DBTargets(binary[0], binary[1], thresh, binary[2])
            self._make(item, filenames[b], views)
            pack_flags(views, flags)
        out["targets"] = targets
        report_part("targets", time.perf_counter_ns() - targets_start)
        return out


def _in_worker() -> bool:
    return torch.utils.data.get_worker_info() is not None


def _empty_shared(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised tensor; in a DataLoader worker, allocated in shared memory.

    A batch that a worker sends is moved to shared memory anyway (a copy when it is pickled);
    building it there (as ``default_collate`` does) saves that copy, and keeps the batch-sized
    buffers out of the worker's heap: freed there, glibc's dynamic mmap threshold keeps them as
    heap the worker never returns (measured: the demo's workers plateaued at ~320 MB USS each
    with heap buffers, ~130 MB with shared ones). ``_new_shared`` is what ``default_collate``
    calls; without it (another torch) the tensor is allocated normally."""
    if _in_worker():
        new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
        if new_shared is not None:
            storage = new_shared(math.prod(shape) * dtype.itemsize)
            return torch.empty(0, dtype=dtype).set_(storage).view(shape)
    return torch.empty(shape, dtype=dtype)


def _stack(images: list[torch.Tensor]) -> torch.Tensor:
    """``torch.stack``; in a DataLoader worker into shared memory (``default_collate`` does it)."""
    if _in_worker():
        return torch.utils.data.default_collate(images)
    return torch.stack(images)


def _check_item(item: Mapping[str, Any], index: int) -> None:
    """Clear errors for items that do not follow the dataset contract."""
    if not isinstance(item, Mapping):
        raise TypeError(f"batch item {index}: expected a dict, got {type(item).__name__}")
    name = item.get("filename", f"<batch item {index}>")
    keys = set(item)
    if keys != ITEM_KEYS:
        missing, extra = sorted(ITEM_KEYS - keys), sorted(keys - ITEM_KEYS)
        raise ValueError(
            f"{name}: batch item keys differ from the contract: "
            f"missing {missing}, unexpected {extra}"
        )
    image = item["image"]
    if not (
        isinstance(image, torch.Tensor)
        and image.ndim == 3
        and (
            (image.dtype == torch.float32 and image.shape[0] == 3)
            or (image.dtype == torch.uint8 and image.shape[2] == 3)
        )
    ):
        desc = (
            f"{image.dtype} {tuple(image.shape)}"
            if isinstance(image, torch.Tensor)
            else type(image).__name__
        )
        raise ValueError(
            f"{name}: 'image' must be a float32 tensor (3, H, W) or a uint8 tensor (H, W, 3), "
            f"got {desc}"
        )
    if len(item["polygons"]) != len(item["word_ids"]):
        raise ValueError(
            f"{name}: {len(item['polygons'])} polygons but {len(item['word_ids'])} word_ids"
        )
    if np.shape(item["inverse_matrix"]) != (3, 3):
        raise ValueError(
            f"{name}: 'inverse_matrix' must be (3, 3), got shape {np.shape(item['inverse_matrix'])}"
        )
    if len(item["raw_size"]) != 2:
        raise ValueError(f"{name}: 'raw_size' must be (w, h), got {item['raw_size']!r}")

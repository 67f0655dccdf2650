"""LightningDataModule for receipt text detection.

Folder layouts (:mod:`ocr.data.layout`)::

    dataset_dir/                       split layout (the receipt competition's)
      images/{train,val,test}/<file>   images of each split
      jsons/{train,val,test}.json      annotations (test may have no words)

    dataset_dir/                       flat layout (receipts as people keep them)
      images/<file>                    every image
      annotations.json                 one annotation file; train/val split by a seeded ratio,
                                       test = every image

With ``synthetic`` set, the folder is generated on first use by ``ocr.data.synth`` into a cache
folder keyed by the generator's parameters, so a changed spec never reuses stale data. An explicit
``dataset_dir`` is generated into only when it is new, empty or made by the generator: a folder
holding the user's own data is refused (``OutputFolderError``) and never modified.
``prepare_data`` runs on one process per node (Lightning's contract), so DDP ranks do not race.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cv2
import lightning as L
import torch
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader

from ocr.data.cache import polygon_cache_from_config
from ocr.data.collate import DBCollateFN
from ocr.data.dataset import ReceiptDataset
from ocr.data.layout import SplitSource, split_source
from ocr.data.transforms import ReceiptTransform
from ocr.errors import ConfigError

DEFAULT_CACHE_ROOT = "~/.cache/receipt-ocr"

log = logging.getLogger(__name__)


def default_cache_root() -> Path:
    """``$OCR_CACHE_DIR`` or ``~/.cache/receipt-ocr``."""
    return Path(os.environ.get("OCR_CACHE_DIR", DEFAULT_CACHE_ROOT)).expanduser()


def synthetic_dataset_dir(spec: Mapping[str, Any], cache_root: str | Path | None = None) -> Path:
    """Cache folder for a synthetic spec: the hash covers every generator parameter."""
    root = Path(cache_root).expanduser() if cache_root else default_cache_root()
    # `workers` changes how fast the data is made, not what is made.
    content = {k: v for k, v in dict(spec).items() if k != "workers"}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]
    return root / f"synthetic-{digest}"


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask: what a container or ``taskset``
    grants), falling back to ``os.cpu_count()`` where affinity is unknown (macOS)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def capped_num_workers(num_workers: int) -> int:
    """``num_workers`` capped at :func:`usable_cores`, with one warning naming both numbers.

    More loader processes than cores only time-share those cores with each other and with the
    training step (and PyTorch warns about it at every DataLoader); capping keeps the run fast
    and the console quiet. Preset values are written for large machines, so this is common."""
    cores = usable_cores()
    if num_workers <= cores:
        return num_workers
    if getattr(rank_zero_only, "rank", 0) == 0:  # every DDP rank caps; one says so
        log.warning(
            "data.num_workers=%d exceeds the %d usable CPU core(s) of this process; using %d "
            "DataLoader workers (set data.num_workers to choose fewer)",
            num_workers,
            cores,
            cores,
        )
    return cores


def worker_init(worker_id: int) -> None:
    """DataLoader worker set-up: one OpenCV thread per worker (the workers already run in
    parallel; OpenCV's own pool would oversubscribe the cores), then Lightning's per-worker seeding
    when ``seed_everything(workers=True)`` asked for it (a custom ``worker_init_fn`` replaces
    Lightning's, so it is chained here)."""
    cv2.setNumThreads(1)
    if int(os.environ.get("PL_SEED_WORKERS", "0")):
        pl_worker_init_function(worker_id)


class ReceiptDataModule(L.LightningDataModule):
    """Receipt detection data: datasets, transforms, DB collate and DataLoaders.

    Args:
        dataset_dir: a folder in either layout (see module docstring). May be ``None``
            when ``synthetic`` is given: a cache folder is derived from the spec.
        canvas_size: side of the square model input in pixels (multiple of 32). Default 640.
        batch_size: training batch size (samples). Default 8.
        eval_batch_size: validation/test/predict batch size; ``None`` uses ``batch_size``.
        num_workers: DataLoader worker processes. Default 2; more than the usable cores are
            capped to them with one warning (:func:`capped_num_workers`). With workers, OpenCV
            in the main process runs on one thread from the first loader on (forked workers
            would otherwise deadlock on OpenCV's inherited thread pool).
        pin_memory: page-locked host memory for faster host-to-GPU copies; ``None`` = only when
            CUDA is available.
        persistent_workers: keep workers alive between epochs (only with ``num_workers > 0``).
        prefetch_factor: batches prefetched per worker; ``None`` keeps PyTorch's default.
        augment: keyword arguments of the training ``ReceiptTransform`` (rotation, scale, ...).
        collate: keyword arguments of ``DBCollateFN`` (shrink_ratio, thresh_min, thresh_max).
        synthetic: ``ocr.data.synth.generate_dataset`` arguments (``splits``, ``seed``, ...), or
            ``None`` for a real dataset.
        cache_root: where synthetic datasets are cached; ``None`` = ``$OCR_CACHE_DIR`` or
            ``~/.cache/receipt-ocr``.
        splits: names of the train/val/test/predict splits (file stems under ``jsons/``).
        polygon_cache: ``{enabled, max_bytes, dir}`` of the DB target cache
            (:func:`ocr.data.cache.polygon_cache_from_config`; ``dir`` ``None`` =
            ``<cache_root>/polygon-cache``); ``None`` = no cache. The validation loader uses it;
            the training loader only when its augmentation is geometrically deterministic
            (random rotation, scale or translation give new polygons, hence new keys, every time).
        val_fraction: flat layout only: the share of images held out for validation. Default 0.2.
        split_seed: flat layout only: the seed of that split (the same images every run).
        compact_batches: workers send compact batches (:mod:`ocr.data.compact`: uint8 images,
            the four target maps packed in one uint8 tensor; 3.5x fewer bytes, 2 tensors instead
            of 6), which the LightningModule expands on the device to the same float32 values.
            ``False``: the float32 batches of before (for comparisons). Default True.
    """

    def __init__(
        self,
        dataset_dir: str | Path | None = None,
        canvas_size: int = 640,
        batch_size: int = 8,
        eval_batch_size: int | None = None,
        num_workers: int = 2,
        pin_memory: bool | None = None,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        augment: Mapping[str, Any] | None = None,
        collate: Mapping[str, Any] | None = None,
        synthetic: Mapping[str, Any] | None = None,
        cache_root: str | Path | None = None,
        splits: Mapping[str, str] | None = None,
        polygon_cache: Mapping[str, Any] | None = None,
        val_fraction: float = 0.2,
        split_seed: int = 0,
        compact_batches: bool = True,
    ) -> None:
        super().__init__()
        if dataset_dir is None and synthetic is None:
            raise ConfigError("data.dataset_dir is required unless data.synthetic is set")
        if batch_size <= 0:
            raise ConfigError(f"data.batch_size must be positive, got {batch_size!r}")
        if num_workers < 0:
            raise ConfigError(f"data.num_workers must be >= 0, got {num_workers!r}")
        if not 0.0 < val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction must be in (0, 1), got {val_fraction!r}")
        self.val_fraction = float(val_fraction)
        self.split_seed = int(split_seed)
        self.synthetic = dict(synthetic) if synthetic is not None else None
        if dataset_dir is not None:
            self.dataset_dir = Path(dataset_dir).expanduser()
        else:
            assert self.synthetic is not None
            self.dataset_dir = synthetic_dataset_dir(self.synthetic, cache_root)
        self.canvas_size = int(canvas_size)
        self.batch_size = int(batch_size)
        self.eval_batch_size = int(eval_batch_size or batch_size)
        self.num_workers = capped_num_workers(int(num_workers))
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        self.persistent_workers = bool(persistent_workers) and self.num_workers > 0
        self.prefetch_factor = prefetch_factor
        self.augment = dict(augment or {})
        self.collate_kwargs = dict(collate or {})
        self.splits = {"train": "train", "val": "val", "test": "test", "predict": "test"}
        self.splits.update(splits or {})
        self.datasets: dict[str, ReceiptDataset] = {}
        self.compact_batches = bool(compact_batches)
        # Built eagerly so a bad transform argument fails at start-up, not in a worker.
        self.train_transform = ReceiptTransform(
            canvas_size=self.canvas_size, train=True, compact=self.compact_batches, **self.augment
        )
        self.eval_transform = ReceiptTransform(
            canvas_size=self.canvas_size, train=False, compact=self.compact_batches
        )
        # Validated here so a bad setting (e.g. `max_bytes: false`) fails at start-up.
        self.polygon_cache = polygon_cache_from_config(
            polygon_cache, Path(cache_root).expanduser() if cache_root else default_cache_root()
        )
        t = self.train_transform
        random_geometry = t.rotate_deg > 0 or t.scale_range[0] != t.scale_range[1]
        self.train_uses_cache = not (random_geometry or t.translate_frac > 0)

    # -- preparation -------------------------------------------------------------------------
    def prepare_data(self) -> None:
        if self.synthetic is None:
            return
        from ocr.data.synth import OutputFolderError, dataset_is_complete, generate_dataset

        spec = dict(self.synthetic)
        if dataset_is_complete(self.dataset_dir, spec):
            return
        try:
            generate_dataset(self.dataset_dir, **spec)
        except OutputFolderError as exc:
            # Typically a real dataset given as data.dataset_dir to a synthetic experiment: the
            # generator refused before writing anything; say which setting to change.
            raise OutputFolderError(
                exc.folder,
                exc.entries,
                f"data.dataset_dir holds files the synthetic generator did not make "
                f"({', '.join(exc.entries[:6]) or 'not a folder'}), and data.synthetic asks to "
                "generate receipts into it; nothing in it was changed. To train on the data in "
                "this folder, add data.synthetic=null (experiment=synthetic_debug turns "
                "generation on); to generate synthetic receipts, leave data.dataset_dir unset "
                "(they go to the cache folder) or name a new or empty folder",
            ) from None

    def split_source(self, stage: str) -> SplitSource:
        """Where the images of a stage's split are (either layout, :mod:`ocr.data.layout`)."""
        name = self.splits[stage]
        return split_source(
            self.dataset_dir,
            name,
            val_fraction=self.val_fraction,
            seed=self.split_seed,
            used_as=stage if name != stage else "",
        )

    def _dataset(self, stage: str) -> ReceiptDataset:
        if stage not in self.datasets:
            source = self.split_source(stage)
            transform = self.train_transform if stage == "train" else self.eval_transform
            self.datasets[stage] = ReceiptDataset(
                source.image_dir,
                source.annotation_file,
                transform,
                require_words=stage in ("train", "val"),
                file_names=source.file_names,
            )
        return self.datasets[stage]

    def setup(self, stage: str | None = None) -> None:
        wanted = {
            "fit": ("train", "val"),
            "validate": ("val",),
            "test": ("test",),
            "predict": ("predict",),
            None: ("train", "val"),
        }[stage]
        for name in wanted:
            self._dataset(name)

    # -- loaders -----------------------------------------------------------------------------
    def _loader(self, stage: str, *, shuffle: bool, inference: bool) -> DataLoader:
        batch_size = self.batch_size if stage == "train" else self.eval_batch_size
        use_cache = not inference and (stage != "train" or self.train_uses_cache)
        cache = self.polygon_cache if use_cache else None
        transform = self.train_transform if stage == "train" else self.eval_transform
        extra: dict[str, Any] = {}
        if self.num_workers > 0:
            # A worker forked after this process has used OpenCV's thread pool inherits the
            # pool's locks mid-state and deadlocks on its first OpenCV call (seen with
            # non-persistent workers after a validation epoch's postprocess). One thread here
            # joins the pool and keeps it from coming back; the workers run in parallel anyway.
            cv2.setNumThreads(1)
            extra["persistent_workers"] = self.persistent_workers
            if self.prefetch_factor is not None:
                extra["prefetch_factor"] = self.prefetch_factor
        return DataLoader(
            self._dataset(stage),
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            collate_fn=DBCollateFN(
                **self.collate_kwargs,
                inference_mode=inference,
                cache=cache,
                mean=transform.mean,  # a compact batch carries its items' normalisation
                std=transform.std,
            ),
            drop_last=False,
            worker_init_fn=worker_init if self.num_workers > 0 else None,
            **extra,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True, inference=False)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False, inference=False)

    def test_dataloader(self) -> DataLoader:
        # No loss is computed at test time, so no DB targets are generated.
        return self._loader("test", shuffle=False, inference=True)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("predict", shuffle=False, inference=True)

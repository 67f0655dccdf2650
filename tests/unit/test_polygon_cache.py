"""PolygonCache: lossless entries, hits across workers and runs, corruption, eviction, config."""

from __future__ import annotations

import multiprocessing
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from ocr.data.cache import PolygonCache, polygon_cache_from_config
from ocr.data.collate import DBCollateFN
from ocr.data.datamodule import ReceiptDataModule
from ocr.data.targets import DBTargets, make_db_targets

PARAMS = {"shrink_ratio": 0.4, "thresh_min": 0.3, "thresh_max": 0.7}
FIELDS = ("prob_map", "prob_mask", "thresh_map", "thresh_mask")
SMALL = 64


def receipt_polygons(seed: int, size: int, words: int) -> list[np.ndarray]:
    """Word boxes on text lines, like a receipt: some rotated slightly, a few tiny (ignored)."""
    rng = np.random.default_rng(seed)
    polygons = []
    for k in range(words):
        x = rng.uniform(0, size * 0.8)
        y = rng.uniform(0, size * 0.95)
        w = rng.uniform(size * 0.02, size * 0.15)
        h = rng.uniform(2, max(3.0, size * 0.03)) if k % 10 else 1.5
        tilt = rng.uniform(-0.05, 0.05) * w
        polygons.append(
            np.array([[x, y], [x + w, y + tilt], [x + w, y + tilt + h], [x, y + h]], np.float32)
        )
    return polygons


def empty_maps(size: int) -> DBTargets:
    return DBTargets(*(np.full((size, size), np.nan, np.float32) for _ in FIELDS))


def assert_maps_equal(got: DBTargets, want: DBTargets) -> None:
    for name in FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == np.float32
        # Bit patterns, so that even -0.0 vs 0.0 would count as a difference.
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), name


def fill(cache: PolygonCache, polygons: list[np.ndarray], size: int) -> tuple[bool, DBTargets]:
    out = empty_maps(size)
    hit = cache.get_or_make(polygons, size, size, out=out, **PARAMS)
    return hit, out


@pytest.fixture
def cache(tmp_path: Path) -> PolygonCache:
    return PolygonCache(tmp_path / "pc", max_bytes=1 << 30)


def test_hit_after_miss_is_bit_identical_and_entry_is_compact(cache: PolygonCache) -> None:
    size = 640
    polygons = receipt_polygons(0, size, 100)
    want = make_db_targets(polygons, size, size, **PARAMS)
    hit, first = fill(cache, polygons, size)
    assert not hit
    assert_maps_equal(first, want)
    hit, second = fill(cache, polygons, size)
    assert hit
    assert_maps_equal(second, want)
    stats = cache.stats()
    assert (stats["hits"], stats["misses"], stats["entries_written"]) == (1, 1, 1)
    assert stats["raw_bytes_per_entry"] == 2 * size * size * 4
    assert stats["bytes_per_entry"] <= 0.25 * stats["raw_bytes_per_entry"]
    key = cache.key(polygons, size, size, **PARAMS)
    assert cache.path(key).stat().st_size == stats["bytes_per_entry"]


def test_key_depends_on_polygons_canvas_and_parameters(cache: PolygonCache) -> None:
    polygons = receipt_polygons(1, SMALL, 4)
    base = cache.key(polygons, SMALL, SMALL, **PARAMS)
    assert base == cache.key([p.astype(np.float64) for p in polygons], SMALL, SMALL, **PARAMS)
    moved = [p.copy() for p in polygons]
    moved[2][0, 0] += 0.25
    variants = [
        cache.key(moved, SMALL, SMALL, **PARAMS),
        cache.key(polygons[::-1], SMALL, SMALL, **PARAMS),
        cache.key(polygons, SMALL, SMALL + 32, **PARAMS),
        cache.key(polygons, SMALL, SMALL, **{**PARAMS, "shrink_ratio": 0.5}),
        cache.key(polygons, SMALL, SMALL, **{**PARAMS, "thresh_min": 0.2}),
        cache.key(polygons, SMALL, SMALL, **{**PARAMS, "thresh_max": 0.8}),
    ]
    assert len({base, *variants}) == 7


def test_hits_across_runs_with_a_new_cache_object(tmp_path: Path) -> None:
    polygons = receipt_polygons(2, SMALL, 6)
    assert not fill(PolygonCache(tmp_path, 1 << 20), polygons, SMALL)[0]
    again = PolygonCache(tmp_path, 1 << 20)
    hit, maps = fill(again, polygons, SMALL)
    assert hit
    assert_maps_equal(maps, make_db_targets(polygons, SMALL, SMALL, **PARAMS))


class _Receipts(Dataset):
    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> dict:
        return {
            "image": torch.zeros(3, SMALL, SMALL),
            "polygons": receipt_polygons(100 + index, SMALL, 5),
            "word_ids": [str(k) for k in range(5)],
            "filename": f"r{index}.jpg",
            "inverse_matrix": np.eye(3),
            "raw_size": (SMALL, SMALL),
        }


class _CountingCollate:
    """DBCollateFN plus this worker's cache hit/miss counts for the batch (picklable)."""

    def __init__(self, cache: PolygonCache) -> None:
        self.inner = DBCollateFN(**PARAMS, cache=cache)

    def __call__(self, items: list[dict]) -> tuple[dict, int, int]:
        cache = self.inner.cache
        assert cache is not None
        hits, misses = cache.hits, cache.misses
        batch = self.inner(items)
        return batch, cache.hits - hits, cache.misses - misses


@pytest.mark.parametrize("persistent", [False, True])
def test_second_epoch_hits_across_two_workers(tmp_path: Path, persistent: bool) -> None:
    cache = PolygonCache(tmp_path / "pc", max_bytes=1 << 24)
    loader = DataLoader(
        _Receipts(),
        batch_size=1,
        num_workers=2,
        persistent_workers=persistent,
        collate_fn=_CountingCollate(cache),
    )
    counts = []
    for _ in range(2):
        hits = misses = 0
        for batch, h, m in loader:
            hits, misses = hits + h, misses + m
            polygons = batch["polygons"][0]
            want = make_db_targets(polygons, SMALL, SMALL, **PARAMS)
            assert np.array_equal(batch["thresh_maps"][0].numpy(), want.thresh_map)
            assert np.array_equal(batch["prob_maps"][0].numpy(), want.prob_map)
        counts.append((hits, misses))
    assert counts == [(0, 6), (6, 0)]
    assert cache.stats()["hits"] == 0  # the main process did no lookups: the workers shared disk


def test_corrupt_and_truncated_entries_are_detected_recomputed_and_counted(
    cache: PolygonCache,
) -> None:
    polygons = receipt_polygons(3, SMALL, 8)
    want = make_db_targets(polygons, SMALL, SMALL, **PARAMS)
    path = cache.path(cache.key(polygons, SMALL, SMALL, **PARAMS))
    damages = {
        "flipped payload byte": lambda data: data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:],
        "truncated": lambda data: data[: len(data) // 2],
        "header only": lambda data: data[:10],
        "empty": lambda data: b"",
        "wrong magic": lambda data: b"X" + data[1:],
    }
    fill(cache, polygons, SMALL)
    for count, (name, damage) in enumerate(damages.items(), start=1):
        path.write_bytes(damage(path.read_bytes()))
        hit, maps = fill(cache, polygons, SMALL)
        assert not hit, name
        assert_maps_equal(maps, want)
        assert cache.stats()["corrupt"] == count, name
        # Rewritten: the next lookup hits again.
        hit, maps = fill(cache, polygons, SMALL)
        assert hit, name
        assert_maps_equal(maps, want)


def _unwritable_dirs(tmp_path: Path) -> list[Path]:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    dirs = [blocker / "pc"]  # cannot be created, even by root
    if os.geteuid() != 0:  # root ignores permission bits
        read_only = tmp_path / "ro"
        read_only.mkdir()
        read_only.chmod(0o500)
        dirs.append(read_only)
    return dirs


def test_unwritable_dir_warns_once_and_computes(tmp_path: Path) -> None:
    polygons = receipt_polygons(4, SMALL, 5)
    want = make_db_targets(polygons, SMALL, SMALL, **PARAMS)
    for directory in _unwritable_dirs(tmp_path):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = PolygonCache(directory, 1 << 20)
            for _ in range(3):
                hit, maps = fill(cache, polygons, SMALL)
                assert not hit
                assert_maps_equal(maps, want)
        messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(messages) == 1, messages
        assert "not writable" in messages[0]
        assert cache.stats()["entries_written"] == 0


def test_eviction_deletes_least_recently_used_first(tmp_path: Path) -> None:
    cache = PolygonCache(tmp_path, 1 << 30)
    keys = []
    for k in range(5):
        polygons = receipt_polygons(10 + k, SMALL, 5)
        fill(cache, polygons, SMALL)
        key = cache.key(polygons, SMALL, SMALL, **PARAMS)
        os.utime(cache.path(key), (1_000_000 + k, 1_000_000 + k))
        keys.append((key, polygons))
    # A hit makes entry 0 the most recently used.
    assert fill(cache, keys[0][1], SMALL)[0]
    sizes = {key: cache.path(key).stat().st_size for key, _ in keys}
    keep = sizes[keys[0][0]] + sizes[keys[4][0]] + sizes[keys[3][0]]
    assert cache.evict(target_bytes=keep) == 2
    present = [cache.path(key).exists() for key, _ in keys]
    assert present == [True, False, False, True, True]
    assert cache.stats()["evictions"] == 2


def test_writes_stay_under_the_byte_bound(tmp_path: Path) -> None:
    probe = PolygonCache(tmp_path / "probe", 1 << 30)
    fill(probe, receipt_polygons(20, SMALL, 5), SMALL)
    entry = int(probe.stats()["bytes_per_entry"])
    bound = 4 * entry
    cache = PolygonCache(tmp_path / "pc", bound)
    for k in range(12):
        fill(cache, receipt_polygons(20 + k, SMALL, 5), SMALL)
        assert cache.total_bytes() <= bound
    assert cache.stats()["evictions"] >= 8
    # The newest entry survives.
    newest = receipt_polygons(31, SMALL, 5)
    assert fill(cache, newest, SMALL)[0]


def _write_same_key(directory: str, barrier, rounds: int) -> None:
    cache = PolygonCache(directory, 1 << 24)
    polygons = receipt_polygons(7, SMALL, 6)
    maps = make_db_targets(polygons, SMALL, SMALL, **PARAMS)
    key = cache.key(polygons, SMALL, SMALL, **PARAMS)
    barrier.wait()
    for _ in range(rounds):
        cache.put(key, maps)
    assert cache.stats()["entries_written"] == rounds


def test_two_processes_writing_the_same_key(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    workers = [
        context.Process(target=_write_same_key, args=(str(tmp_path), barrier, 30)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    cache = PolygonCache(tmp_path, 1 << 24)
    polygons = receipt_polygons(7, SMALL, 6)
    hit, maps = fill(cache, polygons, SMALL)
    assert hit
    assert_maps_equal(maps, make_db_targets(polygons, SMALL, SMALL, **PARAMS))
    leftovers = [p.name for p in tmp_path.rglob("*") if p.is_file() and p.name.startswith(".")]
    assert leftovers == []


@pytest.mark.parametrize("value", [False, True, 0, -1, "1GB", 1.5, None])
def test_invalid_max_bytes_is_a_clear_error(tmp_path: Path, value: object) -> None:
    with pytest.raises(ValueError, match=r"data\.polygon_cache\.max_bytes"):
        polygon_cache_from_config({"enabled": True, "max_bytes": value, "dir": None}, tmp_path)
    with pytest.raises(ValueError, match=r"data\.polygon_cache\.max_bytes"):
        PolygonCache(tmp_path, value)  # type: ignore[arg-type]


def test_config_parsing(tmp_path: Path) -> None:
    assert polygon_cache_from_config(None, tmp_path) is None
    assert polygon_cache_from_config({"enabled": False}, tmp_path) is None
    # Disabled still validates, so a bad value cannot lie dormant.
    with pytest.raises(ValueError, match="max_bytes"):
        polygon_cache_from_config({"enabled": False, "max_bytes": False}, tmp_path)
    with pytest.raises(ValueError, match="enabled"):
        polygon_cache_from_config({"enabled": "yes"}, tmp_path)
    with pytest.raises(ValueError, match="max_size"):
        polygon_cache_from_config({"enabled": True, "max_size": 10}, tmp_path)
    cache = polygon_cache_from_config({"enabled": True, "max_bytes": 1000, "dir": None}, tmp_path)
    assert cache is not None
    assert (cache.directory, cache.max_bytes) == (tmp_path / "polygon-cache", 1000)
    other = polygon_cache_from_config({"enabled": True, "dir": str(tmp_path / "x")}, tmp_path)
    assert other is not None
    assert other.directory == tmp_path / "x"


def test_datamodule_attaches_cache_to_val_and_deterministic_train_only(tmp_path: Path) -> None:
    settings = {"enabled": True, "max_bytes": 1 << 20, "dir": str(tmp_path / "pc")}
    augmenting = ReceiptDataModule(
        dataset_dir=tmp_path, cache_root=tmp_path, polygon_cache=settings
    )
    assert augmenting.polygon_cache is not None
    assert not augmenting.train_uses_cache
    fixed = ReceiptDataModule(
        dataset_dir=tmp_path,
        polygon_cache=settings,
        augment={"rotate_deg": 0.0, "scale_range": [1.0, 1.0], "translate_frac": 0.0},
    )
    assert fixed.train_uses_cache
    with pytest.raises(ValueError, match=r"data\.polygon_cache\.max_bytes"):
        ReceiptDataModule(dataset_dir=tmp_path, polygon_cache={"enabled": True, "max_bytes": False})

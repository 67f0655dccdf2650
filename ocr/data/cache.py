"""A disk-backed, content-addressed cache of DB target maps, shared by DataLoader workers and runs.

Why on disk: DataLoader workers are separate processes (and, without ``persistent_workers``, new
ones every epoch), so an in-memory dict would be per worker and per epoch and would rarely hit.
Every entry is one file ``<dir>/<key[:2]>/<key[2:]>``, written to a temporary file in the same
folder and moved into place with ``os.replace`` (atomic on POSIX): readers see a whole entry or
none, and two processes writing the same key both succeed, the last one winning with identical
content.

**Key**: sha256 of a format tag, :data:`FORMAT_VERSION`, :data:`TARGETS_VERSION`, the canvas
``H``/``W``, ``shrink_ratio``, ``thresh_min``, ``thresh_max`` (float64) and every polygon in order
(shape and little-endian float64 coordinates). Augmented polygons change every epoch and so never
hit; the data module does not attach the cache to an augmenting training loader.

**Entry** (lossless)::

    header  <8s magic> <u2 format version> <u2 reserved> <u4 H> <u4 W> <16s key digest prefix>
            <u4 crc32 of payload> <u8 payload length>
    payload zlib( packbits(prob_map) | packbits(prob_mask) | packbits(thresh_mask)
                  | packbits(thresh_map != thresh_map[0, 0]) | float32 thresh_map values there )

The three masks are 0/1, so one bit per pixel keeps them exactly. The threshold map equals its
floor value almost everywhere; only the pixels that differ from the first pixel are stored, as
float32 bytes, so the round trip is bit-exact. A header or checksum mismatch (a truncated or
corrupt file) is counted as ``corrupt``, the file is deleted and the maps are recomputed.

**Size bound**: least recently used first, by file mtime (a hit touches its file). Each process
keeps a running estimate of the folder's total (a directory scan on its first write, then its own
writes added); when the estimate passes ``max_bytes`` a scan gives the true total and the oldest
entries are deleted down to 90 % of ``max_bytes``. Other processes' writes are not in the
estimate, so the process also rescans after writing ``max_bytes / 8`` of its own: with ``n``
writers the folder can briefly exceed the bound by at most about ``n * max_bytes / 8``.

**Unwritable folder**: one warning, then the maps are computed without being stored (existing
entries are still read).

Statistics are per process (:meth:`PolygonCache.stats`). Each :meth:`PolygonCache.get_or_make`
also reports its outcome with :func:`trainperf.probe.worker.report_count` (``polygon_cache_hits``,
``polygon_cache_misses``, ``polygon_cache_corrupt``, ``polygon_cache_evictions``,
``polygon_cache_bytes_written``): the counts travel back with the batch from whichever worker
built it, so the performance monitors see the whole loader's hit rate
(``performance/{stage}_polygon_cache_hit_rate``) even though every worker has its own counters.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile
import time
import warnings
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from trainperf.probe.worker import report_count

from ocr.data.targets import DBTargets, make_db_targets
from ocr.errors import ConfigError

__all__ = [
    "FORMAT_VERSION",
    "TARGETS_VERSION",
    "PolygonCache",
    "polygon_cache_from_config",
]

FORMAT_VERSION = 1
# Bump when the target semantics of ocr.data.targets change, so old entries are never reused.
TARGETS_VERSION = 1
MAGIC = b"OCRPCv1\x00"
_HEADER = struct.Struct("<8sHHII16sIQ")
_KEY_TAG = b"receipt-ocr/polygon-cache"
_TMP_PREFIX = ".tmp-"
_STALE_TMP_S = 3600.0  # temporary files older than this were left by a killed process
_LOW_WATER = 0.9  # eviction target as a fraction of max_bytes (hysteresis: not one per write)
_RESCAN_FRACTION = 8  # rescan after writing max_bytes / this of one's own entries
_ZLIB_LEVEL = 1  # the payload is mostly bit-packed runs; higher levels cost time, save little
_CONFIG_KEYS = frozenset({"enabled", "max_bytes", "dir"})
_SETTING = "data.polygon_cache"


class _CorruptEntry(Exception):
    """An entry file that does not decode to maps of the expected canvas."""


def _check_max_bytes(max_bytes: Any) -> int:
    # bool is an int subclass: `max_size: false` must not become a 0-byte cache.
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int | np.integer):
        raise ConfigError(
            f"{_SETTING}.max_bytes must be a positive integer number of bytes, "
            f"got {max_bytes!r} ({type(max_bytes).__name__})"
        )
    if max_bytes <= 0:
        raise ConfigError(f"{_SETTING}.max_bytes must be positive, got {max_bytes!r}")
    return int(max_bytes)


class PolygonCache:
    """Disk cache of DB target maps keyed by polygons, canvas size and target parameters.

    Picklable: DataLoader workers get a copy that shares the folder; statistics and the size
    estimate are per process. See the module docstring for the key, entry format and eviction.

    Args:
        directory: cache folder, created on first use (``~`` is expanded). Required.
        max_bytes: bound on the total size of the entry files, in bytes (a positive int; bools
            are rejected). Default 1 GiB (1073741824).
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int = 1 << 30) -> None:
        self.max_bytes = _check_max_bytes(max_bytes)
        self.directory = Path(directory).expanduser()
        self._reset_process_state()
        self._writable = self._check_writable()

    def _reset_process_state(self) -> None:
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.corrupt = 0
        self.bytes_written = 0
        self.entries_written = 0
        self.raw_bytes_written = 0
        self._estimate: int | None = None  # None: scan on the next write
        self._written_since_scan = 0

    def __getstate__(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "max_bytes": self.max_bytes,
            "writable": self._writable,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A worker starts with zero statistics and scans the folder on its first write.
        self.directory = state["directory"]
        self.max_bytes = state["max_bytes"]
        self._writable = state["writable"]
        self._reset_process_state()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.directory)!r}, max_bytes={self.max_bytes})"

    # -- keys ------------------------------------------------------------------------------------
    @staticmethod
    def key(
        polygons: Sequence[npt.ArrayLike],
        height: int,
        width: int,
        *,
        shrink_ratio: float,
        thresh_min: float,
        thresh_max: float,
    ) -> str:
        """Hex sha256 of everything the maps depend on (module docstring, **Key**)."""
        digest = hashlib.sha256(_KEY_TAG)
        digest.update(
            struct.pack(
                "<HHQQdddQ",
                FORMAT_VERSION,
                TARGETS_VERSION,
                int(height),
                int(width),
                float(shrink_ratio),
                float(thresh_min),
                float(thresh_max),
                len(polygons),
            )
        )
        for points in polygons:
            array = np.ascontiguousarray(points, dtype="<f8")
            digest.update(struct.pack("<B", array.ndim))
            digest.update(struct.pack(f"<{array.ndim}Q", *array.shape))
            digest.update(array.tobytes())
        return digest.hexdigest()

    def path(self, key: str) -> Path:
        """The entry file of ``key``."""
        return self.directory / key[:2] / key[2:]

    # -- read / write ----------------------------------------------------------------------------
    def get(self, key: str, out: DBTargets) -> bool:
        """Fill ``out`` (float32 ``(H, W)`` maps) from the entry of ``key``; False on a miss.

        A corrupt or mismatching entry is counted, deleted and reported as a miss.
        """
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return False
        except OSError as err:
            warnings.warn(f"polygon cache: cannot read {path}: {err}", stacklevel=2)
            self.misses += 1
            return False
        try:
            _decode(data, key, out)
        except _CorruptEntry:
            self.corrupt += 1
            self.misses += 1
            path.unlink(missing_ok=True)
            return False
        self.hits += 1
        # LRU: a hit makes the entry young again. A read-only folder or a concurrent eviction
        # does not matter: the maps are already filled.
        with contextlib.suppress(OSError):
            os.utime(path)
        return True

    def put(self, key: str, maps: DBTargets) -> None:
        """Store the maps of ``key`` (no-op when the folder is unwritable)."""
        if not self._writable:
            return
        data = _encode(key, maps)
        if len(data) > self.max_bytes:
            return  # would evict everything else and then itself
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as err:
            self._disable(err)
            return
        self.entries_written += 1
        self.bytes_written += len(data)
        self.raw_bytes_written += 2 * 4 * maps.prob_map.size  # two float32 maps
        self._account(len(data))

    def get_or_make(
        self,
        polygons: Sequence[npt.ArrayLike],
        height: int,
        width: int,
        *,
        shrink_ratio: float,
        thresh_min: float,
        thresh_max: float,
        out: DBTargets,
    ) -> bool:
        """Fill ``out`` from the cache or with :func:`make_db_targets` (then stored); True on a hit.

        Args and errors: those of :func:`ocr.data.targets.make_db_targets`.
        """
        params = {"shrink_ratio": shrink_ratio, "thresh_min": thresh_min, "thresh_max": thresh_max}
        key = self.key(polygons, height, width, **params)
        if self.get(key, out):
            report_count("polygon_cache_hits")
            return True
        corrupt, evictions, written = self.corrupt, self.evictions, self.bytes_written
        make_db_targets(polygons, height, width, out=out, **params)
        self.put(key, out)
        # Carried back with the batch to the monitors (a no-op outside an instrumented loader).
        report_count("polygon_cache_misses")
        if self.corrupt != corrupt:
            report_count("polygon_cache_corrupt", self.corrupt - corrupt)
        if self.evictions != evictions:
            report_count("polygon_cache_evictions", self.evictions - evictions)
        if self.bytes_written != written:
            report_count("polygon_cache_bytes_written", self.bytes_written - written)
        return False

    # -- statistics ------------------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """This process's counters: ``hits``, ``misses``, ``hit_rate`` (0 before any lookup),
        ``evictions``, ``corrupt``, ``entries_written``, ``bytes_written``, ``bytes_per_entry``
        and ``raw_bytes_per_entry`` (two float32 maps, for comparison; both 0 before a write)."""
        lookups = self.hits + self.misses
        written = self.entries_written
        return {
            "hits": float(self.hits),
            "misses": float(self.misses),
            "hit_rate": self.hits / lookups if lookups else 0.0,
            "evictions": float(self.evictions),
            "corrupt": float(self.corrupt),
            "entries_written": float(written),
            "bytes_written": float(self.bytes_written),
            "bytes_per_entry": self.bytes_written / written if written else 0.0,
            "raw_bytes_per_entry": self.raw_bytes_written / written if written else 0.0,
        }

    # -- size bound ------------------------------------------------------------------------------
    def _scan(self) -> list[tuple[float, int, Path]]:
        """``(mtime, size, path)`` of every entry; removes stale temporary files on the way."""
        entries: list[tuple[float, int, Path]] = []
        now = time.time()
        try:
            subdirs = list(os.scandir(self.directory))
        except FileNotFoundError:
            return entries
        for sub in subdirs:
            if not sub.is_dir(follow_symlinks=False):
                continue
            try:
                files = list(os.scandir(sub.path))
            except FileNotFoundError:
                continue
            for entry in files:
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # evicted or replaced by another process meanwhile
                if entry.name.startswith(_TMP_PREFIX):
                    if now - info.st_mtime > _STALE_TMP_S:
                        Path(entry.path).unlink(missing_ok=True)
                    continue
                entries.append((info.st_mtime, info.st_size, Path(entry.path)))
        return entries

    def total_bytes(self) -> int:
        """Size of all entry files now, in bytes (a directory scan)."""
        return sum(size for _, size, _ in self._scan())

    def _account(self, written: int) -> None:
        if self._estimate is None:
            self._estimate = self.total_bytes()  # includes the entry just written
            self._written_since_scan = 0
        else:
            self._estimate += written
            self._written_since_scan += written
            if self._written_since_scan * _RESCAN_FRACTION > self.max_bytes:
                self._estimate = self.total_bytes()
                self._written_since_scan = 0
        if self._estimate > self.max_bytes:
            self.evict()

    def evict(self, target_bytes: int | None = None) -> int:
        """Delete least recently used entries until at most ``target_bytes`` remain (default 90 %
        of ``max_bytes``); returns how many were deleted."""
        target = int(self.max_bytes * _LOW_WATER) if target_bytes is None else target_bytes
        entries = sorted(self._scan(), key=lambda e: e[0])
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, path in entries:
            if total <= target:
                break
            try:
                path.unlink()
            except FileNotFoundError:
                pass  # another process evicted it first: it is gone all the same
            except OSError as err:
                self._disable(err)
                break
            else:
                removed += 1
            total -= size
        self.evictions += removed
        self._estimate = total
        self._written_since_scan = 0
        return removed

    # -- writability -----------------------------------------------------------------------------
    def _check_writable(self) -> bool:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=self.directory)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            self._writable = True
            self._disable(err)
            return False
        return True

    def _disable(self, err: OSError) -> None:
        if self._writable:
            warnings.warn(
                f"polygon cache folder {self.directory} is not writable ({err}); "
                "DB targets are computed without caching",
                RuntimeWarning,
                stacklevel=3,
            )
        self._writable = False


# -- entry format ----------------------------------------------------------------------------------
def _as_bits(array: npt.NDArray[np.float32], name: str) -> npt.NDArray[np.uint8]:
    bits = array == 1.0
    if not (bits | (array == 0.0)).all():
        raise ValueError(f"polygon cache: {name} must hold only 0 and 1")
    return np.packbits(bits, axis=None)


def _encode(key: str, maps: DBTargets) -> bytes:
    height, width = maps.prob_map.shape
    thresh = np.ascontiguousarray(maps.thresh_map, dtype="<f4")
    floor = thresh.flat[0] if thresh.size else np.float32(0)
    # Compare bit patterns, not values, so -0.0 / NaN round-trip exactly too.
    varies = thresh.view(np.uint32) != np.asarray(floor, dtype="<f4").view(np.uint32)
    payload = b"".join(
        (
            _as_bits(maps.prob_map, "prob_map").tobytes(),
            _as_bits(maps.prob_mask, "prob_mask").tobytes(),
            _as_bits(maps.thresh_mask, "thresh_mask").tobytes(),
            np.packbits(varies, axis=None).tobytes(),
            np.asarray(floor, dtype="<f4").tobytes(),
            thresh[varies].tobytes(),
        )
    )
    compressed = zlib.compress(payload, _ZLIB_LEVEL)
    header = _HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        0,
        height,
        width,
        bytes.fromhex(key[:32]),
        zlib.crc32(compressed),
        len(compressed),
    )
    return header + compressed


def _decode(data: bytes, key: str, out: DBTargets) -> None:
    """Fill ``out`` from an entry; :class:`_CorruptEntry` on any mismatch."""
    height, width = out.prob_map.shape
    if len(data) < _HEADER.size:
        raise _CorruptEntry("shorter than the header")
    magic, version, _, h, w, digest, crc, length = _HEADER.unpack_from(data)
    if (magic, version, h, w, digest) != (
        MAGIC,
        FORMAT_VERSION,
        height,
        width,
        bytes.fromhex(key[:32]),
    ):
        raise _CorruptEntry("header mismatch")
    compressed = memoryview(data)[_HEADER.size :]
    if len(compressed) != length or zlib.crc32(compressed) != crc:
        raise _CorruptEntry("truncated or checksum mismatch")
    try:
        payload = zlib.decompress(compressed)
    except zlib.error as err:
        raise _CorruptEntry(str(err)) from err
    pixels = height * width
    packed = (pixels + 7) // 8
    fixed = 4 * packed + 4
    if len(payload) < fixed:
        raise _CorruptEntry("payload too short")
    raw = np.frombuffer(payload, dtype=np.uint8)
    varies = np.unpackbits(raw[3 * packed : 4 * packed], count=pixels).view(bool)
    if len(payload) - fixed != 4 * int(np.count_nonzero(varies)):
        raise _CorruptEntry("threshold values do not match their mask")
    for index, target in enumerate((out.prob_map, out.prob_mask, out.thresh_mask)):
        bits = np.unpackbits(raw[index * packed : (index + 1) * packed], count=pixels)
        np.copyto(target, bits.reshape(height, width))  # uint8 0/1 -> float32 0/1, exact
    floor = np.frombuffer(payload, dtype="<f4", count=1, offset=4 * packed)[0]
    out.thresh_map.fill(floor)
    out.thresh_map[varies.reshape(height, width)] = np.frombuffer(payload, "<f4", offset=fixed)


# -- configuration ---------------------------------------------------------------------------------
def polygon_cache_from_config(
    settings: Mapping[str, Any] | None, cache_root: str | os.PathLike[str]
) -> PolygonCache | None:
    """The cache that ``data.polygon_cache`` asks for, or ``None`` when it is disabled.

    Args:
        settings: ``{enabled: bool, max_bytes: int, dir: str | None}``; ``None`` = disabled.
            ``dir`` ``None`` means ``<cache_root>/polygon-cache``. ``max_bytes`` is validated even
            when disabled, so a bad value never lies dormant.
        cache_root: the data module's cache folder.

    Raises:
        ValueError: an unknown key or a bad value, naming ``data.polygon_cache.<key>``.
    """
    if settings is None:
        return None
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{_SETTING} must be a mapping, got {settings!r}")
    unknown = sorted(set(settings) - _CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"{_SETTING}: unknown keys {unknown}; expected {sorted(_CONFIG_KEYS)}")
    enabled = settings.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ConfigError(f"{_SETTING}.enabled must be true or false, got {enabled!r}")
    max_bytes = _check_max_bytes(settings.get("max_bytes", 1 << 30))
    directory = settings.get("dir")
    if directory is not None and not isinstance(directory, str | os.PathLike):
        raise ConfigError(f"{_SETTING}.dir must be a path or null, got {directory!r}")
    if not enabled:
        return None
    folder = Path(directory) if directory else Path(cache_root).expanduser() / "polygon-cache"
    return PolygonCache(folder, max_bytes)

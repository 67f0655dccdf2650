"""The run directory's performance files: versioned JSON-lines written by the callbacks, read by
``ocr-perf report`` and ``ocr-perf baseline`` (possibly later, on another machine).

Layout (``<run>`` is ``trainer.default_root_dir``; the Hydra output folder for ``ocr-train``)::

    <run>/perf/run.json          one object: schema "receipt-ocr/run" (host, versions, devices,
                                 world size, command line, the LightningModule's hparams)
    <run>/perf/epochs.jsonl      one line per stage epoch, schema "receipt-ocr/perf-epoch"
    <run>/perf/intervals.jsonl   in-epoch training progress, schema "receipt-ocr/perf-interval"
    <run>/perf/resources.jsonl   resource samples, schema "receipt-ocr/resource-sample"
    <run>/perf/alerts.jsonl      alert events, schema "receipt-ocr/alert"
    <run>/perf/profiler.jsonl    profiler windows, schema "receipt-ocr/profiler-window"
    <run>/profiler_traces/       torch.profiler Chrome traces

Every line (and ``run.json``) carries ``"schema"`` and ``"v"`` (an integer format version).
Readers skip lines of other schemas, ignore keys they do not know (writers may add keys without a
version bump) and refuse a higher ``v`` than they understand with an error naming the file and
line. A final line cut short by a crash is ignored with a warning; a malformed line elsewhere is
an error naming the file and line number. Writers append one line per record and flush it, so a
report can be made from a run that is still going or that died.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from ocr.errors import InputError

__all__ = [
    "PERF_DIRNAME",
    "JsonlWriter",
    "RunDirError",
    "iter_records",
    "polygon_cache_hit_rate",
    "read_records",
    "read_run_info",
    "run_info",
    "to_jsonable",
    "write_run_info",
]

PERF_DIRNAME = "perf"
RUN_SCHEMA = "receipt-ocr/run"
RUN_VERSION = 1


def polygon_cache_hit_rate(counts: Mapping[str, Any]) -> float | None:
    """Hit rate (0-1) of the PolygonCache from an epoch record's ``worker_counts`` (or any sum of
    them): ``polygon_cache_hits / (hits + polygon_cache_misses)``; ``None`` without a lookup.
    Absent counters (the writers leave zeros out), ``None`` and non-numbers count as 0."""

    def count(name: str) -> float:
        value = counts.get(name)
        return 0.0 if isinstance(value, bool) or not isinstance(value, int | float) else value

    hits = count("polygon_cache_hits")
    lookups = hits + count("polygon_cache_misses")
    return hits / lookups if lookups else None


class RunDirError(InputError, ValueError):
    """A run-directory file is malformed or of a newer format; the message names file and line."""


def to_jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as ``None`` (strict JSON has no NaN) and tuples as lists;
    numpy / torch scalars become Python numbers. Mappings keep string keys."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            return to_jsonable(item())
        except (TypeError, ValueError):
            pass
    return str(value)


class JsonlWriter:
    """Appends one JSON object per line to ``path`` (created with its folder on first write) and
    flushes it; thread-safe. Every record gets ``schema`` and ``v``.

    Args:
        path: the ``.jsonl`` file.
        schema: the schema name written on every line, e.g. ``"receipt-ocr/perf-epoch"``.
        version: the schema's format version (integer). Default 1.
    """

    def __init__(self, path: str | os.PathLike[str], schema: str, version: int = 1) -> None:
        self.path = Path(path)
        self.schema = schema
        self.version = int(version)
        self._lock = threading.Lock()
        self._fh: IO[str] | None = None

    def write(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` (made JSON-safe with :func:`to_jsonable`). Raises ``OSError`` when
        the file cannot be written; callers in callbacks turn that into one warning."""
        line = json.dumps(
            {"schema": self.schema, "v": self.version, **to_jsonable(dict(record))},
            allow_nan=False,
            separators=(",", ":"),
        )
        with self._lock:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
            self._fh.write(line + "\n")
            self._fh.flush()

    def close(self) -> None:
        """Close the file (idempotent); a later :meth:`write` reopens it in append mode."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def iter_records(
    path: str | os.PathLike[str], schema: str, max_version: int = 1
) -> Iterator[dict[str, Any]]:
    """The records of ``schema`` in the JSON-lines file ``path``, in file order.

    Lines of another schema are skipped. Raises :class:`RunDirError` for a malformed line (other
    than a truncated last line, which is skipped with a warning), a record without ``v`` or with
    ``v > max_version``; ``FileNotFoundError`` when the file does not exist.
    """
    p = Path(path)
    with open(p, encoding="utf-8") as fh:
        lines = fh.readlines()
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not line.endswith("\n"):
                warnings.warn(
                    f"{p}: line {number} is cut short (a run that stopped mid-write); ignored",
                    stacklevel=2,
                )
                continue
            raise RunDirError(f"{p}: line {number} is not valid JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise RunDirError(f"{p}: line {number} is not a JSON object")
        if record.get("schema") != schema:
            continue
        version = record.get("v")
        if not isinstance(version, int):
            raise RunDirError(f"{p}: line {number} has no integer 'v' (format version)")
        if version > max_version:
            raise RunDirError(
                f"{p}: line {number} is {schema} version {version}; this receipt-ocr reads "
                f"up to version {max_version} (upgrade receipt-ocr)"
            )
        yield record


def read_records(
    path: str | os.PathLike[str], schema: str, max_version: int = 1
) -> list[dict[str, Any]]:
    """:func:`iter_records` as a list; an absent file gives ``[]``."""
    try:
        return list(iter_records(path, schema, max_version))
    except FileNotFoundError:
        return []


def cpu_bf16() -> bool | None:
    """Whether this CPU has native bf16 dot products (x86 ``avx512_bf16`` or ``amx_bf16``; on
    CPUs without them bf16 runs emulated, slower than float32); ``None`` where the flags cannot
    be read (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[-1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    except OSError:
        return None
    return None


def _hydra_app() -> dict[str, Any] | None:
    """The Hydra app this process runs, when it is one (``ocr-perf try`` re-runs it with
    overrides): its output folder and where it saved the command's overrides. ``None`` when Hydra
    is not imported or no Hydra app is running."""
    if "hydra" not in sys.modules:
        return None
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return None
        cfg = HydraConfig.get()
        subdir = cfg.output_subdir
        return {
            "output_dir": str(cfg.runtime.output_dir),
            # where the command was started: os.getcwd() is the output dir under job.chdir
            "cwd": str(cfg.runtime.cwd),
            "config_name": cfg.job.config_name,
            # relative to output_dir; None when the app saves no .hydra/ folder
            "overrides_file": f"{subdir}/overrides.yaml" if subdir else None,
            "overrides": list(cfg.overrides.task),
        }
    except Exception:  # an app half-initialising Hydra: no re-run, nothing worse
        return None


def run_info(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a report needs to know about the machine and software of this process, and the
    command that started it (``ocr-perf try`` re-runs it): ``argv``, ``executable`` (the Python
    interpreter), ``orig_argv`` (the interpreter's own command line: ``python -m pkg ...`` or
    a console script), ``cwd`` and ``hydra`` (:func:`_hydra_app`, absent for a plain script)."""
    info: dict[str, Any] = {
        "started_at": time.time(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_bf16": cpu_bf16(),
        "argv": list(sys.argv),
        "executable": sys.executable,
        "orig_argv": list(getattr(sys, "orig_argv", sys.argv)),
        "cwd": os.getcwd(),
    }
    hydra_app = _hydra_app()
    if hydra_app is not None:
        info["hydra"] = hydra_app
    for name in ("torch", "lightning", "numpy"):
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if version is not None:
            info[f"{name}_version"] = str(version)
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()  # compute threads (advice on CPU)
    if torch is not None and torch.cuda.is_available():
        info["cuda_devices"] = [
            torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
        ]
    else:
        info["cuda_devices"] = []
    if extra:
        info.update(extra)
    return info


def write_run_info(run_dir: str | os.PathLike[str], extra: Mapping[str, Any] | None = None) -> Path:
    """Write ``<run_dir>/perf/run.json`` atomically (merging into an existing one, so several
    callbacks may each add their part) and return its path. Raises ``OSError`` when unwritable."""
    path = Path(run_dir) / PERF_DIRNAME / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    current: dict[str, Any] = {}
    try:
        current = read_run_info(run_dir)
    except (FileNotFoundError, RunDirError):
        current = {}
    merged = {**current, **run_info(), **(dict(extra) if extra else {})}
    if "started_at" in current:
        merged["started_at"] = current["started_at"]
    merged.update({"schema": RUN_SCHEMA, "v": RUN_VERSION})
    tmp = path.with_name(f".run.json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(to_jsonable(merged), indent=2, allow_nan=False), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_run_info(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """``<run_dir>/perf/run.json`` as a dict; ``FileNotFoundError`` when absent,
    :class:`RunDirError` when malformed or newer than this reader."""
    path = Path(run_dir) / PERF_DIRNAME / "run.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    if not isinstance(data, dict) or data.get("schema") != RUN_SCHEMA:
        raise RunDirError(f"{path}: not a {RUN_SCHEMA} file")
    version = data.get("v")
    if not isinstance(version, int) or version > RUN_VERSION:
        raise RunDirError(
            f"{path}: {RUN_SCHEMA} version {version!r}; this receipt-ocr reads up to {RUN_VERSION}"
        )
    return data

"""What a run directory records about the process that ran.

:func:`run_info` (machine, software, the command line, as a
:class:`~trainperf.records.run_record.RunRecord`) and :func:`write_run_info` (merged into
``perf/run.json``). The file formats themselves live in :mod:`trainperf.records`."""

from __future__ import annotations

import math
import os
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import msgspec

from trainperf.records.files import enc_hook, write_run_record
from trainperf.records.run_record import RunRecord
from trainperf.records.schema import JsonValue

#: Worker counters of a cache named X (``trainperf.probe.worker.report_count``): ``X_hits`` and
#: ``X_misses`` give its hit rate; ``X_corrupt`` (entries read back unusable) and
#: ``X_evictions`` (entries dropped for room) are optional.
HITS, MISSES, CORRUPT, EVICTIONS = "_hits", "_misses", "_corrupt", "_evictions"


def counter(counts: Mapping[str, float | None], name: str) -> float:
    """``counts[name]`` as a number: absent (the writers leave zeros out), ``None`` and
    non-numbers count as 0."""
    value = counts.get(name)
    return 0.0 if isinstance(value, bool) or not isinstance(value, int | float) else value


def cache_names(counts: Iterable[str]) -> list[str]:
    """The caches (X) that ``counts`` (counter names) has ``X_hits`` or ``X_misses`` of, sorted."""
    return sorted(
        {n.removesuffix(s) for n in counts for s in (HITS, MISSES) if n.endswith(s) and n != s}
    )


def hit_rate(counts: Mapping[str, float | None], cache: str) -> float | None:
    """Hit rate (0-1) of ``cache`` from an epoch record's ``worker_counts`` (or any sum of them):
    ``X_hits / (X_hits + X_misses)``; ``None`` without a lookup."""
    hits = counter(counts, cache + HITS)
    lookups = hits + counter(counts, cache + MISSES)
    return hits / lookups if lookups else None


def hit_rates(counts: Mapping[str, float | None]) -> dict[str, float]:
    """Every cache's hit rate (:func:`hit_rate`) in ``counts``, by cache name, those with a
    lookup only."""
    rates = {name: hit_rate(counts, name) for name in cache_names(counts)}
    return {name: rate for name, rate in rates.items() if rate is not None}


def to_jsonable(value: object) -> JsonValue:
    """``value`` with non-finite floats as ``None`` (strict JSON has no NaN) and tuples as lists;
    numpy / torch scalars become Python numbers, anything else its text. Mappings keep string
    keys. (For documents that are not run-directory records, e.g. a baseline.)"""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [to_jsonable(v) for v in value]
    return to_jsonable(enc_hook(value))  # numpy / torch scalars as numbers, the rest as text


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


#: Providers of facts about this process that only something above knows (a config library the
#: process runs under, :func:`register_facts`); their entries are merged into every run.json.
_FACTS: list[Callable[[], Mapping[str, JsonValue]]] = []


def register_facts(provider: Callable[[], Mapping[str, JsonValue]]) -> None:
    """Add a provider of ``run.json`` entries (:class:`~trainperf.records.run_record.RunRecord`
    fields) that :func:`write_run_info` merges in (once per provider)."""
    if provider not in _FACTS:
        _FACTS.append(provider)


def _provided() -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {}
    for provider in _FACTS:
        try:
            out.update(provider())
        except Exception:  # a provider's failure loses its facts, never the run's file
            continue
    return out


def run_info() -> RunRecord:
    """The machine and software of this process, and the command that started it (``trainperf
    try`` re-runs it; ``orig_argv`` is the interpreter's own: ``python -m pkg ...`` or a console
    script)."""

    def version(name: str) -> str | None:
        value = getattr(sys.modules.get(name), "__version__", None)
        return str(value) if value is not None else None

    torch = sys.modules.get("torch")
    cuda = torch is not None and torch.cuda.is_available()
    return RunRecord(
        started_at=time.time(),
        hostname=socket.gethostname(),
        platform=platform.platform(),
        python=platform.python_version(),
        cpu_count=os.cpu_count(),
        cpu_bf16=cpu_bf16(),
        argv=list(sys.argv),
        executable=sys.executable,
        orig_argv=list(sys.orig_argv),
        cwd=os.getcwd(),
        torch_threads=torch.get_num_threads() if torch is not None else None,
        cuda_devices=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda and torch is not None
        else [],
        cuda_capability=[
            "{}.{}".format(*torch.cuda.get_device_capability(i))
            for i in range(torch.cuda.device_count())
        ]
        if cuda and torch is not None
        else [],
        torch_version=version("torch"),
        numpy_version=version("numpy"),
    )


def write_run_info(
    run_dir: str | os.PathLike[str], extra: Mapping[str, JsonValue] | None = None
) -> Path:
    """Write :func:`run_info` and ``extra`` (more :class:`~trainperf.records.run_record.RunRecord`
    fields)
    into ``<run_dir>/perf/run.json``, merged into an existing one (several callbacks may each add
    their part); returns its path. Raises ``OSError`` when unwritable."""
    # what this process does not know (None, no hparams) must not overwrite another writer's part
    facts: dict[str, JsonValue] = {
        k: v for k, v in msgspec.to_builtins(run_info()).items() if v is not None and v != {}
    }
    facts.update(_provided())
    return write_run_record(run_dir, {**facts, **(extra or {})})

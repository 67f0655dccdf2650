"""This host's measured peak FLOP/s, per device and dtype, cached per host.

This host's peak FLOP/s, *measured*: a short matmul and convolution micro-benchmark per device
and dtype, cached per host, so "model FLOPs utilisation" (MFU) has a denominator that is true of
the machine the run used (a shared 2-core VM and a 64-core server differ by 50x; a spec sheet
says neither).

:func:`measured_peak` times ``n x n`` matmuls and a 3x3 convolution in the requested dtype on the
requested device (warm-up excluded, about a second in all) and keeps the faster of the two as
the peak. It runs with torch's current thread count, which is part of the cache key (a run with
``torch.set_num_threads(2)`` has a 2-thread peak). Results are cached in
``$TRAINPERF_CACHE_DIR/peak_flops.json`` (default ``~/.cache/trainperf``): never in a run folder or
the repository. To measure again: ``TRAINPERF_PEAK_REFRESH=1`` in the environment,
``measured_peak(..., refresh=True)``, or delete that file.

A CPU peak measured while the host was busy (1-minute load average above half its CPUs: other
processes took cores from the benchmark) is kept but marked ``contended`` and measured again at
the next call, keeping the higher figure, until a measurement on a quiet host replaces it: a
peak is a maximum, and a busy moment must not stick as this host's limit. On CUDA,
:func:`spec_peak` also gives the data-sheet peak. No Lightning import.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

CACHE_FILE = "peak_flops.json"
_CACHE_VERSION = 1
#: Seconds of timed work per kernel (after warm-up): long enough to average out scheduler
#: jitter on a shared host, short enough to run at every fit start when nothing is cached.
_MEASURE_S = 0.3
#: 1-minute load average per CPU above which a CPU measurement is marked contended.
BUSY_LOAD_PER_CPU = 0.5

# Data-sheet peaks in TFLOP/s, dense tensor-core figures (no 2:4 sparsity); FP32 is the
# non-tensor-core figure, as torch runs FP32 matmuls without TF32 by default. Patterns are matched
# in order against torch.cuda.get_device_name(), lower case; the first contained in it wins.
_SPEC_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("h200", {"bfloat16": 989.4, "float16": 989.4, "float32": 66.9}),
    ("h100 pcie", {"bfloat16": 756.0, "float16": 756.0, "float32": 51.2}),
    ("h100 nvl", {"bfloat16": 835.0, "float16": 835.0, "float32": 60.0}),
    ("h100", {"bfloat16": 989.4, "float16": 989.4, "float32": 66.9}),  # SXM
    ("a100", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}),
    ("l4", {"bfloat16": 121.0, "float16": 121.0, "float32": 30.3}),
    ("t4", {"float16": 65.0, "float32": 8.1}),
    ("v100", {"float16": 125.0, "float32": 15.7}),  # SXM2; PCIe is ~10 % lower
    ("rtx 4090", {"bfloat16": 165.2, "float16": 165.2, "float32": 82.6}),  # fp32 accumulate
    ("rtx 3090", {"bfloat16": 71.0, "float16": 71.0, "float32": 35.6}),  # fp32 accumulate
)


@dataclass(frozen=True)
class PeakFlops:
    """A measured peak: ``flops_per_sec`` is the higher of the matmul's and the 3x3
    convolution's; ``threads`` torch's intra-op threads (CPU; 0 on CUDA); ``contended``: measured
    while the host was busy, possibly an underestimate; ``cached``: read from the cache."""

    flops_per_sec: float
    matmul_flops_per_sec: float
    conv_flops_per_sec: float
    device: str
    device_name: str
    dtype: str
    threads: int
    host: str
    measured_at: float
    contended: bool = False
    cached: bool = False


#: The environment variable naming the toolkit's cache folder (default :data:`DEFAULT_CACHE_DIR`).
CACHE_DIR_ENV = "TRAINPERF_CACHE_DIR"
DEFAULT_CACHE_DIR = "~/.cache/trainperf"
#: ``1`` in the environment: measure the peak again even when cached.
REFRESH_ENV = "TRAINPERF_PEAK_REFRESH"


def cache_path() -> Path:
    """``$TRAINPERF_CACHE_DIR/peak_flops.json`` (default ``~/.cache/trainperf``)."""
    root = Path(os.environ.get(CACHE_DIR_ENV, DEFAULT_CACHE_DIR)).expanduser()
    return root / CACHE_FILE


def dtype_for_precision(precision: str | int | None) -> torch.dtype:
    """The dtype the matmuls of a Lightning ``precision`` setting run in: ``"bf16-mixed"`` /
    ``"bf16-true"`` -> bfloat16, ``"16-mixed"`` / ``"16-true"`` -> float16, else float32."""
    text = str(precision or "32")
    if text.startswith("bf16"):
        return torch.bfloat16
    if text.startswith("16"):
        return torch.float16
    return torch.float32


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def spec_peak(device_name: str, dtype: torch.dtype | str) -> float | None:
    """The data-sheet peak FLOP/s of a GPU by name (dense, no sparsity), ``None`` when the name
    or the dtype is not in the table."""
    name = device_name.lower()
    key = dtype if isinstance(dtype, str) else _dtype_name(dtype)
    for pattern, table in _SPEC_TFLOPS:
        if pattern in name:
            value = table.get(key)
            return None if value is None else value * 1e12
    return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rate(fn: Callable[[], object], flops: float, device: torch.device) -> float:
    """FLOP/s of ``fn`` (``flops`` each call): two warm-up calls, then calls for about
    :data:`_MEASURE_S` seconds; the best of three timed rounds (the least disturbed)."""
    for _ in range(2):
        fn()
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(1, int(_MEASURE_S / 3 / once))
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        elapsed = time.perf_counter() - start
        if elapsed > 0:
            best = max(best, calls * flops / elapsed)
    return best


def _measure(device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
    # Sizes that keep a GPU busy but a 2-core CPU under ~50 ms per call.
    n = 4096 if device.type == "cuda" else 512
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    with torch.no_grad():
        matmul = _rate(lambda: torch.mm(a, b), 2.0 * n**3, device)
        batch, channels, size = (32, 128, 64) if device.type == "cuda" else (4, 64, 32)
        x = torch.randn(batch, channels, size, size, device=device).to(dtype)
        w = torch.randn(channels, channels, 3, 3, device=device).to(dtype)
        conv_flops = 2.0 * batch * channels * channels * 9 * size * size
        conv = _rate(lambda: torch.nn.functional.conv2d(x, w, padding=1), conv_flops, device)
    return matmul, conv


def _host_busy(device: torch.device) -> bool:
    """Other work on the host's CPUs right now (CPU measurements only)."""
    if device.type != "cpu" or not hasattr(os, "getloadavg"):
        return False
    return os.getloadavg()[0] / max(os.cpu_count() or 1, 1) > BUSY_LOAD_PER_CPU


def _read_cache(path: Path) -> dict[str, dict[str, object]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # absent or damaged: measured again and rewritten
    if not isinstance(doc, dict) or doc.get("v") != _CACHE_VERSION:
        return {}
    entries = doc.get("entries")
    return entries if isinstance(entries, dict) else {}


def _write_cache(path: Path, entries: dict[str, dict[str, object]]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"v": _CACHE_VERSION, "entries": entries}, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the peak is still returned, measured again next time


def measured_peak(
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    refresh: bool | None = None,
) -> PeakFlops:
    """This host's peak FLOP/s on ``device`` in ``dtype``, from the cache or measured (module
    docstring); ``refresh``: measure even when cached (``None``: ``TRAINPERF_PEAK_REFRESH=1``)."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if refresh is None:
        refresh = os.environ.get(REFRESH_ENV, "") not in ("", "0")
    host = socket.gethostname()
    name = _device_name(dev)
    dname = _dtype_name(dtype)
    threads = torch.get_num_threads() if dev.type == "cpu" else 0
    key = f"{host}|{name}|{dname}|threads={threads}|torch={torch.__version__}"
    path = cache_path()
    entries = _read_cache(path)
    previous: PeakFlops | None = None
    hit = entries.get(key)
    if hit is not None and not refresh:
        with contextlib.suppress(TypeError):  # an entry of another layout: measured again
            previous = PeakFlops(**{**hit, "cached": True})  # type: ignore[arg-type]
        if previous is not None and not previous.contended:
            return previous
    busy = _host_busy(dev)
    matmul, conv = _measure(dev, dtype)
    peak = PeakFlops(
        flops_per_sec=max(matmul, conv),
        matmul_flops_per_sec=matmul,
        conv_flops_per_sec=conv,
        device=str(dev),
        device_name=name,
        dtype=dname,
        threads=threads,
        host=host,
        measured_at=time.time(),
        contended=busy,
    )
    if previous is not None and previous.flops_per_sec > peak.flops_per_sec:
        # Both busy, or this one busy after a busier one: keep the higher (a peak is a maximum);
        # still contended unless this measurement ran on a quiet host.
        peak = replace(previous, contended=busy, cached=False)
    record = asdict(peak)
    record.pop("cached")
    entries = _read_cache(path)  # another process may have added its entry meanwhile
    entries[key] = record
    _write_cache(path, entries)
    return peak

"""GPU check (issue 23): every CUDA path of the toolkit, run and timed on a real GPU in one command,
written to ``docs/performance/gpu.md`` (generated; never edited by hand).

On a CUDA machine it runs, in this order:

1. ``preflight``: versions, the GPU, and the wheel check (every runtime dependency of
   ``pyproject.toml`` installed; on the device machine some arrive as carried wheels, see
   ``--plan``). A missing one stops here (exit 2) with the commands that fetch it.
2. ``seams``: the seam tests (the ones pinning Lightning / torch behaviour) on this machine's
   torch and Lightning.
3. ``train``: ``ocr-train preset=example`` on synthetic receipts (640 canvas, ResNet-18 DBNet,
   16-mixed), every monitor and the profiler on (last epoch), DataLoader workers sized to the
   cores, ``--epochs`` x ``--train-batches`` steps; while it trains, ``nvml``: our NVML sampler
   (matched by UUID) beside ``nvidia-smi --query-gpu=...`` at the same moment.
4. ``train_sync``: the same with ``sync_cuda=true``: CUDA-event phase times (no sync) against
   synchronized ones, per phase.
5. ``analyze``, ``report``, ``try``: ``ocr-perf`` on the first run (``try`` with a short budget).
6. ``fixture``: the run's GPU trace (gzip, at most 2 MB) saved for the test fixtures.

Without CUDA it runs what applies (a short CPU training run of ``experiment=synthetic_debug``,
analyze / report / try on it, the seam tests), says which parts it skipped, why, and what a GPU
run adds, and exits 0. A part that fails keeps its traceback in the document and the others go on
(exit 1 at the end).

    python scripts/gpu_check.py [--out DIR] [--fixture-dir DIR] [--work-dir DIR] [--epochs N]
        [--train-batches N] [--try-budget 2m] [--seams run|list|skip] [--skip PART]
        [--json FILE] [--logs FILE.tar.gz] [--plan] [-- HYDRA_OVERRIDE ...]
    python scripts/gpu_check.py --plan        # what it would run here, the wheels to carry and
                                              # the device tool's command
    python scripts/gpu_check.py --fetch-wheels .whl   # fetch those wheels (needs PyPI)

Hydra overrides after ``--`` go to every training run (the tests shrink the CPU run with them).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.baseline_doc import subprocess_env, train  # noqa: E402
from ocr.perf.clock import PHASES  # noqa: E402
from ocr.perf.mfu import stage_utilisation  # noqa: E402
from ocr.perf.records import EpochRecord, RunRecord  # noqa: E402
from ocr.perf.report.load import load_run  # noqa: E402
from ocr.perf.stage import Stage  # noqa: E402
from ocr.perf.trace.agreement import (  # noqa: E402
    ABSOLUTE_FLOOR_PCT_OF_STEP,
    AGREEMENT_TOLERANCE_PCT,
)

DOC_NAME = "gpu.md"
DEFAULT_OUT = REPO_ROOT / "docs" / "performance"
DEFAULT_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "traces"
FIXTURE_MAX_BYTES = 2 * 1024 * 1024
#: The test files that pin Lightning / torch behaviour the toolkit relies on.
SEAM_TESTS = (
    "tests/integration/test_interpose_seams.py",
    "tests/integration/test_action_routing.py",
    "tests/integration/test_lightning_profiler_traces.py",
    "tests/integration/test_trace_phases.py",
    "tests/integration/test_trace_clock_agreement.py",
)

# -- the device machine's image and the wheels to carry ------------------------------------------

#: The device machine's image ('cuda', read 2026-11-17 in /work/.library/device/KINDS.md):
#: Python 3.12, its own torch (2.11.0+cu130) and Lightning, no network.
DEVICE_IMAGE = "device machine image 'cuda' (KINDS.md, 2026-11-17): Python 3.12, torch 2.11.0+cu130"
#: Our runtime dependencies (and theirs) that image already has: used as they are there.
DEVICE_HAS = frozenset(
    {
        "torch",
        "lightning",
        "torchmetrics",
        "numpy",
        "numba",
        "opencv-python-headless",
        "pillow",
        "psutil",
        "nvidia-ml-py",
        "matplotlib",
        "rich",
        "tensorboard",
        "pyyaml",
        "packaging",
        "pytest",
    }
)
#: What it lacks: carried as cp312 manylinux x86_64 (or pure-Python) wheels, versions from
#: constraints.txt. antlr4-python3-runtime (hydra-core's and omegaconf's) is only an sdist on
#: PyPI: ``pip wheel`` builds a pure-Python wheel of it here.
CARRIED = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "pyclipper", "shapely", "msgspec")
SDIST_ONLY = frozenset({"antlr4-python3-runtime"})
WHEEL_DIR = ".whl"
_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def runtime_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[Requirement]:
    """``[project].dependencies`` of ``pyproject``."""
    with open(pyproject, "rb") as fh:
        return [Requirement(r) for r in tomllib.load(fh)["project"]["dependencies"]]


def pinned_versions(constraints: Path = REPO_ROOT / "constraints.txt") -> dict[str, str]:
    """Normalised name -> version of every ``name==version`` line of ``constraints``."""
    out = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        name, sep, version = line.partition("==")
        if sep and not line.startswith("#"):
            out[_norm(name.strip())] = version.strip()
    return out


def wheels_to_carry(pins: Mapping[str, str] | None = None) -> list[str]:
    """``name==version`` of each :data:`CARRIED` package, versions from constraints.txt."""
    pins = pinned_versions() if pins is None else pins
    return [f"{name}=={pins[_norm(name)]}" for name in CARRIED]


def fetch_commands(dest: str = WHEEL_DIR, python: str = "python3") -> list[list[str]]:
    """The commands that put the carried wheels into ``dest`` (the device README's ``pip
    download`` for binary wheels; ``pip wheel`` for the sdist-only ones)."""
    wheels = wheels_to_carry()
    binary = [w for w in wheels if _norm(w.split("==")[0]) not in SDIST_ONLY]
    built = [w for w in wheels if _norm(w.split("==")[0]) in SDIST_ONLY]
    platforms = [arg for p in _PLATFORMS for arg in ("--platform", p)]
    download = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    download += ["--python-version", "3.12", "--implementation", "cp", *platforms]
    commands = [[*download, "-d", dest, *binary]]
    if built:
        commands.append([python, "-m", "pip", "wheel", "--no-deps", "-w", dest, *built])
    return commands


@dataclass
class WheelCheck:
    """Runtime requirements against what is installed: ``missing`` (name==pinned version to
    carry) and ``mismatched`` (installed, outside the requirement: one line each)."""

    missing: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    installed: dict[str, str] = field(default_factory=dict)


def check_requirements(
    requirements: Iterable[Requirement],
    version_of: Callable[[str], str] = importlib.metadata.version,
    pins: Mapping[str, str] | None = None,
) -> WheelCheck:
    """Which ``requirements`` are not installed (``version_of`` raises
    ``PackageNotFoundError``) or installed outside their specifier."""
    pins = pinned_versions() if pins is None else pins
    result = WheelCheck()
    for req in requirements:
        try:
            version = version_of(req.name)
        except importlib.metadata.PackageNotFoundError:
            pin = pins.get(_norm(req.name))
            result.missing.append(f"{req.name}=={pin}" if pin else str(req))
            continue
        result.installed[req.name] = version
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            result.mismatched.append(f"{req.name} {version} (pyproject: {req})")
    return result


def device_command(args: argparse.Namespace) -> str:
    """The device tool's ``run`` command (carry ``.whl``) that runs this check there and brings
    the document, the figures, the trace and the logs back through ``$OUT`` (run sizes only where
    given on this command line: else the GPU defaults)."""
    install = (
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
        f"--target /tmp/site {WHEEL_DIR}/*.whl"
    )
    env = "export PYTHONPATH=/tmp/site:$PWD WANDB_MODE=offline PYTHONUNBUFFERED=1"
    check = [
        "python3 scripts/gpu_check.py --out $OUT --fixture-dir $OUT --work-dir /tmp/gpu-check",
        "--json $OUT/gpu_check.json --logs $OUT/gpu_check_logs.tar.gz",
        f"--try-budget {args.try_budget}",
        *getattr(args, "given_size", []),
    ]
    return f"{install} && {env} || exit; {' '.join(check)}"


# -- parts ----------------------------------------------------------------------------------------


@dataclass
class Part:
    """One part of the check: ``status`` is ``ran``, ``skipped`` or ``failed``; ``reason`` says
    why it was skipped (and ``adds`` what a GPU run adds) or holds the failure's traceback."""

    name: str
    status: str = "ran"
    reason: str = ""
    adds: str = ""
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


#: Parts that need CUDA: why a CPU machine skips them, and what a GPU run adds.
GPU_ONLY: dict[str, tuple[str, str]] = {
    "nvml": (
        "no NVIDIA GPU here",
        "our NVML sampler (matched by UUID: utilisation, memory, power, temperature, SM clock, "
        "throttle reasons) beside `nvidia-smi --query-gpu` at the same moment, while training",
    ),
    "train_sync": (
        "`sync_cuda` synchronizes CUDA only: without CUDA both runs time the same host work",
        "CUDA-event phase times (read without blocking) against synchronized ones, per phase, "
        f"within {AGREEMENT_TOLERANCE_PCT:.0f} %",
    ),
    "fixture": (
        "a CPU trace holds no kernels, copies or device memory",
        "a GPU trace of our own model (<= 2 MB gzip) for the CPU test suite: kernel time per "
        "phase, idle share, H2D copies pinned vs pageable",
    ),
}


def cuda_device() -> dict[str, Any] | None:
    """The first CUDA device (name, UUID, SMs, memory, capability), ``None`` without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "uuid": str(props.uuid),
        "sms": props.multi_processor_count,
        "memory_gib": props.total_memory / 2**30,
        "capability": f"{props.major}.{props.minor}",
    }


def versions() -> dict[str, Any]:
    """Python, torch (CUDA, cuDNN), Lightning, numpy, and whether the seam-gated DataLoader
    instrumentation accepts this torch and Lightning."""
    import lightning
    import numpy
    import torch

    from ocr.lightning_modules.callbacks.interpose import TESTED_VERSIONS, check_versions

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cores": len(os.sched_getaffinity(0)),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "lightning": lightning.__version__,
        "numpy": numpy.__version__,
        "tested_versions": {k: list(v) for k, v in TESTED_VERSIONS.items()},
        "outside_tested": check_versions(),
    }


def workers_for(cores: int) -> int:
    """DataLoader workers sized to the cores: all but two (the training process and the
    resource monitor's thread), at least one."""
    return max(1, cores - 2)


def train_overrides(
    cuda: bool, epochs: int, train_batches: int, cores: int, *, sync: bool
) -> list[str]:
    """The Hydra overrides of the check's training runs. GPU: ``preset=example`` on synthetic
    receipts sized for ``train_batches`` batches of 16; CPU: ``experiment=synthetic_debug``.
    Monitors on; the main run profiles its last epoch, the ``sync`` run synchronizes CUDA at
    every phase switch instead."""
    workers = workers_for(cores)
    if cuda:
        out = [
            "preset=example",
            "data=synthetic",
            f"data.synthetic.splits.train={16 * train_batches}",
            f"data.synthetic.workers={cores}",
            "trainer.precision=16-mixed",
        ]
    else:
        out = ["experiment=synthetic_debug"]
    out += [
        f"data.num_workers={workers}",
        "callbacks=monitoring",
        f"trainer.max_epochs={epochs}",
        f"trainer.limit_train_batches={train_batches}",
        "callbacks.model_summary=null",
    ]
    if sync:
        return [*out, "callbacks.performance_profiler.sync_cuda=true"]
    return [
        *out,
        "callbacks.profiler.enabled=true",
        f"callbacks.profiler.profile_epochs=[{epochs - 1}]",
        "callbacks.profiler.profile_steps=3",
        "callbacks.profiler.warmup_steps=1",
        "callbacks.profiler.gzip=true",
    ]


# -- figures from a run directory -----------------------------------------------------------------


def kept_epochs(
    records: Sequence[EpochRecord], stage: Stage, skip: Iterable[int]
) -> list[EpochRecord]:
    """``stage``'s records minus epoch 0 (warm-up) and the ``skip`` epochs (profiled); all of the
    stage's records when that leaves none."""
    mine = [r for r in records if r.stage == stage]
    dropped = {0, *skip}
    kept = [r for r in mine if r.epoch not in dropped]
    return kept or mine


def stage_figures(
    records: Sequence[EpochRecord], info: RunRecord | None, stage: Stage
) -> dict[str, Any] | None:
    """samples/s, data-wait share, ms per batch by phase (host clock and CUDA events) and MFU of
    ``records`` (one stage's epochs), ``None`` when there are none."""
    if not records:
        return None
    wall = sum(r.all_wall_s for r in records)
    samples = sum(r.all_samples for r in records)
    batches = sum(r.num_batches for r in records)
    data_wait = sum(r.phases_s.get("data_wait", 0.0) for r in records)

    def per_batch(key: str) -> dict[str, float]:
        total: dict[str, float] = {}
        for r in records:
            for phase, s in getattr(r, key).items():
                if s is not None:
                    total[phase] = total.get(phase, 0.0) + s
        return {p: 1e3 * s / batches for p, s in total.items()} if batches else {}

    util = stage_utilisation(info, records, stage)
    return {
        "epochs": [r.epoch for r in records],
        "batches": batches,
        "samples_per_s": samples / wall if wall > 0 else None,
        "data_wait_share": data_wait / wall if wall > 0 else None,
        "host_ms": per_batch("phases_s"),
        "event_ms": per_batch("gpu_phases_s"),
        "flops_per_s": None if util is None else util.flops_per_sec,
        "mfu": None if util is None else util.mfu,
        "mfu_spec": None if util is None else util.spec_mfu,
    }


def run_figures(run_dir: Path, profiled: Iterable[int] = ()) -> dict[str, Any]:
    """Per stage (train, val) :func:`stage_figures` of ``run_dir``, plus the recorded device and
    peaks."""
    data = load_run(run_dir)
    info = data.run_info
    profiled = list(profiled)
    flops = info.flops if info is not None else None
    return {
        "device": info.device if info is not None else None,
        "cuda_devices": info.cuda_devices if info is not None else None,
        "peak_flops_per_s": flops.peak_flops_per_sec if flops is not None else None,
        "spec_peak_flops_per_s": flops.spec_peak_flops_per_sec if flops is not None else None,
        "train": stage_figures(kept_epochs(data.epochs, Stage.TRAIN, profiled), info, Stage.TRAIN),
        "val": stage_figures(kept_epochs(data.epochs, Stage.VAL, ()), info, Stage.VAL),
    }


def compare_phase_times(
    events_ms: Mapping[str, float],
    synced_ms: Mapping[str, float],
    tolerance_pct: float = AGREEMENT_TOLERANCE_PCT,
) -> list[dict[str, Any]]:
    """CUDA-event ms per batch against synchronized ms per batch, per clock phase: a phase agrees
    when the difference is at most ``tolerance_pct`` of the larger figure, or below
    :data:`~ocr.perf.trace.agreement.ABSOLUTE_FLOOR_PCT_OF_STEP` of the synchronized step (the
    rule the trace-vs-clock agreement uses)."""
    step = sum(synced_ms.values())
    floor = step * ABSOLUTE_FLOOR_PCT_OF_STEP / 100.0
    rows = []
    for phase in PHASES:
        e, s = float(events_ms.get(phase, 0.0)), float(synced_ms.get(phase, 0.0))
        big = max(abs(e), abs(s))
        pct = 100.0 * (e - s) / big if big > 0 else None
        agree = abs(e - s) <= floor or (pct is not None and abs(pct) <= tolerance_pct)
        rows.append(
            {"phase": phase, "events_ms": e, "synced_ms": s, "diff_pct": pct, "agree": agree}
        )
    return rows


# -- NVML beside nvidia-smi -----------------------------------------------------------------------

SMI_FIELDS = (
    "uuid",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
    "clocks_event_reasons.active",
)
#: Our sampler's name -> (nvidia-smi field, factor from its unit to ours, absolute tolerance,
#: relative tolerance). nvidia-smi gives MiB where we keep GiB.
NVML_VS_SMI: dict[str, tuple[str, float, float, float]] = {
    "util_percent": ("utilization.gpu", 1.0, 10.0, 0.0),
    "memory_used_gb": ("memory.used", 1 / 1024, 0.25, 0.01),
    "memory_total_gb": ("memory.total", 1 / 1024, 0.01, 0.005),
    "power_w": ("power.draw", 1.0, 5.0, 0.10),
    "temperature_c": ("temperature.gpu", 1.0, 2.0, 0.0),
    "sm_clock_mhz": ("clocks.sm", 1.0, 15.0, 0.05),
}
_GPU_IDLE_BIT = 0x1  # a momentary state, not a throttle: left out of the mask comparison


def smi_command(uuid: str, fields: Sequence[str] = SMI_FIELDS) -> list[str]:
    """``nvidia-smi --query-gpu`` for the device with ``uuid`` (torch spells it without
    ``GPU-``)."""
    ident = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    query = ",".join(fields)
    return ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", ident]


def parse_smi(line: str, fields: Sequence[str] = SMI_FIELDS) -> dict[str, Any]:
    """One ``--format=csv,noheader,nounits`` line -> field -> float (hex masks as int, the UUID
    as text, ``[N/A]`` / ``[Not Supported]`` as ``None``)."""
    values = [v.strip() for v in line.strip().split(",")]
    if len(values) != len(fields):
        raise ValueError(f"nvidia-smi gave {len(values)} values for {len(fields)} fields: {line!r}")
    out: dict[str, Any] = {}
    for name, raw in zip(fields, values, strict=True):
        if name == "uuid":
            out[name] = raw
        elif raw.startswith("["):
            out[name] = None
        elif raw.lower().startswith("0x"):
            out[name] = int(raw, 16)
        else:
            out[name] = float(raw)
    return out


def compare_nvml_smi(
    before: Mapping[str, float], smi: Mapping[str, Any], after: Mapping[str, float]
) -> list[dict[str, Any]]:
    """Rows of our sampler's figures (read just before and just after nvidia-smi, names without
    ``resources/gpu0_``) against nvidia-smi's: a figure agrees when nvidia-smi's value lies
    within the tolerance of the range the two NVML reads span; throttle reasons agree when
    nvidia-smi's mask (GPU-idle bit left out) equals one of the two reads'."""
    rows = []
    for name, (smi_name, factor, abs_tol, rel_tol) in NVML_VS_SMI.items():
        reads = [r[name] for r in (before, after) if name in r]
        raw = smi.get(smi_name)
        if not reads or raw is None:
            rows.append({"figure": name, "nvml": reads, "smi": raw, "agree": None})
            continue
        value = raw * factor
        tol = max(abs_tol, rel_tol * abs(value))
        agree = min(reads) - tol <= value <= max(reads) + tol
        rows.append({"figure": name, "nvml": reads, "smi": value, "tolerance": tol, "agree": agree})
    masks = [int(r["throttle_reasons"]) for r in (before, after) if "throttle_reasons" in r]
    raw_mask = smi.get("clocks_event_reasons.active")
    if masks and raw_mask is not None:
        keep = ~_GPU_IDLE_BIT
        agree = any((m & keep) == (raw_mask & keep) for m in masks)
        rows.append({"figure": "throttle_reasons", "nvml": masks, "smi": raw_mask, "agree": agree})
    else:
        rows.append({"figure": "throttle_reasons", "nvml": masks, "smi": raw_mask, "agree": None})
    return rows


def nvml_gpu0(sample: Mapping[str, float]) -> dict[str, float]:
    """The ``resources/gpu0_*`` figures of one sampler sample, prefix removed."""
    head = "resources/gpu0_"
    return {k.removeprefix(head): v for k, v in sample.items() if k.startswith(head)}


def paired_read(
    sampler: Any, uuid: str, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> dict[str, Any]:
    """NVML (through ``sampler``, a :class:`~ocr.perf.resources.ResourceSampler` over this
    device), nvidia-smi, NVML again: one moment, compared."""
    before = nvml_gpu0(sampler.sample())
    proc = run(smi_command(uuid), capture_output=True, text=True, timeout=30, check=True)
    after = nvml_gpu0(sampler.sample())
    smi = parse_smi(proc.stdout.strip().splitlines()[0])
    if _norm(smi["uuid"]).removeprefix("gpu-") != _norm(uuid).removeprefix("gpu-"):
        raise ValueError(f"nvidia-smi answered for {smi['uuid']}, asked for {uuid}")
    return {"rows": compare_nvml_smi(before, smi, after), "smi": smi}


def read_while_training(
    uuid: str, run_dir: Path, out: list[dict[str, Any]], reads: int = 3
) -> Callable[[subprocess.Popen[bytes]], None]:
    """A ``during`` hook for :func:`benchmarks.baseline_doc.train`: once the run's first epoch
    record exists (the GPU busy with the next epoch), ``reads`` paired reads a second apart into
    ``out`` (at the end, idle, when the run finishes first). A failing read never stops the
    training: its traceback goes into ``out`` as ``{"error": ...}``."""
    from ocr.perf.resources import ResourceSampler

    def during(proc: subprocess.Popen[bytes]) -> None:
        epochs = run_dir / "perf" / "epochs.jsonl"
        while proc.poll() is None and not (epochs.exists() and epochs.stat().st_size):
            time.sleep(0.5)
        try:
            sampler = ResourceSampler(device_uuids=[uuid], memory_detail_s=0)
        except Exception:
            out.append({"error": traceback.format_exc()})
            return
        try:
            for i in range(reads):
                read = paired_read(sampler, uuid)
                read["while_training"] = proc.poll() is None
                read["sampler_status"] = sampler.status.get("gpu")
                out.append(read)
                if i + 1 < reads:
                    time.sleep(1.0)
        except Exception:
            out.append({"error": traceback.format_exc()})
        finally:
            sampler.close()

    return during


# -- ocr-perf on the run, the seam tests, the trace fixture ---------------------------------------


def run_logged(argv: Sequence[str], log: Path, timeout: float | None = None) -> int:
    """Run ``argv`` from the repository root (our environment), its output into ``log``; returns
    the exit code."""
    print(f"$ {shlex.join(argv)}", flush=True)
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.run(
            list(argv),
            cwd=REPO_ROOT,
            env=subprocess_env(),
            stdout=handle,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    return proc.returncode


def perf(*args: str) -> list[str]:
    """``ocr-perf ARGS`` as this interpreter runs it (no console script needed)."""
    return [sys.executable, "-m", "ocr.perf.cli", *args]


def head(path: Path, lines: int) -> str:
    """The first ``lines`` lines of a text file."""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[:lines])


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file."""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def h2d_copies(device_ops: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Host-to-device copies by source memory (``Memcpy HtoD (Pinned -> Device)`` /
    ``(Pageable -> Device)``) from the analyzer's device-op rows: calls and ms."""
    out: dict[str, dict[str, float]] = {}
    for op in device_ops:
        name = str(op.get("name", ""))
        if op.get("kind") != "memcpy" or "HtoD" not in name:
            continue
        source = "pinned" if "Pinned" in name else "pageable" if "Pageable" in name else "other"
        entry = out.setdefault(source, {"calls": 0.0, "ms": 0.0})
        entry["calls"] += float(op.get("calls") or 0)
        entry["ms"] += float(op.get("total_ms") or 0.0)
    return out


def trace_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """What the document shows of an ``ocr-perf analyze --json`` report: steps, GPU busy and idle,
    device time per phase (mean over steps), H2D copies, the trace-vs-clock agreement and the
    findings."""
    metrics = report.get("metrics") or {}
    steps = [s for s in report.get("steps") or [] if s.get("gpu_phases_ms")]
    per_phase: dict[str, float] = {}
    for step in steps:
        for phase, ms in step["gpu_phases_ms"].items():
            per_phase[phase] = per_phase.get(phase, 0.0) + float(ms) / len(steps)
    agreement = report.get("clock_agreement") or {}
    return {
        "has_gpu": bool(metrics.get("has_gpu")),
        "steps": metrics.get("n_steps"),
        "step_ms": metrics.get("step_wall_ms"),
        "gpu_busy_pct": metrics.get("gpu_busy_pct"),
        "gpu_idle_ms_per_step": metrics.get("gpu_idle_ms_per_step"),
        "kernels_per_step": metrics.get("kernels_per_step"),
        "device_ms_per_phase": per_phase,
        "h2d": h2d_copies(report.get("top_cuda_ops") or []),
        "clock_agrees": agreement.get("agree"),
        "findings": [f"{f.get('severity')}: {f.get('title')}" for f in report.get("findings", [])],
    }


def junit_counts(path: Path) -> dict[str, Any]:
    """Tests, failures, errors, skips and the failing test ids of a pytest JUnit XML file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures")}
    counts |= {key: sum(int(s.get(key, 0)) for s in suites) for key in ("errors", "skipped")}
    failing = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    return {**counts, "failing": failing}


def seam_tests(mode: str, work: Path) -> dict[str, Any]:
    """``run``: the seam tests on this machine's torch and Lightning (JUnit counts); ``list``:
    only collect them (how many, no run)."""
    pytest_argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *SEAM_TESTS]
    log = work / f"seams-{mode}.log"
    if mode == "list":
        rc = run_logged([*pytest_argv, "--collect-only", "-q"], log)
        ids = [line for line in log.read_text().splitlines() if "::" in line]
        return {"mode": mode, "rc": rc, "collected": len(ids), "files": list(SEAM_TESTS)}
    junit = work / "seams.xml"
    rc = run_logged([*pytest_argv, "-q", f"--junitxml={junit}"], log)
    return {"mode": mode, "rc": rc, "files": list(SEAM_TESTS), **junit_counts(junit)}


def save_fixture(trace: Path, dest_dir: Path, device_name: str) -> dict[str, Any]:
    """Copy the gzip trace ``trace`` to ``dest_dir`` as
    ``dbnet_r18_640_16mixed_<device>.pt.trace.json.gz`` (recompressed at level 9 when over
    :data:`FIXTURE_MAX_BYTES`; refused when still over)."""
    slug = "".join(c if c.isalnum() else "_" for c in device_name.lower()).strip("_")
    dest = dest_dir / f"dbnet_r18_640_16mixed_{slug}.pt.trace.json.gz"
    data = trace.read_bytes()
    if not trace.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9)
    elif len(data) > FIXTURE_MAX_BYTES:
        data = gzip.compress(gzip.decompress(data), compresslevel=9)
    if len(data) > FIXTURE_MAX_BYTES:
        raise ValueError(
            f"{trace}: {len(data) / 2**20:.2f} MiB gzip, over the fixture limit of "
            f"{FIXTURE_MAX_BYTES / 2**20:.0f} MiB; profile fewer steps "
            "(callbacks.profiler.profile_steps=2) or without callbacks.profiler.record_shapes"
        )
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return {"path": str(dest), "bytes": len(data), "source": str(trace)}


# -- the check ------------------------------------------------------------------------------------


@dataclass
class Check:
    """Everything one run of the check found, rendered by :func:`render`."""

    argv: list[str]
    cuda: dict[str, Any] | None
    versions: dict[str, Any]
    wheels: WheelCheck
    parts: dict[str, Part] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    started: str = ""

    def run(self, name: str, fn: Callable[[], dict[str, Any] | None]) -> Part:
        """Run part ``name``; a failure keeps its traceback in the part and the check goes on."""
        part = Part(name)
        start = time.perf_counter()
        try:
            part.data = fn() or {}
        except Exception:
            part.status, part.reason = "failed", traceback.format_exc()
            print(f"part {name} failed:\n{part.reason}", file=sys.stderr, flush=True)
        part.seconds = time.perf_counter() - start
        self.parts[name] = part
        return part

    def skip(self, name: str, reason: str, adds: str = "") -> None:
        self.parts[name] = Part(name, "skipped", reason, adds)

    def ok(self, name: str) -> bool:
        part = self.parts.get(name)
        return part is not None and part.status == "ran"

    def as_dict(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "started": self.started,
            "cuda": self.cuda,
            "versions": self.versions,
            "wheels": asdict(self.wheels),
            "commands": self.commands,
            "parts": {name: asdict(part) for name, part in self.parts.items()},
        }


def _f(value: Any, spec: str = ".1f", scale: float = 1.0) -> str:
    if value is None:
        return "–"
    return format(value * scale, spec)


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f} %"


def _ok(flag: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "–"}[flag]


def _render_parts(check: Check) -> list[str]:
    lines = ["| part | status | seconds | note |", "|---|---|---:|---|"]
    for part in check.parts.values():
        note = part.reason.strip().splitlines()[-1] if part.reason else ""
        lines.append(f"| {part.name} | {part.status} | {part.seconds:.1f} | {note} |")
    skipped = [p for p in check.parts.values() if p.status == "skipped"]
    if skipped:
        lines += ["", "Skipped, why, and what a GPU run adds:", ""]
        for p in skipped:
            lines.append(
                f"* **{p.name}**: {p.reason}." + (f" A GPU run adds {p.adds}." if p.adds else "")
            )
    failed = [p for p in check.parts.values() if p.status == "failed"]
    for p in failed:
        lines += ["", f"**{p.name} failed:**", "", "```", p.reason.rstrip(), "```"]
    return lines


def _render_machine(check: Check) -> list[str]:
    v, cuda, wheels = check.versions, check.cuda, check.wheels
    device = (
        f"{cuda['name']} ({cuda['sms']} SMs, {cuda['memory_gib']:.1f} GiB, compute "
        f"{cuda['capability']}, UUID {cuda['uuid']})"
        if cuda
        else "no CUDA device (CPU only)"
    )
    lines = [
        f"* device: {device}; {v['cores']} usable cores, {v['platform']}",
        f"* Python {v['python']}, torch {v['torch']} (CUDA {v['cuda']}, cuDNN {v['cudnn']}), "
        f"Lightning {v['lightning']}, numpy {v['numpy']}",
        "* DataLoader instrumentation's tested range "
        + ", ".join(f"{k} [{a}, {b})" for k, (a, b) in v["tested_versions"].items())
        + (f": **outside** ({v['outside_tested']})" if v["outside_tested"] else ": inside"),
        f"* wheels: every runtime dependency installed; carried to the device machine: "
        f"{', '.join(wheels_to_carry())}",
    ]
    lines += [f"* version outside pyproject's range: {m}" for m in wheels.mismatched]
    return lines


def _render_throughput(fig: Mapping[str, Any]) -> list[str]:
    lines = [
        f"Epochs measured (warm-up epoch 0 and the profiled epoch left out where others remain): "
        f"train {fig['train']['epochs'] if fig['train'] else '–'}, "
        f"val {fig['val']['epochs'] if fig['val'] else '–'}. Peak: measured "
        f"{_f(fig['peak_flops_per_s'], '.1f', 1e-12)} TFLOP/s, spec sheet "
        f"{_f(fig['spec_peak_flops_per_s'], '.1f', 1e-12)} TFLOP/s.",
        "",
        "| stage | samples/s | data-wait share | TFLOP/s | MFU (measured peak) | MFU (spec) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for stage in ("train", "val"):
        s = fig.get(stage)
        if not s:
            lines.append(f"| {stage} | – | – | – | – | – |")
            continue
        lines.append(
            f"| {stage} | {_f(s['samples_per_s'], '.2f')} | {_pct(s['data_wait_share'])} | "
            f"{_f(s['flops_per_s'], '.3f', 1e-12)} | {_pct(s['mfu'])} | {_pct(s['mfu_spec'])} |"
        )
    train = fig.get("train") or {}
    host, events = train.get("host_ms") or {}, train.get("event_ms") or {}
    lines += [
        "",
        "Training phase split, ms per batch (host clock; CUDA events where recorded):",
        "",
        "| phase | host ms | CUDA-event ms |",
        "|---|---:|---:|",
    ]
    for phase in PHASES:
        if host.get(phase) or events.get(phase):
            lines.append(
                f"| {phase} | {_f(host.get(phase), '.2f')} | {_f(events.get(phase), '.2f')} |"
            )
    return lines


def _render_comparison(title: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    bad = [r["phase"] for r in rows if not r["agree"]]
    verdict = (
        "all phases agree" if not bad else f"**differ on {', '.join(bad)}** (see the note below)"
    )
    lines = [
        f"{title}: {verdict} (tolerance {AGREEMENT_TOLERANCE_PCT:.0f} % of the larger figure, "
        f"or below {ABSOLUTE_FLOOR_PCT_OF_STEP:.0f} % of the step).",
        "",
        "| phase | CUDA events ms/batch | synchronized ms/batch | diff % | agree |",
        "|---|---:|---:|---:|---|",
    ]
    for r in rows:
        if r["events_ms"] or r["synced_ms"]:
            lines.append(
                f"| {r['phase']} | {r['events_ms']:.2f} | {r['synced_ms']:.2f} | "
                f"{_f(r['diff_pct'], '+.1f')} | {_ok(r['agree'])} |"
            )
    if bad:
        lines += [
            "",
            "Where they differ: a synchronized phase also holds the host's wait for the GPU work "
            "launched before it, and asynchronous launches let the GPU run one phase's kernels "
            "while the host is already in the next; data_wait and transfer move most when the "
            "GPU runs behind the host.",
        ]
    return lines


def _render_nvml(reads: Sequence[Mapping[str, Any]]) -> list[str]:
    if not reads:
        return ["No paired read was taken."]
    lines = [
        f"{len(reads)} paired reads (NVML through `ocr.perf.resources.ResourceSampler`, matched "
        "by UUID, just before and just after `" + shlex.join(smi_command("<uuid>")) + "`); "
        f"sampler: {reads[0].get('sampler_status')}; "
        f"{'while training' if reads[0].get('while_training') else 'after training (idle)'}.",
        "",
        "| read | figure | NVML (before, after) | nvidia-smi | tolerance | agree |",
        "|---:|---|---|---:|---:|---|",
    ]
    for i, read in enumerate(reads, 1):
        for r in read["rows"]:
            nvml = ", ".join(_f(v, ".4g") for v in r["nvml"]) or "–"
            smi = r["smi"]
            smi_text = (
                hex(smi)
                if r["figure"] == "throttle_reasons" and smi is not None
                else _f(smi, ".4g")
            )
            lines.append(
                f"| {i} | {r['figure']} | {nvml} | {smi_text} | {_f(r.get('tolerance'), '.3g')} "
                f"| {_ok(r['agree'])} |"
            )
    return lines


def _render_trace(summary: Mapping[str, Any]) -> list[str]:
    lines = [
        f"* {summary['steps']} steps, {_f(summary['step_ms'], '.2f')} ms/step; GPU busy "
        f"{_f(summary['gpu_busy_pct'], '.1f')} %, idle {_f(summary['gpu_idle_ms_per_step'], '.2f')}"
        f" ms/step, {_f(summary['kernels_per_step'], '.0f')} kernels/step; trace vs phase clock "
        f"agree: {_ok(summary['clock_agrees'])}",
    ]
    if summary["device_ms_per_phase"]:
        lines.append(
            "* device ms per step by phase: "
            + ", ".join(f"{p} {ms:.2f}" for p, ms in summary["device_ms_per_phase"].items())
        )
    if summary["h2d"]:
        lines.append(
            "* host-to-device copies: "
            + ", ".join(
                f"{src} {int(e['calls'])} calls / {e['ms']:.2f} ms"
                for src, e in summary["h2d"].items()
            )
        )
    lines += [f"* finding: {f}" for f in summary["findings"]]
    return lines


def render(check: Check) -> str:
    """The Markdown document of ``check``."""
    host = platform.node()
    lines = [
        "# GPU check",
        "",
        "<!-- Generated file: do not edit by hand. Regenerate with the command below. -->",
        "",
        f"Generated by `{shlex.join(['python', 'scripts/gpu_check.py', *check.argv])}` on "
        f"{check.started}, on `{host}`.",
        "",
    ]
    if check.cuda is None:
        lines += [
            "**No GPU on this machine**: the parts that need CUDA were skipped (below: why, and "
            "what a GPU run adds). On a machine with CUDA the same command runs them all; "
            "`python scripts/gpu_check.py --plan` prints the device machine's command and the "
            "wheels to carry.",
            "",
        ]
    lines += ["## Parts", "", *_render_parts(check), "", "## Machine and versions", ""]
    lines += _render_machine(check)
    train = check.parts.get("train")
    if train and train.status == "ran":
        lines += ["", "## Throughput, phases, MFU", "", *_render_throughput(train.data["figures"])]
    sync = check.parts.get("train_sync")
    if sync and sync.status == "ran":
        lines += ["", "## CUDA events vs synchronized phase times", ""]
        lines += _render_comparison(
            "CUDA events of the main run against the synchronized run (`sync_cuda=true`)",
            sync.data["events_vs_sync"],
        )
        lines.append("")
        lines += _render_comparison(
            "CUDA events against the synchronized host clock, same steps (the synchronized run)",
            sync.data["events_vs_sync_same_run"],
        )
    nvml = check.parts.get("nvml")
    if nvml and nvml.status == "ran":
        lines += ["", "## NVML vs nvidia-smi", "", *_render_nvml(nvml.data["reads"])]
    analyze = check.parts.get("analyze")
    if analyze and analyze.status == "ran":
        lines += ["", "## `ocr-perf analyze` on the profiled epoch", ""]
        lines += _render_trace(analyze.data["summary"])
    for name, title in (("report", "`ocr-perf report`"), ("try", "`ocr-perf try`")):
        part = check.parts.get(name)
        if part and part.status == "ran":
            lines += ["", f"## {title} (exit {part.data['rc']})", "", "```"]
            lines += [part.data["output"].rstrip(), "```"]
    seams = check.parts.get("seams")
    if seams and seams.status == "ran":
        d = seams.data
        lines += ["", "## Seam tests", ""]
        if d["mode"] == "list":
            lines.append(
                f"Listed only (`--seams list`): {d['collected']} tests in "
                + ", ".join(f"`{f}`" for f in d["files"])
                + "."
            )
        else:
            lines.append(
                f"{d['tests']} tests, {d['failures']} failed, {d['errors']} errors, "
                f"{d['skipped']} skipped (exit {d['rc']}) on torch {check.versions['torch']}, "
                f"Lightning {check.versions['lightning']}: "
                + ", ".join(f"`{f}`" for f in d["files"])
                + "."
            )
            lines += [f"* failing: `{t}`" for t in d["failing"]]
    fixture = check.parts.get("fixture")
    if fixture and fixture.status == "ran":
        d = fixture.data
        lines += [
            "",
            "## Trace fixture",
            "",
            f"`{Path(d['path']).name}` ({d['bytes'] / 2**20:.2f} MiB gzip), the profiled epoch of "
            "the main run below.",
        ]
    if check.commands:
        lines += ["", "## Commands", ""]
        lines += [f"* {label}: `{cmd}`" for label, cmd in check.commands.items()]
    return "\n".join(lines) + "\n"


# -- main -----------------------------------------------------------------------------------------

#: (epochs, training batches per epoch) when not given: a few hundred steps on a GPU, a short
#: CPU run (synthetic_debug has 30 batches per epoch).
RUN_SIZE = {"gpu": (4, 100), "cpu": (3, 10)}
PART_NAMES = ("seams", "train", "nvml", "train_sync", "analyze", "report", "try", "fixture")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_check.py",
        description=__doc__.splitlines()[0],
        epilog="Exit codes: 0 done (parts skipped without CUDA included), 1 a part failed, "
        "2 bad input or a missing runtime dependency.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder for {DOC_NAME}")
    parser.add_argument(
        "--fixture-dir", type=Path, default=DEFAULT_FIXTURES, help="folder for the GPU trace"
    )
    parser.add_argument("--work-dir", type=Path, help="keep the runs here (default: a temp dir)")
    parser.add_argument("--epochs", type=int, help="training epochs per run, >= 2 (GPU: 4, CPU: 3)")
    parser.add_argument(
        "--train-batches", type=int, help="training batches per epoch (GPU: 100, CPU: 10)"
    )
    parser.add_argument("--try-budget", default="2m", help="ocr-perf try --budget")
    parser.add_argument("--seams", choices=("run", "list", "skip"), default="run")
    parser.add_argument("--skip", action="append", default=[], choices=PART_NAMES)
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--logs", type=Path, help="also write the runs' logs to this .tar.gz")
    parser.add_argument("--plan", "--dry-run", action="store_true", help="print the plan only")
    parser.add_argument("--fetch-wheels", metavar="DIR", help="fetch the carried wheels into DIR")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every training run")
    args = parser.parse_args(argv)
    return args


def size_run(args: argparse.Namespace, cuda: bool) -> None:
    """Fill in ``--epochs`` / ``--train-batches`` left out: :data:`RUN_SIZE` of the device."""
    args.given_size = [
        f"--{name.replace('_', '-')} {value}"
        for name, value in (("epochs", args.epochs), ("train_batches", args.train_batches))
        if value is not None
    ]
    epochs, batches = RUN_SIZE["gpu" if cuda else "cpu"]
    args.epochs = epochs if args.epochs is None else args.epochs
    args.train_batches = batches if args.train_batches is None else args.train_batches
    if args.epochs < 2:
        raise SystemExit(
            "gpu_check.py: error: --epochs must be >= 2 (epoch 0 is warm-up, the last one is "
            "profiled)"
        )
    if args.train_batches < 1:
        raise SystemExit("gpu_check.py: error: --train-batches must be >= 1")


def plan(args: argparse.Namespace, cuda: dict[str, Any] | None, cores: int) -> list[str]:
    """What :func:`main` would run here, then the device machine's recipe."""
    where = f"CUDA ({cuda['name']})" if cuda else "no CUDA: the GPU-only parts are skipped"
    main_run = train_overrides(bool(cuda), args.epochs, args.train_batches, cores, sync=False)
    sync_run = train_overrides(bool(cuda), args.epochs, args.train_batches, cores, sync=True)
    lines = [f"Here: {where}; {cores} cores -> data.num_workers={workers_for(cores)}.", ""]
    steps = [
        ("preflight", "always: versions, GPU, wheel check of pyproject's runtime dependencies"),
        ("seams", f"pytest ({args.seams}) {' '.join(SEAM_TESTS)}"),
        ("train", "python -m ocr.train " + shlex.join([*main_run, *args.overrides])),
        ("nvml", "ResourceSampler beside " + shlex.join(smi_command("<uuid>")) + " while training"),
        ("train_sync", "python -m ocr.train " + shlex.join([*sync_run, *args.overrides])),
        ("analyze", "ocr-perf analyze <train run>/profiler_traces --json ..."),
        ("report", "ocr-perf report <train run> --markdown ..."),
        ("try", f"ocr-perf try <train run> --budget {args.try_budget}"),
        ("fixture", f"<train run>'s GPU trace -> {args.fixture_dir} (<= 2 MB gzip)"),
    ]
    for name, what in steps:
        skipped = (
            " [skipped: --skip]"
            if name in args.skip
            else f" [skipped: {GPU_ONLY[name][0]}]"
            if name in GPU_ONLY and not cuda
            else ""
        )
        lines.append(f"  {name}: {what}{skipped}")
    lines += [
        "",
        f"Device machine ({DEVICE_IMAGE}). Wheels to carry (cp312 manylinux x86_64 or pure "
        f"Python): {', '.join(wheels_to_carry())}. Here, in the repository root ({WHEEL_DIR}/ "
        "is git-ignored):",
        "",
        *(f"  {shlex.join(c)}" for c in fetch_commands()),
        "  (or: python scripts/gpu_check.py --fetch-wheels .whl)",
        "",
        f"Then the device tool's run, with carry [{WHEEL_DIR!r}], timeout_s 600:",
        "",
        f"  {device_command(args)}",
        "",
        "torch stays the device's own (a CUDA torch wheel is far over the 64 MiB a call carries): "
        "the seam tests say whether the DataLoader instrumentation's tested range can include it.",
    ]
    return lines


def fetch_wheels(dest: str) -> int:
    """Run :func:`fetch_commands` with this interpreter's pip; the first failing exit code."""
    for cmd in fetch_commands(dest, python=sys.executable):
        print(f"$ {shlex.join(cmd)}", flush=True)
        rc = subprocess.run(cmd, check=False).returncode
        if rc:
            return rc
    return 0


def _train_part(
    check: Check, args: argparse.Namespace, work: Path, cores: int
) -> tuple[Path, list[dict[str, Any]]]:
    run_dir = work / "train"
    reads: list[dict[str, Any]] = []
    cuda = check.cuda
    overrides = [*train_overrides(bool(cuda), args.epochs, args.train_batches, cores, sync=False)]
    during = (
        read_while_training(cuda["uuid"], run_dir, reads)
        if cuda and "nvml" not in args.skip
        else None
    )

    def go() -> dict[str, Any]:
        argv = train(run_dir, [*overrides, *args.overrides], work / "train.log", during=during)
        check.commands["train"] = shlex.join(["python", *argv])
        return {"run_dir": str(run_dir), "figures": run_figures(run_dir, [args.epochs - 1])}

    check.run("train", go)
    return run_dir, reads


def _sync_part(check: Check, args: argparse.Namespace, work: Path, cores: int) -> None:
    run_dir = work / "train_sync"

    def go() -> dict[str, Any]:
        overrides = train_overrides(True, args.epochs, args.train_batches, cores, sync=True)
        argv = train(run_dir, [*overrides, *args.overrides], work / "train_sync.log")
        check.commands["train_sync"] = shlex.join(["python", *argv])
        figures = run_figures(run_dir)
        main_train = check.parts["train"].data["figures"]["train"] or {}
        synced = figures["train"] or {}
        return {
            "run_dir": str(run_dir),
            "figures": figures,
            "events_vs_sync": compare_phase_times(
                main_train.get("event_ms") or {}, synced.get("host_ms") or {}
            ),
            "events_vs_sync_same_run": compare_phase_times(
                synced.get("event_ms") or {}, synced.get("host_ms") or {}
            ),
        }

    check.run("train_sync", go)


def _perf_parts(check: Check, args: argparse.Namespace, run_dir: Path, work: Path) -> None:
    traces = run_dir / "profiler_traces"

    def analyze() -> dict[str, Any]:
        out = work / "analyze.json"
        rc = run_logged(
            perf("analyze", str(traces), "--json", str(out), "--top-k", "500"), work / "analyze.log"
        )
        if rc != 0:
            raise RuntimeError(f"ocr-perf analyze exit {rc}:\n{tail(work / 'analyze.log', 30)}")
        return {"rc": rc, "summary": trace_summary(json.loads(out.read_text()))}

    def report() -> dict[str, Any]:
        log = work / "report.log"
        rc = run_logged(perf("report", str(run_dir), "--markdown", str(work / "report.md")), log)
        return {"rc": rc, "output": head(log, 30)}

    def try_() -> dict[str, Any]:
        log = work / "try.log"
        rc = run_logged(perf("try", str(run_dir), "--budget", args.try_budget), log)
        return {"rc": rc, "output": tail(log, 40)}

    for name, fn in (("analyze", analyze), ("report", report), ("try", try_)):
        if name in args.skip:
            check.skip(name, "--skip on the command line")
        else:
            check.run(name, fn)


def write_logs(archive: Path, work: Path) -> None:
    """The runs' logs, perf files and ocr-perf outputs (no checkpoints, no traces) as a .tar.gz."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    keep = (".log", ".json", ".jsonl", ".md", ".xml", ".yaml")
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file() and path.name.endswith(keep) and "profiler_traces" not in path.parts:
                tar.add(path, arcname=str(path.relative_to(work)))


def run_check(
    args: argparse.Namespace, argv: list[str], work: Path, cuda: dict[str, Any] | None
) -> Check:
    """Every part in order (see the module doc)."""
    vers = versions()
    cores = vers["cores"]
    check = Check(argv, cuda, vers, check_requirements(runtime_requirements()))
    check.started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if args.seams == "skip" or "seams" in args.skip:
        check.skip("seams", "--seams skip / --skip seams on the command line")
    else:
        check.run("seams", lambda: seam_tests(args.seams, work))
    run_dir, reads = _train_part(check, args, work, cores)
    trained = check.ok("train")
    for name in ("nvml", "train_sync", "fixture"):
        if name in args.skip:
            check.skip(name, "--skip on the command line")
        elif cuda is None:
            check.skip(name, *GPU_ONLY[name])
        elif not trained:
            check.skip(name, "the training run failed")
        elif name == "nvml":
            check.run("nvml", lambda: nvml_reads(reads))
        elif name == "train_sync":
            _sync_part(check, args, work, cores)
    if trained:
        _perf_parts(check, args, run_dir, work)
    else:
        for name in ("analyze", "report", "try"):
            check.skip(name, "the training run failed")
    if cuda is not None and trained and "fixture" not in args.skip:
        trace = sorted((run_dir / "profiler_traces").glob("*.json*"))
        check.run("fixture", lambda: save_fixture(trace[0], args.fixture_dir, cuda["name"]))
    return check


def nvml_reads(reads: list[dict[str, Any]]) -> dict[str, Any]:
    """The nvml part's result: the paired reads taken while training; a read that failed (its
    traceback kept) or none at all fails the part."""
    errors = [r["error"] for r in reads if "error" in r]
    if errors:
        raise RuntimeError("a paired NVML / nvidia-smi read failed:\n" + errors[0])
    if not reads:
        raise RuntimeError("no paired NVML / nvidia-smi read was taken during the training run")
    return {"reads": reads}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.fetch_wheels:
        return fetch_wheels(args.fetch_wheels)
    cuda = cuda_device()
    size_run(args, cuda is not None)
    if args.plan:
        print("\n".join(plan(args, cuda, len(os.sched_getaffinity(0)))))
        return 0
    wheels = check_requirements(runtime_requirements())
    if wheels.missing:
        print(
            f"gpu_check.py: error: not installed: {', '.join(wheels.missing)}; on the device "
            f"machine carry them as wheels (python scripts/gpu_check.py --plan)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = args.work_dir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        check = run_check(args, argv, work, cuda)
        args.out.mkdir(parents=True, exist_ok=True)
        doc = args.out / DOC_NAME
        doc.write_text(render(check), encoding="utf-8")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(check.as_dict(), indent=1, default=str))
        if args.logs:
            write_logs(args.logs, work)
        print(f"wrote {doc}")
    failed = [p.name for p in check.parts.values() if p.status == "failed"]
    for p in check.parts.values():
        print(
            f"{p.name}: {p.status}"
            + (f" ({p.reason.strip().splitlines()[-1]})" if p.reason else "")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

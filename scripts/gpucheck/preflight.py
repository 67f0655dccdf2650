"""Before the check runs: the GPU, the versions, and the wheel check of pyproject's runtime
dependencies against what is installed; the device machine's image, the wheels carried there and
the device tool's command that runs the check on it."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from scripts.gpucheck import REPO_ROOT

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
#: Dependencies that live in this repository: on ``PYTHONPATH`` there (``packages/*/src``).
IN_REPO = frozenset({"trainperf"})
IN_REPO_PATH = "$PWD/packages/trainperf/src"
WHEEL_DIR = ".whl"
_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def norm_name(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def runtime_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[Requirement]:
    """``[project].dependencies`` of ``pyproject``, the toolkit's (:data:`IN_REPO`, on the path
    there) replaced by its own."""
    with open(pyproject, "rb") as fh:
        reqs = [Requirement(r) for r in tomllib.load(fh)["project"]["dependencies"]]
    out = [r for r in reqs if norm_name(r.name) not in IN_REPO]
    if len(out) < len(reqs) and pyproject == REPO_ROOT / "pyproject.toml":
        out += runtime_requirements(REPO_ROOT / "packages" / "trainperf" / "pyproject.toml")
    return out


def pinned_versions(constraints: Path = REPO_ROOT / "constraints.txt") -> dict[str, str]:
    """Normalised name -> version of every ``name==version`` line of ``constraints``."""
    out = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        name, sep, version = line.partition("==")
        if sep and not line.startswith("#"):
            out[norm_name(name.strip())] = version.strip()
    return out


def wheels_to_carry(pins: Mapping[str, str] | None = None) -> list[str]:
    """``name==version`` of each :data:`CARRIED` package, versions from constraints.txt."""
    pins = pinned_versions() if pins is None else pins
    return [f"{name}=={pins[norm_name(name)]}" for name in CARRIED]


def fetch_commands(dest: str = WHEEL_DIR, python: str = "python3") -> list[list[str]]:
    """The commands that put the carried wheels into ``dest`` (the device README's ``pip
    download`` for binary wheels; ``pip wheel`` for the sdist-only ones)."""
    wheels = wheels_to_carry()
    binary = [w for w in wheels if norm_name(w.split("==")[0]) not in SDIST_ONLY]
    built = [w for w in wheels if norm_name(w.split("==")[0]) in SDIST_ONLY]
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
            pin = pins.get(norm_name(req.name))
            result.missing.append(f"{req.name}=={pin}" if pin else str(req))
            continue
        result.installed[req.name] = version
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            result.mismatched.append(f"{req.name} {version} (pyproject: {req})")
    return result


#: Parts the device command skips, to fit the arms in the device time (``--plan`` budgets it):
#: ``train_sync`` was measured on the H200 on 2026-11-26 (events and synchronized phase times
#: agree within 1 % on the same steps), and ``try`` measured one pair in its 90 s there, too few to
#: tell anything; run them with ``--skip`` left out when there is time.
DEVICE_SKIPS = ("train_sync", "try")


def device_command(args: argparse.Namespace) -> str:
    """The device tool's ``run`` command (carry ``.whl``) that runs this check there and brings
    the document, the figures, the trace and the logs back through ``$OUT`` (run sizes only where
    given on this command line: else the GPU defaults)."""
    install = (
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
        f"--target /tmp/site {WHEEL_DIR}/*.whl"
    )
    env = f"export PYTHONPATH=/tmp/site:$PWD:{IN_REPO_PATH} WANDB_MODE=offline PYTHONUNBUFFERED=1"
    check = [
        "python3 scripts/gpu_check.py --out $OUT --fixture-dir $OUT --work-dir /tmp/gpu-check",
        "--json $OUT/gpu_check.json --logs $OUT/gpu_check_logs.tar.gz",
        f"--try-budget {args.try_budget}",
        *getattr(args, "given_size", []),
        *(f"--skip {part}" for part in DEVICE_SKIPS),
    ]
    return f"{install} && {env} || exit; {' '.join(check)}"


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
    from trainperf.lightning.interpose import TESTED_VERSIONS, worker_timing_off

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
        "outside_tested": worker_timing_off(),  # Lightning range, then torch seams
    }

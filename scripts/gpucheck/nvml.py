"""Our NVML sampler beside ``nvidia-smi --query-gpu`` at the same moment: the paired reads taken
while the check's training run keeps the GPU busy, and their comparison figure by figure."""

from __future__ import annotations

import subprocess
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scripts.gpucheck.preflight import norm_name

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
    """NVML (through ``sampler``, a :class:`~trainperf.probe.resources.ResourceSampler` over this
    device), nvidia-smi, NVML again: one moment, compared."""
    before = nvml_gpu0(sampler.sample())
    proc = run(smi_command(uuid), capture_output=True, text=True, timeout=30, check=True)
    after = nvml_gpu0(sampler.sample())
    smi = parse_smi(proc.stdout.strip().splitlines()[0])
    if norm_name(smi["uuid"]).removeprefix("gpu-") != norm_name(uuid).removeprefix("gpu-"):
        raise ValueError(f"nvidia-smi answered for {smi['uuid']}, asked for {uuid}")
    return {"rows": compare_nvml_smi(before, smi, after), "smi": smi}


def read_while_training(
    uuid: str, run_dir: Path, out: list[dict[str, Any]], reads: int = 3
) -> Callable[[subprocess.Popen[bytes]], None]:
    """A ``during`` hook for :func:`benchmarks.baseline_doc.train`: once the run's first epoch
    record exists (the GPU busy with the next epoch), ``reads`` paired reads a second apart into
    ``out`` (at the end, idle, when the run finishes first). A failing read never stops the
    training: its traceback goes into ``out`` as ``{"error": ...}``."""
    from trainperf.probe.resources import ResourceSampler

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


def nvml_reads(reads: list[dict[str, Any]]) -> dict[str, Any]:
    """The nvml part's result: the paired reads taken while training; a read that failed (its
    traceback kept) or none at all fails the part."""
    errors = [r["error"] for r in reads if "error" in r]
    if errors:
        raise RuntimeError("a paired NVML / nvidia-smi read failed:\n" + errors[0])
    if not reads:
        raise RuntimeError("no paired NVML / nvidia-smi read was taken during the training run")
    return {"reads": reads}

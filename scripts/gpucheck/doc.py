"""The check's Markdown document (``docs/performance/gpu.md``, generated, never edited by hand)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainperf.analysis.trace.agreement import ABSOLUTE_FLOOR_PCT_OF_STEP, AGREEMENT_TOLERANCE_PCT
from trainperf.core.clock import PHASES

from scripts.gpucheck.check import Check
from scripts.gpucheck.nvml import smi_command
from scripts.gpucheck.preflight import wheels_to_carry

DOC_NAME = "gpu.md"


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


def _met(flag: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[flag]


def render_ab(data: Mapping[str, Any]) -> list[str]:
    """The A/B of the default configuration against the fast one, and the goal it checks."""
    ab, arms = data["ab"], data["arms"]
    goal = ab["goal"]
    lines = [
        "Both arms at the same size, one after the other on this machine; each named in full by "
        "its overrides (they hold whatever the config's CUDA defaults are). Training epochs "
        "measured: warm-up epoch 0 and the profiled last epoch left out.",
        "",
        "| arm | overrides | train samples/s | MFU (measured peak) | MFU (spec) | data wait |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in ("default", "fast"):
        a = ab["arms"][name]
        overrides = " ".join(f"`{o}`" for o in arms[name])
        lines.append(
            f"| {name} | {overrides} | {_f(a['samples_per_s'], '.2f')} | {_pct(a['mfu'])} | "
            f"{_pct(a['mfu_spec'])} | {_pct(a['data_wait_share'])} |"
        )
    fast = ab["arms"]["fast"]
    where = (
        ""
        if goal["on_goal_device"]
        else f" (the goal was set for the {goal['device']}; this is another device)"
    )
    lines += [
        "",
        f"Fast / default: {_f(ab['speedup'], '.2f')}x training samples/s.",
        "",
        f"Goal{where}: >= {goal['samples_per_s']:.0f} training samples/s at 640 px, batch 16: "
        f"{_f(fast['samples_per_s'], '.1f')}, {_met(goal['samples_met'])}; MFU >= "
        f"{100 * goal['mfu']:.0f} % of the measured peak: {_pct(fast['mfu'])}, "
        f"{_met(goal['mfu_met'])}.",
    ]
    return lines


ARM_FIGURES = (
    "training samples/s (and against the reference arm), MFU against the measured peak, the "
    "data-wait share of the step and its split (waiting for a worker / receiving and pinning), "
    "the GPU's idle share (1 - mean NVML utilisation over the measured epoch's samples) and the "
    "warm-up epoch's wall time (where compiling shows)"
)


def render_arms(data: Mapping[str, Any]) -> list[str]:
    """The arms' table: per arm its overrides and :data:`ARM_FIGURES`; a failed arm its error."""
    rows, errors, comp = data["rows"], data["errors"], data["comparison"]
    ref = comp["reference"]
    lines = [
        "Each arm a short run of the fast configuration (two epochs of the same samples: epoch 0 "
        "warm-up, epoch 1 measured; no validation, checkpoint or profiler), one after the other "
        f"on this machine, differing from `{ref}` in its overrides only.",
        "",
        f"| arm | overrides | train samples/s | vs {ref} | MFU (measured peak) | data wait | "
        "of it: worker / receive | GPU idle (NVML) | warm-up epoch s |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for name, arm in data["arms"].items():
        overrides = " ".join(f"`{o}`" for o in arm["overrides"]) or "(the reference)"
        row = rows.get(name)
        if row is None:
            error = errors.get(name, "no figures")
            lines.append(f"| {name} | {overrides} | **failed**: {error} | – | – | – | – | – | – |")
            continue
        split = row["data_wait_split"]
        causes = f"{_pct(split.get('worker'))} / {_pct(split.get('receive'))}" if split else "–"
        idle = row["gpu_idle"]
        idle_text = (
            f"{_pct(idle['share'])} ({idle['samples']} samples)"
            if idle["share"] is not None
            else "–"
        )
        lines.append(
            f"| {name} | {overrides} | {_f(row['samples_per_s'], '.2f')} | "
            f"{_f(comp['speedup'].get(name), '.2f')}x | {_pct(row['mfu'])} | "
            f"{_pct(row['data_wait_share'])} | {causes} | {idle_text} | "
            f"{_f(row['warmup_s'], '.1f')} |"
        )
    if comp["fastest"] is not None:
        best = comp["fastest"]
        lines += [
            "",
            f"Fastest: **{best}** ({_f(rows[best]['samples_per_s'], '.1f')} training samples/s, "
            f"{_f(comp['speedup'].get(best), '.2f')}x {ref}).",
        ]
    return lines


def render_planned_arms(planned: Mapping[str, Any]) -> list[str]:
    """The arms a GPU run trains, with their budgets, while none has run: no figures."""
    lines = [
        "**Planned, not yet run**: no GPU run has trained these arms, so there are no figures "
        f"yet. A GPU run of this check trains each (on the device machine's {planned['cores']} "
        f"cores), after the A/B, and shows per arm {ARM_FIGURES}. Each is the fast "
        "configuration at 640 px on the main run's synthetic receipts, two epochs of "
        f"{planned['samples_per_epoch']} samples (epoch 0 warm-up, epoch 1 measured), no "
        "validation, checkpoint or profiler; its run is stopped at twice its budget.",
        "",
        "| arm | what | overrides | budget s |",
        "|---|---|---|---:|",
    ]
    for name, arm in planned["arms"].items():
        overrides = " ".join(f"`{o}`" for o in arm["overrides"]) or "(the reference)"
        lines.append(
            f"| {name} | {arm['what']} | {overrides} | {planned['budget'][f'arms/{name}']:.0f} |"
        )
    lines += [
        "",
        f"The whole GPU run as the device command runs it: {planned['total_s']:.0f} s budgeted "
        f"of {planned['limit_s']:.0f} (`python scripts/gpu_check.py --plan` prints each part).",
    ]
    return lines


def render_comparison(title: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
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
        f"{len(reads)} paired reads (NVML through `trainperf.probe.resources.ResourceSampler`, "
        "matched by UUID, just before and just after `" + shlex.join(smi_command("<uuid>")) + "`); "
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
    made = shlex.join(["python", "scripts/gpu_check.py", *check.argv])
    where = f", on `{check.host}`" if check.host else ""
    lines = [
        "# GPU check",
        "",
        "<!-- Generated file: do not edit by hand. Regenerate with the command below. -->",
        "",
    ]
    if check.rendered_from:
        again = shlex.join(["python", "scripts/gpu_check.py", *check.render_argv])
        lines += [
            f"Rendered by `{again}` from `{check.rendered_from}`, the figures of `{made}` on "
            f"{check.started}{where}.",
            "",
        ]
    else:
        lines += [f"Generated by `{made}` on {check.started}{where}.", ""]
    if check.note:
        lines += [f"> {check.note}", ""]
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
    fast = check.parts.get("train_fast")
    if fast and fast.status == "ran":
        lines += ["", "## A/B: default vs fast configuration", "", *render_ab(fast.data)]
    arms = check.parts.get("arms")
    if arms and arms.data.get("rows") is not None:
        lines += ["", "## Arms for the fast path", "", *render_arms(arms.data)]
    elif check.planned and not (arms and arms.status == "failed"):
        lines += ["", "## Arms for the fast path", "", *render_planned_arms(check.planned)]
    sync = check.parts.get("train_sync")
    if sync and sync.status == "ran":
        lines += ["", "## CUDA events vs synchronized phase times", ""]
        lines += render_comparison(
            "CUDA events of the main run against the synchronized run (`sync_cuda=true`)",
            sync.data["events_vs_sync"],
        )
        lines.append("")
        lines += render_comparison(
            "CUDA events against the synchronized host clock, same steps (the synchronized run)",
            sync.data["events_vs_sync_same_run"],
        )
    nvml = check.parts.get("nvml")
    if nvml and nvml.status == "ran":
        lines += ["", "## NVML vs nvidia-smi", "", *_render_nvml(nvml.data["reads"])]
    analyze = check.parts.get("analyze")
    if analyze and analyze.status == "ran":
        lines += ["", "## `trainperf analyze` on the profiled epoch", ""]
        lines += _render_trace(analyze.data["summary"])
        if analyze.data.get("summary_fast"):
            lines += ["", "The fast run's profiled epoch (bf16-mixed, channels_last, fused):", ""]
            lines += _render_trace(analyze.data["summary_fast"])
    for name, title in (("report", "`trainperf report`"), ("try", "`trainperf try`")):
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
        if d.get("fast"):
            lines.append(
                f"`{Path(d['fast']['path']).name}` ({d['fast']['bytes'] / 2**20:.2f} MiB gzip), "
                "the profiled epoch of the fast run (bf16-mixed)."
            )
    if check.commands:
        lines += ["", "## Commands", ""]
        lines += [f"* {label}: `{cmd}`" for label, cmd in check.commands.items()]
    return "\n".join(lines) + "\n"

"""Trace analysis speed and memory, side by side: ``trainperf.analysis.trace.analyze_trace`` vs
plain ``json.load`` vs Holistic Trace Analysis (HTA), plus ProfilerCallback's cost outside its
windows.

Inputs, all analysed in the same run:

* ``cpu-30MB``: generated here. A real torch.profiler trace of a small CNN trained on the CPU
  (shapes and memory recorded, DataLoader + SGD, 3 active steps) is recorded first; its step
  events are then replicated (shifted in time, ``ProfilerStep#N``, correlation and flow ids
  renumbered) until the file reaches ``--size-mb``. So the schema and the event mix are exactly
  those of torch 2.13 on this machine; only the number of steps is synthetic.
* ``gpu-2021`` / ``gpu-2024``: the real GPU traces of ``../shared/fixtures/traces`` (gunzipped into
  a temporary directory; everyone reads the same plain ``.json``).
* ``gpu-gen``: generated like ``cpu-30MB`` from the 2024 GPU fixture (kernels, memcpys, flows,
  correlation ids renumbered per copy): a ~30 MB trace that HTA can read, since HTA fails on
  CPU-only traces.

Every tool runs in a fresh subprocess per input: peak memory is the increase of the process's
peak RSS (``VmHWM`` over ``VmRSS`` after the imports) during the first run (a tool that used
worker processes is flagged: their memory is not counted); times are wall seconds of ``--reps``
runs (min and median; file cache warm). ``ours`` is
``analyze_trace`` end to end (read, decode, columns, every analysis and finding). ``json.load``
only decodes. HTA runs with ``--hta-python`` (its own virtualenv: it pulls pandas, jupyterlab, ...
and is no dependency of ours): ``TraceAnalysis(trace_dir=...)`` (load and parse) plus
``get_temporal_breakdown()``; a failure is reported as such.

Then the callback overhead: a tight Lightning loop on a tiny model with no callback, with
``ProfilerCallback(schedule=ProfileSchedule(epochs=[99]))`` (never inside a window) and with
on-demand polling on as well, interleaved over ``--overhead-reps`` repetitions; µs per
steady-state step, min and median.

Large-trace mode (``--size-mb 1000`` and more, or ``--large``): one trace of that size generated
from the 2024 GPU fixture's steps (written as it is generated, into a temporary directory made
for it and removed at the end; ``--tmp-dir`` picks where), and its ``.json.gz``: ours on each
(wall s, MB/s of the uncompressed size, peak RSS) beside ``json.load`` and HTA where they fit in
RAM, else the RAM they would need (json.load's from its peak on a 30 MB trace of the same
events, HTA's from its users' 4.75x).

Prints figures only; never passes or fails on a time.

    python benchmarks/trace_analysis.py [--hta-python /work/hta-venv/bin/python] [--json OUT]
    python benchmarks/trace_analysis.py --size-mb 4000 [--tmp-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "traces"
GOAL_S, GOAL_HTA_RATIO, GOAL_MEM_RATIO = 0.5, 10.0, 3.0

# Run in a fresh interpreter (ours / json.load: this one; HTA: --hta-python). Prints one JSON line.
_WORKER = r"""
import json, os, resource, statistics, sys, time

def status_mb(field):
    # VmHWM is this process image's own peak RSS (ru_maxrss survives exec: it would include the
    # parent's RSS at fork)
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(field + " not in /proc/self/status")

def rss_mb():
    return status_mb("VmRSS")

def peak_mb():
    return status_mb("VmHWM")

tool, path, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    if tool == "ours":
        sys.path.insert(0, sys.argv[4])
        from trainperf.analysis.trace import analyze_trace
        def run():
            analyze_trace(path)
    elif tool == "json":
        def run():
            with open(path, "rb") as fh:
                json.load(fh)
    else:
        import logging, warnings
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        from hta.trace_analysis import TraceAnalysis
        def run():
            analyzer = TraceAnalysis(trace_dir=path)
            analyzer.get_temporal_breakdown(visualize=False)
except ImportError as exc:
    print(json.dumps({"status": "not installed", "error": str(exc)}))
    sys.exit(0)
base = rss_mb()
times = []
try:
    for i in range(reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
        if i == 0:
            peak = peak_mb() - base
except Exception as exc:
    msg = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:300]
    print(json.dumps({"status": "failed", "error": msg}))
    sys.exit(0)
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime > 0
print(json.dumps({"status": "ok", "min_s": min(times), "median_s": statistics.median(times),
                  "peak_mb": peak, "subprocesses": children}))
"""


# -- the generated trace ----------------------------------------------------------------------


def record_cpu_trace(path: Path) -> None:
    """A real torch.profiler trace: a small CNN trained on the CPU for 3 active steps."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(16 * 16, 4),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.utils.data.TensorDataset(torch.randn(64, 3, 32, 32), torch.randint(0, 4, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
            record_shapes=True,
            profile_memory=True,
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        ) as prof:
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()


_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def replicate(
    src: Path,
    dst: Path,
    target_mb: float,
    stretch: float = 1.0,
    top: dict[str, Any] | None = None,
) -> int:
    """Write ``src`` (plain or gzip) with its timed events repeated until ``dst`` is about
    ``target_mb``; returns the number of copies. Copies are shifted by the recorded span,
    ``ProfilerStep`` numbers, ``correlation`` / ``External id`` and flow ``id`` are offset so that
    every copy is new work. Written as it is generated (one copy at a time), so a 4 GB trace
    needs the memory of one copy; the bytes are those ``json.dump`` of the whole document
    would write. ``stretch``: every time and duration scaled by it (a slower rank's steps);
    ``top``: top-level keys set or replaced (``distributedInfo`` of a rank file)."""
    opener = gzip.open if src.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(src, "rb") as fh:
        doc = json.loads(fh.read())
    doc.update(top or {})
    events = doc["traceEvents"]
    timed: list[dict[str, Any]] = []
    fixed: list[dict[str, Any]] = []  # metadata: written once
    for e in events:
        is_timed = e.get("ph") != "M" and isinstance(e.get("ts"), int | float)
        (timed if is_timed else fixed).append(e)
    t_lo = min(e["ts"] for e in timed)
    t_hi = max(e["ts"] + e.get("dur", 0) for e in timed)
    period = (t_hi - t_lo) * 1.02
    if stretch != 1.0:
        for e in timed:
            e["ts"] = t_lo + (e["ts"] - t_lo) * stretch
            if isinstance(e.get("dur"), int | float):
                e["dur"] = e["dur"] * stretch
        period *= stretch
    steps = [int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))]
    n_steps = max(steps) - min(steps) + 1 if steps else 0
    ids = [e.get("id", 0) for e in timed if isinstance(e.get("id"), int)]
    id_span = max(ids, default=0) + 1
    corr = [
        e["args"].get(k, 0)
        for e in timed
        if isinstance(e.get("args"), dict)
        for k in ("correlation", "External id")
    ]
    corr_span = max((c for c in corr if isinstance(c, int)), default=0) + 1
    one_copy = len(json.dumps(timed))
    copies = max(1, round(target_mb * 2**20 / one_copy))
    # Each event is serialised once, with the fields a copy changes left open: a 4 GB trace is
    # then written at disk speed rather than json.dumps speed.
    templates = [_template(e) for e in timed]

    def text(parts: list[str | tuple[Any, ...]], k: int) -> str:
        out = []
        for p in parts:
            if isinstance(p, str):
                out.append(p)
            elif p[0] == "ts":
                out.append(repr(p[1] + k * period))
            elif p[0] == "id":
                out.append(str(p[1] + k * id_span))
            elif p[0] == "step":
                out.append(json.dumps(f"ProfilerStep#{p[1] + k * n_steps}" if k else p[2]))
            else:  # a correlation / External id
                out.append(str(p[1] + k * corr_span))
        return "".join(out)

    # torch writes one event per line; json.dumps' default separators are as wordy as torch's
    with open(dst, "w") as out:
        out.write("{")
        for i, key in enumerate(doc):
            out.write((", " if i else "") + json.dumps(key) + ": ")
            if key != "traceEvents":
                out.write(json.dumps(doc[key]))
                continue
            out.write("[" + ", ".join(map(json.dumps, fixed)))
            for k in range(copies):
                sep = ", " if fixed or k else ""
                out.write(sep + ", ".join(text(t, k) for t in templates))
            out.write("]")
        out.write("}")
    return copies


_MARK = re.compile(r'"\\u0001(\d+)\\u0001"')


def _template(e: dict[str, Any]) -> list[str | tuple[Any, ...]]:
    """``e`` as JSON text pieces with the fields a copy changes (``ts``, flow ``id``, a
    ``ProfilerStep`` name, ``correlation`` / ``External id``) as ``(field, original)``."""
    c = dict(e)
    fields: list[tuple[Any, ...]] = []

    def mark(field: tuple[Any, ...]) -> str:
        fields.append(field)
        return f"\x01{len(fields) - 1}\x01"

    c["ts"] = mark(("ts", e["ts"]))
    m = _STEP.match(str(e.get("name", "")))
    if m:
        c["name"] = mark(("step", int(m.group(1)), e["name"]))
    if isinstance(e.get("id"), int):
        c["id"] = mark(("id", e["id"]))
    args = e.get("args")
    if isinstance(args, dict) and ("correlation" in args or "External id" in args):
        c["args"] = dict(args)
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int):
                c["args"][key] = mark(("corr", args[key]))
    pieces = _MARK.split(json.dumps(c))
    return [p if i % 2 == 0 else fields[int(p)] for i, p in enumerate(pieces)]


# -- measurement ------------------------------------------------------------------------------


def run_tool(python: str, tool: str, path: Path, reps: int) -> dict[str, Any]:
    target = path if tool != "hta" else path.parent  # HTA reads a trace directory
    cmd = [python, "-c", _WORKER, tool, str(target), str(reps), str(REPO)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"status": "failed", "error": f"exit {proc.returncode}: {tail[0][:300]}"}
    return dict(json.loads(lines[-1]))


def callback_overhead(steps: int, reps: int) -> dict[str, dict[str, float]]:
    """µs per steady-state training step: no callback vs ProfilerCallback outside its window."""
    import logging
    import warnings

    import torch
    from _tiny_loop import fit_tiny
    from lightning.pytorch.callbacks import Callback
    from trainperf.lightning import ProfilerCallback, ProfileSchedule

    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    configs: dict[str, Any] = {
        "no callback": lambda: [],
        "an empty Callback": lambda: [Callback()],  # Lightning's own per-hook dispatch cost
        "ProfilerCallback, epochs=[99]": lambda: [
            ProfilerCallback(schedule=ProfileSchedule(epochs=[99]))
        ],
        "  + on-demand polling": lambda: [
            ProfilerCallback(
                schedule=ProfileSchedule(epochs=[99], trigger_file="PROFILE_NOW", on_request=True)
            )
        ],
    }
    results: dict[str, list[float]] = {name: [] for name in configs}
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        for _ in range(reps):
            for name, make in configs.items():
                clock = fit_tiny(make(), steps=steps, warmup=100, width=32, batch_size=8, root=root)
                results[name].append(clock.us_per_step())
    return {
        name: {"min_us": min(v), "median_us": statistics.median(v)} for name, v in results.items()
    }


# -- main ---------------------------------------------------------------------------------------


def analysis_table(
    args: argparse.Namespace, rows: list[dict[str, Any]], figures: dict[str, float | None]
) -> None:
    """Generate the CPU trace, run every tool on every input, print the table (fills ``rows``
    and ``figures``)."""
    hta_missing = False
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        inputs: dict[str, Path] = {}
        (work / "cpu").mkdir()
        record_cpu_trace(work / "recorded.json")
        copies = replicate(work / "recorded.json", work / "cpu" / "cpu_rank0.json", args.size_mb)
        inputs["cpu-30MB"] = work / "cpu" / "cpu_rank0.json"
        print(
            f"generated {inputs['cpu-30MB'].stat().st_size / 2**20:.1f} MB: a real CPU trace "
            f"({(work / 'recorded.json').stat().st_size / 2**20:.2f} MB, 3 steps) x {copies}"
        )
        for label, name in (
            ("gpu-2021", "gpu_resnet50_2021.pt.trace.json.gz"),
            ("gpu-2024", "gpu_ns_resolution_2024.pt.trace.json.gz"),
        ):
            if (FIXTURES / name).exists():
                (work / label).mkdir()
                dst = work / label / name.removesuffix(".gz")
                with gzip.open(FIXTURES / name, "rb") as src, open(dst, "wb") as out:
                    shutil.copyfileobj(src, out)
                inputs[label] = dst
        if "gpu-2024" in inputs:
            # a generated ~30 MB trace that HTA can read (it fails on CPU-only traces)
            (work / "gpu-gen").mkdir()
            dst = work / "gpu-gen" / "gpu_30mb.pt.trace.json"
            copies = replicate(inputs["gpu-2024"], dst, args.size_mb)
            inputs["gpu-gen"] = dst
            print(
                f"generated {dst.stat().st_size / 2**20:.1f} MB: the 2024 GPU fixture's steps "
                f"x {copies}"
            )

        for label, path in inputs.items():
            size_mb = path.stat().st_size / 2**20
            results = {
                "ours": run_tool(sys.executable, "ours", path, args.reps),
                "json.load": run_tool(sys.executable, "json", path, args.reps),
                "HTA": run_tool(args.hta_python, "hta", path, args.hta_reps),
            }
            hta_missing |= results["HTA"]["status"] == "not installed"
            ours = results["ours"].get("min_s")
            for tool, r in results.items():
                ok = r["status"] == "ok"
                status = r["status"] if ok else f"{r['status']}: {r.get('error', '')}"
                if r.get("subprocesses"):
                    status += " (used subprocesses: their memory not counted)"
                row = {
                    "trace": label,
                    "mb": size_mb,
                    "tool": tool,
                    "status": status,
                    "min_s": r.get("min_s"),
                    "median_s": r.get("median_s"),
                    "peak_mb": r.get("peak_mb"),
                    "peak_x_file": r["peak_mb"] / size_mb if ok else None,
                    "x_ours": r["min_s"] / ours if ok and ours else None,
                }
                rows.append(row)
                key = f"{label}_{tool.replace('.', '_').lower()}"
                figures[f"{key}_min_s"] = r.get("min_s")
                figures[f"{key}_peak_mb"] = r.get("peak_mb")
                if tool != "ours":
                    figures[f"{key}_x_ours"] = r["min_s"] / ours if ok and ours else None
            figures[f"{label}_mb"] = size_mb

    def f(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    print(
        f"\n{'trace':9} {'MB':>5} {'tool':10} {'min s':>7} {'median s':>9} {'peak MB':>8} "
        f"{'peak/file':>9} {'x ours':>7}  status"
    )
    for r in rows:
        print(
            f"{r['trace']:9} {r['mb']:5.1f} {r['tool']:10} {f(r['min_s'], '7.3f')} "
            f"{f(r['median_s'], '9.3f')} {f(r['peak_mb'], '8.1f')} {f(r['peak_x_file'], '9.2f')} "
            f"{f(r['x_ours'], '7.1f')}  {r['status']}"
        )
    if hta_missing:
        print(
            "\nHTA is not importable by --hta-python. Install it in a separate virtualenv "
            "(it pulls pandas, plotly, jupyterlab; never into this project's):\n"
            "  python -m venv /work/hta-venv && /work/hta-venv/bin/pip install "
            "HolisticTraceAnalysis\n"
            "  python benchmarks/trace_analysis.py --hta-python /work/hta-venv/bin/python"
        )
    print(
        f"\ngoals: ours <= {GOAL_S} s per ~30 MB, >= {GOAL_HTA_RATIO:.0f}x faster than HTA, "
        f"peak <= {GOAL_MEM_RATIO:.0f}x the file size"
    )
    for r in rows:
        if r["tool"] == "ours" and r["min_s"] is not None:
            hta = next(x for x in rows if x["trace"] == r["trace"] and x["tool"] == "HTA")
            vs_hta = (
                f"HTA {hta['x_ours']:.1f}x slower"
                if hta["x_ours"]
                else f"HTA n/a ({hta['status'][:70]})"
            )
            print(
                f"  {r['trace']:9} {r['min_s']:.3f} s, peak {r['peak_x_file']:.2f}x file, {vs_hta}"
            )


LARGE_MB = 1000.0  # --size-mb from here on: the large-trace mode
HTA_RAM_X = 4.75  # HTA's RAM per trace byte, as its users report it (950 GB for 200 GB)


def large_trace(
    args: argparse.Namespace, rows: list[dict[str, Any]], figures: dict[str, Any]
) -> None:
    """``--size-mb`` >= :data:`LARGE_MB`: one trace of that size, generated from the 2024 GPU
    fixture's steps (written as it is generated into a temporary directory made here and removed
    at the end), and its ``.json.gz``; ours on each (wall s, MB/s of the uncompressed size, peak
    RSS) beside ``json.load`` and HTA where they fit in RAM (else the RAM they would need)."""
    import psutil

    src = FIXTURES / "gpu_ns_resolution_2024.pt.trace.json.gz"
    if not src.exists():
        print(f"large-trace mode needs the fixture {src}")
        return
    with tempfile.TemporaryDirectory(prefix="trace-bench-", dir=args.tmp_dir) as tmp:
        work = Path(tmp)
        disk = args.size_mb * 2**20 * 1.25  # the trace and its gzip
        free = shutil.disk_usage(work).free
        if free < disk:
            print(
                f"skipped: needs ~{disk / 2**30:.1f} GiB of disk in {work}, {free / 2**30:.1f} free"
            )
            return
        for d in ("plain", "gz", "small"):
            (work / d).mkdir()
        plain = work / "plain" / "gpu_large.pt.trace.json"
        t0 = time.perf_counter()
        copies = replicate(src, plain, args.size_mb)
        gen_s = time.perf_counter() - t0
        size_mb = plain.stat().st_size / 2**20
        gz = work / "gz" / "gpu_large.pt.trace.json.gz"
        t0 = time.perf_counter()
        with open(plain, "rb") as fin, gzip.open(gz, "wb", compresslevel=1) as fout:
            shutil.copyfileobj(fin, fout, 16 << 20)
        gz_s = time.perf_counter() - t0
        print(
            f"generated {size_mb:,.0f} MB in {gen_s:.0f} s: the 2024 GPU fixture's steps "
            f"x {copies} "
            f"(+ .json.gz, {gz.stat().st_size / 2**20:,.0f} MB, in {gz_s:.0f} s) in {work}"
        )
        # json.load's RAM per trace byte, from a 30 MB trace of the same events
        small = work / "small" / "gpu_small.pt.trace.json"
        replicate(src, small, 30.0)
        probe = run_tool(sys.executable, "json", small, 1)
        per_mb = (
            probe["peak_mb"] / (small.stat().st_size / 2**20) if probe["status"] == "ok" else None
        )
        avail_gib = psutil.virtual_memory().available / 2**30
        results: dict[str, dict[str, Any]] = {}
        results["ours"] = run_tool(sys.executable, "ours", plain, 1)
        results["ours .gz"] = run_tool(sys.executable, "ours", gz, 1)
        need_gib = per_mb * size_mb / 1024 if per_mb else None
        if need_gib is not None and need_gib < 0.7 * avail_gib:
            results["json.load"] = run_tool(sys.executable, "json", plain, 1)
        else:
            need = f"~{need_gib:.0f} GiB" if need_gib is not None else "an unknown amount of RAM"
            results["json.load"] = {
                "status": f"skipped, needs {need} ({per_mb:.1f}x the file on 30 MB; "
                f"{avail_gib:.0f} GiB available)"
            }
        hta_need = HTA_RAM_X * size_mb / 1024
        hta = run_tool(args.hta_python, "hta", small, 1)  # importable at all?
        if hta["status"] == "not installed":
            results["HTA"] = {"status": f"not installed ({args.hta_python} cannot import hta)"}
        elif hta_need >= 0.7 * avail_gib:
            results["HTA"] = {
                "status": f"skipped, needs ~{hta_need:.0f} GiB ({HTA_RAM_X}x the trace, as its "
                f"users report; {avail_gib:.0f} GiB available)"
            }
        else:
            results["HTA"] = run_tool(args.hta_python, "hta", plain, 1)
    print(f"\n{'tool':10} {'s':>8} {'MB/s':>7} {'peak MiB':>9} {'peak/file':>9}  status")
    for tool, r in results.items():
        ok = r["status"] == "ok"
        mbs = size_mb / r["min_s"] if ok else None
        row = {
            "trace": f"gpu-{size_mb:.0f}MB",
            "mb": size_mb,
            "tool": tool,
            "status": r["status"] if ok or "error" not in r else f"{r['status']}: {r['error']}",
            "min_s": r.get("min_s"),
            "mb_per_s": mbs,
            "peak_mb": r.get("peak_mb"),
        }
        rows.append(row)
        key = f"large_{tool.replace('.', '_').replace(' ', '_').lower()}"
        figures[f"{key}_s"] = r.get("min_s")
        figures[f"{key}_mb_per_s"] = mbs
        figures[f"{key}_peak_mb"] = r.get("peak_mb")
        cells = (
            f"{r['min_s']:8.1f} {mbs:7.1f} {r['peak_mb']:9.0f} {r['peak_mb'] / size_mb:9.3f}"
            if ok
            else f"{'-':>8} {'-':>7} {'-':>9} {'-':>9}"
        )
        print(f"{tool:10} {cells}  {row['status']}")
    figures["large_mb"] = size_mb
    print(
        f"\ngoal: ours <= 1 GiB peak RSS at any size; MB/s of the uncompressed trace, one process "
        f"(wall s on a {os.cpu_count()}-core machine, file cache warm for the plain file)"
    )


def _tree_rss_mb(proc: Any) -> float:
    """RSS of ``proc`` and all its descendants (MiB); processes that ended meanwhile count 0."""
    import psutil

    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


def _run_tree(cmd: list[str]) -> tuple[float, float, int]:
    """Run ``cmd``; (wall s, peak RSS summed over its process tree in MiB, exit code). Sampled
    every 50 ms (a worker that lives shorter than that can be missed)."""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ps = psutil.Process(proc.pid)
    peak = 0.0
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, _tree_rss_mb(ps))
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    if proc.returncode:
        err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace").strip()
        print(f"  {' '.join(cmd[-4:])}: exit {proc.returncode}: {err.splitlines()[-1:]}")
    return wall, peak, proc.returncode


def _patched_copy(src: Path, dst: Path, old: bytes, new: bytes) -> None:
    """``src`` copied to ``dst`` with the one occurrence of ``old`` (in the first or last MiB)
    replaced by ``new`` of the same length."""
    assert len(old) == len(new)
    shutil.copyfile(src, dst)
    size = dst.stat().st_size
    with open(dst, "r+b") as fh:
        for at in (0, max(0, size - 2**20)):
            fh.seek(at)
            window = fh.read(2**20)
            pos = window.find(old)
            if pos >= 0:
                fh.seek(at + pos)
                fh.write(new)
                return
    raise RuntimeError(f"{old!r} not found in {src}")


def rank_set(args: argparse.Namespace, rows: list[dict[str, Any]], figures: dict[str, Any]) -> None:
    """``--ranks N``: N rank traces of ``--rank-size-mb`` each, generated from the 2024 GPU
    fixture's steps with ``distributedInfo.rank`` set, rank ``--slow-rank`` with every step
    stretched by ``--stretch``; ``trainperf analyze DIR`` on them with each of ``--jobs-list``:
    wall s and peak RSS summed over its process tree, and the straggler it names."""
    src = FIXTURES / "gpu_ns_resolution_2024.pt.trace.json.gz"
    n, slow = args.ranks, args.slow_rank
    if not src.exists():
        print(f"multi-rank mode needs the fixture {src}")
        return
    if not 0 <= slow < n or n > 10:
        print(f"--slow-rank must be one of the {n} ranks, and at most 10 ranks (one digit)")
        return
    with tempfile.TemporaryDirectory(prefix="trace-ranks-", dir=args.tmp_dir) as tmp:
        work = Path(tmp)
        disk = args.rank_size_mb * 2**20 * (n + 1)
        free = shutil.disk_usage(work).free
        if free < disk:
            print(
                f"skipped: needs ~{disk / 2**30:.1f} GiB of disk in {work}, {free / 2**30:.1f} free"
            )
            return
        ranks = work / "ranks"
        ranks.mkdir()

        def info(r: int) -> dict[str, Any]:
            return {"distributedInfo": {"rank": r, "world_size": n, "backend": "nccl"}}

        def path(r: int) -> Path:
            return ranks / f"rank{r}.pt.trace.json"

        t0 = time.perf_counter()
        base = 0 if slow != 0 else 1
        replicate(src, path(base), args.rank_size_mb, top=info(base))
        replicate(src, path(slow), args.rank_size_mb, stretch=args.stretch, top=info(slow))
        for r in range(n):
            if r not in (base, slow):
                old = json.dumps(info(base)["distributedInfo"]).encode()
                _patched_copy(
                    path(base), path(r), old, json.dumps(info(r)["distributedInfo"]).encode()
                )
        total_mb = sum(path(r).stat().st_size for r in range(n)) / 2**20
        print(
            f"generated {n} rank traces, {total_mb:,.0f} MB in all, "
            f"in {time.perf_counter() - t0:.0f} s: "
            f"the 2024 GPU fixture's steps; rank {slow}'s stretched x{args.stretch}"
        )
        exe = Path(sys.executable).with_name("trainperf")
        print(f"\n{'command':34} {'s':>7} {'MB/s':>7} {'peak MiB':>9}  straggler")
        for jobs in args.jobs_list:
            out = work / f"jobs{jobs}.json"
            cmd = [str(exe), "analyze", str(ranks), "--jobs", str(jobs), "--json", str(out)]
            wall, peak, rc = _run_tree(cmd)
            named = "failed"
            if rc == 0:
                doc = json.loads(out.read_text())
                named = (
                    ", ".join(
                        f"{s['stage']}: rank {s['rank']} "
                        f"({s.get('cause')}, +{s.get('share_pct')} %)"
                        if s.get("rank") is not None
                        else f"{s['stage']}: none"
                        for s in doc.get("stragglers", [])
                    )
                    or "none"
                )
            label = f"trainperf analyze DIR --jobs {jobs}"
            print(f"{label:34} {wall:7.1f} {total_mb / wall:7.1f} {peak:9.0f}  {named}")
            rows.append(
                {
                    "trace": f"{n}x{args.rank_size_mb:.0f}MB",
                    "mb": total_mb,
                    "tool": label,
                    "status": "ok" if rc == 0 else f"exit {rc}",
                    "min_s": wall,
                    "mb_per_s": total_mb / wall,
                    "peak_mb": peak,
                    "straggler": named,
                }
            )
            figures[f"ranks_jobs{jobs}_s"] = wall
            figures[f"ranks_jobs{jobs}_peak_mb"] = peak
        print(
            f"\nslowed: rank {slow}; peak RSS sampled every 50 ms over the process tree "
            f"(the CLI and its workers); {os.cpu_count()}-core machine, file cache warm"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", default=sys.executable, help="interpreter with HTA")
    parser.add_argument(
        "--size-mb",
        type=float,
        default=30.0,
        help=f"generated trace size; from {LARGE_MB:.0f} on, the large-trace mode only",
    )
    parser.add_argument("--reps", type=int, default=5, help="runs of ours and json.load")
    parser.add_argument("--hta-reps", type=int, default=2)
    parser.add_argument("--overhead-steps", type=int, default=2000)
    parser.add_argument("--overhead-reps", type=int, default=5)
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--only-overhead", action="store_true", help="skip the trace analysis")
    parser.add_argument("--json", type=Path, help="write the figures as a trainperf/bench file")
    parser.add_argument("--large", action="store_true", help="the large-trace mode at any size")
    parser.add_argument(
        "--tmp-dir", type=Path, default=None, help="where the large-trace mode makes its temp dir"
    )
    parser.add_argument("--ranks", type=int, default=0, help="multi-rank mode: N rank files")
    parser.add_argument("--rank-size-mb", type=float, default=500.0, help="size of each rank file")
    parser.add_argument("--slow-rank", type=int, default=3, help="the rank whose steps are slower")
    parser.add_argument("--stretch", type=float, default=1.3, help="the slow rank's time factor")
    parser.add_argument(
        "--jobs-list",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[1, 2],
        help="--jobs values of trainperf analyze to run, comma-separated",
    )
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    figures: dict[str, float | None] = {}
    if args.ranks:
        rank_set(args, rows, figures)
    elif args.size_mb >= LARGE_MB or args.large:
        large_trace(args, rows, figures)
    elif not args.only_overhead:
        analysis_table(args, rows, figures)

    if not args.skip_overhead:
        over = callback_overhead(args.overhead_steps, args.overhead_reps)
        base = over["no callback"]
        print(
            f"\nProfilerCallback outside its windows: tiny model, {args.overhead_steps} steps x "
            f"{args.overhead_reps} reps (interleaved)"
        )
        print(f"{'configuration':32} {'min us/step':>12} {'added':>7} {'median':>8} {'added':>7}")
        for name, v in over.items():
            print(
                f"{name:32} {v['min_us']:12.1f} {v['min_us'] - base['min_us']:7.1f} "
                f"{v['median_us']:8.1f} {v['median_us'] - base['median_us']:7.1f}"
            )
            key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
            figures[f"overhead_{key}_min_us"] = v["min_us"]
            figures[f"overhead_{key}_median_us"] = v["median_us"]

    if args.json:
        import torch
        from trainperf.analysis.baseline import BENCH_SCHEMA

        bench = {
            "schema": BENCH_SCHEMA,
            "v": 1,
            "name": "trace_analysis",
            "t": time.time(),
            "machine": {
                "hostname": platform.node(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "cpu_count": os.cpu_count(),
                "torch": torch.__version__,
            },
            "figures": figures,
            "rows": rows,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(bench, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()

"""GPU check (issue 23): every CUDA path of the toolkit, run and timed on a real GPU in one command,
written to ``docs/performance/gpu.md`` (generated; never edited by hand).

On a CUDA machine it runs, in this order:

1. ``preflight``: versions, the GPU, and the wheel check (every runtime dependency of
   ``pyproject.toml`` installed; on the device machine some arrive as carried wheels, see
   ``--plan``). A missing one stops here (exit 2) with the commands that fetch it.
2. ``seams``: the seam tests (the ones pinning Lightning / torch behaviour) on this machine's
   torch and Lightning.
3. ``train``: ``ocr-train preset=example`` on synthetic receipts (640 canvas, ResNet-18 DBNet,
   batch 16) in the default configuration (16-mixed, NCHW, AdamW's foreach loop: the A/B's
   default arm, named by its overrides), every monitor and the profiler on (last epoch),
   DataLoader workers sized to the cores, ``--epochs`` x ``--train-batches`` steps; while it
   trains, ``nvml``: our NVML sampler (matched by UUID) beside ``nvidia-smi --query-gpu=...`` at
   the same moment.
4. ``train_fast``: the same in the fast configuration (bf16-mixed, channels_last, fused AdamW),
   profiled the same way (a profiled window in bf16-mixed): the A/B of the two, training
   samples/s and MFU each, against the goal (>= 400 samples/s on the H200 at 640 px, batch 16,
   MFU >= 8 %).
5. ``train_sync``: the default run with ``sync_cuda=true``: CUDA-event phase times (no sync)
   against synchronized ones, per phase.
6. ``arms``: the arms that choose the fast path (``scripts/gpucheck/arms.py``): short runs of the
   fast configuration at batch 16 / 32 / 64, ``data.num_workers`` half and all of the cores, and
   ``model.compile=true``; per arm training samples/s, MFU, the data-wait share and its split,
   the GPU's idle share (NVML) and the warm-up epoch's time.
7. ``analyze``, ``report``, ``try``: ``trainperf`` on the first run (``try`` with a short budget;
   ``analyze`` on the fast run's trace too).
8. ``fixture``: both runs' GPU traces (gzip, at most 2 MB each) saved for the test fixtures, the
   fast one's name with ``bf16`` in it.

``--plan`` budgets every part and arm in seconds on the device machine
(``scripts/gpucheck/budget.py``, from the first H200 run's timings) against 9 minutes; the device
command skips ``train_sync`` and ``try`` to fit (both measured on the H200 on 2026-11-26).

Without CUDA it runs what applies (a short CPU training run of ``experiment=synthetic_debug``,
analyze / report / try on it, the seam tests), says which parts it skipped, why, and what a GPU
run adds, and exits 0. A part that fails keeps its traceback in the document and the others go on
(exit 1 at the end).

    python scripts/gpu_check.py [--out DIR] [--fixture-dir DIR] [--work-dir DIR] [--epochs N]
        [--train-batches N] [--try-budget 2m] [--seams run|list|skip] [--skip PART]
        [--json FILE] [--logs FILE.tar.gz] [--note TEXT] [--plan] [-- HYDRA_OVERRIDE ...]
    python scripts/gpu_check.py --render FILE.json [--out DIR] [--note TEXT]
                                              # the document again from a run's --json figures
    python scripts/gpu_check.py --plan        # what it would run here, the wheels to carry and
                                              # the device tool's command
    python scripts/gpu_check.py --fetch-wheels .whl   # fetch those wheels (needs PyPI)

Hydra overrides after ``--`` go to every training run (the tests shrink the CPU run with them).
This file is the command and its plan; the parts it runs live in ``scripts/gpucheck/``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from trainperf.analysis.trace.agreement import AGREEMENT_TOLERANCE_PCT  # noqa: E402
from trainperf.cli.trial.cli import parse_budget  # noqa: E402

from benchmarks.baseline_doc import train  # noqa: E402
from scripts.gpucheck.arms import arm_overrides, arms_for, run_arms  # noqa: E402
from scripts.gpucheck.budget import (  # noqa: E402
    ARM_TIMEOUT_FACTOR,
    DEVICE_CORES,
    Item,
    budget_items,
    planned_arms,
    render_budget,
)
from scripts.gpucheck.check import Check, check_from_dict  # noqa: E402
from scripts.gpucheck.doc import DOC_NAME, render  # noqa: E402
from scripts.gpucheck.figures import (  # noqa: E402
    GOAL_DEVICE,
    GOAL_MFU,
    GOAL_SAMPLES_PER_S,
    ab_comparison,
    compare_phase_times,
    run_figures,
)
from scripts.gpucheck.nvml import nvml_reads, read_while_training, smi_command  # noqa: E402
from scripts.gpucheck.preflight import (  # noqa: E402
    DEVICE_IMAGE,
    DEVICE_SKIPS,
    WHEEL_DIR,
    check_requirements,
    cuda_device,
    device_command,
    fetch_commands,
    runtime_requirements,
    versions,
    wheels_to_carry,
)
from scripts.gpucheck.runs import (  # noqa: E402
    DEFAULT_ARM,
    FAST_ARM,
    head,
    perf,
    run_logged,
    tail,
    train_overrides,
    workers_for,
    write_logs,
)
from scripts.gpucheck.seams import SEAM_TESTS, seam_tests  # noqa: E402
from scripts.gpucheck.trace import FIXTURE_CONFIGS, save_fixture, trace_summary  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "docs" / "performance"
DEFAULT_FIXTURES = REPO_ROOT / "packages" / "trainperf" / "tests" / "fixtures" / "traces"

#: Parts that need CUDA: why a CPU machine skips them, and what a GPU run adds.
GPU_ONLY: dict[str, tuple[str, str]] = {
    "nvml": (
        "no NVIDIA GPU here",
        "our NVML sampler (matched by UUID: utilisation, memory, power, temperature, SM clock, "
        "throttle reasons) beside `nvidia-smi --query-gpu` at the same moment, while training",
    ),
    "train_fast": (
        "bf16-mixed, channels_last and fused AdamW are CUDA settings: on the CPU an A/B would not "
        "measure what they do to a GPU",
        f"the A/B of the default configuration ({' '.join(DEFAULT_ARM)}) against the fast one "
        f"({' '.join(FAST_ARM)}) at the same size, training samples/s and MFU each, against the "
        f"goal (>= {GOAL_SAMPLES_PER_S:.0f} samples/s on the {GOAL_DEVICE} at 640 px, batch 16, "
        f"MFU >= {100 * GOAL_MFU:.0f} %), and a profiled window in bf16-mixed (its trace a second "
        "fixture)",
    ),
    "train_sync": (
        "`sync_cuda` synchronizes CUDA only: without CUDA both runs time the same host work",
        "CUDA-event phase times (read without blocking) against synchronized ones, per phase, "
        f"within {AGREEMENT_TOLERANCE_PCT:.0f} %",
    ),
    "arms": (
        "the arms weigh CUDA settings against each other (a batch that fills the GPU, workers "
        "that feed it, code compiled for it): on the CPU they would not measure what they do there",
        "the arms that choose the fast path: short runs of the fast configuration at batch 16 / "
        "32 / 64, DataLoader workers at half and all of the cores, and `model.compile=true`, each "
        "with its training samples/s, MFU, data-wait share and split, GPU idle share and warm-up "
        "time",
    ),
    "fixture": (
        "a CPU trace holds no kernels, copies or device memory",
        "GPU traces of our own model (<= 2 MB gzip each; 16-mixed, and bf16-mixed from the fast "
        "run) for the CPU test suite: kernel time per phase, idle share, H2D copies pinned vs "
        "pageable",
    ),
}

#: (epochs, training batches per epoch) when not given: 180 steps on a GPU (the first H200 run
#: had 4 x 100; shortened so that the arms fit the device time), a short CPU run
#: (synthetic_debug has 30 batches per epoch).
RUN_SIZE = {"gpu": (3, 60), "cpu": (3, 10)}
PART_NAMES = (
    "seams",
    "train",
    "nvml",
    "train_fast",
    "train_sync",
    "arms",
    "analyze",
    "report",
    "try",
    "fixture",
)


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
    parser.add_argument("--epochs", type=int, help="training epochs per run, >= 2 (GPU: 3, CPU: 3)")
    parser.add_argument(
        "--train-batches", type=int, help="training batches per epoch (GPU: 60, CPU: 10)"
    )
    parser.add_argument("--try-budget", default="2m", help="trainperf try --budget")
    parser.add_argument("--seams", choices=("run", "list", "skip"), default="run")
    parser.add_argument("--skip", action="append", default=[], choices=PART_NAMES)
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    parser.add_argument("--logs", type=Path, help="also write the runs' logs to this .tar.gz")
    parser.add_argument(
        "--note", default="", help="a note shown at the top of the document (e.g. which run)"
    )
    parser.add_argument("--plan", "--dry-run", action="store_true", help="print the plan only")
    parser.add_argument("--fetch-wheels", metavar="DIR", help="fetch the carried wheels into DIR")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="FILE.json",
        help="write the document again from a run's --json figures (nothing is run)",
    )
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
    fast_run = train_overrides(
        True, args.epochs, args.train_batches, cores, sync=False, arm=FAST_ARM
    )
    sync_run = train_overrides(bool(cuda), args.epochs, args.train_batches, cores, sync=True)
    lines = [f"Here: {where}; {cores} cores -> data.num_workers={workers_for(cores)}.", ""]
    steps = [
        ("preflight", "always: versions, GPU, wheel check of pyproject's runtime dependencies"),
        ("seams", f"pytest ({args.seams}) {' '.join(SEAM_TESTS)}"),
        ("train", "python -m ocr.train " + shlex.join([*main_run, *args.overrides])),
        ("nvml", "ResourceSampler beside " + shlex.join(smi_command("<uuid>")) + " while training"),
        ("train_fast", "python -m ocr.train " + shlex.join([*fast_run, *args.overrides])),
        ("train_sync", "python -m ocr.train " + shlex.join([*sync_run, *args.overrides])),
        *(
            (
                f"arms/{arm.name}",
                "python -m ocr.train "
                + shlex.join(arm_overrides(arm, cores, args.train_batches, args.overrides)),
            )
            for arm in arms_for(cores)
        ),
        (
            "analyze",
            "trainperf analyze <train run>/profiler_traces --json ... (and <train_fast run>)",
        ),
        ("report", "trainperf report <train run> --markdown ..."),
        ("try", f"trainperf try <train run> --budget {args.try_budget}"),
        (
            "fixture",
            f"<train run>'s and <train_fast run>'s GPU traces -> {args.fixture_dir} "
            "(<= 2 MB gzip each)",
        ),
    ]
    for name, what in steps:
        part = name.split("/", 1)[0]
        skipped = (
            " [skipped: --skip]"
            if part in args.skip
            else f" [skipped: {GPU_ONLY[part][0]}]"
            if part in GPU_ONLY and not cuda
            else ""
        )
        lines.append(f"  {name}: {what}{skipped}")
    lines += ["", *render_budget(device_budget(args), device_args(args).skip)]
    lines += [
        "",
        f"A/B goal (fast arm, checked by train_fast): >= {GOAL_SAMPLES_PER_S:.0f} training "
        f"samples/s on the {GOAL_DEVICE} at 640 px, batch 16, MFU >= {100 * GOAL_MFU:.0f} % of the "
        "measured peak.",
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


def device_args(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` as the device command runs them: the GPU run size unless given on this command
    line, and :data:`~scripts.gpucheck.preflight.DEVICE_SKIPS` skipped."""
    out = argparse.Namespace(**vars(args))
    epochs, batches = RUN_SIZE["gpu"]
    given = " ".join(getattr(args, "given_size", []))
    out.epochs = args.epochs if "--epochs" in given else epochs
    out.train_batches = args.train_batches if "--train-batches" in given else batches
    out.skip = list(dict.fromkeys([*args.skip, *DEVICE_SKIPS]))
    return out


def device_budget(args: argparse.Namespace) -> list[Item]:
    """Each part and arm of the device command's run, in seconds on the device machine."""
    dev = device_args(args)
    return budget_items(
        epochs=dev.epochs,
        train_batches=dev.train_batches,
        try_budget_s=parse_budget(dev.try_budget),
        seams=dev.seams,
        skips=dev.skip,
        cores=DEVICE_CORES,
    )


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


def _fast_part(check: Check, args: argparse.Namespace, work: Path, cores: int) -> None:
    """The A/B's fast arm, profiled as the main run is, compared with the main run."""
    run_dir = work / "train_fast"
    cuda = check.cuda
    assert cuda is not None

    def go() -> dict[str, Any]:
        overrides = train_overrides(
            True, args.epochs, args.train_batches, cores, sync=False, arm=FAST_ARM
        )
        argv = train(run_dir, [*overrides, *args.overrides], work / "train_fast.log")
        check.commands["train_fast"] = shlex.join(["python", *argv])
        figures = run_figures(run_dir, [args.epochs - 1])
        main_figures = check.parts["train"].data["figures"]
        return {
            "run_dir": str(run_dir),
            "figures": figures,
            "arms": {"default": list(DEFAULT_ARM), "fast": list(FAST_ARM)},
            "ab": ab_comparison(main_figures, figures, str(cuda["name"])),
        }

    check.run("train_fast", go)


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


def _arms_part(check: Check, args: argparse.Namespace, work: Path, cores: int) -> None:
    """The arms (``scripts/gpucheck/arms.py``), each stopped at twice its budget; an arm that
    fails fails the part, its row names the error and the other arms' figures stay."""
    budgets = {
        i.name: ARM_TIMEOUT_FACTOR * i.seconds
        for i in budget_items(
            epochs=args.epochs,
            train_batches=args.train_batches,
            try_budget_s=0.0,
            seams="skip",
            skips=(),
            cores=cores,
        )
    }

    def go() -> dict[str, Any]:
        data = run_arms(work, cores, args.train_batches, args.overrides, budgets, train)
        check.commands.update({f"arms/{n}": c for n, c in data["commands"].items()})
        return data

    part = check.run("arms", go)
    if part.status == "ran" and part.data["errors"]:
        part.status = "failed"
        part.reason = "arms failed: " + "; ".join(
            f"{n}: {e}" for n, e in part.data["errors"].items()
        )


def _perf_parts(check: Check, args: argparse.Namespace, run_dir: Path, work: Path) -> None:
    traces = run_dir / "profiler_traces"

    def analyze_one(folder: Path, name: str) -> dict[str, Any]:
        out, log = work / f"{name}.json", work / f"{name}.log"
        rc = run_logged(perf("analyze", str(folder), "--json", str(out), "--top-k", "500"), log)
        if rc != 0:
            raise RuntimeError(f"trainperf analyze exit {rc}:\n{tail(log, 30)}")
        return trace_summary(json.loads(out.read_text()))

    def analyze() -> dict[str, Any]:
        out: dict[str, Any] = {"rc": 0, "summary": analyze_one(traces, "analyze")}
        if check.ok("train_fast"):
            fast = Path(check.parts["train_fast"].data["run_dir"]) / "profiler_traces"
            out["summary_fast"] = analyze_one(fast, "analyze_fast")
        return out

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
    for name in ("nvml", "train_fast", "train_sync", "arms", "fixture"):
        if name in args.skip:
            check.skip(name, "--skip on the command line")
        elif cuda is None:
            check.skip(name, *GPU_ONLY[name])
        elif not trained:
            check.skip(name, "the training run failed")
        elif name == "nvml":
            check.run("nvml", lambda: nvml_reads(reads))
        elif name == "train_fast":
            _fast_part(check, args, work, cores)
        elif name == "train_sync":
            _sync_part(check, args, work, cores)
        elif name == "arms":
            _arms_part(check, args, work, cores)
    if trained:
        _perf_parts(check, args, run_dir, work)
    else:
        for name in ("analyze", "report", "try"):
            check.skip(name, "the training run failed")
    if cuda is not None and trained and "fixture" not in args.skip:
        check.run("fixture", lambda: _save_fixtures(check, run_dir, args.fixture_dir))
    return check


def _save_fixtures(check: Check, run_dir: Path, dest: Path) -> dict[str, Any]:
    """The main run's trace (16-mixed) and, when it ran, the fast run's (bf16-mixed) as fixtures."""
    assert check.cuda is not None
    runs = {"default": run_dir}
    if check.ok("train_fast"):
        runs["fast"] = Path(check.parts["train_fast"].data["run_dir"])
    saved = {}
    for arm, folder in runs.items():
        trace = sorted((folder / "profiler_traces").glob("*.json*"))
        if not trace:
            raise FileNotFoundError(f"{folder}/profiler_traces: no trace was written")
        saved[arm] = save_fixture(trace[0], dest, check.cuda["name"], FIXTURE_CONFIGS[arm])
    return {**saved["default"], "fast": saved.get("fast")}


def render_again(args: argparse.Namespace, argv: list[str]) -> int:
    """``--render FILE.json``: the document of a saved run (its figures as they were measured)
    with this version's arms plan; ``--note`` replaces the run's note when given."""
    try:
        check = check_from_dict(json.loads(args.render.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        print(f"gpu_check.py: error: --render {args.render}: {exc}", file=sys.stderr)
        return 2
    check.rendered_from = args.render.as_posix()
    check.render_argv = argv
    check.note = args.note or check.note
    args.given_size, args.seams, args.skip = [], "run", []
    check.planned = planned_arms(device_budget(args), device_args(args).train_batches)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = args.out / DOC_NAME
    doc.write_text(render(check), encoding="utf-8")
    print(f"wrote {doc}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.fetch_wheels:
        return fetch_wheels(args.fetch_wheels)
    if args.render:
        return render_again(args, argv)
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
        check.note = args.note
        check.planned = planned_arms(device_budget(args), device_args(args).train_batches)
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

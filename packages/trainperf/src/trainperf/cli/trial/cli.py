"""The ``trainperf try`` command: its parser and what it runs.

``trainperf try RUN_DIR [--candidate CHANGE ...] [--budget 10m] [--pairs N]``; the parser's
description and epilog say what it does and its exit codes.

Results go to ``RUN_DIR/perf/try.jsonl`` and the report's "Measured changes" section; that is the
only thing the session adds to the run folder (the trials run in folders of their own,
:mod:`trainperf.cli.trial.run_guard`).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
from pathlib import Path
from typing import Any

from trainperf.records.run_record import EvalCommand

__all__ = ["add_parser", "evaluation_from", "parse_budget", "run"]

EXIT_OK = 0
EXIT_NOTHING_MEASURED = 1
_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_budget(text: str) -> float:
    """``90s``, ``10m``, ``1.5h`` or plain seconds -> seconds (argparse type)."""
    match = _BUDGET.match(text)
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 10m or 1h, got {text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _epilog() -> str:
    import textwrap

    from trainperf.core.knobs import KNOBS

    def wrap(text: str, indent: str = "") -> str:
        return textwrap.fill(text, 88, initial_indent=indent, subsequent_indent=indent + "    ")

    rows = "\n".join(
        wrap(f"knob:{name}={spec.placeholder}  {spec.meaning}", "  ")
        for name, spec in KNOBS.items()
    )
    return (
        wrap(
            "Runtime knobs (knob:NAME=VALUE; ':' is not valid in a Hydra key, so a knob is never "
            "an override): our callbacks apply them at setup inside the trial, for any Lightning "
            "script that records with them, Hydra or not:"
        )
        + f"\n{rows}\n\n"
        + wrap(
            "Exit codes: 0 done, 1 nothing could be measured (every change not applicable, "
            "failed or untried), 2 bad input (no command recorded or one that cannot be re-run, "
            "no candidate, bad option)."
        )
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``try`` command to ``subparsers``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "try",
        help="measure candidate changes by re-running the run's command (A/B, interleaved)",
        description=(
            "Re-run RUN_DIR's own command with each candidate change (the run's findings' "
            "candidates and --candidate overrides) in short training windows, interleaved with "
            "the unchanged command (after one uncounted warm-up run), and report each change's "
            "speed-up (geometric mean of paired ratios) with a t interval, 95 % over the looks "
            "that may decide it (3, 5, 8 pairs): 'recommended' when its low end is above 1.03, "
            "'regression' when its high end is below 1/1.03."
        ),
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    p.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="CHANGE",
        help="a change to measure (repeatable): a Hydra override of the run's config, e.g. "
        "data.num_workers=4, or a runtime knob, e.g. knob:dataloader.num_workers=4 (knobs below)",
    )
    p.add_argument(
        "--budget",
        type=parse_budget,
        default=600.0,
        metavar="DURATION",
        help="wall-clock budget, e.g. 10m (default), 90s, 1h; planned once the first run of "
        "the command is timed: changes in order get the 3 pairs a verdict needs while it holds "
        "them, the rest are left out and named",
    )
    p.add_argument(
        "--pairs",
        type=_positive,
        default=8,
        help="pairs per candidate at most (8); a change is decided after 3, 5 or 8 pairs, as "
        "soon as its interval allows, and its pairs go to the others",
    )
    p.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="skip the uncounted first run of the unchanged command (it keeps the first run's "
        "cold caches out of the pairs)",
    )
    p.add_argument(
        "--warmup", type=_non_negative, default=5, help="training batches skipped per trial (5)"
    )
    p.add_argument(
        "--batches", type=_positive, default=20, help="training batches measured per trial (20)"
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        metavar="CKPT",
        help="checkpoint on which eval-time changes are checked with the app's evaluation "
        "command (default: RUN_DIR/checkpoints/last.ckpt, else another .ckpt there)",
    )
    p.add_argument(
        "--eval-command",
        metavar="ARGS",
        help="the app's evaluation command for eval-time changes, as the interpreter's "
        "arguments then Hydra overrides, {checkpoint} for the checkpoint's path, e.g. "
        "'-m app.evaluate ckpt={checkpoint}' (default: the one the app recorded in "
        "perf/run.json); it must record its test stage with the performance callbacks",
    )
    p.add_argument(
        "--eval-quality",
        metavar="REGEX",
        help="a regular expression whose first group, in the evaluation's output, is its quality "
        "figure (0-1, higher is better), e.g. 'F1: ([0-9.]+)' (default: the recorded one)",
    )
    p.add_argument(
        "--no-findings",
        action="store_true",
        help="measure only the --candidate changes, not the findings' candidates",
    )
    p.add_argument(
        "--trial-dir",
        type=Path,
        metavar="DIR",
        help="keep the trials' folders (their perf/ files and logs) in a new folder under DIR, "
        "outside the run folder (default: a temporary folder, removed at the end)",
    )
    p.add_argument(
        "--json",
        type=Path,
        metavar="OUT",
        help="also write the session's results (perf/try.jsonl's records) as JSON (- : stdout)",
    )
    p.set_defaults(func=run)
    return p


def _checkpoint(run_dir: Path) -> Path | None:
    folder = run_dir / "checkpoints"
    last = folder / "last.ckpt"
    if last.is_file():
        return last.resolve()
    found = sorted(folder.glob("*.ckpt")) if folder.is_dir() else []
    return found[0].resolve() if found else None


def evaluation_from(
    recorded: EvalCommand | None, command: str | None, quality: str | None
) -> EvalCommand | None:
    """The evaluation command of a session: the ``recorded`` one with what ``--eval-command``
    (``command``) and ``--eval-quality`` (``quality``) replace; ``None`` when neither says one.
    :class:`~trainperf.records.command.TryInputError` for a command without a launcher or an
    evaluation without a quality pattern."""
    import shlex

    from msgspec.structs import replace

    from trainperf.cli.trial.trial_process import quality_pattern
    from trainperf.records.command import TryInputError

    if command is None and quality is None:
        return recorded
    launcher: list[str] = []
    overrides: list[str] = []
    if command is not None:
        words = shlex.split(command)
        # the launcher runs up to the first override (KEY=VALUE, not an option)
        cut = next((i for i, w in enumerate(words) if "=" in w and not w.startswith("-")), None)
        launcher, overrides = words[:cut], words[len(words) if cut is None else cut :]
        if not launcher:
            raise TryInputError(f"--eval-command {command!r}: names no program (e.g. -m app.eval)")
    if recorded is None:
        if command is None or quality is None:
            raise TryInputError(
                "the run recorded no evaluation command: --eval-command and --eval-quality "
                "name it together"
            )
        quality_pattern(quality, "--eval-quality")
        return EvalCommand(launcher=launcher, overrides=overrides, quality=quality)
    if quality is not None:
        quality_pattern(quality, "--eval-quality")
        recorded = replace(recorded, quality=quality, quality_name="quality")
    if command is not None:
        recorded = replace(recorded, launcher=launcher, overrides=overrides, name=None)
    return recorded


def run(args: argparse.Namespace) -> int:
    """Run a ``try`` session for parsed ``args``."""
    from trainperf.analysis.contention import trials_contention_note
    from trainperf.analysis.trials import TrialEvent, code_lines, paste_line
    from trainperf.cli.trial.candidate_options import (
        applicable,
        candidates_from_findings,
        parse_candidate,
        unique_candidates,
    )
    from trainperf.cli.trial.run_guard import RunSnapshot, trial_work_dir
    from trainperf.cli.trial.session import TryOptions, TrySession, write_records
    from trainperf.cli.trial.trial_process import quality_pattern
    from trainperf.present.console import widen_for_logs
    from trainperf.present.report import build_report
    from trainperf.present.trial_table import (
        print_line,
        print_plan,
        print_results,
        start_line,
        trial_progress,
    )
    from trainperf.records.command import TryInputError, recorded_command
    from trainperf.records.files import read_run_record
    from trainperf.records.try_record import TryRecord

    if str(args.json) == "-":  # the JSON alone on stdout: the tables go to stderr
        import rich

        rich.reconfigure(stderr=True)
    widen_for_logs()  # a log (not a terminal) gets the table's columns whole
    run_dir: Path = args.run_dir
    command = recorded_command(run_dir)
    evaluation = evaluation_from(command.evaluation, args.eval_command, args.eval_quality)
    if evaluation is not None:
        quality_pattern(evaluation.quality, f"{run_dir}/perf/run.json: eval.quality")
    command = dataclasses.replace(command, evaluation=evaluation)
    explicit = [parse_candidate(text) for text in args.candidate]
    found = [] if args.no_findings else candidates_from_findings(build_report(run_dir).findings)
    candidates = unique_candidates([*explicit, *found])
    framework = read_run_record(run_dir).framework_info
    applied, refused = applicable(candidates, framework)
    for r in refused:  # said plainly, before any trial; recorded "not applicable" with why
        print_line(r.line)
    if not applied:
        why = "; ".join(r.line for r in refused)
        raise TryInputError(
            f"{run_dir}: nothing to try: "
            + (why if refused else "the run's findings propose no change")
            + "; name one with --candidate KEY=VALUE"
        )
    options = TryOptions(args.budget, args.pairs, args.warmup, args.batches, args.warm_up)
    checkpoint = _checkpoint(run_dir)
    if args.checkpoint is not None:
        if not args.checkpoint.is_file():
            raise TryInputError(f"--checkpoint {args.checkpoint}: no such file")
        checkpoint = args.checkpoint.resolve()
    scratch = trial_work_dir(run_dir, args.trial_dir)
    kept = args.trial_dir is not None
    print_line(start_line(len(candidates), args.pairs, args.budget))
    print_line(
        f"Trials run in {scratch / 'trials'} ({'kept' if kept else 'removed at the end'}); "
        f"the run folder gets only {TryRecord.path(run_dir)}"
    )
    snapshot = RunSnapshot.take(run_dir)
    try:
        with trial_progress(len(candidates) * args.pairs * 2) as progress:

            def on_trial(event: TrialEvent) -> None:
                snapshot.check(f"{event.done} ({event.label})")  # stops the session if touched
                progress(event)

            session = TrySession(
                command,
                candidates,
                options,
                scratch / "trials",
                checkpoint=checkpoint,
                on_trial=on_trial,
                on_plan=print_plan,
                refused={r.candidate: r.reason for r in refused},
            )
            records = session.run()
            contention = trials_contention_note(scratch / "trials")  # before they are removed
    finally:
        if not kept:
            shutil.rmtree(scratch, ignore_errors=True)  # the trials' folders, made above
    path = write_records(run_dir, records)
    code = code_lines(records, framework)
    print_results(records, session.budget_note, paste_line(records), path, code)
    if contention is not None:
        print(f"Note: {contention}")
    if args.json is not None:
        import msgspec

        from trainperf.present.console import write_json

        write_json(args.json, msgspec.to_builtins(records))
    return EXIT_OK if any(r.pairs for r in records) else EXIT_NOTHING_MEASURED

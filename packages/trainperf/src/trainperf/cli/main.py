"""The ``trainperf`` command line: its subcommands and exit codes.

``trainperf``: analyse and compare torch.profiler traces; record baselines and check against
them; write a run's report (``trainperf report RUN_DIR``); measure candidate changes by re-running
the run (``trainperf try RUN_DIR``); follow a run as it goes (``trainperf watch RUN_DIR``). Exit
codes: the ``EXIT_*`` constants (and ``--help``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trainperf.cli.errors import EXIT_BAD_INPUT, full_error_requested, is_expected, report_error

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK = 0
EXIT_REGRESSION = 1
#: ``check``: either side has too few epochs or batches to judge (never 1: not a regression).
EXIT_INSUFFICIENT_DATA = 3


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    from trainperf import __version__

    p = argparse.ArgumentParser(
        prog="trainperf",
        description="Analyse and compare torch.profiler Chrome traces (.json / .json.gz), record "
        "performance baselines and check runs against them, and write a run's report.",
        epilog="Exit codes: 0 success, 1 regression (check, compare --fail-on-regression), "
        "2 bad input, 3 insufficient data (check: too few epochs or batches to judge). "
        "`trainperf COMMAND --help` describes each command.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # metavar: one word in the usage line; the commands are listed under "commands"
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    a = sub.add_parser(
        "analyze",
        help="top ops, step breakdown and findings of a trace",
        description="Read a torch.profiler / Kineto Chrome trace (a file, .json.gz, or a folder "
        "of them: Lightning's per-stage files, one per rank) and print the top CPU and device "
        "ops, each stage's step breakdown (data loading / forward / backward / optimizer / "
        "hooks), step statistics, memory peaks, communication, findings with a concrete change "
        "and the trace's integrity problems. A folder of rank traces (DDP) is analysed rank by "
        "rank (--jobs at a time) and shown side by side with the straggler.",
    )
    a.add_argument("trace", type=Path, help="trace file or directory of traces")
    a.add_argument("--top-k", type=_positive_int, default=15, help="rows per op table (15)")
    a.add_argument(
        "--json", type=Path, metavar="OUT", help="write the full report as JSON ('-': stdout)"
    )
    a.add_argument("--markdown", type=Path, metavar="OUT", help="write a Markdown summary")
    a.add_argument(
        "--jobs",
        type=_positive_int,
        metavar="N",
        help="a folder of rank traces: ranks analysed at once, one process each (default: the "
        "usable cores); each rank's files are analysed together, the ranks side by side",
    )
    c = sub.add_parser(
        "compare",
        help="compare two traces (files or directories); exit 1 on a regression if asked",
        description="Compare trace B with trace A: per-stage step and phase deltas, the largest "
        "per-op changes, and a verdict from the per-step distributions (Mann-Whitney test and a "
        "bootstrap interval of the median change), not from two sums.",
    )
    c.add_argument("a", type=Path, help="baseline trace or directory")
    c.add_argument("b", type=Path, help="candidate trace or directory")
    c.add_argument("--top-k", type=_positive_int, default=15, help="op rows to show (15)")
    c.add_argument(
        "--json", type=Path, metavar="OUT", help="write the comparison as JSON ('-': stdout)"
    )
    c.add_argument(
        "--fail-on-regression",
        type=_non_negative,
        metavar="PCT",
        help="exit 1 when the median step time is significantly more than PCT %% slower",
    )
    b = sub.add_parser(
        "baseline",
        help="record a performance baseline from a run directory or a bench JSON",
        description="Summarise one stage of a run (<run>/perf/epochs.jsonl) or a benchmark's "
        "--json output as a baseline JSON for `trainperf check`.",
    )
    b.add_argument("source", type=Path, help="run directory, bench JSON or baseline JSON")
    b.add_argument("-o", "--output", type=Path, required=True, help="baseline JSON to write")
    b.add_argument("--name", help="baseline name (default: the source's name)")
    _add_source_options(b)
    k = sub.add_parser(
        "check",
        help="compare a run / bench / baseline with a baseline; exit 1 on a regression",
        description="Noise-aware comparison: medians over epochs against thresholds widened to "
        "the baseline's own epoch-to-epoch noise (3 sigmas from the IQR of its epochs, so outlying "
        "epochs cannot widen them), and Mann-Whitney tests of the epoch values and batch times.",
        epilog="Exit codes: 0 pass, 1 regression, 2 bad input or not comparable, 3 insufficient "
        "data: a run side has fewer than 2 epochs after --skip-epochs or fewer than 8 batches "
        "in them (no measured noise to judge against); record with more epochs.",
    )
    k.add_argument("baseline", type=Path, help="baseline JSON (or any source)")
    k.add_argument("current", type=Path, help="run directory, bench JSON or baseline JSON")
    k.add_argument(
        "--json", type=Path, metavar="OUT", help="write the comparison as JSON ('-': stdout)"
    )
    k.add_argument(
        "--tolerance",
        type=_non_negative,
        metavar="PCT",
        help="smallest change that counts, %% (points for hit rates); default 10 (2 points)",
    )
    k.add_argument(
        "--allow-other-machine",
        action="store_true",
        help="compare even when device / CPU count differ (a warning instead of exit 2)",
    )
    _add_source_options(k)
    from trainperf.cli.report_command import add_parser as add_report_parser  # argparse only: cheap

    add_report_parser(sub)
    from trainperf.cli.trial.cli import add_parser as add_try_parser  # argparse only: cheap

    add_try_parser(sub)
    w = sub.add_parser(
        "watch",
        help="follow a running (or finished) run from its files: epochs, phases, alerts",
        description="Follow RUN_DIR from the files its monitors write (works over SSH and for "
        "ranks on other nodes writing to a shared folder): a live view on a terminal, one line "
        "per epoch, alert and start / end elsewhere. Stops when every rank's run has ended.",
        epilog="Exit codes: 0 the run ended (or Ctrl-C), 1 the run stopped without an end (its "
        "process is gone, or nothing new for --stale-after seconds), 2 bad input.",
    )
    w.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    w.add_argument("--poll", type=_positive_float, default=1.0, help="seconds between reads (1)")
    w.add_argument(
        "--stale-after",
        type=_positive_float,
        default=600.0,
        metavar="S",
        help="give up after S seconds without a new record and no end recorded (600)",
    )
    w.add_argument(
        "--json", action="store_true", help="print each new record as one JSON line instead"
    )
    w.set_defaults(func=_watch)
    return p


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _watch(args: argparse.Namespace) -> int:
    from trainperf.cli.watch import watch

    return watch(
        args.run_dir, poll_s=args.poll, stale_after_s=args.stale_after, json_lines=args.json
    )


def _add_source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stage",
        choices=("train", "val", "test"),
        help="stage of a run directory (default: val if recorded, else train, else test)",
    )
    parser.add_argument(
        "--skip-epochs",
        type=_non_negative_int,
        default=1,
        metavar="N",
        help="leading epochs of the stage to drop (start-up, JIT, cold cache); default 1",
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _console(args: argparse.Namespace) -> Console:
    """The console for a command's tables: stderr when ``--json -`` has stdout."""
    from trainperf.present.console import make_console

    return make_console(stderr=str(getattr(args, "json", None)) == "-")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``trainperf``; returns the exit code. Bad input (:mod:`trainperf.cli.errors`)
    is one line on stderr and exit 2; ``HYDRA_FULL_ERROR=1`` shows the traceback."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except Exception as exc:
        if full_error_requested() or not is_expected(exc):
            raise
        report_error("trainperf", exc)
        return EXIT_BAD_INPUT


def _run(args: argparse.Namespace) -> int:
    if args.command in ("baseline", "check"):
        return _baseline_main(args)
    if args.command in ("report", "try", "watch"):
        return int(args.func(args))
    # Imported here so that `trainperf --help` and argument errors stay instant.
    from trainperf.analysis.trace import analyze_path
    from trainperf.analysis.trace.clock_windows import attach_clock_agreement
    from trainperf.analysis.trace.compare import compare_reports
    from trainperf.analysis.trace.rankset import (
        add_live_sync_wait,
        analyze_rank_set,
        live_sync_wait,
    )
    from trainperf.present.console import write_json
    from trainperf.present.rank_tables import (
        integrity_markdown,
        print_communication,
        print_integrity,
        print_rank_set,
        rank_set_markdown,
    )
    from trainperf.present.trace_tables import print_analysis, print_comparison, trace_markdown

    console = _console(args)
    try:
        if args.command == "analyze":
            rank_set = analyze_rank_set(args.trace, jobs=args.jobs, top_k=args.top_k)
            if rank_set is not None:
                for analysis in rank_set.analyses.values():
                    attach_clock_agreement(analysis)
                print_rank_set(rank_set, console)
                if args.json:
                    write_json(args.json, rank_set.as_dict())
                if args.markdown:
                    _write(args.markdown, rank_set_markdown(rank_set))
                return EXIT_OK
            report = analyze_path(args.trace, top_k=args.top_k)
            attach_clock_agreement(report)  # the phase clock's figures, for ProfilerCallback runs
            add_live_sync_wait(report.findings, live_sync_wait([s.path for s in report.sources]))
            print_analysis(report, console)
            print_communication(report.communication, console)
            print_integrity(report.integrity, console)
            if args.json:
                write_json(args.json, report.as_dict())
            if args.markdown:
                _write(args.markdown, trace_markdown(report) + integrity_markdown(report.integrity))
            return EXIT_OK
        threshold = 5.0 if args.fail_on_regression is None else args.fail_on_regression
        result = compare_reports(
            analyze_path(args.a, top_k=None),
            analyze_path(args.b, top_k=None),
            threshold_pct=threshold,
            top_k=args.top_k,
        )
        print_comparison(result, console)
        if args.json:
            write_json(args.json, result.as_dict())
        if args.fail_on_regression is not None and result.verdict["verdict"] == "regression":
            return EXIT_REGRESSION
        if result.verdict["verdict"] == "not comparable":
            report_error("trainperf", result.verdict["note"])
            return EXIT_BAD_INPUT
        return EXIT_OK
    except OSError as exc:  # traces are read into TraceError: an OSError here is an output
        report_error("trainperf", f"cannot write output: {exc}")
        return EXIT_BAD_INPUT


def _baseline_main(args: argparse.Namespace) -> int:
    from trainperf.analysis.baseline import make_baseline, write_baseline
    from trainperf.analysis.gate import check_baseline
    from trainperf.present.console import write_json
    from trainperf.present.gate_table import print_baseline, print_check

    console = _console(args)
    options = {"stage": args.stage, "skip_epochs": args.skip_epochs}
    try:
        if args.command == "baseline":
            baseline = make_baseline(args.source, name=args.name, **options)
            print_baseline(baseline, console)
            path = write_baseline(baseline, args.output)
            console.print(f"baseline written to {path}")
            return EXIT_OK
        result = check_baseline(
            args.baseline,
            args.current,
            args.tolerance,
            allow_other_machine=args.allow_other_machine,
            **options,
        )
        print_check(result, console)
        if args.json:
            write_json(args.json, result.as_dict())
    except OSError as exc:
        report_error("trainperf", f"cannot write output: {exc}")
        return EXIT_BAD_INPUT
    if result.verdict == "not comparable":
        report_error("trainperf", f"not comparable: {'; '.join(result.notes)}")
        return EXIT_BAD_INPUT
    if result.verdict == "insufficient data":
        return EXIT_INSUFFICIENT_DATA
    return EXIT_REGRESSION if result.verdict == "regression" else EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())

"""``trainperf report RUN_DIR [-o report.html] [--markdown OUT] [--baseline FILE]``.

Exit codes: 0 success, 2 bad input (missing run directory, malformed run file or baseline,
unwritable output); the message names the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainperf.cli.errors import EXIT_BAD_INPUT, report_error

EXIT_OK = 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``report`` command to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "report",
        help="one HTML page (+ Markdown, terminal summary) of where a run's time went",
        description=(
            "Read what the performance callbacks wrote into RUN_DIR and write a self-contained "
            "HTML report with a ranked verdict of bottlenecks."
        ),
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="HTML",
        help="where to write the page (default RUN_DIR/perf/report.html)",
    )
    p.add_argument("--markdown", type=Path, metavar="OUT", help="also write a Markdown version")
    p.add_argument(
        "--json",
        type=Path,
        metavar="OUT",
        help="also write the verdict (headline, stages, ranked findings) as JSON ('-': stdout)",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        metavar="FILE",
        help="compare with a baseline JSON, bench JSON or another run directory",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Build and write the report for parsed ``args``; print a terminal summary and the path."""
    # Imported here so that `trainperf --help` stays instant (matplotlib, numpy).
    from trainperf.analysis.run import ReportInputError, check_ran_here, load_run
    from trainperf.present.console import make_console, write_json
    from trainperf.present.report import build_report, print_summary, to_markdown, write_html
    from trainperf.present.report.writers import to_json

    try:  # the run folder is read here, once; what follows renders what was read
        check_ran_here(args.run_dir)  # a folder where no run happened: say so, no report
        run_data = load_run(args.run_dir, baseline=args.baseline)
    except ReportInputError as exc:
        report_error("trainperf", exc)
        return EXIT_BAD_INPUT
    report = build_report(run_data)
    output = args.output or Path(args.run_dir) / "perf" / "report.html"
    try:
        write_html(report, output)
        if args.markdown:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(to_markdown(report), encoding="utf-8")
        if args.json is not None:
            write_json(args.json, to_json(report))
    except OSError as exc:
        report_error("trainperf", f"cannot write output: {exc}")
        return EXIT_BAD_INPUT
    # with --json - stdout is the JSON alone: the summary goes to stderr
    console = make_console(stderr=str(args.json) == "-")
    print_summary(report, console)
    if run_data.interruption is not None:  # an interrupted run: where, and how to resume it
        console.print(run_data.interruption, highlight=False, markup=False, soft_wrap=True)
    console.print(f"Report: {output}", highlight=False, markup=False)
    if args.markdown:
        console.print(f"Markdown: {args.markdown}", highlight=False, markup=False)
    return EXIT_OK

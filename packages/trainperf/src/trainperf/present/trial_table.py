"""What ``trainperf try`` prints: its progress, then the measured changes.

Progress is a live bar in a terminal (one plain line per trial otherwise); the results are a table
of the measured changes and the override line to paste."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainperf.analysis.trial_plan import BudgetPlan, duration
from trainperf.analysis.trials import MIN_PAIRS, RECOMMEND_ABOVE, TrialEvent
from trainperf.present.console import fit_table, print_renderable, stdout_is_live
from trainperf.records.try_record import TryRecord

__all__ = [
    "format_trial",
    "labels",
    "nothing_recommended_line",
    "print_line",
    "print_plan",
    "print_results",
    "start_line",
    "trial_progress",
]


def print_line(text: str) -> None:
    """One whole line, above a live progress bar when there is one (a log keeps it whole)."""
    print_renderable(text, markup=False, highlight=False, soft_wrap=True)


def start_line(changes: int, pairs: int, budget_s: float) -> str:
    """What the session sets out to do, before anything ran: ``trainperf try: 6 change(s), at
    most 5 pairs each, within a 2 min budget; the first run of the command times the plan.``"""
    return (
        f"trainperf try: {changes} change(s), at most {pairs} pair{'s' if pairs != 1 else ''} "
        f"each (two runs of the command a pair), within a {duration(budget_s)} budget; the "
        "first run of the command times the plan."
    )


def print_plan(plan: BudgetPlan) -> None:
    """The budget's plan (which changes, how many pairs, what is left out), when it is made."""
    print_line(plan.line())


def format_trial(event: TrialEvent) -> str:
    """One trial as a line: ``trial 3/20  data.num_workers=2 (pair 2)  41.2 samples/s  6.1 s``."""
    if event.samples_per_sec:
        speed = f"{event.samples_per_sec:.1f} samples/s"
    else:  # a knob the run cannot take is not a failure of the trial
        refused = event.error is not None and event.error.startswith("not applicable")
        speed = "-" if refused else "failed"
    pair = f" (pair {event.pair})" if event.pair else ""  # pair 0: the warm-up
    line = f"trial {event.done}/{event.planned}  {event.label}{pair}  {speed}"
    line += f"  {event.seconds:.1f} s"
    return line + (f"  {event.error}" if event.error else "")


@contextmanager
def trial_progress(planned: int) -> Iterator[Callable[[TrialEvent], None]]:
    """Progress of the trials, yielding what to call after each: Rich's live bar when stdout is a
    terminal, else a plain line per trial (a log file sees each as it ends)."""
    if not stdout_is_live():
        yield lambda event: print(format_trial(event), flush=True)
        return
    columns = (TextColumn("trainperf try"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TextColumn("{task.description}")) as progress:
        task = progress.add_task("", total=planned)

        def trial(event: TrialEvent) -> None:
            total = max(event.planned, event.done)
            progress.update(task, completed=event.done, total=total, description=event.label)
            progress.console.print(format_trial(event), markup=False, highlight=False)

        yield trial


def _interval(r: TryRecord) -> str:
    if r.median is None or r.low is None or r.high is None:
        return "-"
    return f"{r.median:.3f} [{r.low:.3f}, {r.high:.3f}]"


def labels(r: TryRecord) -> str:
    """``alters computation``, ``eval-time``, both (comma-separated) or ``""``: a change's
    labels, as the table here and the report's show them."""
    words = (("alters computation", r.alters_computation), ("eval-time", r.eval_time))
    return ", ".join(word for word, on in words if on)


def results_table(records: Sequence[TryRecord], dropped: frozenset[str] = frozenset()) -> Table:
    table = Table(
        title="Measured changes (speed-up = changed / unchanged, 95 % interval over its looks)"
    )
    table.add_column("change", overflow="fold", min_width=16)
    table.add_column("speed-up", no_wrap=True)
    table.add_column("pairs", justify="right", no_wrap=True)
    table.add_column("outcome", no_wrap=True)  # status words stay whole (grep, logs)
    if "labels" not in dropped:
        table.add_column("labels", overflow="fold", min_width=10)
    if "note" not in dropped:
        table.add_column("note", overflow="fold", min_width=12)
    for r in records:
        row = [r.override or r.description, _interval(r), str(r.pairs), r.status]
        if "labels" not in dropped:
            row.append(labels(r))
        if "note" not in dropped:
            row.append(r.note)
        table.add_row(*row)
    return table


def _why_lines(records: Sequence[TryRecord]) -> list[str]:
    """Why each change that was not measured was not (the table may have dropped its note)."""
    words = {"not applicable": "Not applicable", "failed": "Failed", "untried": "Untried"}
    return [
        f"{words[r.status]}: {r.override or r.description}: {r.note}"
        for r in records
        if r.status in words and r.note
    ]


def outcome_line(r: TryRecord) -> str:
    """One plain line a script can grep: ``model.channels_last=true: 1.23x [1.02, 1.29]
    inconclusive`` (``-`` without pairs, then the outcome)."""
    figures = "-" if r.median is None else f"{r.median:.2f}x"
    if r.low is not None and r.high is not None:
        figures += f" [{r.low:.2f}, {r.high:.2f}]"
    return f"{r.override or r.description}: {figures} {r.status}"


def nothing_recommended_line(records: Sequence[TryRecord], recommended: bool) -> str | None:
    """What the session says when it recommends nothing: whether anything was measured at all
    (a measured "no" and "nothing could be tried" read differently); ``None`` when it
    recommends something."""
    if recommended:
        return None
    measured = [r for r in records if r.pairs]
    if not measured:
        return (
            "Nothing measured: no change could be applied or run (reasons above), so nothing "
            "is known about their speed."
        )
    short = [r for r in measured if r.pairs < MIN_PAIRS]
    if short:
        return (
            f"Nothing recommended yet: {len(short)} of {len(measured)} measured change(s) had "
            f"fewer than {MIN_PAIRS} pairs, too few to tell; more --pairs or a larger "
            "--budget (or fewer changes) measures them."
        )
    return (
        f"Nothing recommended. {len(measured)} change(s) measured, none faster by more than "
        f"{100 * (RECOMMEND_ABOVE - 1):.0f} % with 95 % confidence."
    )


def print_results(
    records: Sequence[TryRecord],
    budget_note: str,
    paste: str | None,
    path: Path,
    code: Sequence[str] = (),
) -> None:
    """The table, then: the budget's note, why changes were not measured, the overrides to
    paste and the changes to make in one's own code (or why nothing is recommended), and the
    results file."""
    import rich

    width = rich.get_console().width
    print_renderable(fit_table(lambda d: results_table(records, d), ("note", "labels"), width))
    lines = []
    if budget_note:
        lines.append(f"Budget: {budget_note}")
    lines += _why_lines(records)
    if paste:
        lines.append(f"Paste: {paste}")
    lines += [f"In your code: {line}" for line in code]
    verdict = nothing_recommended_line(records, bool(paste or code))
    if verdict:
        lines.append(verdict)
    lines += [outcome_line(r) for r in records]
    lines.append(f"Results: {path}")
    for line in lines:  # whole lines: a log keeps each reason and code change on one line
        print_line(line)

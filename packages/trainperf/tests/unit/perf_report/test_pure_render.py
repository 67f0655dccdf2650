"""The run folder is read once (issue 34): ``load_run`` reads every file a report shows (records,
config, traces, the ``trainperf try`` session, how the run ended, the baseline), and building
and writing the report (HTML, Markdown, JSON, the terminal summary) read no file at all."""

from __future__ import annotations

import builtins
import errno
import gzip
import io
import os
import pathlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
from rich.console import Console
from trainperf.analysis.run import RunData, load_run
from trainperf.cli.trial.session import write_records
from trainperf.present.report import build_report, print_summary, to_html, to_markdown
from trainperf.present.report.writers import to_json
from trainperf.records.monitoring import LifecycleRecord
from trainperf.records.schema import PERF_DIRNAME
from trainperf.records.try_record import TryRecord

from trainperf_testing.run_lines import write_lines
from trainperf_testing.runs import CONFIG, T0, epoch_record, make_run
from trainperf_testing.synth import make_trace, write

_READERS: tuple[tuple[Any, str], ...] = (
    (builtins, "open"),
    (io, "open"),
    (os, "open"),
    (os, "stat"),
    (os, "lstat"),
    (os, "scandir"),
    (os, "listdir"),
    (gzip, "open"),
    (pathlib.Path, "open"),
    (pathlib.Path, "read_text"),
    (pathlib.Path, "read_bytes"),
    (pathlib.Path, "stat"),
    (pathlib.Path, "iterdir"),
)


@contextmanager
def _no_files(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every way of reading a file or a folder raises (and is logged) inside the block."""
    calls: list[str] = []

    def refuse(name: str) -> Any:
        def reader(*args: object, **kwargs: object) -> NoReturn:
            calls.append(f"{name}{args[:1]}")
            raise OSError(errno.EACCES, f"no file I/O while rendering ({name})")

        return reader

    with monkeypatch.context() as patch:
        for owner, attr in _READERS:
            patch.setattr(owner, attr, refuse(f"{getattr(owner, '__name__', owner)}.{attr}"))
        yield calls


def _epochs(slow: float) -> list[dict[str, Any]]:
    times = [0.1] * 9 + [slow]  # one outlier batch per epoch
    return [
        epoch_record(stage, epoch, {"data_wait": 0.6, "forward": 0.3, "backward": 0.1 + slow})
        | {"batch_times_s": times}
        for epoch in range(3)
        for stage in ("train", "val")
    ]


def _rich_run(root: Path) -> Path:
    """A run folder with every file the report reads: records, config, a resource sample, an
    interrupted end with its checkpoint, a ``trainperf try`` session and a profiler trace."""
    run = make_run(
        root,
        _epochs(1.5),
        config=CONFIG,
        resources=[{"t": T0 + 1.0, "phase": "train", "metrics": {"resources/cpu_percent": 80.0}}],
        run_info={"argv": ["train.py", "trainer.max_epochs=3"], "cpu_count": 2},
    )
    write_lines(
        run / PERF_DIRNAME / LifecycleRecord.FILE,
        LifecycleRecord,
        [
            {"t": T0, "event": "start"},
            {
                "t": T0 + 9.0,
                "event": "end",
                "status": "interrupted",
                "signal": "SIGTERM",
                "epoch": 2,
                "batch": 4,
            },
        ],
    )
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    write_records(
        run,
        [
            TryRecord(
                session="2026-01-02T00:00:00+00:00",
                kind="candidate",
                override="data.num_workers=4",
                description="set data.num_workers=4",
                family="workers",
                alters_computation=False,
                eval_time=False,
                status="recommended",
                pairs=5,
                median=1.5,
                low=1.3,
                high=1.7,
            )
        ],
    )
    (run / "profiler_traces").mkdir()
    write(make_trace(n_steps=3), run / "profiler_traces" / "epoch_0.json")
    return run


def test_a_loaded_run_builds_and_renders_without_reading_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _rich_run(tmp_path / "run")
    baseline = make_run(tmp_path / "base", _epochs(0.2), config=CONFIG)
    run = load_run(run_dir, baseline=baseline)
    # everything the report shows was loaded with the run
    assert run.trace is not None
    assert run.baseline is not None
    assert [r.override for r in run.try_session] == ["data.num_workers=4"]
    assert run.interruption is not None
    assert "last.ckpt" in run.interruption
    # a first rendering imports what the writers import and warms matplotlib's font cache:
    # the library's own files, not the run's
    expected = to_html(build_report(run))
    with _no_files(monkeypatch) as calls:
        report = build_report(run)
        page = to_html(report)
        markdown = to_markdown(report)
        verdict = to_json(report)
        out = io.StringIO()
        print_summary(report, Console(file=out, width=120, force_terminal=False))
        # the guard bites: loading a run inside it fails on the first folder it looks at
        with pytest.raises(OSError, match="no file I/O while rendering"):
            load_run(run_dir)
    assert len(calls) == 1, calls  # load_run's, nothing else
    assert page == expected
    for text in (page, markdown):
        assert "The run was interrupted at epoch 2, batch 4 (SIGTERM); resume:" in text
        assert "data.num_workers=4" in text  # the measured change
        assert "Top CPU ops by self time" in text  # the trace's analysis
        assert "Baseline base:" in text
        assert "outlier batches" in text
    assert verdict["findings"]
    assert "Verdict" in out.getvalue()


def test_a_run_built_by_hand_renders_without_a_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    # a RunData that names a folder which does not exist: nothing is looked up there
    run = RunData(run_dir=Path("/nonexistent/run"), folder="run")
    with _no_files(monkeypatch) as calls:
        report = build_report(run)
        page = to_html(report)
        markdown = to_markdown(report)
    assert calls == []
    assert report.name.title == "run"
    assert "no step-time attribution was recorded" in page
    assert "No baseline given." in markdown

from __future__ import annotations

from pathlib import Path

from trainperf.analysis.trials import latest_session
from trainperf.cli.trial.session import write_records
from trainperf.present.report import build_report, to_html, to_markdown
from trainperf.records.try_record import TryRecord

from trainperf_testing.runs import epoch_record, make_run


def _record(session: str, override: str, status: str, **kw: object) -> TryRecord:
    return TryRecord(
        session=session,
        kind="candidate",
        override=override,
        description=f"set {override}",
        family="workers",
        alters_computation=False,
        eval_time=False,
        status=status,
        **kw,  # type: ignore[arg-type]
    )


def test_section_shows_the_latest_session(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [epoch_record("train", 0, {"forward": 1.0})])
    write_records(run, [_record("2026-01-01T00:00:00+00:00", "data.num_workers=8", "slower")])
    latest = [
        _record(
            "2026-01-02T00:00:00+00:00",
            "data.num_workers=4",
            "recommended",
            pairs=5,
            ratios=(1.8, 1.9, 2.0, 2.1, 2.2),
            median=2.0,
            low=1.85,
            high=2.15,
        ),
        TryRecord(
            session="2026-01-02T00:00:00+00:00",
            kind="candidate",
            override="model.postprocess.box_thresh=0.95",
            description="stricter boxes",
            family="postprocess",
            alters_computation=True,
            eval_time=True,
            status="H-mean drop",
            pairs=3,
            median=1.01,
            low=0.99,
            high=1.03,
            note="H-mean 0.84 -> 0.41",
        ),
    ]
    write_records(run, latest)
    assert [r.override for r in latest_session(run)] == [r.override for r in latest]
    md = to_markdown(build_report(run))
    section = md.split("## Measured changes", 1)[1].split("\n## ", 1)[0]
    assert "data.num_workers=4" in section
    assert "[1.850, 2.150]" in section
    assert "H-mean drop" in section
    assert "alters computation, eval-time" in section
    assert "data.num_workers=8" not in section  # an earlier session
    assert "To apply: data.num_workers=4" in section
    assert "Measured changes" in to_html(build_report(run))


def test_section_without_a_session_says_how_to_measure(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [epoch_record("train", 0, {"forward": 1.0})])
    md = to_markdown(build_report(run))
    assert "trainperf try RUN_DIR" in md.split("## Measured changes", 1)[1]


def test_unreadable_try_file_is_named_not_fatal(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [epoch_record("train", 0, {"forward": 1.0})])
    TryRecord.path(run).write_text('{"schema": "receipt-ocr/try", "v": 99}\n', encoding="utf-8")
    md = to_markdown(build_report(run))
    assert "try.jsonl could not be read" in md
    assert "version 99" in md


def test_a_knob_winner_says_how_to_make_it_in_ones_own_code(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [epoch_record("train", 0, {"forward": 1.0})])
    knob = _record(
        "2026-01-03T00:00:00+00:00",
        "knob:dataloader.num_workers=4",
        "recommended",
        pairs=3,
        median=1.6,
        low=1.4,
        high=1.9,
        apply="DataLoader(..., num_workers=4)  # the training loader",
    )
    write_records(run, [knob])
    section = to_markdown(build_report(run)).split("## Measured changes", 1)[1]
    assert "In your code: `DataLoader(..., num_workers=4)  # the training loader`" in section
    assert "To apply:" not in section.split("\n## ", 1)[0]  # no Hydra override to paste

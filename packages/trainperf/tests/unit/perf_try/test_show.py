"""What the terminal says after a session: why each change was not measured (the table may drop
its note column), and a measured "no" apart from "nothing could be tried"."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from trainperf.present.trial_table import print_results
from trainperf.records.try_record import TryRecord


def _record(override: str, status: str, pairs: int = 0, note: str = "") -> TryRecord:
    return TryRecord(
        session="s",
        kind="candidate",
        override=override,
        description=override,
        family="other",
        alters_computation=False,
        eval_time=False,
        status=status,
        pairs=pairs,
        note=note,
    )


def test_nothing_measured_is_not_a_measured_no(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [
        _record("data.num_workers=4", "not applicable", note="not a Hydra app"),
        _record("knob:trainer.precision=16-mixed", "not applicable", note="16-mixed on CPU"),
        _record("knob:torch.threads=1", "failed", note="exit status 1: boom"),
    ]
    print_results(records, "", None, tmp_path / "try.jsonl")
    out = capsys.readouterr().out
    assert "Not applicable: data.num_workers=4: not a Hydra app" in out
    assert "Not applicable: knob:trainer.precision=16-mixed: 16-mixed on CPU" in out
    assert "Failed: knob:torch.threads=1: exit status 1: boom" in out
    assert "Nothing measured" in out
    assert "Nothing recommended" not in out


def test_a_measured_no_says_how_many_were_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [_record("knob:cudnn.benchmark=true", "no significant change", pairs=3)]
    print_results(records, "", None, tmp_path / "try.jsonl")
    out = capsys.readouterr().out
    assert "Nothing recommended. 1 change(s) measured, none faster by more than 3 %" in out


def test_a_winner_is_pasted_or_made_in_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [_record("knob:dataloader.num_workers=4", "recommended", pairs=3)]
    code = ["DataLoader(..., num_workers=4)  # the training loader"]
    print_results(records, "", None, tmp_path / "try.jsonl", code)
    out = capsys.readouterr().out
    assert "In your code: DataLoader(..., num_workers=4)  # the training loader" in out
    assert "Nothing" not in out


def test_too_few_pairs_is_not_a_measured_no(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = [
        _record("knob:model.compile=true", "inconclusive", pairs=1),
        _record("knob:cudnn.benchmark=true", "no significant change", pairs=3),
    ]
    print_results(records, "the budget ran out", None, tmp_path / "try.jsonl")
    out = capsys.readouterr().out
    assert "Nothing recommended yet: 1 of 2 measured change(s) had fewer than 3 pairs" in out
    assert "--budget" in out


def test_each_outcome_ends_as_one_plain_line_a_script_can_grep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measured = msgspec.structs.replace(
        _record("model.channels_last=true", "inconclusive", pairs=3),
        median=1.234,
        low=1.02,
        high=1.29,
    )
    records = [measured, _record("knob:torch.threads=1", "untried", note="budget")]
    print_results(records, "", None, tmp_path / "try.jsonl")
    lines = capsys.readouterr().out.splitlines()
    assert "model.channels_last=true: 1.23x [1.02, 1.29] inconclusive" in lines
    assert "knob:torch.threads=1: - untried" in lines

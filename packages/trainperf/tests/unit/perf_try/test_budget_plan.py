"""``trainperf try`` fits its budget: the plan (which changes get how many pairs), changes stopped
early when they cannot win, and the command's output, on a fake clock with fake trials.

On an H200 a trial took 30 s: a 90 s budget measured one pair of one change and the default
10 minutes cannot cover six changes with five pairs each. The session times its first trial,
plans what fits, says so at the start, and at the end names what it measured and left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from trainperf.analysis.trial_plan import BudgetPlan, allocate, duration
from trainperf.cli.main import main as perf_main
from trainperf.cli.trial import session as session_mod
from trainperf.cli.trial.session import TryOptions, TrySession
from trainperf.cli.trial.trial_process import TrialResult
from trainperf.core.candidates import Candidate

from trainperf_testing.try_session import FakeClock, _command

NOOP_1 = Candidate("other", "nothing", "trainer.log_every_n_steps=51")
NOOP_2 = Candidate("other", "nothing either", "trainer.log_every_n_steps=52")
WORKERS = Candidate("workers", "more workers", "data.num_workers=4")


def _fake_trials(
    monkeypatch: pytest.MonkeyPatch, seconds: Callable[[tuple[str, ...]], float]
) -> tuple[FakeClock, list[tuple[str, ...]]]:
    """Training trials that advance the fake clock by ``seconds(changes)``; 100 samples/s with a
    little noise, twice that with more workers."""
    clock = FakeClock()
    calls: list[tuple[str, ...]] = []

    def training(command, folder, changes, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(changes)
        took = seconds(changes)
        clock.now += took
        speed = 100.0 * (1.0 + 0.001 * (len(calls) % 3))
        if any("num_workers" in c for c in changes):
            speed *= 2.0
        return TrialResult(took, speed)

    monkeypatch.setattr(session_mod, "run_training_trial", training)
    return clock, calls


# -- the allocation ------------------------------------------------------------------------------


def test_allocate_gives_changes_in_order_the_pairs_a_verdict_needs_then_the_rest() -> None:
    six = [0] * 6
    # ten pairs for six changes (5 asked, 3 needed): three changes with 3, one more for the first
    assert allocate(six, [60.0] * 6, [True] * 6, 600.0, 5, 3) == [4, 3, 3, 0, 0, 0]
    # all of it: every change gets what was asked
    assert allocate(six, [60.0] * 6, [True] * 6, 1e9, 5, 3) == [5] * 6
    # not even 3 pairs: the first change gets what fits (an inconclusive answer beats none)
    assert allocate([1, 0, 0], [60.0] * 3, [True] * 3, 60.0, 5, 3) == [2, 0, 0]
    # a change measured already, short of 3, takes what is left; an untried one is left out
    assert allocate([3, 1, 0], [20.0] * 3, [True] * 3, 30.0, 5, 3) == [3, 2, 0]
    # a change that takes no more pairs (stopped, failed) keeps what it has; its share goes on
    assert allocate([3, 0], [20.0, 20.0], [False, True], 60.0, 5, 3) == [3, 3]
    # ... but a change that cannot get 3 pairs after one decided early is left out, not
    # measured too little to tell
    assert allocate([3, 0], [20.0, 20.0], [False, True], 40.0, 5, 3) == [3, 0]
    # fewer pairs asked than a verdict needs: that many
    assert allocate([0, 0], [10.0, 10.0], [True, True], 1e9, 2, 3) == [2, 2]


def test_durations_read_as_a_person_says_them() -> None:
    assert [duration(s) for s in (45, 90, 120, 600, 3725, 5400)] == [
        "45 s",
        "1 min 30 s",
        "2 min",
        "10 min",
        "62 min 5 s",
        "1.5 h",
    ]


# -- stopping early ------------------------------------------------------------------------------


def test_changes_that_cannot_win_stop_early_and_hand_their_pairs_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, calls = _fake_trials(monkeypatch, lambda changes: 10.0)
    plans: list[BudgetPlan] = []
    # after the first trial, 200 s: ten pairs of 20 s, 3 each and one more for the first two;
    # after three pairs the no-ops lie below the bar and stop, and the workers get their pairs
    session = TrySession(
        _command(tmp_path),
        [NOOP_1, NOOP_2, WORKERS],
        TryOptions(220, 5, warm_up=False),  # the plan's arithmetic on pairs alone
        tmp_path / "w",
        clock=clock,
        on_plan=plans.append,
    )
    noop_1, noop_2, workers = session.run()
    first, revised = plans
    assert first.pairs == ((NOOP_1.override, 4), (NOOP_2.override, 4), (WORKERS.override, 3))
    assert first.left_out == ()
    assert not first.revised
    assert revised.revised
    assert revised.pairs == ((WORKERS.override, 5),)
    assert revised.stopped == (NOOP_1.override, NOOP_2.override)
    assert revised.line().startswith("Plan (revised with 40 s left): ")
    for r in (noop_1, noop_2):
        assert r.pairs == 3
        assert r.status == "no significant change"
        assert "stopped early after 3 of 4 planned pairs" in r.note
        assert r.note.endswith("decides it: no significant change")
    assert workers.pairs == 5
    assert workers.status == "recommended"
    assert clock.now <= 220
    assert len(calls) == 2 * (3 + 3 + 5)
    assert session.budget_note == (
        "3 of 3 change(s) measured, 11 pairs in 3 min 40 s of the 3 min 40 s budget; stopped "
        "early, decided: trainer.log_every_n_steps=51 after 3 pairs (no significant change), "
        "trainer.log_every_n_steps=52 after 3 pairs (no significant change)"
    )


def test_the_second_trial_of_the_first_pair_is_not_started_past_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock, calls = _fake_trials(monkeypatch, lambda changes: 30.0)
    plans: list[BudgetPlan] = []
    (record,) = TrySession(
        _command(tmp_path),
        [WORKERS],
        TryOptions(45, 5, warm_up=False),
        tmp_path / "w",
        clock=clock,
        on_plan=plans.append,
    ).run()
    assert calls == [()]  # the unchanged run timed; its pair cannot end within 45 s
    assert clock.now == 30.0
    assert record.status == "untried"
    (plan,) = plans
    assert plan.pairs == ()
    assert plan.left_out == (WORKERS.override,)
    assert "budget ran out" in record.note


# -- the command: a 2 min budget, trials of ~30 s ------------------------------------------------

SIX = (
    "trainer.precision=bf16-mixed",
    "model.channels_last=true",
    "trainer.benchmark=true",
    "data.num_workers=4",
    "data.prefetch_factor=4",
    "data.batch_size=32",
)


def _run_dir(tmp_path: Path) -> Path:
    overrides = ["preset=example", f"hydra.run.dir={tmp_path}/run"]
    run = tmp_path / "run"
    (run / "perf").mkdir(parents=True)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    info: dict[str, Any] = {
        "schema": "receipt-ocr/run",
        "v": 1,
        "executable": "/venv/bin/python",
        "orig_argv": ["/venv/bin/python", "-m", "ocr.train", *overrides],
        "argv": ["/src/ocr/train.py", *overrides],
        "cwd": str(tmp_path),
        "hydra": {"overrides_file": ".hydra/overrides.yaml", "overrides": overrides},
        "lightning_module": "OCRLightningModule",
    }
    (run / "perf" / "run.json").write_text(json.dumps(info))
    return run


def test_a_two_minute_budget_with_30_s_trials_ends_in_time_and_says_what_it_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The acceptance case of the H200 run: the unchanged run takes 29 s, a changed one 31 s."""
    clock, calls = _fake_trials(monkeypatch, lambda changes: 31.0 if changes else 29.0)

    class Clocked(TrySession):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, clock=clock, **kwargs)

    monkeypatch.setattr(session_mod, "TrySession", Clocked)
    run = _run_dir(tmp_path)
    # without the warm-up run (--no-warm-up): two pairs fit, as on the H200
    args = ["try", str(run), "--no-findings", "--budget", "2m", "--no-warm-up"]
    for change in SIX:
        args += ["--candidate", change]
    assert perf_main(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()

    assert clock.now <= 120 + 31  # within the budget plus one trial
    assert len(calls) == 4  # two pairs of the first change
    start = lines.index(
        "trainperf try: 6 change(s), at most 8 pairs each (two runs of the command a pair), "
        "within a 2 min budget; the first run of the command times the plan."
    )
    plan = next(i for i, line in enumerate(lines) if line.startswith("Plan: "))
    first_trial = next(i for i, line in enumerate(lines) if line.startswith("trial 1/"))
    assert start < first_trial < plan  # said once the first run is timed, before the second
    assert lines[plan] == (
        "Plan: one run of the command takes ~29.0 s, so the 2 min budget holds about 2 pairs "
        "(~58 s each); measuring 2 pairs: trainer.precision=bf16-mixed 2 pairs (fewer than the 3 "
        "pairs a verdict needs); "
        "left out: " + ", ".join(SIX[1:]) + " (--budget 18m would give every change 3 pairs)."
    )
    assert (
        "Budget: 1 of 6 change(s) measured, 2 pairs in 2 min of the 2 min budget; left out: "
        + ", ".join(SIX[1:])
        + "; left short: trainer.precision=bf16-mixed (2 of 8 pairs)"
    ) in lines
    for change in SIX[1:]:
        assert f"{change}: - untried" in lines
        assert any(
            line.startswith(
                f"Untried: {change}: the budget ran out before its first pair: the plan left it out"
            )
            for line in lines
        )
    assert "trainer.precision=bf16-mixed: " in out

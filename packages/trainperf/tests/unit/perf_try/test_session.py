"""The session's plan with fake trials: pairs, order, budget, the quality-drop rule (the app's
evaluation command and quality figure, recorded by the app), winners together."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainperf.analysis.trial_plan import BudgetPlan
from trainperf.analysis.trials import QUALITY_TOLERANCE, code_lines, paste_line
from trainperf.cli.trial import session as session_mod
from trainperf.cli.trial.session import TryOptions, TrySession
from trainperf.cli.trial.trial_process import TrialResult
from trainperf.core.candidates import Candidate
from trainperf.core.knobs import Knob

from trainperf_testing.try_session import FakeClock, _command

WORKERS = Candidate("workers", "more workers", "data.num_workers=4")
PREFETCH = Candidate("prefetch", "deeper prefetch", "data.prefetch_factor=4")
NOOP = Candidate("other", "nothing", "trainer.log_every_n_steps=51")
BOX = Candidate("postprocess", "stricter boxes", "model.postprocess.box_thresh=0.95", True, True)


@pytest.fixture
def fake_trials(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeClock, list[tuple[str, ...]]]:
    """Trials take 10 s on the fake clock; speed 100 samples/s, x2 with workers, x1.5 with
    prefetch (x3 with both), and box_thresh keeps the speed but drops the H-mean 0.80 -> 0.60."""
    clock = FakeClock()
    calls: list[tuple[str, ...]] = []

    def speed(changes: tuple[str, ...]) -> float:
        s = 100.0 * (1.0 + 0.001 * (len(calls) % 3))  # a little noise, the same on both sides
        if any("num_workers" in c for c in changes):
            s *= 2.0
        if any("prefetch" in c for c in changes):
            s *= 1.5
        return s

    def training(command, folder, changes, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(changes)
        clock.now += 10.0
        return TrialResult(10.0, speed(changes))

    def evaluation(command, folder, changes, checkpoint, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(changes)
        clock.now += 10.0
        assert kwargs["evaluation"] == command.evaluation
        quality = 0.60 if any("box_thresh" in c for c in changes) else 0.80
        return TrialResult(10.0, speed(changes), None, quality)

    monkeypatch.setattr(session_mod, "run_training_trial", training)
    monkeypatch.setattr(session_mod, "run_eval_trial", evaluation)
    return clock, calls


def test_pairs_alternate_order_and_winners_are_verified_together(
    tmp_path: Path, fake_trials: tuple[FakeClock, list[tuple[str, ...]]]
) -> None:
    clock, calls = fake_trials
    session = TrySession(
        _command(tmp_path),
        [WORKERS, PREFETCH, NOOP],
        TryOptions(10_000, 3),
        tmp_path / "w",
        clock=clock,
    )
    records = session.run()
    by = {r.override: r for r in records}
    assert by["data.num_workers=4"].status == "recommended"
    assert by["data.num_workers=4"].median == pytest.approx(2.0, rel=0.01)
    assert by["data.prefetch_factor=4"].status == "recommended"
    assert by["trainer.log_every_n_steps=51"].status == "no significant change"
    combined = records[-1]
    assert combined.kind == "combined"
    assert combined.override == "data.num_workers=4 data.prefetch_factor=4"
    assert combined.status == "recommended"
    assert combined.median == pytest.approx(3.0, rel=0.01)
    # the warm-up (not counted); round 1 A B per candidate, round 2 B A, round 3 A B; then the
    # combination
    assert calls[:3] == [(), (), ("data.num_workers=4",)]
    assert calls[7:9] == [("data.num_workers=4",), ()]
    assert len(calls) == 1 + 3 * 3 * 2 + 3 * 2
    assert paste_line(records) == "data.num_workers=4 data.prefetch_factor=4"


def test_budget_measures_the_first_changes_enough_and_names_what_it_left_out(
    tmp_path: Path, fake_trials: tuple[FakeClock, list[tuple[str, ...]]]
) -> None:
    clock, calls = fake_trials
    # 20 s per pair: 75 s holds 3 pairs, the 3 a verdict needs for the first change (not one
    # inconclusive pair for each of three)
    session = TrySession(
        _command(tmp_path),
        [WORKERS, PREFETCH, NOOP],
        TryOptions(75, 5, warm_up=False),  # the plan's arithmetic on pairs alone
        tmp_path / "w",
        clock=clock,
    )
    records = session.run()
    assert clock.now <= 75
    assert len(calls) == 6
    workers, prefetch, noop = records
    assert workers.pairs == 3
    assert workers.status == "recommended"
    assert "3 of 5 pairs (budget)" in workers.note
    for r in (prefetch, noop):
        assert r.status == "untried"
        assert "the plan left it out" in r.note
    assert session.budget_note == (
        "1 of 3 change(s) measured, 3 pairs in 60 s of the 75 s budget; left out: "
        "data.prefetch_factor=4, trainer.log_every_n_steps=51; left short: data.num_workers=4 "
        "(3 of 5 pairs)"
    )


def test_budget_too_small_for_the_first_pair_leaves_candidates_untried(
    tmp_path: Path, fake_trials: tuple[FakeClock, list[tuple[str, ...]]]
) -> None:
    clock, _ = fake_trials
    session = TrySession(
        _command(tmp_path),
        [WORKERS, PREFETCH],
        TryOptions(25, 3, warm_up=False),
        tmp_path / "w",
        clock=clock,
    )
    records = session.run()
    assert [r.status for r in records] == ["inconclusive", "untried"]
    assert "budget ran out" in records[1].note


def test_eval_time_change_that_lowers_the_quality_figure_is_never_recommended(
    tmp_path: Path, fake_trials: tuple[FakeClock, list[tuple[str, ...]]]
) -> None:
    clock, _ = fake_trials
    ckpt = tmp_path / "last.ckpt"
    session = TrySession(
        _command(tmp_path), [BOX], TryOptions(10_000, 3), tmp_path / "w", ckpt, clock=clock
    )
    (record,) = session.run()
    assert record.status == "H-mean drop"  # named by the app's quality figure
    assert not record.recommended
    assert record.quality_name == "H-mean"
    assert record.quality_base == pytest.approx(0.80)
    assert record.quality_changed == pytest.approx(0.60)
    assert str(QUALITY_TOLERANCE) in record.note
    assert "speed of evaluation (app-test on the checkpoint)" in record.note
    assert paste_line([record]) is None


def test_what_cannot_be_applied_is_said_per_candidate(
    tmp_path: Path, fake_trials: tuple[FakeClock, list[tuple[str, ...]]]
) -> None:
    clock, calls = fake_trials
    words = Candidate("other", "cache the decoded images", None)
    plain = TrySession(
        _command(tmp_path, hydra=False),
        [WORKERS, words],
        TryOptions(100, 3),
        tmp_path / "a",
        clock=clock,
    ).run()
    assert [r.status for r in plain] == ["not applicable", "not applicable"]
    assert "not a Hydra app" in plain[0].note
    assert "plain-language" in plain[1].note
    # a family that has a knob, proposed without one (it needs an earlier change first)
    later = Candidate("persistent_workers", "keep workers alive, once it has workers", None)
    (record,) = TrySession(
        _command(tmp_path, hydra=False), [later], TryOptions(100, 3), tmp_path / "d", clock=clock
    ).run()
    assert record.status == "not applicable"
    assert "does not apply to the run as it is" in record.note
    foreign = TrySession(
        _command(tmp_path, module="MyModule", evaluation=None),  # recorded no evaluation
        [BOX],
        TryOptions(100, 3),
        tmp_path / "b",
        tmp_path / "c.ckpt",
        clock=clock,
    ).run()
    assert foreign[0].status == "not applicable"
    assert "--eval-command" in foreign[0].note
    assert calls == []


def test_a_failing_trial_fails_its_candidate_only(
    tmp_path: Path,
    fake_trials: tuple[FakeClock, list[tuple[str, ...]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, _ = fake_trials
    ok = session_mod.run_training_trial

    def flaky(command, folder, changes, **kwargs):  # type: ignore[no-untyped-def]
        if any("prefetch" in c for c in changes):
            return TrialResult(1.0, None, "exit status 1: KeyError: prefetch_factor")
        return ok(command, folder, changes, **kwargs)

    monkeypatch.setattr(session_mod, "run_training_trial", flaky)
    records = TrySession(
        _command(tmp_path),
        [PREFETCH, WORKERS],
        TryOptions(10_000, 3),
        tmp_path / "w",
        clock=clock,
    ).run()
    assert records[0].status == "failed"
    assert "KeyError" in records[0].note
    assert records[1].status == "recommended"


def test_a_failing_unchanged_command_stops_every_candidate_of_its_kind(
    tmp_path: Path,
    fake_trials: tuple[FakeClock, list[tuple[str, ...]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, calls = fake_trials

    def broken(command, folder, changes, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(changes)
        return TrialResult(1.0, None, "exit status 1: MisconfigurationException")

    monkeypatch.setattr(session_mod, "run_training_trial", broken)
    records = TrySession(
        _command(tmp_path),
        [WORKERS, PREFETCH, NOOP],
        TryOptions(10_000, 3),
        tmp_path / "w",
        clock=clock,
    ).run()
    assert [r.status for r in records] == ["failed"] * 3
    assert all("the unchanged command" in r.note for r in records)
    assert calls == [()]  # tried once, not once per candidate


def test_plan_follows_the_measured_pair_cost(
    tmp_path: Path, fake_trials: tuple[FakeClock, list[tuple[str, ...]]]
) -> None:
    clock, calls = fake_trials
    events: list[session_mod.TrialEvent] = []
    plans: list[BudgetPlan] = []
    # after the first trial (10 s): 80 s hold four more pairs of 20 s; the first change takes
    # the 3 a verdict needs and the two left (5 asked), the others would get fewer than 3; it is
    # decided after 3 (twice as fast, steadily), and the 40 s left cannot give another change 3
    records = TrySession(
        _command(tmp_path),
        [WORKERS, PREFETCH, NOOP],
        TryOptions(100, 5, warm_up=False),  # the plan's arithmetic on pairs alone
        tmp_path / "w",
        on_trial=events.append,
        clock=clock,
        on_plan=plans.append,
    ).run()
    assert len(calls) == 6
    assert events[0].planned == 30  # before anything was measured: 5 pairs each
    assert [e.planned for e in events[1:]] == [10] * 5
    assert events[-1].done == 6
    plan, revised = plans
    assert plan.pairs == (("data.num_workers=4", 5),)
    assert plan.left_out == ("data.prefetch_factor=4", "trainer.log_every_n_steps=51")
    assert plan.trial_s == 10.0
    assert plan.capacity == 5  # the pair under way and four more
    assert (revised.pairs, revised.stopped) == ((), ("data.num_workers=4",))
    assert [(r.status, r.pairs) for r in records] == [
        ("recommended", 3),
        ("untried", 0),
        ("untried", 0),
    ]


def test_progress_never_counts_past_its_plan(
    tmp_path: Path, fake_trials: tuple[FakeClock, list[tuple[str, ...]]]
) -> None:
    clock, _ = fake_trials
    events: list[session_mod.TrialEvent] = []
    TrySession(
        _command(tmp_path),
        [WORKERS, PREFETCH],
        TryOptions(10_000, 2),
        tmp_path / "w",
        on_trial=events.append,
        clock=clock,
    ).run()
    assert all(e.done <= e.planned for e in events)


KNOB_WORKERS = Candidate(
    "workers", "more workers", knob=Knob.parse("knob:dataloader.num_workers=4")
)
KNOB_PRECISION = Candidate(
    "precision", "fp16", None, True, knob=Knob.parse("knob:trainer.precision=16-mixed")
)


def test_knobs_are_measured_on_a_plain_script_and_say_how_to_apply(
    tmp_path: Path,
    fake_trials: tuple[FakeClock, list[tuple[str, ...]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock, calls = fake_trials
    ok = session_mod.run_training_trial

    def refusing(command, folder, changes, **kwargs):  # type: ignore[no-untyped-def]
        if any("precision" in c for c in changes):
            why = "trainer.precision=16-mixed: Lightning does not run 16-mixed on CPU"
            return TrialResult(1.0, None, "exit status 1", not_applicable=why)
        return ok(command, folder, changes, **kwargs)

    monkeypatch.setattr(session_mod, "run_training_trial", refusing)
    records = TrySession(
        _command(tmp_path, hydra=False),
        [KNOB_WORKERS, KNOB_PRECISION, WORKERS],
        TryOptions(10_000, 3),
        tmp_path / "w",
        clock=clock,
    ).run()
    workers, precision, override = records
    assert workers.status == "recommended"
    assert workers.override == "knob:dataloader.num_workers=4"
    assert workers.apply == "DataLoader(..., num_workers=4)  # the training loader"
    assert precision.status == "not applicable"
    assert "16-mixed on CPU" in precision.note
    assert precision.pairs == 0
    # a Hydra override on a plain script: not applicable, with the knob that makes it
    assert override.status == "not applicable"
    assert "--candidate knob:dataloader.num_workers=4" in override.note
    assert ("knob:dataloader.num_workers=4",) in calls
    # after the warm-up, a knob's pairs start with the change: the refused one cost no trial of
    # the unchanged run
    assert len(calls) == 1 + 3 * 2
    assert calls[:3] == [(), ("knob:dataloader.num_workers=4",), ()]
    assert paste_line(records) is None  # no Hydra override to paste
    assert code_lines(records) == ["DataLoader(..., num_workers=4)  # the training loader"]


def test_a_hydra_app_takes_overrides_and_knobs_together(
    tmp_path: Path, fake_trials: tuple[FakeClock, list[tuple[str, ...]]]
) -> None:
    clock, _ = fake_trials
    prefetch = Candidate("prefetch", "deeper", knob=Knob.parse("knob:dataloader.prefetch_factor=4"))
    records = TrySession(
        _command(tmp_path), [WORKERS, prefetch], TryOptions(10_000, 3), tmp_path / "w", clock=clock
    ).run()
    assert [r.status for r in records] == ["recommended", "recommended", "recommended"]
    assert records[-1].override == "data.num_workers=4 knob:dataloader.prefetch_factor=4"
    assert paste_line(records) == "data.num_workers=4"
    assert code_lines(records) == ["DataLoader(..., prefetch_factor=4)  # the training loader"]

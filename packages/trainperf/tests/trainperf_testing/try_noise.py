"""``trainperf try`` sessions on a fake clock under realistic noise: the A/A test's machinery
(``tests/unit/perf_try/test_calibration.py``) and ``benchmarks/try_calibration.py``'s.

A trial's speed is what the session reads from a real one: samples over the summed times of its
measured batches. The noise, each part of it seen on a shared machine:

* per batch: lognormal jitter (``batch_sigma``) and, now and then (``outlier_p`` a batch), a batch
  several times slower (a GC pause, a page fault storm, another process's burst);
* per trial: the machine's load drifts as a random walk in log speed (``drift_sigma`` a trial),
  so the two trials of a pair see slightly different machines and far-apart pairs very
  different ones; now and then (``hiccup_p`` a trial) a trial shares the machine with another
  job for its whole length (``hiccup`` slower);
* per session: the first trial is slower (``warmup``): cold page cache, first compile.

The change multiplies the changed trials' speed by ``effect`` (1.0: the A/A test). The trials
go through the real :class:`~trainperf.cli.trial.session.TrySession` (its pair loop, plan,
looks and decision); only ``run_training_trial`` is replaced.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from trainperf.cli.trial import session as session_mod
from trainperf.cli.trial.session import TryOptions, TrySession
from trainperf.cli.trial.trial_process import TrialResult
from trainperf.core.candidates import Candidate
from trainperf.records.command import RecordedCommand

#: A change that changes nothing the speed depends on.
NOTHING = Candidate("other", "a change that changes nothing", "trainer.log_every_n_steps=51")
#: Changes that change nothing, told apart by their override, for sessions of several.
NOTHINGS = tuple(
    Candidate("other", f"nothing {i}", f"trainer.log_every_n_steps={51 + i}") for i in range(6)
)


@dataclass(frozen=True)
class Noise:
    """How noisy a trial's speed is (module docstring). The defaults spread the pair ratios of a
    change that changes nothing as a tiny model on a shared CPU does (the user's three pairs of
    channels_last ran from 0.96 to 1.27): 0.86-1.17 holds 90 % of them (the first pair aside),
    the standard deviation of their logarithms is ~0.09, and the first pair is ~1.25 (A first)."""

    batches: int = 20
    batch_sigma: float = 0.08
    outlier_p: float = 0.01
    outlier: tuple[float, float] = (1.5, 4.0)
    drift_sigma: float = 0.03
    hiccup_p: float = 0.05
    hiccup: tuple[float, float] = (1.05, 1.30)
    warmup: float = 1.25
    trial_s: float = 10.0


class FakeClock:
    """Seconds on a fake clock; each trial moves it on by its length."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTrials:
    """Trial speeds from :class:`Noise`, seeded, in call order: a trial with a change is
    ``effect`` times as fast. ``__call__`` is a stand-in for ``run_training_trial``."""

    def __init__(self, noise: Noise, effect: float | dict[str, float], seed: int) -> None:
        self.noise = noise
        self.effect = effect
        self.rng = np.random.default_rng(seed)
        self.clock = FakeClock()
        self.level = 0.0  # the machine's load, log speed
        self.trials = 0

    def speed(self, changes: Sequence[str]) -> float:
        n, rng = self.noise, self.rng
        self.level += rng.normal(0.0, n.drift_sigma)
        times = np.exp(rng.normal(0.0, n.batch_sigma, n.batches))
        slow = rng.random(n.batches) < n.outlier_p
        times[slow] *= rng.uniform(*n.outlier, int(slow.sum()))
        seconds = float(times.sum()) / np.exp(self.level)
        if rng.random() < n.hiccup_p:
            seconds *= rng.uniform(*n.hiccup)
        if self.trials == 0:
            seconds *= n.warmup
        self.trials += 1
        speed = n.batches / seconds
        for change in changes:
            speed *= self.effect.get(change, 1.0) if isinstance(self.effect, dict) else self.effect
        return speed

    def __call__(
        self, command: RecordedCommand, folder: Path, changes: Sequence[str], **kwargs: object
    ) -> TrialResult:
        self.clock.now += self.noise.trial_s
        return TrialResult(self.noise.trial_s, self.speed(changes))


def command(root: Path) -> RecordedCommand:
    """A Hydra app's recorded command (never run: the trials are fake)."""
    return RecordedCommand(
        run_dir=root / "run",
        executable="python",
        launcher=("-m", "app"),
        flags=(),
        overrides=(),
        cwd=root,
        takes_overrides=True,
    )


@contextmanager
def fake_trials(trials: FakeTrials) -> Iterator[None]:
    """The session's training trials are ``trials`` while inside."""
    real = session_mod.run_training_trial
    session_mod.run_training_trial = trials
    try:
        yield
    finally:
        session_mod.run_training_trial = real


def session_outcomes(
    candidates: Sequence[Candidate],
    effect: float | dict[str, float],
    seed: int,
    pairs: int,
    budget_s: float = 1e9,
    noise: Noise = Noise(),
    root: Path | None = None,
) -> list[tuple[str, int]]:
    """One seeded session through :class:`TrySession`: ``(status, pairs)`` per candidate."""
    trials = FakeTrials(noise, effect, seed)
    with session_dir(root) as where, fake_trials(trials):
        session = TrySession(
            command(where),
            candidates,
            TryOptions(budget_s, pairs),
            where / "w",
            clock=trials.clock,
        )
        records = session.run()
    return [(r.status, r.pairs) for r in records if r.kind == "candidate"]


@contextmanager
def session_dir(root: Path | None) -> Iterator[Path]:
    """A fresh folder for a session's work folder: under ``root`` when given, else temporary."""
    if root is not None:
        where = Path(tempfile.mkdtemp(dir=root))
        yield where
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


def pair_ratios(
    noise: Noise, effect: float, seed: int, n: int, first_b: bool = False
) -> list[float]:
    """The first ``n`` pair ratios a one-change session would see with the same seed (the
    session's order: A B, then B A, ...; B first when ``first_b``): for rules measured
    outside the session."""
    trials = FakeTrials(noise, effect, seed)
    ratios = []
    for i in range(n):
        order = ("A", "B") if (i + first_b) % 2 == 0 else ("B", "A")
        speeds = {side: trials.speed(("x",) if side == "B" else ()) for side in order}
        ratios.append(speeds["B"] / speeds["A"])
    return ratios


def decided_share(outcomes: Sequence[str]) -> float:
    """The share of ``recommended`` or ``regression`` among ``outcomes``."""
    return sum(o in ("recommended", "regression") for o in outcomes) / max(len(outcomes), 1)

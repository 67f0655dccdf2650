"""Is ``trainperf try`` calibrated? The old rule and the new one on a fake clock, side by side.

Sessions of ``trainperf try`` on a fake clock (``trainperf_testing/try_noise.py``: lognormal
batch jitter, outlier batches, a drifting machine load, trials that share the machine with
another job, a slow first trial), seeded, each scenario ``--sessions`` times:

* ``A/A``: one change that changes nothing (a Hydra override: pairs start with the unchanged
  command, so the slow first trial falls on it);
* ``A/A knob``: the same as a runtime knob (pairs start with the change: the slow first trial
  falls on it);
* ``A/A x3, 4 min``: three changes that change nothing in one session of a 4-minute budget
  (10 s trials: 12 pairs for the three, planned and replanned as changes are decided);
* ``+25 %`` / ``+10 %`` / ``-20 %``: a change that makes training that much faster (slower).

The new rule runs through the real session (``TrySession``: its plan, looks and decision); the
old rule (a 95 % percentile bootstrap of the median pair ratio, ``recommended`` above 1.03,
``regression`` below 1, ``no significant change`` when the interval holds 1; a change whose
interval lies below 1.03 after 3 pairs stopped) is replayed here on the same pair ratios (the same
seeds give the same trials). Printed per scenario and rule: the share of sessions with each
outcome, the false-decision rate (``recommended`` or ``regression`` when nothing changed) with its
95 % Clopper-Pearson upper bound, and the mean number of pairs. Prints figures only.

With ``--real N`` it also runs the real A/A N times (``trainperf_testing/try_real.py``: a tiny
plain Lightning script on the CPU, ``trainperf try`` with a knob set to the value the script has; a
trial is a few seconds) and prints each session's outcome and the counts.

    python benchmarks/try_calibration.py [--sessions 1000] [--pairs 8] [--old-pairs 5] [--real N]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# the toolkit's test helpers (packages/trainperf/tests/trainperf_testing) are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "trainperf" / "tests"))

from trainperf.core.candidates import Candidate
from trainperf.core.knobs import Knob

from trainperf_testing.try_noise import (
    NOTHING,
    NOTHINGS,
    Noise,
    decided_share,
    pair_ratios,
    session_outcomes,
)

KNOB_NOTHING = Candidate(
    "workers", "a knob set to what it is", knob=Knob.parse("knob:dataloader.num_workers=0")
)
WORDS = ("recommended", "regression", "no significant change", "inconclusive")


# -- the old rule, as it was ---------------------------------------------------------------------


def _old_interval(ratios: Sequence[float]) -> tuple[float, float]:
    """The old 95 % percentile bootstrap of the median (4000 resamples, seed 0)."""
    values = np.asarray(ratios, dtype=np.float64)
    rng = np.random.default_rng(0)
    picks = rng.integers(0, values.size, size=(4000, values.size))
    low, high = np.nanquantile(np.median(values[picks], axis=1), [0.025, 0.975])
    return float(low), float(high)


def _old_word(low: float, high: float, pairs: int) -> str:
    bar = 1.03
    if pairs < 3:
        return "inconclusive"
    if low > bar:
        return "recommended"
    if low <= 1.0 <= high or (low >= 1.0 / bar and high <= bar):
        return "no significant change"
    if high < 1.0:
        return "regression"
    return "inconclusive"


def old_session(ratios: Sequence[float]) -> tuple[str, int]:
    """The old session on one change's pair ratios in order (all it would have run)."""
    for n in range(3, len(ratios)):
        low, high = _old_interval(ratios[:n])
        if high < 1.03:  # stopped early: it cannot be recommended
            return _old_word(low, high, n), n
    low, high = _old_interval(ratios)
    return _old_word(low, high, len(ratios)), len(ratios)


# -- the scenarios -------------------------------------------------------------------------------


def clopper_pearson_upper(k: int, n: int, confidence: float = 0.95) -> float:
    """The one-sided upper bound of a binomial share ``k / n`` (bisection on its tail)."""
    if k >= n:
        return 1.0

    def tail(p: float) -> float:  # P(X <= k) for X ~ Binomial(n, p)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))

    low, high = k / n, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if tail(mid) > 1 - confidence else (low, mid)
    return high


def _line(name: str, rule: str, found: list[tuple[str, int]], null: bool) -> str:
    counts = Counter(word for word, _ in found)
    n = len(found)
    shares = "  ".join(f"{100 * counts[w] / n:5.1f}" for w in WORDS)
    wrong = sum(counts[w] for w in ("recommended", "regression"))
    if null:
        upper = 100 * clopper_pearson_upper(wrong, n)
        tail = f"  false decisions {100 * wrong / n:4.1f} % (95 % upper {upper:4.1f} %)"
    else:
        tail = ""
    pairs = sum(p for _, p in found) / n
    return f"{name:<16}{rule:<5}{shares}  {pairs:5.1f}{tail}"


def real_aa(sessions: int) -> None:
    """The real A/A, ``sessions`` times on one recorded run of the tiny script."""
    import contextlib
    import io

    from trainperf_testing.try_real import aa_session, record_run

    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        run = record_run(Path(tmp))
        for i in range(sessions):
            with contextlib.redirect_stdout(io.StringIO()):
                record = aa_session(run)
            counts[record.status] += 1
            print(
                f"real A/A {i + 1}/{sessions}: {record.status} {record.median:.3f} "
                f"[{record.low:.3f}, {record.high:.3f}] ratios "
                + " ".join(f"{r:.3f}" for r in record.ratios),
                flush=True,
            )
    decided = counts["recommended"] + counts["regression"]
    print(f"real A/A: {dict(counts)}; recommended or regression in {decided} of {sessions}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--pairs", type=int, default=8, help="the new rule's most pairs (8)")
    p.add_argument("--old-pairs", type=int, default=5, help="the old rule's pairs (5)")
    p.add_argument("--real", type=int, default=0, help="real A/A sessions on a tiny script (0)")
    args = p.parse_args(argv)
    noise = Noise()
    started = time.monotonic()
    head = "  ".join(f"{w[:11]:>5}" for w in WORDS)
    print(f"{args.sessions} sessions a scenario; outcome shares in %: {head}  mean pairs")
    quiet = Noise(batch_sigma=0.03, outlier_p=0.0, drift_sigma=0.01, hiccup_p=0.0, warmup=1.1)
    most, old_most = args.pairs, args.old_pairs
    scenarios = [  # name, change, effect, noise, the old rule's pairs, the new rule's most
        ("A/A", NOTHING, 1.0, noise, old_most, most),
        ("A/A 3 pairs", NOTHING, 1.0, noise, 3, 3),
        ("A/A knob", KNOB_NOTHING, 1.0, noise, old_most, most),
        ("A/A knob 3", KNOB_NOTHING, 1.0, noise, 3, 3),
        ("A/A quiet", NOTHING, 1.0, quiet, old_most, most),
        ("+25 %", NOTHING, 1.25, noise, old_most, most),
        ("+25 % 3 pairs", NOTHING, 1.25, noise, 3, 3),
        ("+10 %", NOTHING, 1.10, noise, old_most, most),
        ("+10 % quiet", NOTHING, 1.10, quiet, old_most, most),
        ("-20 %", NOTHING, 0.80, noise, old_most, most),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, candidate, effect, kind, old_pairs, new_pairs in scenarios:
            first_b = candidate.knob is not None
            null = effect == 1.0
            old = [
                old_session(pair_ratios(kind, effect, seed, old_pairs, first_b))
                for seed in range(args.sessions)
            ]
            new = [
                session_outcomes([candidate], effect, seed, new_pairs, noise=kind, root=root)[0]
                for seed in range(args.sessions)
            ]
            print(_line(name, "old", old, null))
            print(_line(name, "new", new, null))
        several: list[tuple[str, int]] = []
        for seed in range(args.sessions):
            several += session_outcomes(NOTHINGS[:3], 1.0, seed, args.pairs, 240.0, root=root)
        print(_line("A/A x3, 4 min", "new", several, True))
        share = decided_share([w for w, _ in several])
        print(f"  (per change; {100 * share:.1f} % of the changes decided wrongly)")
    if args.real:
        real_aa(args.real)
    print(f"took {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Main-process growth from resource samples: a steady slope on a short run is reported, noise
and the first epoch's start-up are not, and growth an attribute explains is left to it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from trainperf.analysis.memory_growth.process import process_growth, process_growth_finding
from trainperf.records.monitoring import ResourceSample


def _samples(mb: Sequence[float], epoch_of: list[int], dt: float = 10.0) -> list[ResourceSample]:
    return [
        ResourceSample(
            t=1000.0 + dt * k,
            phase="train",
            epoch=e,
            metrics={"resources/process_uss_gb": v / 1024.0, "resources/process_rss_gb": 9.0},
        )
        for k, (v, e) in enumerate(zip(mb, epoch_of, strict=True))
    ]


def test_steady_slope_on_a_short_run_is_reported() -> None:
    # epoch 0: start-up jump; epochs 1-2: +2 MB every 10 s = 12 MB/min
    mb = [100, 300, 500, 500, 502, 504, 506, 508, 510, 512, 514, 516]
    got = process_growth(_samples(mb, [0, 0, 0] + [1] * 5 + [2] * 4))
    assert got is not None
    assert got.metric == "resources/process_uss_gb"
    assert got.from_epoch == 1
    assert got.slope_mb_per_min == pytest.approx(12.0, rel=0.02)
    assert got.r2 > 0.99
    f = process_growth_finding(got, explained=False)
    assert f is not None
    assert "12.0 MB/min" in f.title
    assert "no attribute" in f.title
    assert process_growth_finding(got, explained=True) is None


def test_flat_or_noisy_memory_is_not() -> None:
    flat = process_growth(_samples([500, 501, 499, 500, 502, 499, 500, 501], [1] * 8))
    assert flat is not None
    assert process_growth_finding(flat, explained=False) is None
    noisy = process_growth(_samples([500, 560, 480, 590, 470, 600, 490, 610], [1] * 8))
    assert noisy is not None
    assert noisy.r2 < 0.8
    assert process_growth_finding(noisy, explained=False) is None


def test_too_few_samples_or_too_short() -> None:
    assert process_growth(_samples([1, 2, 3], [1, 1, 1])) is None
    short = process_growth(_samples([500, 510, 520, 530, 540, 550], [1] * 6, dt=1.0))
    assert short is not None
    assert process_growth_finding(short, explained=False) is None  # 5 s is not evidence

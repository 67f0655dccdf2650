"""A real A/A test of ``trainperf try`` (``trainperf_testing/try_real.py``): on a tiny plain
Lightning script, a knob set to the value the script already has changes nothing, and ``try``
says so: never ``recommended``, never ``regression``. One session here (seconds a trial);
``benchmarks/try_calibration.py --real N`` repeats it and counts the outcomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainperf_testing.try_real import SAME_VALUE, aa_session, record_run

pytestmark = pytest.mark.slow


def test_a_knob_set_to_its_value_is_not_decided(tmp_path: Path) -> None:
    run = record_run(tmp_path)
    record = aa_session(run)
    assert record.override == SAME_VALUE
    assert record.pairs == 3, record.note
    assert record.status in ("no significant change", "inconclusive"), record
    assert len(record.ratios) == 3

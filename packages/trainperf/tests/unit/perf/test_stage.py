"""The one stage vocabulary: every spelling parses to one of train / val / test."""

from __future__ import annotations

import pytest
from trainperf.core.stage import STAGE_ORDER, Stage


@pytest.mark.parametrize(
    ("name", "stage"),
    [
        ("train", Stage.TRAIN),
        ("val", Stage.VAL),
        ("validate", Stage.VAL),  # Lightning's RunningStage.VALIDATING
        ("validation", Stage.VAL),  # the trace analyzer's name
        ("test", Stage.TEST),
    ],
)
def test_every_spelling_parses(name: str, stage: Stage) -> None:
    assert Stage.parse(name) is stage
    assert Stage.of_running(name) is stage


def test_unknown_names_are_refused_or_not_measured() -> None:
    with pytest.raises(ValueError, match=r"unknown stage 'predict'; expected one of"):
        Stage.parse("predict")
    with pytest.raises(ValueError, match="unknown stage 'training'"):
        Stage.parse("training")
    assert Stage.of_running("sanity_check") is Stage.VAL  # validation batches before a fit
    assert Stage.of_running("predict") is None
    assert Stage.of_running(None) is None


def test_values_labels_and_trace_names_stay_as_the_files_and_keys_spell_them() -> None:
    assert [str(s) for s in STAGE_ORDER] == ["train", "val", "test"]
    assert f"performance/{Stage.VAL}_epoch_time" == "performance/val_epoch_time"
    assert [s.label for s in STAGE_ORDER] == ["training", "validation", "test"]
    assert [s.trace_name for s in STAGE_ORDER] == ["train", "validation", "test"]

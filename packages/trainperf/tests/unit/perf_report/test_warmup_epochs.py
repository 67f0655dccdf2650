"""Warm-up epochs are left out of the shares: a slow first epoch (planted: workers starting on a
loaded host, the model's own compute long) must not dilute the steady epochs' input share, and the
summaries say which epochs were summed and which were left out."""

from __future__ import annotations

from pathlib import Path

import msgspec
from trainperf.analysis.stages import split_warmup, summarize_stages
from trainperf.core.stage import Stage
from trainperf.present.report import build_report, to_markdown
from trainperf.records.epoch_scans import RecompilesRecord
from trainperf.records.epochs import EpochRecord

from trainperf_testing.runs import CONFIG, epoch_record, make_run

#: A 45 ms-per-sample dataset: 87 % of each steady epoch waits for data.
STEADY = {"data_wait": 8.7, "forward": 1.0, "backward": 0.2, "optimizer": 0.1}
#: The warm-up epoch: long, and mostly not data wait (first steps, allocator, workers start).
WARM = {"data_wait": 4.0, "forward": 20.0, "backward": 3.0, "unattributed": 3.0}


def _records(phases: list[dict[str, float]], stage: str = "train") -> list[EpochRecord]:
    return [msgspec.convert(epoch_record(stage, e, p), EpochRecord) for e, p in enumerate(phases)]


def test_a_slow_warm_up_epoch_does_not_dilute_the_input_share(tmp_path: Path) -> None:
    epochs = [epoch_record("train", 0, WARM)] + [
        epoch_record("train", e, STEADY) for e in range(1, 4)
    ]
    report = build_report(make_run(tmp_path, epochs, config=CONFIG, run_info={"cpu_count": 8}))
    train = report.stages[Stage.TRAIN]
    assert train.epoch_numbers == [1, 2, 3]
    assert [(w.epoch, w.why) for w in train.warmup] == [(0, "the stage's first epoch")]
    assert abs(train.share("data_wait") - 87.0) < 10.0
    (bound,) = [f for f in report.findings if f.id == "input_bound"]
    assert abs(bound.evidence["data_wait_pct"] - 87.0) < 10.0
    # every epoch summed would have given about half
    whole = summarize_stages(_records([WARM, STEADY, STEADY, STEADY]), warmup=False)[Stage.TRAIN]
    assert whole.share("data_wait") < 60.0
    md = to_markdown(report)
    assert "epochs 1-3 (epoch 0 left out as warm-up: 30.00 s)" in md


def test_one_epoch_is_kept_and_nothing_is_left_out() -> None:
    steady, warm = split_warmup(_records([WARM]))
    assert len(steady) == 1
    assert warm == {}
    s = summarize_stages(_records([WARM]))[Stage.TRAIN]
    assert s.epoch_numbers == [0]
    assert s.warmup == []
    assert s.epochs_words() == "epoch 0"


def test_each_stage_leaves_out_its_own_first_epoch() -> None:
    records = _records([STEADY, STEADY, STEADY]) + _records([STEADY, STEADY], stage="val")
    stages = summarize_stages(records)
    assert stages[Stage.TRAIN].epoch_numbers == [1, 2]
    assert stages[Stage.VAL].epoch_numbers == [1]
    assert [w.epoch for w in stages[Stage.VAL].warmup] == [0]


def test_a_compiling_epoch_and_a_restart_are_warm_up_too() -> None:
    records = _records([STEADY] * 5)
    # epoch 2 spent 6 s of its 10 s compiling (a recompile storm); the run restarted at epoch 3
    records.insert(4, records[3])
    compiles = [RecompilesRecord(epoch=2, compiles=9, compile_s=6.0)]
    steady, warm = split_warmup(records, compiles)
    left = {(w.epoch, w.why.split(":")[0]) for w in warm[Stage.TRAIN]}
    assert left == {
        (0, "the stage's first epoch"),
        (2, "compiling"),
        (3, "the first epoch after a restart"),
    }
    assert [r.epoch for r in steady] == [1, 3, 4]
    # a little compiling is not warm-up
    light = [RecompilesRecord(epoch=2, compiles=1, compile_s=0.5)]
    assert [r.epoch for r in split_warmup(_records([STEADY] * 4), light)[0]] == [1, 2, 3]

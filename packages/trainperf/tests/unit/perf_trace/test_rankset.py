"""A folder of rank traces: how files are told apart by rank, and the side-by-side summary."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainperf.analysis.trace.rankset import analyze_rank_set, group_by_rank, rank_of
from trainperf.analysis.trace.table import TraceError

from trainperf_testing.synth import make_trace, write


def _head_first(rank: int) -> dict:
    """torch's layout: the metadata (``distributedInfo``) before ``traceEvents``."""
    doc = make_trace(rank=rank)
    events = doc.pop("traceEvents")
    return {**doc, "traceEvents": events}


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_rank_from_distributed_info_in_the_head_or_the_tail(tmp_path: Path, suffix: str) -> None:
    head = write(_head_first(3), tmp_path / f"a{suffix}")
    tail = write(make_trace(rank=5), tmp_path / f"b{suffix}")  # distributedInfo after the events
    assert rank_of(head) == (3, "distributedInfo")
    assert rank_of(tail) == (5, "distributedInfo")


def test_rank_from_the_file_name_else_none(tmp_path: Path) -> None:
    named = write(make_trace(), tmp_path / "epoch_0_rank2.json")
    assert rank_of(named) == (2, "filename")
    assert rank_of(write(make_trace(), tmp_path / "plain.json")) == (None, None)
    # distributedInfo wins over the name
    assert rank_of(write(make_trace(rank=1), tmp_path / "x_rank7.json")) == (1, "distributedInfo")


def test_grouping(tmp_path: Path) -> None:
    a = write(make_trace(rank=0), tmp_path / "w1_a.json")
    b = write(make_trace(rank=1), tmp_path / "w1_b.json")
    c = write(make_trace(rank=0), tmp_path / "w2_a.json")  # a second window of rank 0
    assert group_by_rank([a, b, c]) == {0: [a, c], 1: [b]}
    assert group_by_rank([a, c]) is None  # one rank: not a rank set
    plain = write(make_trace(), tmp_path / "plain.json")
    assert group_by_rank([plain]) is None
    with pytest.raises(TraceError, match=r"plain\.json: no rank"):
        group_by_rank([a, b, plain])


def test_the_rank_that_works_longer_is_the_straggler(tmp_path: Path) -> None:
    write(make_trace(rank=0, seed=1), tmp_path / "r0.json")
    write(make_trace(rank=1, seed=2, conv_us=20_000), tmp_path / "r1.json")  # +19.6 ms forward
    result = analyze_rank_set(tmp_path, jobs=1)
    assert result is not None
    (s,) = result.stragglers
    assert (s.rank, s.cause) == (1, "forward")
    assert s.cause_excess_ms == pytest.approx(19.6, rel=0.05)
    rows = {r.rank: r for r in result.ranks}
    assert rows[1].phases_ms["forward"] > rows[0].phases_ms["forward"] + 19
    assert rows[0].phases_ms["sync_wait"] == 0.0  # no collectives in these traces
    assert result.findings[0].id == "straggler"
    assert result.integrity.clean
    # the same ranks analysed in two worker processes give the same figures
    again = analyze_rank_set(tmp_path, jobs=2)
    assert again is not None
    assert again.jobs == 2
    assert again.ranks == result.ranks


def test_no_straggler_among_equal_ranks(tmp_path: Path) -> None:
    write(make_trace(rank=0, seed=1), tmp_path / "r0.json")
    write(make_trace(rank=1, seed=2), tmp_path / "r1.json")
    result = analyze_rank_set(tmp_path, jobs=1)
    assert result is not None
    assert [(s.stage, s.rank) for s in result.stragglers] == [("train", None)]


def test_bad_input_in_a_worker_names_the_file(tmp_path: Path) -> None:
    write(make_trace(rank=0), tmp_path / "r0.json")
    (tmp_path / "epoch_0_rank1.json").write_text('{"traceEvents": [{"ph": "X", "name": ')
    with pytest.raises(TraceError, match=r"epoch_0_rank1\.json"):
        analyze_rank_set(tmp_path, jobs=2)


def test_a_folder_that_is_not_a_rank_set_is_left_to_the_one_table_analysis(
    tmp_path: Path,
) -> None:
    write(make_trace(), tmp_path / "a.json")
    write(make_trace(), tmp_path / "b.json")
    assert analyze_rank_set(tmp_path) is None
    assert analyze_rank_set(tmp_path / "a.json") is None


def test_rank_whatever_the_order_of_distributed_info_keys(tmp_path: Path) -> None:
    doc = _head_first(0)
    doc["distributedInfo"] = {"pg_config": [{"ranks": [0, 1], "rank": 9}], "rank": 4}
    assert rank_of(write(doc, tmp_path / "t.json")) == (4, "distributedInfo")


def _with_slow_callback(doc: dict, ms: float) -> dict:
    """``doc`` with a Lightning callback span of ``ms`` at the end of every step (the steps
    lengthened by it, later events shifted)."""
    events = doc["traceEvents"]
    steps = sorted(
        (e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    ends = [s["ts"] + s["dur"] for s in steps]
    extra = ms * 1e3
    for e in events:
        if not isinstance(e.get("ts"), int | float):
            continue
        before = sum(end <= e["ts"] for end in ends)  # steps that ended before it
        e["ts"] += before * extra
    for k, s in enumerate(steps):
        s["dur"] += extra
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "[pl][profile][Callback]ImageLogger{'every': 1}.on_train_batch_end",
                "pid": s["pid"],
                "tid": s["tid"],
                "ts": ends[k] + k * extra - 1,
                "dur": extra - 1,
            }
        )
    return doc


def test_a_slow_callback_is_named_as_the_live_clock_names_it(tmp_path: Path) -> None:
    """find_straggler's refinement: a callbacks cause names the callback class."""
    write(make_trace(rank=0, seed=1), tmp_path / "r0.json")
    write(_with_slow_callback(make_trace(rank=1, seed=2), 15.0), tmp_path / "r1.json")
    result = analyze_rank_set(tmp_path, jobs=1)
    assert result is not None
    (s,) = result.stragglers
    assert (s.rank, s.cause) == (1, "callbacks: ImageLogger")
    assert s.cause_excess_ms == pytest.approx(15.0, rel=0.05)


def test_default_jobs_are_the_usable_cores() -> None:
    import os

    from trainperf.analysis.trace.rankset import default_jobs

    assert default_jobs() == len(os.sched_getaffinity(0))

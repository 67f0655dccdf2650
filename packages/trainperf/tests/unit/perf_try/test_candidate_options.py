from __future__ import annotations

import pytest
from trainperf.cli.trial.candidate_options import (
    TOP_FINDINGS,
    candidates_from_findings,
    parse_candidate,
    unique_candidates,
)
from trainperf.core.candidates import Candidate
from trainperf.core.findings import Finding
from trainperf.records.command import TryInputError


@pytest.mark.parametrize(
    ("text", "family", "alters", "eval_time"),
    [
        ("data.num_workers=4", "workers", False, False),
        ("data.prefetch_factor=4", "prefetch", False, False),
        ("data.pin_memory=true", "pin_memory", False, False),
        ("data.batch_size=16", "batch_size", True, False),
        ("trainer.precision=bf16-mixed", "precision", True, False),
        ("data.canvas_size=320", "other", True, False),
        ("model.postprocess.box_thresh=0.6", "postprocess", True, True),
        ("+data.polygon_cache.enabled=true", "cache", False, False),
        ("trainer.benchmark=true", "cudnn_benchmark", False, False),
        ("torch_threads=2", "threads", False, False),
        ("model.compile=true", "compile", False, False),
        ("trainer.log_every_n_steps=51", "other", False, False),
        ("+model.optimizer.fused=true", "fused_optimizer", False, False),
    ],
)
def test_family_and_labels_from_the_key(
    text: str, family: str, alters: bool, eval_time: bool
) -> None:
    c = parse_candidate(text)
    assert (c.family, c.alters_computation, c.eval_time) == (family, alters, eval_time)
    assert c.override == text


def test_cache_key_is_the_cache_family() -> None:
    assert parse_candidate("data.polygon_cache_size=100").family == "cache"


@pytest.mark.parametrize("text", ["num_workers", "=4", "a b=1", "x="])
def test_not_an_override_is_refused_by_name(text: str) -> None:
    with pytest.raises(TryInputError, match="--candidate"):
        parse_candidate(text)


def _finding(score: float, candidates: list[Candidate]) -> Finding:
    return Finding(
        id=f"rule{score:g}",
        severity="warning",
        score=score,
        title="t",
        evidence={},
        threshold={},
        suggestion="s",
        candidates=candidates,
    )


def test_findings_candidates_by_score_from_the_top_findings_and_deduplicated() -> None:
    a = Candidate("workers", "more workers", "data.num_workers=4")
    b = Candidate("threads", "fewer threads (no key)", None)
    c = Candidate("compile", "compile", None)
    d = Candidate("precision", "bf16", "trainer.precision=bf16-mixed")
    found = candidates_from_findings(
        [
            _finding(5.0, [a]),
            _finding(80.0, [b, a]),
            _finding(50.0, []),
            _finding(1.0, [c]),
            _finding(60.0, [d]),
        ]
    )
    # score order, the finding without candidates does not count, the fourth one is left out
    assert TOP_FINDINGS == 3
    assert found == [b, a, d, a]
    assert unique_candidates(found) == [b, a, d]


def test_findings_candidates_follow_the_verdicts_order_not_the_score() -> None:
    """A critical cause with a bound (input-bound, 30 % of the run) before compute-bound of
    unknown headroom with the larger share (60 %): try measures what could recover the most."""
    workers = Candidate("workers", "more workers", "data.num_workers=4")
    compile_ = Candidate("compile", "compile", None)
    inputs = Finding(
        "input_bound",
        "critical",
        30.0,
        "t",
        {},
        {},
        "s",
        candidates=[workers],
        recoverable_pct=30.0,
        recoverable_from="bound",
    )
    compute = Finding(
        "compute_bound",
        "info",
        60.0,
        "t",
        {},
        {},
        "s",
        candidates=[compile_],
        recoverable_from="unknown",
    )
    assert candidates_from_findings([compute, inputs]) == [workers, compile_]

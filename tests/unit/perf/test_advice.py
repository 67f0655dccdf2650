"""trainperf.analysis.advice: candidate changes name only keys the run's config has, with values
from the
run's evidence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from rich.console import Console
from trainperf.analysis.advice import RunFacts, candidates_for
from trainperf.analysis.config_keys import find_key
from trainperf.core.candidates import Candidate
from trainperf.core.findings import Finding
from trainperf.present.report import build_report, print_summary, to_html, to_markdown
from trainperf.records.run_info import run_info

from ocr.runtime import register_resolvers
from trainperf_testing.advice_keys import absent_keys, has_key, parse_override
from trainperf_testing.runs import epoch_record, make_run

# A stage whose workers take 4x the main loop per batch, with no workers: input-bound.
SLOW_INPUT = {"data_wait": 8.0, "forward": 1.0, "backward": 0.5, "optimizer": 0.5}
WORKERS = {"fetch": 6.0, "collate": 2.0}
VAL = {"forward": 1.0, "metric": 1.0, "unattributed": 1.0}
TEST = {"forward": 6.0, "postprocess": 2.0}


def our_config(*overrides: str) -> dict[str, Any]:
    """Our app's config as ocr-train composes and records it in .hydra/config.yaml."""
    register_resolvers()
    with initialize_config_module(version_base="1.3", config_module="ocr.configs"):
        cfg = compose(config_name="train", overrides=list(overrides))
    container = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}


def input_bound_run(root: Path, config: dict[str, Any] | None, device: str = "cpu") -> Path:
    """Training input-bound, validation with a slow metric and unattributed time, testing
    compute-bound with slow postprocessing: most rules speak."""
    epochs = []
    for e in range(2):
        kw: dict[str, Any] = {"num_workers": 0, "device": device}
        epochs.append(epoch_record("train", e, SLOW_INPUT, worker_s=WORKERS, **kw))
        epochs.append(epoch_record("val", e, VAL, **kw))
    epochs.append(epoch_record("test", 0, TEST, num_workers=0, device=device))
    return make_run(root, epochs, config=config, run_info={"cpu_count": 8, "cpu_bf16": False})


def test_absent_keys_flags_a_key_the_config_lacks() -> None:
    f = Finding(
        id="compute_bound",
        severity="info",
        score=1.0,
        title="compute-bound",
        evidence={},
        threshold={},
        suggestion="narrower backbone `model.net.backbone.widths`, torch.compile, e.g. x.y(1)",
        candidates=[Candidate("workers", "more", "data.num_workers=2")],
    )
    assert absent_keys([f], {"model": {"net": {}}}) == [
        "compute_bound: model.net.backbone.widths",
        "compute_bound: override data.num_workers=2",
    ]
    assert (
        absent_keys(
            [f], {"model": {"net": {"backbone": {"widths": [1]}}}, "data": {"num_workers": None}}
        )
        == []
    )


def test_find_key_by_leaf_prefers_a_loader_parent_and_the_stage() -> None:
    config = {
        "hydra": {"num_workers": 9},
        "synthetic": {"workers": 3},
        "loader": {"workers": 1},
        "model": {"num_workers": 5},
        "data": {"train": {"num_workers": 1}, "val": {"num_workers": 2}},
    }
    key = find_key(config, ("num_workers",), stage="val", skip=("hydra",))
    assert key is not None
    assert key.path == "data.val.num_workers"
    assert key.value == 2
    assert key.note is not None
    assert "data.train.num_workers" in key.note
    assert "hydra" not in key.note  # the config library's own section (config_skip): no advice
    # an alias counts only under a loader-like parent, and only when no leaf matches
    key = find_key(
        {"synthetic": {"workers": 3}, "loader": {"workers": 1}},
        ("num_workers",),
        aliases=("workers",),
    )
    assert key is not None
    assert key.path == "loader.workers"
    assert find_key({"synthetic": {"workers": 3}}, ("num_workers",), aliases=("workers",)) is None
    assert find_key(None, ("num_workers",)) is None


def test_our_app_gets_real_overrides_that_parse_and_exist(tmp_path: Path) -> None:
    config = our_config("experiment=synthetic_debug", "data.num_workers=0")
    report = build_report(input_bound_run(tmp_path, config))
    (finding,) = [f for f in report.findings if f.id == "input_bound"]
    overrides = {c.family: c.override for c in finding.candidates}
    # 8 s of worker time for 2 s of main loop per epoch: 4 workers, under the 8 cores
    assert overrides["workers"] == "data.num_workers=4"
    assert overrides["prefetch"] == "data.prefetch_factor=4"  # null in the config: torch's 2
    assert "persistent_workers" not in overrides  # synthetic_debug keeps them already
    # shown in the page (override as code), the Markdown and the terminal summary
    assert "<code>data.num_workers=4</code>" in to_html(report)
    assert "Try: `data.num_workers=4`: set `data.num_workers` (now 0) to 4" in to_markdown(report)
    console = Console(width=200, record=True)
    print_summary(report, console, top=len(report.findings))
    assert "try: `data.num_workers=4`" in console.export_text()
    (compute,) = [f for f in report.findings if f.id == "compute_bound"]
    assert "`model.net.backbone.widths` (now [16, 32, 64, 128])" in compute.suggestion
    for f in report.findings:
        for c in f.candidates:
            if c.override is not None:
                key, _ = parse_override(c.override)
                assert has_key(config, key), c.override
    assert absent_keys(report.findings, config) == []


def test_values_come_from_the_evidence_and_are_capped_at_the_cores() -> None:
    config = {"data": {"num_workers": 0, "batch_size": 8}}
    facts = RunFacts(config, cpu_count=2, stage="train", num_workers=0, suggested_workers=6)
    (workers, *_) = candidates_for("input_bound", facts)
    assert workers.override == "data.num_workers=2"
    config = {"data": {"num_workers": 4, "batch_size": 8}}
    facts = RunFacts(config, cpu_count=16, stage="train", num_workers=4, suggested_workers=3)
    assert [c.family for c in candidates_for("input_bound", facts)] == [
        "persistent_workers",
        "prefetch",
    ]  # 4 workers already keep up: no workers candidate


def test_device_decides_precision_pinned_memory_and_cudnn() -> None:
    config = {
        "data": {"num_workers": 2, "pin_memory": None, "batch_size": 8},
        "trainer": {"precision": "32-true", "benchmark": None},
    }
    cpu = RunFacts(config, device="cpu", cpu_count=4, num_workers=2, cpu_bf16=False)
    gpu = RunFacts(config, device="cuda", cpu_count=4, num_workers=2)
    cpu_families = {c.family for c in candidates_for("compute_bound", cpu)}
    assert "precision" not in cpu_families
    assert "cudnn_benchmark" not in cpu_families
    bf16 = RunFacts(config, device="cpu", cpu_count=4, num_workers=2, cpu_bf16=True)
    by_family = {c.family: c for c in candidates_for("compute_bound", bf16)}
    assert by_family["precision"].override == "trainer.precision=bf16-mixed"
    assert by_family["precision"].alters_computation
    by_family = {c.family: c for c in candidates_for("compute_bound", gpu)}
    assert by_family["precision"].override == "trainer.precision=16-mixed"
    assert by_family["cudnn_benchmark"].override == "trainer.benchmark=true"
    assert by_family["batch_size"].override == "data.batch_size=16"
    assert by_family["batch_size"].alters_computation
    assert by_family["compile"].override is None  # no such key here: plain language
    assert "torch.compile" in by_family["compile"].description
    pins = [c for c in candidates_for("input_bound", gpu) if c.family == "pin_memory"]
    assert pins
    assert pins[0].override == "data.pin_memory=true"
    assert not [c for c in candidates_for("input_bound", cpu) if c.family == "pin_memory"]


def test_compute_changes_only_with_headroom() -> None:
    config = {"trainer": {"precision": "32-true"}}
    near_limit = RunFacts(config, device="cuda", compute_headroom=False)
    assert candidates_for("compute_bound", near_limit) == []
    room = RunFacts(config, device="cuda", compute_headroom=True)
    assert candidates_for("compute_bound", room)


def test_postprocess_limits_are_eval_time_and_alter_computation() -> None:
    config = {"model": {"postprocess": {"max_candidates": 1000, "box_thresh": 0.5}}}
    found = candidates_for("slow_postprocess", RunFacts(config))
    assert [c.override for c in found] == [
        "model.postprocess.max_candidates=500",
        "model.postprocess.box_thresh=0.6",
    ]
    assert all(c.eval_time and c.alters_computation for c in found)
    plain = candidates_for("slow_postprocess", RunFacts(None))
    assert plain
    assert all(c.override is None and c.eval_time for c in plain)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (None, None),  # a plain script: no Hydra config at all
        ({"dataloader": {"num_workers": 0}, "optim": {"lr": 0.1}}, "dataloader.num_workers=4"),
        ({"loader": {"workers": 0, "batch": 8}}, "loader.workers=4"),
    ],
)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_foreign_configs_get_their_own_keys_or_plain_language(
    tmp_path: Path, config: dict[str, Any] | None, expected: str | None, device: str
) -> None:
    report = build_report(input_bound_run(tmp_path, config, device=device))
    assert absent_keys(report.findings, config) == []
    (finding,) = [f for f in report.findings if f.id == "input_bound"]
    workers = [c for c in finding.candidates if c.family == "workers"]
    assert workers
    assert workers[0].override == expected
    ids = {f.id for f in report.findings}
    assert {"compute_bound", "slow_postprocess", "slow_metric", "unattributed"} <= ids
    if expected is None:
        assert all(c.override is None for f in report.findings for c in f.candidates)
        assert "num_workers" in workers[0].description


def test_threads_only_when_compute_does_not_use_every_core() -> None:
    def threads(**kw: Any) -> list[Candidate]:
        facts = RunFacts(None, device="cpu", cpu_count=4, **kw)
        return [c for c in candidates_for("compute_bound", facts) if c.family == "threads"]

    assert threads(torch_threads=4) == []
    (fewer,) = threads(torch_threads=2)
    assert "torch.set_num_threads(4)" in fewer.description
    assert "now 2" in fewer.description
    assert threads()  # unknown: worth measuring


def test_run_info_records_what_the_advice_needs() -> None:
    info = run_info()
    assert info.torch_threads == torch.get_num_threads()
    assert info.cpu_bf16 in (True, False, None)


def test_a_value_left_as_an_interpolation_is_not_shown_as_the_value() -> None:
    config = {"trainer": {"precision": "${ocr_auto_precision:}"}}
    facts = RunFacts(config, device="cpu", cpu_count=4, num_workers=2, cpu_bf16=True)
    (precision,) = [c for c in candidates_for("compute_bound", facts) if c.family == "precision"]
    assert precision.override == "trainer.precision=bf16-mixed"
    assert "(now ${" not in precision.description
    assert "decided at run time by `${ocr_auto_precision:}`" in precision.description


def test_what_the_run_already_does_is_never_proposed() -> None:
    # the demo's own settings: channels-last on, precision decided at run time (bf16-mixed)
    config = {
        "model": {"channels_last": True, "compile": True},
        "trainer": {"precision": "${ocr_auto_precision:bf16}"},
    }
    facts = RunFacts(config, device="cpu", cpu_count=2, cpu_bf16=True, precision="bf16-mixed")
    families = {c.family for c in candidates_for("compute_bound", facts)}
    assert not families & {"channels_last", "compile", "precision"}
    # the same config on a run that computed in float32 still gets the precision candidate
    float32 = RunFacts(config, device="cpu", cpu_count=2, cpu_bf16=True, precision="32-true")
    assert "precision" in {c.family for c in candidates_for("compute_bound", float32)}


def test_gpu_causes_get_bf16_fused_and_channels_last_in_our_keys() -> None:
    """Issue 31: 16-mixed's scaler on a GPU with bf16 -> bf16-mixed (and a fused optimizer,
    whose step keeps found_inf on the device); the optimizer's host loop -> fused=True, set on
    the optimizer node (our config has the key, resolved per device; on a CPU it resolves to
    torch's default); layout conversions -> channels_last."""
    config = our_config("trainer.precision=16-mixed")
    facts = RunFacts(config, device="cuda", cpu_count=16, cuda_bf16=True, precision="16-mixed")
    scaler = candidates_for("fp16_scaler", facts)
    assert [c.override for c in scaler] == [
        "trainer.precision=bf16-mixed",
        "model.optimizer.fused=true",
    ]
    assert scaler[0].alters_computation
    (loop,) = candidates_for("optimizer_host_bound", facts)
    assert loop.family == "fused_optimizer"
    assert "torch.optim.AdamW" in loop.description
    (layout,) = candidates_for("layout_conversion", facts)
    assert layout.override == "model.channels_last=true"
    assert candidates_for("host_sync", facts) == []  # named in words, nothing to measure
    findings = [Finding("x", "warning", 1.0, "t", {}, {}, "s", candidates=[*scaler, loop])]
    assert absent_keys(findings, config) == []
    for c in [*scaler, loop, layout]:
        assert c.override is not None
        parse_override(c.override)
    # a GPU without bf16 gets no bf16; compute-bound on a bf16 GPU proposes bf16-mixed
    assert [c.family for c in candidates_for("fp16_scaler", replace(facts, cuda_bf16=False))] == [
        "fused_optimizer"
    ]
    compute = {c.family: c for c in candidates_for("compute_bound", replace(facts, precision=None))}
    assert compute["precision"].override == "trainer.precision=bf16-mixed"


def test_fused_is_set_not_added_where_the_key_exists_and_never_twice() -> None:
    def fused(node: dict[str, Any] | None) -> Candidate | None:
        config = None if node is None else {"model": {"optimizer": node}}
        found = candidates_for("optimizer_host_bound", RunFacts(config, device="cuda"))
        return found[0] if found else None

    adamw = {"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 0.001}
    assert (c := fused({**adamw, "fused": None})) is not None
    assert c.override == "model.optimizer.fused=true"
    assert fused({**adamw, "fused": True}) is None  # already fused
    assert fused({"_target_": "torch.optim.RMSprop", "lr": 0.01}) is None  # no fused kernel
    plain = fused(None)  # a plain script: the runtime knob makes it
    assert plain is not None
    assert plain.override is None
    assert plain.knob is not None
    assert plain.knob.text == "knob:optimizer.fused=true"
    # an absent "+" key that already exists, or whose node is absent, is flagged
    bad = Candidate("fused_optimizer", "d", "+model.optimizer.lr=1")
    f = Finding("x", "warning", 1.0, "t", {}, {}, "s", candidates=[bad])
    assert absent_keys([f], {"model": {"optimizer": adamw}}) == [
        "x: override +model.optimizer.lr=1"
    ]

"""The knob table: parsing, the namespace, the window variable, how to apply a winner."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from trainperf.cli.trial.candidate_options import parse_candidate
from trainperf.core.knobs import KNOBS, Knob, KnobError, apply_lines, family_knob, is_knob
from trainperf.core.trial_window import TryWindow, TryWindowError
from trainperf.frameworks.spellings import HF, LIGHTNING


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("knob:dataloader.num_workers=4", 4),
        ("knob:dataloader.persistent_workers=True", True),
        ("knob:cudnn.benchmark=off", False),
        ("knob:trainer.precision=bf16-mixed", "bf16-mixed"),
        ("knob:model.compile=true", True),
        ("knob:model.compile=eager", "eager"),
    ],
)
def test_parse_round_trip(text: str, value: object) -> None:
    knob = Knob.parse(text)
    assert knob.value == value
    assert Knob.parse(knob.text) == knob


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("knob:dataloader.num_workers=-1", ">= 0"),
        ("knob:dataloader.prefetch_factor=0", ">= 1"),
        ("knob:dataloader.pin_memory=maybe", "true or false"),
        ("knob:trainer.precision=fp8", "32-true, 16-mixed, bf16-mixed"),
        ("knob:model.compile=a;b", "backend"),
        ("knob:data.num_workers=4", "not known"),
        ("knob:torch.threads", "NAME=VALUE"),
        ("dataloader.num_workers=4", "is not a knob"),
    ],
)
def test_bad_knobs_name_the_knob_and_value(text: str, names: str) -> None:
    with pytest.raises(KnobError, match=names):
        Knob.parse(text)


def test_a_knob_is_never_a_hydra_override() -> None:
    parser = OverridesParser.create()
    for name in KNOBS:
        with pytest.raises(OverrideParseException):
            parser.parse_overrides([f"knob:{name}=1"])
    assert not is_knob("data.num_workers=4")
    assert is_knob(" knob:torch.threads=2")


def test_knobs_travel_in_the_window(tmp_path: Path) -> None:
    knobs = (Knob.parse("knob:dataloader.num_workers=4"), Knob.parse("knob:model.compile=eager"))
    window = TryWindow(1, 2, tmp_path, knobs=knobs)
    assert "knobs=dataloader.num_workers=4,model.compile=eager" in window.to_env()
    assert TryWindow.parse(window.to_env()) == window
    assert "applies dataloader.num_workers=4, model.compile=eager" in window.announcement()
    with pytest.raises(TryWindowError, match="not known"):
        TryWindow.parse(f"warmup=1;batches=2;perf_dir={tmp_path};knobs=gpu.fast=1")


def test_how_to_apply_winners_in_ones_own_code() -> None:
    knobs = [
        Knob.parse("knob:dataloader.num_workers=4"),
        Knob.parse("knob:trainer.precision=bf16-mixed"),
        Knob.parse("knob:dataloader.persistent_workers=true"),
        Knob.parse("knob:model.channels_last=true"),
        Knob.parse("knob:model.compile=eager"),
    ]
    # no framework recorded: neutral words (the framework's own come from its record)
    assert apply_lines(knobs) == [
        "DataLoader(..., num_workers=4, persistent_workers=True)  # the training loader",
        'mixed precision "bf16-mixed", as the run\'s framework sets it',
        "model = model.to(memory_format=torch.channels_last)  # before training",
        'model = torch.compile(model, backend="eager")  # before training',
    ]
    assert apply_lines([Knob.parse("knob:model.compile=true")]) == [
        "model = torch.compile(model)  # before training"
    ]
    # a Lightning run's record spells them in Lightning's words (the DataLoader's its own)
    assert apply_lines(knobs, LIGHTNING.spell)[:2] == [
        "DataLoader(..., num_workers=4, persistent_workers=True)  # the training loader",
        'Trainer(precision="bf16-mixed")',
    ]
    # a Hugging Face run's in TrainingArguments
    assert apply_lines(knobs, HF.spell)[:1] == [
        "TrainingArguments(dataloader_num_workers=4, bf16=True, dataloader_persistent_workers="
        'True, torch_compile=True, torch_compile_backend="eager")'
    ]


def test_a_family_maps_to_its_knob_or_to_none() -> None:
    assert family_knob("workers", 4) == Knob("dataloader.num_workers", 4)
    assert family_knob("persistent_workers", True) == Knob("dataloader.persistent_workers", True)
    assert family_knob("precision", "bf16-mixed") == Knob("trainer.precision", "bf16-mixed")
    assert family_knob("cache", True) is None  # needs the app's own code
    assert family_knob("workers", "many") is None


def test_a_knob_candidate_takes_family_and_labels_from_the_table() -> None:
    c = parse_candidate("knob:dataloader.batch_size=64")
    assert c.family == "batch_size"
    assert c.alters_computation
    assert c.override is None
    assert c.change == "knob:dataloader.batch_size=64"


def test_findings_changes_are_knobs_without_a_config_key() -> None:
    from trainperf.analysis.advice import RunFacts, candidates_for

    plain = RunFacts(config=None, cpu_count=2, stage="train", num_workers=0)
    found = {c.family: c for c in candidates_for("input_bound", plain)}
    assert found["workers"].override is None
    assert found["workers"].knob == Knob("dataloader.num_workers", 2)
    # persistent workers need workers: alone, on a run without any, the knob would not apply
    assert found["persistent_workers"].knob is None
    assert "once it has workers" in found["persistent_workers"].description
    with_workers = RunFacts(config=None, cpu_count=2, stage="train", num_workers=1)
    persistent = [c for c in candidates_for("unattributed", with_workers)]
    assert persistent[0].knob == Knob("dataloader.persistent_workers", True)
    # the run's config has the key: the override, as before, and no knob
    hydra = RunFacts(config={"data": {"num_workers": 0}}, cpu_count=2, stage="train")
    (workers, *_) = candidates_for("input_bound", hydra)
    assert workers.override == "data.num_workers=2"
    assert workers.knob is None
    # compute-bound on CPU: compile and channels_last as knobs, a target cache has none
    compute = candidates_for("compute_bound", RunFacts(config=None, cpu_count=2, torch_threads=1))
    assert {c.knob.name for c in compute if c.knob} >= {
        "torch.threads",
        "model.channels_last",
        "model.compile",
    }
    cache = candidates_for("input_bound", plain, part="targets")[0]
    assert cache.family == "cache"
    assert cache.knob is None


def test_advice_never_proposes_what_the_live_loader_has() -> None:
    from trainperf.analysis.advice import RunFacts, candidates_for

    live = RunFacts(
        config=None,
        device="cuda",
        cpu_count=8,
        stage="train",
        num_workers=2,
        persistent_workers=True,
        pin_memory=True,
        prefetch_factor=4,
    )
    families = {c.family: c for c in candidates_for("input_bound", live)}
    assert "persistent_workers" not in families
    assert "pin_memory" not in families
    assert families["prefetch"].knob == Knob("dataloader.prefetch_factor", 8)


def test_waiting_workers_may_outnumber_the_cores() -> None:
    from trainperf.analysis.advice import RunFacts, candidates_for

    def workers(busy: float | None) -> int | None:
        facts = RunFacts(
            config=None,
            cpu_count=2,
            stage="train",
            num_workers=2,
            suggested_workers=9,
            workers_busy=busy,
        )
        found = [c for c in candidates_for("input_bound", facts) if c.family == "workers"]
        return int(found[0].knob.value) if found and found[0].knob else None

    assert workers(0.03) == 4  # they wait: up to twice the cores
    assert workers(0.9) is None  # they compute: the cores are used
    assert workers(None) is None  # unknown: not beyond the cores

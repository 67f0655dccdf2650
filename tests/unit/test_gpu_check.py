"""scripts/gpu_check.py's comparisons on recorded answers, so they run without a GPU: our NVML
sampler (a fake pynvml with pynvml's real names) beside a recorded ``nvidia-smi`` CSV line, CUDA
events against synchronized phase times, the wheel check, the trace fixture's size limit."""

from __future__ import annotations

import gzip
import importlib.metadata
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from trainperf.core.stage import Stage
from trainperf.probe.resources import ResourceSampler
from trainperf.records.epochs import EpochRecord

from scripts import gpu_check
from scripts.gpucheck import doc, figures, nvml, preflight, runs, seams, trace
from trainperf_testing.fake_nvml import device, fake_nvml

UUID = "3b0f6d7e-9c1a-4d0e-8f3b-2a1c5e7d9f10"  # torch's spelling: no "GPU-"
# nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits on an H100 while it trains,
# for the device the fake NVML below describes (30 GiB of 80 used = 30720 / 81920 MiB).
SMI_LINE = f"GPU-{UUID}, 87, 30720, 81920, 312.45, 71, 1980, 0x0000000000000000\n"


def sampler(**overrides: Any) -> ResourceSampler:
    return ResourceSampler(
        device_uuids=[UUID], nvml=fake_nvml([device(f"GPU-{UUID}", **overrides)])
    )


def smi_answer(line: str) -> Any:
    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert argv[0] == "nvidia-smi"
        assert argv[-2:] == ["-i", f"GPU-{UUID}"]
        return subprocess.CompletedProcess(argv, 0, stdout=line, stderr="")

    return run


def verdicts(read: dict[str, Any]) -> dict[str, bool | None]:
    return {row["figure"]: row["agree"] for row in read["rows"]}


def test_nvml_agrees_with_a_recorded_nvidia_smi_answer() -> None:
    read = nvml.paired_read(sampler(), UUID, run=smi_answer(SMI_LINE))
    assert verdicts(read) == {
        "util_percent": True,
        "memory_used_gb": True,
        "memory_total_gb": True,
        "power_w": True,
        "temperature_c": True,
        "sm_clock_mhz": True,
        "throttle_reasons": True,
    }
    rows = {row["figure"]: row for row in read["rows"]}
    assert rows["memory_used_gb"]["smi"] == pytest.approx(30.0)
    assert rows["power_w"]["nvml"] == [pytest.approx(312.5), pytest.approx(312.5)]


def test_a_figure_off_beyond_its_tolerance_is_named_alone() -> None:
    hot = SMI_LINE.replace(", 71, ", ", 80, ")  # 9 degrees off, tolerance 2
    read = nvml.paired_read(sampler(), UUID, run=smi_answer(hot))
    assert [f for f, ok in verdicts(read).items() if not ok] == ["temperature_c"]


def test_throttle_masks_compare_without_the_idle_bit() -> None:
    idle = SMI_LINE.replace("0x0000000000000000", "0x0000000000000001")
    assert verdicts(nvml.paired_read(sampler(), UUID, run=smi_answer(idle)))["throttle_reasons"]
    capped = SMI_LINE.replace("0x0000000000000000", "0x0000000000000004")  # SW power cap
    assert not verdicts(nvml.paired_read(sampler(), UUID, run=smi_answer(capped)))[
        "throttle_reasons"
    ]


def test_nvidia_smi_value_between_two_nvml_reads_agrees() -> None:
    before = {"util_percent": 40.0}
    after = {"util_percent": 95.0}  # the GPU got busy while nvidia-smi ran
    smi = nvml.parse_smi(SMI_LINE.replace(", 87, ", ", 70, "))
    row = nvml.compare_nvml_smi(before, smi, after)[0]
    assert row["figure"] == "util_percent"
    assert row["agree"] is True
    assert nvml.compare_nvml_smi(before, smi, {"util_percent": 45.0})[0]["agree"] is False


def test_unsupported_fields_are_not_judged() -> None:
    line = SMI_LINE.replace("312.45", "[N/A]")
    smi = nvml.parse_smi(line)
    assert smi["power.draw"] is None
    read = nvml.paired_read(sampler(power_mw=None), UUID, run=smi_answer(line))
    assert verdicts(read)["power_w"] is None


def test_an_answer_for_another_device_is_refused() -> None:
    other = SMI_LINE.replace(UUID, "00000000-0000-0000-0000-000000000000")

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, stdout=other, stderr="")

    with pytest.raises(ValueError, match="answered for GPU-00000000"):
        nvml.paired_read(sampler(), UUID, run=run)


def test_parse_smi_refuses_a_line_of_other_fields() -> None:
    with pytest.raises(ValueError, match="7 values for 8 fields"):
        nvml.parse_smi("GPU-x, 1, 2, 3, 4, 5, 6")


# -- CUDA events against synchronized phase times -------------------------------------------------


def test_event_and_synchronized_phase_times_agree_within_ten_percent() -> None:
    events = {"data_wait": 1.0, "transfer": 0.6, "forward": 12.0, "backward": 21.0}
    synced = {"data_wait": 1.1, "transfer": 0.5, "forward": 12.9, "backward": 20.0}
    rows = {r["phase"]: r for r in figures.compare_phase_times(events, synced)}
    assert all(r["agree"] for r in rows.values())
    assert rows["forward"]["diff_pct"] == pytest.approx(-100 * 0.9 / 12.9)
    # transfer is 20 % off but 0.1 ms is under 1 % of the 34.5 ms step: nobody resolves that
    assert abs(rows["transfer"]["diff_pct"]) > 10


def test_a_phase_the_events_misplace_is_named() -> None:
    # asynchronous launches: the events give forward's GPU work to the host's next phase
    events = {"data_wait": 1.0, "forward": 8.0, "backward": 25.0}
    synced = {"data_wait": 1.0, "forward": 12.0, "backward": 21.0}
    rows = figures.compare_phase_times(events, synced)
    assert [r["phase"] for r in rows if not r["agree"]] == ["forward", "backward"]
    text = "\n".join(doc.render_comparison("events vs sync", rows))
    assert "**differ on forward, backward**" in text
    assert "| forward | 8.00 | 12.00 | -33.3 | **no** |" in text


def test_stage_figures_per_batch_and_data_wait_share() -> None:
    records = [
        EpochRecord(
            stage=Stage.TRAIN,
            epoch=e,
            wall_s=2.0,
            samples=32,
            num_batches=2,
            phases_s={"data_wait": 0.5, "forward": 1.0, "backward": 0.5},
            gpu_phases_s={"forward": 0.9, "backward": 0.6},
        )
        for e in range(4)
    ]
    kept = figures.kept_epochs(records, Stage.TRAIN, skip=[3])
    assert [r.epoch for r in kept] == [1, 2]
    fig = figures.stage_figures(kept, None, Stage.TRAIN)
    assert fig is not None
    assert fig["samples_per_s"] == pytest.approx(16.0)
    assert fig["data_wait_share"] == pytest.approx(0.25)
    assert fig["host_ms"]["forward"] == pytest.approx(500.0)
    assert fig["event_ms"]["backward"] == pytest.approx(300.0)
    assert fig["mfu"] is None  # no FLOPs recorded


# -- wheels ---------------------------------------------------------------------------------------


def test_wheel_check_names_missing_and_out_of_range_packages() -> None:
    installed = {"packaging": "26.3", "torch": "2.11.0+cu130"}

    def version_of(name: str) -> str:
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    reqs = [Requirement(r) for r in ("packaging>=20", "torch==2.13.0", "msgspec>=0.18")]
    result = preflight.check_requirements(reqs, version_of, pins={"msgspec": "0.22.0"})
    assert result.missing == ["msgspec==0.22.0"]
    assert result.mismatched == ["torch 2.11.0+cu130 (pyproject: torch==2.13.0)"]


def test_every_runtime_dependency_is_in_the_device_image_or_carried() -> None:
    pins = preflight.pinned_versions()
    names = {preflight.norm_name(r.name) for r in preflight.runtime_requirements()}
    carried = {preflight.norm_name(n) for n in preflight.CARRIED}
    assert names - preflight.DEVICE_HAS - carried == set()
    # hydra-core and omegaconf need antlr4, which the image lacks
    assert "antlr4-python3-runtime" in carried
    assert all(n in pins for n in carried), "a carried wheel without a pinned version"
    assert preflight.wheels_to_carry()[0] == f"hydra-core=={pins['hydra-core']}"


def test_fetch_commands_are_the_device_readmes() -> None:
    download, build = preflight.fetch_commands()
    assert download[:6] == ["python3", "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    assert "--python-version" in download
    assert "manylinux_2_17_x86_64" in download
    assert not any(w.startswith("antlr4") for w in download)
    assert build[3] == "wheel"
    assert build[-1].startswith("antlr4-python3-runtime==")


def test_device_command_fits_the_device_tool() -> None:
    args = gpu_check.parse_args(["--epochs", "3"])
    gpu_check.size_run(args, cuda=False)
    command = preflight.device_command(args)
    assert len(command) <= 2000
    assert command.startswith("python3 -m pip install -q --no-index --no-deps")
    assert "--target /tmp/site .whl/*.whl" in command
    assert "--out $OUT --fixture-dir $OUT" in command
    assert "--epochs 3" in command
    assert "--train-batches" not in command


def test_run_size_follows_the_device_unless_given() -> None:
    args = gpu_check.parse_args([])
    gpu_check.size_run(args, cuda=True)
    assert (args.epochs, args.train_batches) == gpu_check.RUN_SIZE["gpu"]
    args = gpu_check.parse_args(["--train-batches", "7"])
    gpu_check.size_run(args, cuda=False)
    assert (args.epochs, args.train_batches) == (gpu_check.RUN_SIZE["cpu"][0], 7)
    with pytest.raises(SystemExit, match="--epochs must be >= 2"):
        gpu_check.size_run(gpu_check.parse_args(["--epochs", "1"]), cuda=False)


def test_gpu_overrides_are_the_example_preset_at_16_mixed_with_workers_for_the_cores() -> None:
    main_run = runs.train_overrides(True, 4, 100, 16, sync=False)
    assert main_run[:2] == ["preset=example", "data=synthetic"]
    assert "data.synthetic.splits.train=1600" in main_run
    assert "trainer.precision=16-mixed" in main_run
    assert "data.num_workers=14" in main_run
    assert "callbacks.profiler.schedule.epochs=[3]" in main_run
    sync_run = runs.train_overrides(True, 4, 100, 16, sync=True)
    assert sync_run[-1] == "callbacks.performance_profiler.sync_cuda=true"
    assert not any(o.startswith("callbacks.profiler.") for o in sync_run)


@pytest.mark.parametrize(
    ("arm", "precision", "channels_last", "fused", "foreach"),
    [
        (runs.DEFAULT_ARM, "16-mixed", False, False, True),
        (runs.FAST_ARM, "bf16-mixed", True, True, False),
    ],
)
def test_each_ab_arm_composes_to_its_configuration_whatever_the_defaults(
    arm: tuple[str, ...], precision: str, channels_last: bool, fused: bool, foreach: bool
) -> None:
    """Both arms name every setting they differ in (``++`` sets a key the config may or may not
    have), so a change of the CUDA defaults cannot turn the A/B into the same run twice."""
    import hydra
    import torch

    overrides = runs.train_overrides(True, 4, 100, 16, sync=False, arm=arm)
    assert all(o in overrides for o in arm)
    cfg = _compose(*[o for o in overrides if not o.startswith("callbacks.profiler.")])
    assert cfg.trainer.precision == precision
    assert cfg.model.channels_last is channels_last
    make = hydra.utils.instantiate(cfg.model.optimizer)
    optimizer = make([torch.nn.Parameter(torch.zeros(2))])
    assert isinstance(optimizer, torch.optim.AdamW)
    assert (optimizer.defaults["fused"], optimizer.defaults["foreach"]) == (fused, foreach)


def _compose(*overrides: str) -> Any:
    from hydra import compose, initialize_config_module

    from ocr.runtime import register_resolvers

    register_resolvers()
    with initialize_config_module(version_base="1.3", config_module="ocr.configs"):
        return compose(config_name="train", overrides=list(overrides))


def _figures(samples_per_s: float | None, mfu: float | None) -> dict[str, Any]:
    train = {"samples_per_s": samples_per_s, "mfu": mfu, "mfu_spec": None, "epochs": [1, 2]}
    return {"train": {**train, "data_wait_share": 0.1}, "val": None}


def test_ab_states_each_arm_the_speedup_and_the_goal() -> None:
    ab = figures.ab_comparison(_figures(193.0, 0.039), _figures(241.0, 0.051), "NVIDIA H200")
    assert ab["speedup"] == pytest.approx(241 / 193)
    assert ab["arms"]["default"]["samples_per_s"] == 193.0
    goal = ab["goal"]
    assert (goal["samples_per_s"], goal["mfu"]) == (400.0, 0.08)
    assert goal["on_goal_device"] is True
    assert (goal["samples_met"], goal["mfu_met"]) == (False, False)
    met = figures.ab_comparison(_figures(193.0, 0.039), _figures(401.0, 0.08), "NVIDIA H100")
    assert (met["goal"]["samples_met"], met["goal"]["mfu_met"]) == (True, True)
    assert met["goal"]["on_goal_device"] is False
    unknown = figures.ab_comparison(_figures(193.0, 0.039), _figures(None, None), "NVIDIA H200")
    assert unknown["speedup"] is None
    assert unknown["goal"]["samples_met"] is None
    data = {"ab": ab, "arms": {"default": list(runs.DEFAULT_ARM), "fast": list(runs.FAST_ARM)}}
    text = "\n".join(doc.render_ab(data))
    assert "| fast | `trainer.precision=bf16-mixed` `model.channels_last=true` " in text
    assert "| 241.00 | 5.1 % |" in text
    assert "Fast / default: 1.25x training samples/s." in text
    assert (
        "Goal: >= 400 training samples/s at 640 px, batch 16: 241.0, **not met**; MFU >= 8 % of "
        "the measured peak: 5.1 %, **not met**." in text
    )
    other = "\n".join(doc.render_ab({**data, "ab": met}))
    assert "Goal (the goal was set for the H200; this is another device): " in other
    assert "401.0, met; " in other


def test_the_plan_names_the_fast_run_and_the_goal() -> None:
    args = gpu_check.parse_args([])
    gpu_check.size_run(args, cuda=True)
    lines = gpu_check.plan(args, {"name": "NVIDIA H200"}, 16)
    (fast,) = [line for line in lines if line.startswith("  train_fast: ")]
    assert all(o in fast for o in runs.FAST_ARM)
    assert "callbacks.profiler.enabled=true" in fast  # its profiled window, in bf16-mixed
    (main,) = [line for line in lines if line.startswith("  train: ")]
    assert all(o in main for o in runs.DEFAULT_ARM)
    assert any(
        line.startswith("A/B goal (fast arm, checked by train_fast): >= 400 ") for line in lines
    )
    assert gpu_check.PART_NAMES.index("train_fast") == gpu_check.PART_NAMES.index("train") + 2


# -- trace summary, fixture, seam-test counts -----------------------------------------------------


def test_h2d_copies_by_source_memory() -> None:
    ops = [
        {"name": "Memcpy HtoD (Pinned -> Device)", "kind": "memcpy", "calls": 6, "total_ms": 1.5},
        {"name": "Memcpy HtoD (Pageable -> Device)", "kind": "memcpy", "calls": 2, "total_ms": 3},
        {"name": "Memcpy DtoD (Device -> Device)", "kind": "memcpy", "calls": 9, "total_ms": 1},
        {"name": "void at::native::kernel", "kind": "kernel", "calls": 90, "total_ms": 40},
    ]
    assert trace.h2d_copies(ops) == {
        "pinned": {"calls": 6.0, "ms": 1.5},
        "pageable": {"calls": 2.0, "ms": 3.0},
    }


def test_fixture_is_saved_gzip_under_the_limit_and_refused_over_it(tmp_path: Path) -> None:
    small = tmp_path / "epoch_3.json.gz"
    small.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    saved = trace.save_fixture(small, tmp_path / "fixtures", "NVIDIA H100 80GB HBM3")
    assert (
        Path(saved["path"]).name == "dbnet_r18_640_16mixed_nvidia_h100_80gb_hbm3.pt.trace.json.gz"
    )
    assert gzip.decompress(Path(saved["path"]).read_bytes()) == b'{"traceEvents": []}'
    fast = trace.save_fixture(small, tmp_path / "fixtures", "NVIDIA H200", "bf16mixed_cl_fused")
    assert (
        Path(fast["path"]).name == "dbnet_r18_640_bf16mixed_cl_fused_nvidia_h200.pt.trace.json.gz"
    )
    assert (
        trace.fixture_name("NVIDIA H200", trace.FIXTURE_CONFIGS["fast"]) == Path(fast["path"]).name
    )
    big = tmp_path / "big.json"
    big.write_bytes(os.urandom(trace.FIXTURE_MAX_BYTES + 1))  # incompressible
    with pytest.raises(ValueError, match="over the fixture limit"):
        trace.save_fixture(big, tmp_path / "fixtures", "x")


def test_junit_counts(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="0">'
        '<testcase classname="tests.a" name="test_ok"/>'
        '<testcase classname="tests.a" name="test_bad"><failure message="x"/></testcase>'
        '<testcase classname="tests.b" name="test_ok2"/>'
        "</testsuite></testsuites>"
    )
    counts = seams.junit_counts(xml)
    assert counts["tests"] == 3
    assert counts["failures"] == 1
    assert counts["failing"] == ["tests.a::test_bad"]


def test_a_failing_read_never_stops_the_training_and_fails_the_nvml_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(nvml, "paired_read", broken)

    class Finished:
        def poll(self) -> int:
            return 0

    reads: list[dict[str, Any]] = []
    nvml.read_while_training(UUID, tmp_path, reads)(Finished())  # type: ignore[arg-type]
    assert len(reads) == 1
    assert "FileNotFoundError: nvidia-smi" in reads[0]["error"]
    with pytest.raises(RuntimeError, match=r"(?s)read failed:\n.*FileNotFoundError: nvidia-smi"):
        nvml.nvml_reads(reads)
    with pytest.raises(RuntimeError, match="no paired"):
        nvml.nvml_reads([])


def test_the_seam_test_files_exist() -> None:
    # a renamed seam test must break here, not on the device machine's few minutes
    root = Path(gpu_check.__file__).resolve().parents[1]
    assert [f for f in seams.SEAM_TESTS if not (root / f).is_file()] == []

"""trainperf.present.report on hand-made run directories: loading, verdict rules, rendering, CLI."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from trainperf.analysis.gate import Band, GateOutcome, GateRow
from trainperf.analysis.run import load_run
from trainperf.cli.main import main as perf_main
from trainperf.core.findings import Finding
from trainperf.present.report import (
    ReportInputError,
    build_report,
    print_summary,
    to_html,
    to_markdown,
    write_html,
)

from trainperf_testing.paths import shared
from trainperf_testing.runs import CONFIG, T0, epoch_record, make_run

INPUT_VAL = {"data_wait": 6.0, "forward": 1.0, "metric": 0.5, "callbacks": 0.1}
TRAIN = {"data_wait": 0.2, "forward": 3.0, "backward": 2.0, "optimizer": 0.5, "callbacks": 0.1}
TARGETS = {"fetch": 2.0, "collate": 5.0, "targets": 4.6}


def input_bound_run(root: Path, config: dict[str, Any] | None = CONFIG, **kw: Any) -> Path:
    epochs = []
    for e in range(2):
        epochs.append(epoch_record("train", e, TRAIN, **kw))
        epochs.append(epoch_record("val", e, INPUT_VAL, worker_s=TARGETS, **kw))
    return make_run(root, epochs, config=config, run_info={"cpu_count": 8})


# -- loading -------------------------------------------------------------------------------------


def test_empty_run_dir_reports_every_section_as_not_recorded(tmp_path: Path) -> None:
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "alerts.jsonl").touch()  # a run that recorded nothing but no alert
    report = build_report(tmp_path)
    assert [f.id for f in report.findings] == ["not_recorded"]
    md = to_markdown(report)
    assert "perf/epochs.jsonl: not recorded" in md
    assert "perf/resources.jsonl is absent" in md
    assert "no profiler trace recorded" in md
    assert "no baseline given" in md
    assert "Not recorded (no app configuration" in md
    assert "<svg" not in to_html(report)  # nothing to plot


def test_missing_run_dir_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ReportInputError, match="nope"):
        build_report(missing)
    assert perf_main(["report", str(missing)]) == 2
    assert "nope: not a run directory" in capsys.readouterr().err


def test_malformed_line_exits_2_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    input_bound_run(tmp_path)
    path = tmp_path / "perf" / "epochs.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(1, "{not json")
    path.write_text("\n".join(lines) + "\n")
    assert perf_main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "epochs.jsonl: line 2" in err
    assert not (tmp_path / "perf" / "report.html").exists()


def test_bad_field_names_the_file(tmp_path: Path) -> None:
    record = epoch_record("train", 0, TRAIN)
    record["stage"] = "warmup"
    make_run(tmp_path, [record])
    bad = r"epochs\.jsonl: line 1: .*'warmup' - at `\$\.stage`"
    with pytest.raises(ReportInputError, match=bad):
        build_report(tmp_path)


# -- verdict -------------------------------------------------------------------------------------


def test_input_bound_names_target_generation_and_the_configured_settings(tmp_path: Path) -> None:
    first = build_report(input_bound_run(tmp_path)).findings[0]
    assert first.id == "input_bound"
    assert first.stage == "val"
    assert first.severity == "critical"  # 79 % data wait >= 40 %
    assert first.evidence["worker_bottleneck"] == "targets"
    assert first.title.startswith("input-bound: 79 % of validation wall time is data wait")
    assert "target generation takes 115 ms/sample" in first.title  # 2 x 4.6 s / 80 samples
    assert "`data.polygon_cache.enabled=true` (now false)" in first.suggestion
    assert "`data.num_workers` (now 2)" in first.suggestion
    assert "on CPU the workers share cores" in first.suggestion
    # ranked by seconds at stake: 2 x 6 s of data wait out of 2 x (5.8 + 7.6) s recorded
    assert first.score == pytest.approx(100 * 12.0 / 26.8, abs=0.1)


def test_without_config_the_advice_names_generic_settings(tmp_path: Path) -> None:
    first = build_report(input_bound_run(tmp_path, config=None)).findings[0]
    assert "the DataLoader's num_workers (now 2)" in first.suggestion
    assert "`data.num_workers`" not in first.suggestion


def test_cpu_and_gpu_runs_get_their_own_compute_advice(tmp_path: Path) -> None:
    def compute_first(device: str) -> str:
        root = tmp_path / device
        make_run(root, [epoch_record("train", 0, TRAIN, device=device)], config=CONFIG)
        first = build_report(root).findings[0]
        assert first.id == "compute_bound"
        return first.suggestion

    cpu, gpu = compute_first("cpu"), compute_first("cuda")
    assert "on CPU" in cpu
    assert "precision" not in cpu
    assert "`trainer.precision` (now 32-true)" in gpu
    assert "on CPU" not in gpu


def test_slow_metric_and_postprocess_rules(tmp_path: Path) -> None:
    val = {"forward": 1.0, "postprocess": 2.0, "metric": 4.0}
    make_run(tmp_path, [epoch_record("val", 0, val)], config=CONFIG)
    ids = [f.id for f in build_report(tmp_path).findings]
    assert ids[:2] == ["slow_metric", "slow_postprocess"]
    metric = build_report(tmp_path).findings[0]
    assert "`trainer.check_val_every_n_epoch` (now 1)" in metric.suggestion


def test_critical_alert_outranks_time_findings_and_starvation_corroborates(tmp_path: Path) -> None:
    input_bound_run(tmp_path)
    alerts = [
        {
            "t": T0 + 30,
            "rule": "nan_loss",
            "event": "fired",
            "severity": "critical",
            "message": "loss is NaN at step 12",
            "evidence": {"step": 12},
            "threshold": {},
            "suggestion": "lower the learning rate",
            "step": 12,
            "epoch": 0,
            "rank": 0,
        },
        {
            "t": T0 + 60,
            "rule": "gpu_starvation",
            "event": "fired",
            "severity": "warning",
            "message": "GPU idle 70 % of the last minute",
            "evidence": {},
            "threshold": {},
            "suggestion": "more workers",
            "step": 20,
            "epoch": 0,
            "rank": 0,
        },
    ]
    make_run(tmp_path, alerts=alerts)
    findings = build_report(tmp_path).findings
    assert findings[0].id == "alert:nan_loss"
    assert findings[0].score == 100.0
    assert findings[0].suggestion == "lower the learning rate"
    assert findings[1].id == "input_bound"
    assert any("gpu_starvation" in c for c in findings[1].corroboration)
    assert not any(f.id == "alert:gpu_starvation" for f in findings)


def test_cache_statistics_and_low_hit_rate(tmp_path: Path) -> None:
    counts = {"polygon_cache_hits": 3, "polygon_cache_misses": 37, "polygon_cache_evictions": 5}
    epochs = [
        epoch_record("val", e, INPUT_VAL, worker_s=TARGETS, worker_counts=counts) for e in range(2)
    ]
    make_run(tmp_path, epochs, config=CONFIG)
    report = build_report(tmp_path)
    cache = next(f for f in report.findings if f.id == "cache_misses")
    assert cache.evidence["hit_rate_pct"] == pytest.approx(7.5)
    assert "`data.polygon_cache.max_bytes` (now 1073741824)" in cache.suggestion
    md = to_markdown(report)
    assert "| validation | 1 | 7.5 | 5 | 3 | 37 |" in md  # per-epoch cache table


def test_epoch_tables_list_epochs_in_order_training_first(tmp_path: Path) -> None:
    # Lightning's order of closing: validation epoch e inside training epoch e
    epochs = []
    for e in range(2):
        epochs.append(epoch_record("val", e, INPUT_VAL))
        epochs.append(epoch_record("train", e, TRAIN))
    epochs.append(epoch_record("test", 0, INPUT_VAL))
    make_run(tmp_path, epochs, config=CONFIG)
    md = to_markdown(build_report(tmp_path))
    for section in ("Batch-time distribution", "Throughput"):
        text = md[md.index(section) :]
        table = text[: text.index("\n\n", text.index("| stage"))]
        order = re.findall(r"^\| (training|validation|test) \| (\d+) \|", table, re.M)
        assert order == [
            ("training", "0"),
            ("validation", "0"),
            ("training", "1"),
            ("validation", "1"),
            ("test", "0"),
        ], section


def test_resources_are_plotted_with_alerts_marked(tmp_path: Path) -> None:
    input_bound_run(tmp_path)
    samples = [
        {
            "t": T0 + 10 * i,
            "phase": "train",
            "epoch": 0,
            "step": i,
            "rank": 0,
            "metrics": {
                "resources/system_cpu_percent": 95.0,
                "resources/process_rss_gb": 1.0 + 0.1 * i,
                "resources/disk_read_mb_s": 3.0,
            },
        }
        for i in range(6)
    ]
    alert = {
        "t": T0 + 25,
        "rule": "host_memory_leak",
        "event": "fired",
        "severity": "warning",
        "message": "RSS grows 0.1 GB/min",
        "suggestion": "look for a leak",
    }
    make_run(tmp_path, resources=samples, alerts=[alert])
    report = build_report(tmp_path)
    assert any(f.id == "cpu_saturated" for f in report.findings)
    page = to_html(report)
    resources = page[page.index('id="resources"') : page.index('id="trace"')]
    assert resources.count("<svg") == 1
    assert "host_memory_leak" in resources
    assert "RSS grows 0.1 GB/min" in resources


def test_unreadable_trace_leaves_a_note(tmp_path: Path) -> None:
    input_bound_run(tmp_path)
    traces = tmp_path / "profiler_traces"
    traces.mkdir()
    (traces / "epoch_1.json").write_text('{"traceEvents": [')
    report = build_report(tmp_path)
    assert report.run.trace is None
    assert report.run.trace_note is not None
    assert report.run.trace_note.startswith("profiler trace unreadable")
    assert str(tmp_path) not in report.run.trace_note  # relative: copies give the same report


def test_real_gpu_trace_gives_top_ops_and_memory(tmp_path: Path) -> None:
    source = shared("traces/gpu_ns_resolution_2024.pt.trace.json.gz")
    input_bound_run(tmp_path)
    (tmp_path / "profiler_traces").mkdir()
    (tmp_path / "profiler_traces" / "epoch_0.json.gz").symlink_to(source)
    report = build_report(tmp_path)
    assert report.run.trace is not None
    assert report.run.trace.top_cpu_ops
    page = to_html(report)
    trace_section = page[page.index('id="trace"') : page.index('id="cache"')]
    assert "Top CPU ops by self time" in trace_section
    assert "Top CUDA kernels" in trace_section


_DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def test_the_trace_integrity_is_one_line_per_problem_and_nothing_when_clean(
    tmp_path: Path,
) -> None:
    import gzip

    source = shared("traces/gpu_ns_resolution_2024.pt.trace.json.gz")
    with gzip.open(source, "rt") as f:
        doc = json.load(f)
    pages = {}
    for name, events in (
        ("clean", doc["traceEvents"]),
        ("broken", [e for e in doc["traceEvents"] if e.get("cat") not in _DEVICE]),
    ):
        run = input_bound_run(tmp_path / name)
        (run / "profiler_traces").mkdir()
        (run / "profiler_traces" / "epoch_0.json").write_text(
            json.dumps({**doc, "traceEvents": events})
        )
        page = to_html(build_report(run))
        pages[name] = page[page.index('id="trace"') : page.index('id="cache"')]
    assert "Trace integrity" not in pages["clean"]
    (line,) = re.findall(r"Trace integrity: [^<]*", pages["broken"])
    assert "without device events" in line
    assert "gpu_busy_pct" in line


def test_trace_findings_reach_the_verdict_as_objects_in_the_one_score_unit(
    tmp_path: Path,
) -> None:
    """The trace rules' findings reach the verdict as the same Finding objects (no dict round
    trip), and their scores stay in the one unit: the share of the profiled (train) steps'
    time a cause costs, scaled to the run by the train stage's share, never a fixed 20 / 5 / 1
    by severity."""
    source = shared("traces/gpu_resnet50_2021.pt.trace.json.gz")
    input_bound_run(tmp_path)
    (tmp_path / "profiler_traces").mkdir()
    (tmp_path / "profiler_traces" / "epoch_0.json.gz").symlink_to(source)
    report = build_report(tmp_path)
    assert report.run.trace is not None
    by_id = {f.id: f for f in report.run.trace.findings}
    assert all(isinstance(f, Finding) for f in by_id.values())
    assert {"low_gpu_utilisation", "launch_overhead"} <= set(by_id)
    train_share = (
        100.0 * report.stages["train"].wall_s / sum(s.wall_s for s in report.stages.values())
    )
    ranked = {f.id: f for f in report.findings if f.id.startswith("trace:")}
    assert {"trace:low_gpu_utilisation", "trace:launch_overhead"} <= set(ranked)
    for rid, f in ranked.items():
        assert f.score == pytest.approx(by_id[rid[6:]].score * train_share / 100.0, abs=0.06)
    # two warnings no longer tie at a fixed score: the larger cost ranks first
    assert ranked["trace:low_gpu_utilisation"].score > ranked["trace:launch_overhead"].score > 0


def test_baseline_comparison_and_missing_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = input_bound_run(tmp_path / "run")
    base = tmp_path / "base.json"
    base.write_text("{}")
    row = GateRow(
        "val_epoch_time",
        "regression",
        unit="s",
        better="lower",
        baseline=5.0,
        current=8.6,
        ratio=1.72,
        change=72.0,
        threshold=10.0,
        band=Band(-9.1, 10.0, "%"),
        rules=("tolerance 10.0 %", "change +72.0 % outside the band"),
    )
    result = GateOutcome("regression", [row], ["same machine class"])
    fake = types.ModuleType("trainperf.analysis.gate")
    fake.check_baseline = lambda baseline, current, tolerance_pct=None: result  # type: ignore[attr-defined]
    reader = types.ModuleType("trainperf.analysis.baseline")
    reader.load_source = lambda path: {"path": str(path)}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trainperf.analysis.gate", fake)
    monkeypatch.setitem(sys.modules, "trainperf.analysis.baseline", reader)
    report = build_report(load_run(run, baseline=base))
    regression = next(f for f in report.findings if f.id == "baseline_regression")
    assert regression.score == pytest.approx(72.0)
    md = to_markdown(report)
    assert (
        "| val_epoch_time | s | lower | 5.000 | 8.600 | +72.0 % | -9.1 / +10.0 % | regression | "
        "tolerance 10.0 %; change +72.0 % outside the band |"
    ) in md
    assert "Baseline base.json: verdict: regression." in md  # plain words, no Markdown
    with pytest.raises(ReportInputError, match=r"missing\.json: baseline not found"):
        load_run(run, baseline=tmp_path / "missing.json")


def test_a_gate_bug_keeps_its_traceback_while_bad_input_is_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run the baseline cannot be compared with is a note on the page; an exception of our
    own gate (not bad input) is not turned into that note."""
    from trainperf.analysis.baseline import BaselineError

    run = input_bound_run(tmp_path / "run")
    base = tmp_path / "base.json"
    base.write_text("{}")
    reader = types.ModuleType("trainperf.analysis.baseline")
    reader.load_source = lambda path: {"path": str(path)}  # type: ignore[attr-defined]
    gate = types.ModuleType("trainperf.analysis.gate")
    monkeypatch.setitem(sys.modules, "trainperf.analysis.baseline", reader)
    monkeypatch.setitem(sys.modules, "trainperf.analysis.gate", gate)

    def refuse(baseline: object, current: object) -> None:
        raise BaselineError("figure 'x' missing from the run")

    gate.check_baseline = refuse  # type: ignore[attr-defined]
    report = build_report(load_run(run, baseline=base))
    assert report.run.baseline is None
    assert "cannot compare with base.json: figure 'x' missing" in (report.run.baseline_note or "")

    def bug(baseline: object, current: object) -> None:
        raise KeyError("median")

    gate.check_baseline = bug  # type: ignore[attr-defined]
    with pytest.raises(KeyError, match="median"):
        load_run(run, baseline=base)


# -- rendering -----------------------------------------------------------------------------------


def test_text_from_the_run_is_escaped(tmp_path: Path) -> None:
    config = {**CONFIG, "task_name": "<script>alert(1)</script>"}
    input_bound_run(tmp_path, config=config)
    page = to_html(build_report(tmp_path))
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_html_is_deterministic_and_self_contained(tmp_path: Path) -> None:
    input_bound_run(tmp_path)
    a = write_html(build_report(tmp_path), tmp_path / "a.html").read_bytes()
    b = write_html(build_report(tmp_path), tmp_path / "b.html").read_bytes()
    assert a == b
    text = a.decode()
    assert "<dc:date>" not in text  # no SVG creation date
    assert not re.search(r"(src|href)=\"https?://", text)  # nothing fetched from the network
    assert text.count("<svg") >= 3  # phases, batch times, throughput


def test_markdown_escapes_table_cells(tmp_path: Path) -> None:
    input_bound_run(tmp_path, config={**CONFIG, "note": "a|b"})
    md = to_markdown(build_report(tmp_path))
    # the title, where its name came from, then the verdict first
    assert re.match(r"# Performance report: [^\n]+\n\nRun name from [^\n]+\.\n\n## Verdict", md)
    for line in md.splitlines():
        if line.startswith("| ") and "a" in line and "|b" in line:
            assert "a\\|b" in line


def test_terminal_summary_and_cli_outputs(tmp_path: Path) -> None:
    run = input_bound_run(tmp_path / "run")
    console = Console(record=True, width=120)
    print_summary(build_report(run), console)
    text = console.export_text()
    assert "validation" in text
    assert "input-bound" in text
    md = tmp_path / "out" / "r.md"
    assert perf_main(["report", str(run), "--markdown", str(md)]) == 0
    assert (run / "perf" / "report.html").is_file()  # the default output
    assert md.read_text().startswith("# Performance report")
    json.dumps([f.as_dict() for f in build_report(run).findings])  # JSON-ready


# -- names and ranks (issue 12) ------------------------------------------------------------------


def test_slow_callback_and_module_hook_are_named_in_findings_and_tables(tmp_path: Path) -> None:
    epochs = []
    for e in range(2):
        record = epoch_record("train", e, {**TRAIN, "callbacks": 2.0})
        record["callbacks_s"] = {"SlowCallback": 1.9, "ModelCheckpoint": 0.1}
        record["callback_hooks_s"] = {
            "SlowCallback.on_train_batch_end": 1.9,
            "ModelCheckpoint.on_train_batch_end": 0.1,
        }
        epochs.append(record)
        val = epoch_record("val", e, {"forward": 0.5, "module_hooks": 1.5})
        val["module_hooks_s"] = {"UserModule.on_validation_epoch_end": 1.5}
        epochs.append(val)
    report = build_report(make_run(tmp_path, epochs, config=CONFIG))
    by_id = {f.id: f for f in report.findings}
    assert "SlowCallback.on_train_batch_end" in by_id["callback_overhead"].title
    assert by_id["callback_overhead"].evidence["slowest"] == "SlowCallback.on_train_batch_end"
    # The module's own epoch-end work is not blamed on callbacks, and is named.
    hook = by_id["module_hook_overhead"]
    assert hook.stage == "val"
    assert "UserModule.on_validation_epoch_end" in hook.title
    assert "log less often" not in hook.suggestion
    md = to_markdown(report)
    assert "| SlowCallback.on_train_batch_end | callback |" in md
    assert "| UserModule.on_validation_epoch_end | module hook |" in md


def test_ddp_straggler_comes_from_the_epoch_records_not_epoch_time(tmp_path: Path) -> None:
    epochs = []
    spreads = {"epoch_time": {"min": 4.0, "median": 4.0, "max": 4.0, "slowest_rank": 0}}
    for e in range(3):
        record = epoch_record("train", e, {**TRAIN, "sync_wait": 1.0}, spreads=spreads)
        record["world_size"] = 2
        record["straggler"] = {
            "rank": 1,
            "excess_s": 1.0,
            "share": 0.15,
            "cause": "data_wait",
            "cause_excess_s": 0.9,
            "others_wait_s": 1.0,
        }
        epochs.append(record)
    report = build_report(make_run(tmp_path, epochs, config=CONFIG))
    (finding,) = [f for f in report.findings if f.id == "straggler"]
    assert "rank 1" in finding.title
    assert "data_wait" in finding.title
    assert finding.evidence["rank"] == 1
    assert "| training | 2 | 1 | 1.000 | data_wait | 1.000 |" in to_markdown(report)
    # Equal epoch times and no straggler record: no finding (synchronised ranks end together).
    for record in epochs:
        record["straggler"] = None
    quiet = build_report(make_run(tmp_path / "b", epochs, config=CONFIG))
    assert not [f for f in quiet.findings if f.id == "straggler"]

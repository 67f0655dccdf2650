"""The report reads like one page (issue 14, point 5): the run's name in the title, findings by
score with the severity explained, long tables folded, whole-number axes, every resource sample
plotted."""

from __future__ import annotations

import html
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from matplotlib.ticker import MaxNLocator
from rich.console import Console
from trainperf.analysis.stages import training_rates
from trainperf.core.findings import SEVERITY_ORDER, rank, threshold
from trainperf.present.report import build_report, print_summary, to_html, to_markdown
from trainperf.present.report.document import OPEN_ROWS
from trainperf.present.report.findings_section import (
    HEADLINE_WORDS,
    ranked,
    recoverable_text,
    short_title,
)
from trainperf.present.report.plots import (
    MAX_LINE_POINTS,
    resources_figure,
    thin,
    throughput_figure,
)
from trainperf.records.monitoring import ResourceSummary

from trainperf_testing.run_lines import write_lines
from trainperf_testing.runs import CONFIG, T0, epoch_record, make_run

TRAIN = {"data_wait": 0.2, "forward": 3.0, "backward": 2.0, "optimizer": 0.5, "callbacks": 0.1}
VAL = {"data_wait": 6.0, "forward": 1.0, "metric": 2.5, "postprocess": 2.0, "callbacks": 0.1}


def _epochs(n: int = 2) -> list[dict[str, Any]]:
    out = []
    for e in range(n):
        out.append(epoch_record("train", e, TRAIN))
        out.append(epoch_record("val", e, VAL))
    return out


def _section(page: str, sid: str) -> str:
    start = page.index(f'<section id="{sid}">')
    return page[start : page.index("</section>", start)]


# -- the run's name ------------------------------------------------------------------------------


def test_title_names_the_task_and_its_experiment_tag(tmp_path: Path) -> None:
    config = {**CONFIG, "task_name": "train", "experiment_tag": "bs16"}
    run = make_run(tmp_path / "2026-01-31_12-00-00", _epochs(), config=config)
    report = build_report(run)
    assert report.name.name == "train-bs16"  # what make_wandb_logger names the WandB run
    page = to_html(report)
    expected = "Performance report: train-bs16 (2026-01-31_12-00-00)"
    assert f"<h1>{expected}</h1>" in page
    assert f"<title>{expected}</title>" in page
    assert "Run name from task_name in .hydra/config.yaml." in page
    assert to_markdown(report).startswith(f"# {expected}\n")
    console = Console(record=True, width=200)
    print_summary(report, console)
    assert "Verdict (train-bs16 (2026-01-31_12-00-00))" in console.export_text()


def test_title_without_a_tag_or_with_an_unresolved_one(tmp_path: Path) -> None:
    for i, tag in enumerate((None, "${oc.env:TAG}")):
        config = {**CONFIG, "task_name": "train", "experiment_tag": tag}
        run = make_run(tmp_path / str(i), _epochs(), config=config)
        assert build_report(run).name.name == "train"


def test_title_of_a_foreign_hydra_app_is_its_job_name(tmp_path: Path) -> None:
    run = make_run(tmp_path / "0", _epochs(), config={"model": {"lr": 0.1}})
    (run / ".hydra" / "hydra.yaml").write_text(
        yaml.safe_dump({"hydra": {"job": {"name": "my_train_script"}, "mode": "RUN"}})
    )
    report = build_report(run)
    assert report.name.name == "my_train_script"
    assert report.name.source == "the app's job name"
    assert "<h1>Performance report: my_train_script (0)</h1>" in to_html(report)


def test_malformed_hydra_yaml_is_an_error_naming_it(tmp_path: Path) -> None:
    from trainperf.present.report import ReportInputError

    run = make_run(tmp_path / "r", _epochs(), config=CONFIG)
    (run / ".hydra" / "hydra.yaml").write_text("hydra: [unclosed")
    with pytest.raises(ReportInputError, match=r"hydra\.yaml: not readable YAML"):
        build_report(run)


def test_run_json_names_a_run_whose_hydra_folder_is_gone(tmp_path: Path) -> None:
    run = make_run(
        tmp_path / "r1",
        _epochs(),
        run_info={"cpu_count": 2, "task_name": "train", "experiment_tag": "lr3"},
    )
    report = build_report(run)
    assert (report.name.name, report.name.source) == ("train-lr3", "perf/run.json")


def test_foreign_run_without_config_is_named_by_its_folder(tmp_path: Path) -> None:
    run = make_run(tmp_path / "lightning_run_7", _epochs(), run_info={"cpu_count": 2})
    report = build_report(run)
    assert report.name.title == "lightning_run_7"  # not "lightning_run_7 (lightning_run_7)"
    assert "<h1>Performance report: lightning_run_7</h1>" in to_html(report)
    assert "Run name from run folder name." in to_markdown(report)


# -- findings by what they could recover, the legend --------------------------------------------


def _recoverable_in_markdown(md: str) -> list[str]:
    return re.findall(r"^\d+\. \*\*\[\w+, recoverable ([^,]+), score [\d.]+, cause \w+\]", md, re.M)


def test_findings_appear_in_ranking_order_whatever_order_they_come_in(tmp_path: Path) -> None:
    report = build_report(make_run(tmp_path, _epochs(), config=CONFIG))
    assert len(report.findings) >= 3  # input-bound, slow metric, postprocess, ...
    # bounds and compute-bound of unknown headroom together by size (the unknown's score, kept
    # below every critical bound), whatever order the producer gave
    kinds = {f.recoverable_from for f in report.findings}
    assert kinds == {"bound", "unknown"}, kinds
    expected = [recoverable_text(f) for f in rank(report.findings)]
    severities = [f.severity for f in rank(report.findings)]
    assert severities == sorted(severities, key=SEVERITY_ORDER.__getitem__)  # critical first
    random.Random(0).shuffle(report.findings)  # a producer that does not sort
    md = to_markdown(report)
    assert _recoverable_in_markdown(md) == expected
    verdict = _section(to_html(report), "verdict")
    rows = re.findall(r"<tr><td>\d+</td><td[^>]*>\w+</td><td>([^<]+)</td>", verdict)
    assert [html.unescape(r) for r in rows] == expected
    critical = [f for f in report.findings if f.severity == "critical" and f.recoverable_pct]
    unknown = [i for i, f in enumerate(rank(report.findings)) if f.recoverable_from == "unknown"]
    for f in critical:  # compute-bound never outranks a critical, fixable cause
        assert all(rank(report.findings).index(f) < i for i in unknown)
    top = ranked(report)[0]
    # the verdict opens with one sentence: the top finding's first clause without its
    # parenthesised figures
    first = md.split("## Verdict\n\n", 1)[1].split("\n", 1)[0]
    assert first.startswith(short_title(top.title))
    assert len(first.split()) <= HEADLINE_WORDS
    assert first.endswith(".")
    assert "Change:" not in first


def test_severity_legend_explains_each_severity_and_the_score(tmp_path: Path) -> None:
    report = build_report(make_run(tmp_path, _epochs(), config=CONFIG))
    verdict = _section(to_html(report), "verdict")
    legend = html.unescape(verdict[verdict.index('<dl class="legend" id="severity-legend">') :])
    for term in ("Order", "Score", "critical", "warning", "info", "Cause"):
        assert re.search(rf"<dt[^>]*>{term}</dt><dd>[^<]+</dd>", legend), term
    assert "share (%) of the run's recorded wall time" in legend
    assert "score 100 when critical, 10 as a warning" in legend
    critical = threshold("severity_critical_pct")
    # the verdict's own thresholds, on what a change could recover of the whole run
    assert f"the change could recover {critical:g} % of the run or more" in legend
    assert '<dt class="sev-critical">critical</dt>' in legend
    md = to_markdown(report)
    assert "critical, then warning, then info; within each, by what the" in legend  # the ranking
    block = md[md.index("**Order, severity and score**") : md.index("## Run")]
    assert [line.split(":")[0] for line in block.splitlines() if line.startswith("- ")] == [
        "- Order",
        "- Score",
        "- critical",
        "- warning",
        "- info",
        "- Cause",
    ]


# -- folded tables -------------------------------------------------------------------------------


def _resource_samples(n: int) -> list[dict[str, Any]]:
    return [
        {
            "t": T0 + 0.5 * i,
            "phase": "train",
            "epoch": 0,
            "step": i,
            "rank": 0,
            "metrics": {
                "resources/system_cpu_percent": 40.0 + (i % 7),
                "resources/process_rss_gb": 1.0 + 0.01 * i,
            },
        }
        for i in range(n)
    ]


def test_long_tables_and_the_config_are_folded_headlines_stay_open(tmp_path: Path) -> None:
    run = make_run(tmp_path, _epochs(OPEN_ROWS), config=CONFIG, resources=_resource_samples(5))
    summary = {f"resources/m{i}_mean": float(i) for i in range(3)}  # short, but a listing
    record = {"t": T0 + 99, "rank": 0, "status": {}, "metrics": summary, "run": "fit"}
    write_lines(ResourceSummary.path(run), ResourceSummary, [record])
    report = build_report(run)
    page = to_html(report)
    resources = _section(page, "resources")
    assert "<details><summary>Summary at fit end (3 rows)</summary>\n<table>" in resources
    config = _section(page, "config")
    assert re.search(r"<details><summary>\.hydra/config\.yaml \(\d+ lines\)</summary><pre>", config)
    # 2 x OPEN_ROWS epoch rows: folded; the verdict and phase tables: open however long
    throughput = _section(page, "throughput")
    assert f"<details><summary>Throughput per epoch ({2 * OPEN_ROWS} rows)</summary>" in throughput
    assert "<details>" not in _section(page, "verdict")
    phases = _section(page, "phases")
    assert phases.index("<table>") < phases.index("Seconds per phase")
    assert not phases[: phases.index("Seconds per phase")].count("<details>")
    # the run's identity (a short table) stays open
    assert "<details>" not in _section(page, "run")
    md = to_markdown(report)
    assert "<details>\n<summary>Summary at fit end (3 rows)</summary>\n\n| figure | value |" in md
    assert re.search(r"<summary>\.hydra/config\.yaml \(\d+ lines\)</summary>\n\n```yaml\n", md)
    assert "*Seconds per phase, all epochs*" in md  # open: caption above, no <details>


def test_a_short_table_stays_open(tmp_path: Path) -> None:
    report = build_report(make_run(tmp_path, _epochs(2), config=CONFIG))
    throughput = _section(to_html(report), "throughput")
    assert "<caption>Throughput per epoch</caption>" in throughput
    assert "<details>" not in throughput


# -- plots: integer axes, every sample -----------------------------------------------------------


def _integer_ticks(ax: Any) -> list[float]:
    lo, hi = sorted(ax.get_xlim())
    return [t for t in ax.get_xticks() if lo - 1e-9 <= t <= hi + 1e-9]


@pytest.mark.parametrize("epochs", [1, 2, 3])
def test_throughput_ticks_are_whole_epochs_and_steps(tmp_path: Path, epochs: int) -> None:
    intervals = [
        {
            "t": T0 + 10 * e + i,
            "stage": "train",
            "epoch": e,
            "num_batches": 5 * (i + 1),
            "samples": 20 * (i + 1),
            "elapsed_s": 1.0 * (i + 1),
            "world_size": 1,
            "step": 10 * e + 5 * (i + 1),
        }
        for e in range(epochs)
        for i in range(2)
    ]
    run = make_run(tmp_path, _epochs(epochs), config=CONFIG, intervals=intervals)
    fig = throughput_figure(build_report(run).run)
    assert fig is not None
    per_epoch, per_step = fig.axes
    assert per_epoch.get_xlabel() == "epoch"
    assert per_step.get_xlabel() == "training step"
    for ax in (per_epoch, per_step):
        locator = ax.xaxis.get_major_locator()
        assert isinstance(locator, MaxNLocator)
        ticks = _integer_ticks(ax)
        assert ticks, ax.get_xlabel()
        assert all(float(t).is_integer() for t in ticks), (ax.get_xlabel(), ticks)
    # one point per interval record, at its step; the first of an epoch counts from its start
    (line,) = per_step.get_lines()
    assert list(line.get_xdata()) == [r["step"] for r in intervals]
    assert list(line.get_ydata()) == pytest.approx([20.0] * len(intervals))


def test_training_rates_skip_validation_and_empty_windows(tmp_path: Path) -> None:
    base = {"world_size": 1, "t": T0}
    intervals = [
        {**base, "stage": "train", "epoch": 0, "samples": 8, "elapsed_s": 2.0, "step": 2},
        {**base, "stage": "val", "epoch": 0, "samples": 8, "elapsed_s": 1.0, "step": 2},
        {**base, "stage": "train", "epoch": 0, "samples": 8, "elapsed_s": 2.0, "step": 3},
        {**base, "stage": "train", "epoch": 0, "samples": 24, "elapsed_s": 4.0, "step": 4},
    ]
    run = make_run(tmp_path, _epochs(1), intervals=intervals)
    assert training_rates(build_report(run).run.intervals) == [(2, 4.0), (4, 8.0)]


def test_resource_plot_draws_every_sample_of_resources_jsonl(tmp_path: Path) -> None:
    run = make_run(tmp_path, _epochs(1), config=CONFIG, resources=_resource_samples(50))
    fig = resources_figure(build_report(run).run)
    assert fig is not None
    lines = [line for ax in fig.axes for line in ax.get_lines() if line.get_label()[0] != "_"]
    assert {line.get_label() for line in lines} == {"system_cpu_percent", "process_rss_gb"}
    for line in lines:
        assert len(line.get_xdata()) == 50, line.get_label()
    rss = next(line for line in lines if line.get_label() == "process_rss_gb")
    assert list(rss.get_ydata()) == pytest.approx([1.0 + 0.01 * i for i in range(50)])
    # x: minutes since the first sample, half a second apart
    assert list(rss.get_xdata())[-1] == pytest.approx(49 * 0.5 / 60.0)


def test_a_day_of_samples_keeps_every_spike_within_the_point_budget() -> None:
    n = 86_400  # a day at one sample per second
    points = [(i / 60.0, 50.0) for i in range(n)]
    points[12_345] = (points[12_345][0], 99.0)  # one-sample spike
    points[70_001] = (points[70_001][0], 1.0)  # one-sample dip
    kept = thin(points)
    assert len(kept) <= MAX_LINE_POINTS + 2
    assert points[12_345] in kept
    assert points[70_001] in kept
    assert [p[0] for p in kept] == sorted(p[0] for p in kept)  # still in time order
    assert thin(points[:MAX_LINE_POINTS]) == points[:MAX_LINE_POINTS]  # short: untouched


# -- advice on how to get what is missing --------------------------------------------------------


def test_no_trace_note_names_the_runs_own_switch_or_the_callback(tmp_path: Path) -> None:
    config = {**CONFIG, "callbacks": {"profiler": {"enabled": False, "schedule": {"epochs": [1]}}}}
    ours = build_report(make_run(tmp_path / "ours", _epochs(1), config=config))
    assert ours.run.trace_note == (
        "no profiler trace recorded (rerun with callbacks.profiler.enabled=true)"
    )
    foreign = build_report(make_run(tmp_path / "foreign", _epochs(1), config=CONFIG))
    assert foreign.run.trace_note is not None
    assert "callbacks.profiler" not in foreign.run.trace_note  # a key this run does not have
    assert "ProfilerCallback" in foreign.run.trace_note

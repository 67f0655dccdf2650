"""``trainperf report`` on real tiny Lightning runs with planted bottlenecks.

Each scenario runs a CPU Trainer with the performance callbacks attached (they write the run
directory's ``perf/epochs.jsonl``), builds the report from the folder alone, and checks that the
verdict's FIRST finding names the planted cause. Delays are sleeps or real matrix products sized
so that the planted cause dominates with a wide margin even on 2 busy cores.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data import default_collate as torch_default_collate
from trainperf.cli.main import main as perf_main
from trainperf.core.clock import perf_phase
from trainperf.core.findings import rank
from trainperf.lightning import (
    PerformanceProfilerCallback,
    ResourceMonitorCallback,
    ThroughputMonitorCallback,
)
from trainperf.present.report import build_report, to_html, to_markdown, write_html
from trainperf.present.report.findings_section import recoverable_text
from trainperf.present.report.plots import resources_figure, throughput_figure
from trainperf.records.monitoring import ResourceSample, ResourceSummary

from trainperf_testing.run_lines import read_dicts

pytestmark = pytest.mark.slow


class Items(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``n`` regression pairs; ``delay`` seconds of sleep per ``__getitem__`` (a slow dataset)."""

    def __init__(self, n: int, delay: float = 0.0) -> None:
        self.n = n
        self.delay = delay

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay:
            time.sleep(self.delay)
        g = torch.Generator().manual_seed(index)
        return torch.randn(8, generator=g), torch.randn(1, generator=g)


class SlowCollate:
    """Picklable collate sleeping ``delay`` seconds per batch (runs in the workers)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __call__(self, items: list[Any]) -> Any:
        time.sleep(self.delay)
        return torch_default_collate(items)


class Module(L.LightningModule):
    """Linear regression; ``compute`` matrix products of 384x384 per training step (real CPU
    work), ``metric_delay`` seconds per validation batch inside ``perf_phase("metric")``."""

    def __init__(self, compute: int = 0, metric_delay: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.compute = compute
        self.metric_delay = metric_delay
        self.weight = torch.randn(384, 384) / 20.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        if self.compute:
            h = torch.randn(384, 384)
            for _ in range(self.compute):
                h = torch.tanh(h @ self.weight)
            x = x + 0.0 * h.mean()
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.net(x), y))
        with perf_phase("metric"):
            if self.metric_delay:
                time.sleep(self.metric_delay)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _run(
    root: Path,
    module: Module,
    train: DataLoader,
    val: DataLoader,
    batches: int = 6,
    extra_callbacks: tuple[L.Callback, ...] = (),
) -> Path:
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        limit_train_batches=batches,
        limit_val_batches=4,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=root,
        callbacks=[PerformanceProfilerCallback(), ThroughputMonitorCallback(), *extra_callbacks],
    )
    trainer.fit(module, train, val)
    assert (root / "perf" / "epochs.jsonl").is_file(), "the callbacks wrote no epochs.jsonl"
    return root


def _loader(n: int = 24, delay: float = 0.0, **kwargs: Any) -> DataLoader:
    return DataLoader(Items(n, delay), batch_size=4, **kwargs)


def test_slow_dataset_is_named_first(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", Module(), _loader(delay=0.04), _loader())
    first = build_report(run).findings[0]
    assert first.id == "input_bound"
    assert first.stage == "train"
    assert first.evidence["worker_bottleneck"] == "fetch"
    assert "__getitem__" in first.title
    assert "num_workers" in first.suggestion  # loads in the main process: advice to parallelise


def test_slow_collate_in_workers_is_named_first(tmp_path: Path) -> None:
    train = _loader(collate_fn=SlowCollate(0.25), num_workers=1)
    run = _run(tmp_path / "run", Module(), train, _loader())
    first = build_report(run).findings[0]
    assert first.id == "input_bound"
    assert first.evidence["worker_bottleneck"] == "collate"
    assert "collate" in first.title


def test_slow_metric_is_named_first(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", Module(metric_delay=0.25), _loader(), _loader(), batches=4)
    report = build_report(run)
    first = report.findings[0]
    assert first.id == "slow_metric"
    assert first.stage == "val"
    assert first.evidence["metric_s"] >= 0.9  # 4 batches x 0.25 s planted


def test_compute_bound_is_named_first(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", Module(compute=60), _loader(), _loader())
    first = build_report(run).findings[0]
    assert first.id == "compute_bound"
    assert first.stage == "train"
    assert "CPU" in first.suggestion  # CPU runs get CPU advice
    assert "AMP" not in first.suggestion
    assert "-> 16-mixed" not in first.suggestion  # the GPU words
    # mixed precision only as the run's own candidate (bf16-mixed, on a CPU with native bf16)
    bf16 = [c for c in first.candidates if c.family == "precision"]
    assert ("precision" in first.suggestion) == bool(bf16)
    assert all("bf16-mixed" in c.description for c in bf16)


def test_copied_run_dir_gives_the_same_report(tmp_path: Path) -> None:
    run = _run(tmp_path / "a" / "run", Module(metric_delay=0.05), _loader(), _loader(), batches=3)
    copy = tmp_path / "elsewhere" / "run"
    shutil.copytree(run, copy)
    first, second = build_report(run), build_report(copy)
    assert to_markdown(first) == to_markdown(second)
    assert [f.as_dict() for f in first.findings] == [f.as_dict() for f in second.findings]
    assert perf_main(["report", str(run), "-o", str(tmp_path / "a.html")]) == 0
    assert perf_main(["report", str(copy), "-o", str(tmp_path / "b.html")]) == 0
    html_a = (tmp_path / "a.html").read_bytes()
    assert html_a == (tmp_path / "b.html").read_bytes()
    assert b"<svg" in html_a  # the phase plot
    # a second build of the same folder is byte-identical too (no generation time in the page)
    write_html(build_report(run), tmp_path / "c.html")
    assert (tmp_path / "c.html").read_bytes() == html_a


def test_page_of_a_real_run_names_it_ranks_findings_and_plots_every_sample(tmp_path: Path) -> None:
    # Samples every 50 ms, logged every 60 s: the loggers get one record, the file every sample.
    monitor = ResourceMonitorCallback(interval_s=0.05, log_interval_s=60.0, print_summary=False)
    run = _run(
        tmp_path / "my_run",
        Module(metric_delay=0.05),
        _loader(delay=0.02),
        _loader(),
        extra_callbacks=(monitor,),
    )
    report = build_report(run)
    page = to_html(report)
    assert "<h1>Performance report: my_run</h1>" in page  # a foreign run: its folder's name
    # listed by what each change could recover (the verdict's ranking), not by score
    expected = [(recoverable_text(f), f"{f.score:.1f}") for f in rank(report.findings)]
    pattern = r"^\d+\. \*\*\[\w+, recoverable ([^,]+), score ([\d.]+), cause \w+\]"
    listed = re.findall(pattern, to_markdown(report), re.M)
    assert listed == expected
    assert 'id="severity-legend"' in page
    samples = read_dicts(run / "perf" / "resources.jsonl", ResourceSample)
    (summary,) = read_dicts(run / "perf" / "resources.jsonl", ResourceSummary)
    assert len(samples) == summary["metrics"]["resources/samples"] >= 5
    fig = resources_figure(report.run)
    assert fig is not None
    rss = next(
        line for ax in fig.axes for line in ax.get_lines() if line.get_label() == "process_rss_gb"
    )
    assert len(rss.get_xdata()) == len(samples)  # every sample, not the one logged record
    throughput = throughput_figure(report.run)
    assert throughput is not None
    for ax in throughput.axes:
        lo, hi = sorted(ax.get_xlim())
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks, ax.get_xlabel()
        assert all(float(t).is_integer() for t in ticks), (ax.get_xlabel(), ticks)


CHROMIUM = Path("/usr/bin/chromium")
REPO_ROOT = Path(__file__).resolve().parents[2]


def require_browser(chromium: Path, env: Mapping[str, str]) -> None:
    """Skip the browser check without ``chromium`` on a developer's machine; under ``CI=true``
    fail instead (``.ci/run`` installs Debian's chromium), so CI cannot pass it by skipping."""
    if chromium.exists():
        return
    if env.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(
            f"{chromium} absent under CI=true: .ci/run installs it (apt-get install chromium)"
        )
    pytest.skip(f"{chromium} absent (apt-get install chromium)")


def test_the_browser_check_fails_under_ci_without_a_browser(tmp_path: Path) -> None:
    missing = tmp_path / "no-chromium"
    with pytest.raises(pytest.fail.Exception, match="absent under CI=true"):
        require_browser(missing, {"CI": "true"})
    with pytest.raises(pytest.skip.Exception, match="absent"):
        require_browser(missing, {})
    require_browser(Path(sys.executable), {"CI": "true"})  # present: it runs


def test_page_renders_in_headless_chromium_without_console_errors(tmp_path: Path) -> None:
    require_browser(CHROMIUM, os.environ)
    run = _run(tmp_path / "run", Module(metric_delay=0.05), _loader(), _loader(), batches=3)
    assert perf_main(["report", str(run)]) == 0
    page = run / "perf" / "report.html"
    shot = tmp_path / "report.png"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "check_report_render.py"),
            str(page),
            str(shot),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the checker itself fails on a page with a script error
    bad = tmp_path / "bad.html"
    bad.write_text(page.read_text().replace("</body>", "<script>missing_fn()</script></body>"))
    done = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "check_report_render.py"),
            str(bad),
            str(shot),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 1
    assert "missing_fn" in done.stderr

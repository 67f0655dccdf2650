"""``trainperf.loop.Monitor`` on plain loops written here, each with a cause planted and measured
where it lands: a slow ``__getitem__`` (input wait, named first by the report, its share within
10 points of the planted one), a slow optimizer step (a step pre-hook that sleeps) charged to
``optimizer``, a slow custom autograd backward charged to ``backward``, phases summing to each
epoch within 2 %, and the run folder read by ``trainperf report``."""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainperf import perf_phase
from trainperf.cli.main import main as perf_main
from trainperf.errors import PerfCallbackWarning
from trainperf.loop import Monitor


class Timed(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Eight features per sample; ``sleep_s`` in ``__getitem__``, its real total in
    ``slept_s``."""

    def __init__(self, n: int, sleep_s: float = 0.0) -> None:
        self.n, self.sleep_s, self.slept_s = n, sleep_s, 0.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep_s:
            start = time.perf_counter()
            time.sleep(self.sleep_s)
            self.slept_s += time.perf_counter() - start
        return torch.randn(8), torch.randn(1)


class SlowBackward(torch.autograd.Function):
    """Identity forward; backward sleeps ``SLEEP_S`` (counted in ``slept_s``)."""

    SLEEP_S = 0.02
    slept_s = 0.0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        time.sleep(SlowBackward.SLEEP_S)
        SlowBackward.slept_s += time.perf_counter() - start
        return grad


class Net(nn.Module):
    def __init__(self, slow_backward: bool = False) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        self.slow_backward = slow_backward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body[0](x)
        if self.slow_backward:  # after a layer with weights: its backward runs
            h = SlowBackward.apply(h)
        return self.body[2](self.body[1](h))


def epochs(run: Path) -> list[dict[str, Any]]:
    lines = (run / "perf" / "epochs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def train(
    run: Path,
    dataset: Dataset[Any],
    *,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    epochs_n: int = 1,
    validate: bool = False,
    **options: Any,
) -> None:
    net = model if model is not None else Net()
    opt = optimizer if optimizer is not None else torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(dataset, batch_size=4)
    with Monitor(run, model=net, optimizer=opt, live=False, **options) as mon:
        for _ in range(epochs_n):
            for x, y in mon.train(loader):
                loss = nn.functional.mse_loss(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            if validate:
                with torch.no_grad():
                    for x, _y in mon.validate(loader):
                        with perf_phase("metric"):
                            net(x).sum()


def test_a_slow_getitem_is_input_wait_named_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = Timed(48, sleep_s=0.01)
    train(tmp_path / "run", data)
    (record,) = epochs(tmp_path / "run")
    planted = 100 * data.slept_s / record["wall_s"]
    measured = 100 * record["phases_s"]["data_wait"] / record["wall_s"]
    assert abs(measured - planted) <= 10, (measured, planted)
    assert record["worker_s"]["fetch"] >= 0.9 * data.slept_s  # timed where it ran
    assert record["samples"] == 48
    assert record["num_batches"] == 12
    from trainperf.present.report import build_report

    findings = build_report(tmp_path / "run").findings
    assert findings[0].id == "input_bound", [f.id for f in findings]
    assert perf_main(["report", str(tmp_path / "run")]) == 0
    assert "input-bound" in capsys.readouterr().out


def test_a_slow_optimizer_step_hook_is_optimizer(tmp_path: Path) -> None:
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    slept = [0.0]

    def slow(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        start = time.perf_counter()
        time.sleep(0.02)
        slept[0] += time.perf_counter() - start

    opt.register_step_pre_hook(slow)  # the user's hook, registered before the Monitor's
    train(tmp_path / "run", Timed(32), model=net, optimizer=opt)
    (record,) = epochs(tmp_path / "run")
    phases = record["phases_s"]
    assert phases["optimizer"] >= slept[0] > 0
    assert phases["optimizer"] <= slept[0] + 0.1 * record["wall_s"]
    assert max(phases, key=phases.get) == "optimizer"
    assert phases["backward"] < 0.5 * slept[0]


def test_a_slow_autograd_backward_is_backward(tmp_path: Path) -> None:
    SlowBackward.slept_s = 0.0
    train(tmp_path / "run", Timed(32), model=Net(slow_backward=True))
    (record,) = epochs(tmp_path / "run")
    phases = record["phases_s"]
    assert SlowBackward.slept_s > 0
    assert phases["backward"] >= SlowBackward.slept_s
    assert max(phases, key=phases.get) == "backward"
    assert phases["forward"] < 0.5 * SlowBackward.slept_s
    assert phases["optimizer"] < 0.5 * SlowBackward.slept_s


def test_phases_sum_to_each_epoch_and_validation_is_its_own(tmp_path: Path) -> None:
    train(tmp_path / "run", Timed(24, sleep_s=0.002), epochs_n=2, validate=True)
    records = epochs(tmp_path / "run")
    assert [(r["stage"], r["epoch"]) for r in records] == [
        ("train", 0),
        ("val", 0),
        ("train", 1),
        ("val", 1),
    ]
    for r in records:
        total = sum(r["phases_s"].values())
        assert math.isclose(total, r["wall_s"], rel_tol=0.02), r
    val = records[1]["phases_s"]
    assert val["forward"] > 0
    assert val["metric"] > 0
    assert val["backward"] == 0
    assert val["optimizer"] == 0
    info = json.loads((tmp_path / "run" / "perf" / "run.json").read_text())
    assert info["framework"] == "loop"
    setup = info["plain_loop"]
    assert setup["num_workers"] == 0
    assert setup["batch_size"] == 4
    assert setup["optimizer"] == "SGD"
    assert setup["precision"] == "32-true"
    lifecycle = (tmp_path / "run" / "perf" / "lifecycle.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lifecycle] == ["start", "end"]


def test_transfer_and_worker_timing(tmp_path: Path) -> None:
    data = Timed(32, sleep_s=0.005)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(data, batch_size=4, num_workers=2)
    moved = [0]
    with Monitor(tmp_path / "run", model=net, optimizer=opt, live=False) as mon:
        for batch in mon.train(loader):
            x, y = mon.to_device(batch, "cpu")
            moved[0] += 1
            loss = nn.functional.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    (record,) = epochs(tmp_path / "run")
    assert moved[0] == 8
    assert record["samples"] == 32
    assert record["phases_s"]["transfer"] > 0
    assert record["worker_s"]["fetch"] >= 32 * 0.005 * 0.9  # timed in the two workers
    assert record["num_workers"] == 2


def test_without_model_or_optimizer_one_warning_names_what_cannot_split(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with Monitor(tmp_path / "run", live=False) as mon:
            for _ in mon.train(DataLoader(Timed(8), batch_size=4)):
                pass
    said = [str(w.message) for w in seen if issubclass(w.category, PerfCallbackWarning)]
    assert len(said) == 1, said
    assert "forward and backward" in said[0]
    assert "optimizer" in said[0]
    (record,) = epochs(tmp_path / "run")
    assert record["num_batches"] == 2


def test_the_live_line_goes_to_stderr_and_can_be_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(folder: Path, live: bool) -> str:
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        loader = DataLoader(Timed(16, sleep_s=0.01), batch_size=4)
        with Monitor(folder, net, opt, live=live, live_interval_s=0.01) as mon:
            for x, _y in mon.train(loader):
                net(x).sum().backward()
                opt.step()
        return capsys.readouterr().err

    err = run(tmp_path / "a", True)
    assert "[trainperf] epoch 0 train batch" in err
    assert "data_wait" in err
    assert "[trainperf]" not in run(tmp_path / "b", False)


def test_a_loop_that_breaks_early_still_records_its_epoch(tmp_path: Path) -> None:
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with Monitor(tmp_path / "run", net, opt, live=False) as mon:
        batches: Iterator[Any] = mon.train(DataLoader(Timed(40), batch_size=4))
        for i, (x, _y) in enumerate(batches):
            net(x)
            if i == 2:
                break
    (record,) = epochs(tmp_path / "run")
    assert record["num_batches"] == 2  # the batch the loop broke out of never ended


class CountingExchange:
    """An exchange of one process standing in for a rank of several: it counts the gathers
    (in a real run each waits for the other ranks)."""

    sync_wait_measured = "gather"

    def __init__(self) -> None:
        self.gathered: list[str] = []

    def gather(self, local: Any) -> Any:
        self.gathered.append(local.stage)
        return local, None


def _as_rank_of_two(mon: Monitor) -> CountingExchange:
    exchange = CountingExchange()
    mon.recorder.world_size = 2
    mon.recorder.exchange = exchange  # type: ignore[assignment]
    return exchange


def test_an_exception_under_several_ranks_ends_the_epoch_without_an_exchange(
    tmp_path: Path,
) -> None:
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    mon = Monitor(tmp_path / "run", net, opt, live=False)
    exchange = _as_rank_of_two(mon)

    def raising_loop() -> None:
        with mon:
            for x, _y in mon.train(DataLoader(Timed(16), batch_size=4)):
                net(x)
                raise RuntimeError("planted")

    with pytest.raises(RuntimeError, match="planted"):
        raising_loop()
    assert exchange.gathered == []
    assert mon.recorder.finished


def test_epochs_broken_out_of_under_several_ranks_are_still_exchanged(tmp_path: Path) -> None:
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with Monitor(tmp_path / "run", net, opt, live=False) as mon:
        exchange = _as_rank_of_two(mon)
        for i, (x, _y) in enumerate(mon.train(DataLoader(Timed(16), batch_size=4))):
            net(x)
            if i == 1:
                for j, (v, _w) in enumerate(mon.validate(DataLoader(Timed(16), batch_size=4))):
                    net(v)
                    if j == 1:
                        break  # closed at the training loop's next step, exchanged
                assert exchange.gathered == []
            if i == 2:
                assert exchange.gathered == ["val"]
                break
        for _ in mon.validate(DataLoader(Timed(4), batch_size=4)):  # the next epoch closes it
            pass
    assert exchange.gathered == ["val", "train", "val"]
    assert [r["stage"] for r in epochs(tmp_path / "run")] == ["val", "train", "val"]


def test_profiler_windows_and_resources_as_options(tmp_path: Path) -> None:
    from trainperf import analyze_trace
    from trainperf.lightning import ProfileSchedule, TraceOptions  # the old import path holds

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(Timed(40), batch_size=4)
    schedule = ProfileSchedule(epochs=[1], active=3, warmup=1)
    trace = TraceOptions(activities=["cpu"], profile_memory=False, record_shapes=False)
    run = tmp_path / "run"
    with Monitor(run, net, opt, live=False, resources=True, profile=schedule, trace=trace) as mon:
        for _ in range(2):
            for x, y in mon.train(loader):
                loss = nn.functional.mse_loss(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            time.sleep(1.1)  # the sampler's first tick
    traces = sorted((run / "profiler_traces").iterdir())
    assert [p.name for p in traces] == ["epoch_1.json"]  # epoch 0 is not profiled
    analysis = analyze_trace(traces[0])
    assert analysis["top_cpu_ops"]
    samples = (run / "perf" / "resources.jsonl").read_text().splitlines()
    assert samples
    assert json.loads(samples[0])["rank"] == 0

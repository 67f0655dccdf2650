"""Acceptance: planted sleeps land in their phase of the trace's step breakdown.

Traces are recorded here from LightningModules written here (automatic optimization, manual
optimization, gradient accumulation) and from a plain PyTorch loop, with ``time.sleep`` planted in
the step function, in a backward tensor hook, in a wrapped optimizer's ``step`` and in the
dataset's ``__getitem__``. Every sleep is measured with ``perf_counter`` where it runs; the
analyzer must put each in its phase within ±15 % of its measured duration, the phases must sum
to the step, and the optimizer phase must hold nothing but optimizer work.

Under load (a loaded CI machine) the code between the sleeps is descheduled too and a phase grows
by more than its sleeps: a phase may then also hold up to the steps' time outside every planted
sleep (``other``), but never another phase's sleep, which the lower bound of the phase that lost
it catches whatever the load.
"""

from __future__ import annotations

import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from trainperf.analysis.trace import analyze_trace
from trainperf.lightning.action_stream import ActionStream
from trainperf.lightning.profiler_callback import ProfilerCallback
from trainperf.recording.profiler_settings import ProfileSchedule, TraceOptions

# distinct lengths, so a sleep counted in the wrong phase cannot pass for the right one
DATA_S = 0.006  # per sample; batches of 2
STEP_S = 0.024
HOOK_S = 0.012
OPT_S = 0.018
TOL = 0.15
N_BATCHES = 6


class Sleeps:
    """Measured sleeps per (batch, phase); ``batch`` is set by the code under test. Each sleep is
    kept with its own batch: under load one sleep can last several times another, so a mean over
    the epoch is no stand-in for the steps a trace recorded."""

    def __init__(self) -> None:
        self.batch = -1
        self.by_batch: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        # by the batch current while the loader fetched: the fetch in step b's data wait runs
        # before b starts (Lightning's one-batch prefetch, the plain loop alike), so it is b - 1's
        self.data: dict[int, float] = defaultdict(float)

    def sleep(self, phase: str, seconds: float) -> None:
        t0 = time.perf_counter()
        time.sleep(seconds)
        dt = time.perf_counter() - t0
        if phase == "data_wait":
            self.data[self.batch] += dt
        else:
            self.by_batch[self.batch][phase] += dt


class SlowData(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, sleeps: Sleeps, n: int = 2 * N_BATCHES + 4) -> None:
        self.sleeps = sleeps
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 8, generator=g)
        self.y = torch.randn(n, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.sleeps.sleep("data_wait", DATA_S)
        return self.x[i], self.y[i]


class SlowSGD(torch.optim.SGD):
    """A wrapped optimizer: its own work (a sleep) after the closure, then the real step."""

    sleeps: Sleeps

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.sleeps.sleep("optimizer", OPT_S)
        super().step()
        return loss


def _forward(net: torch.nn.Module, sleeps: Sleeps, x: torch.Tensor, y: torch.Tensor) -> Any:
    sleeps.sleep("forward", STEP_S)
    out = net(x)
    out.register_hook(lambda g: sleeps.sleep("backward", HOOK_S))
    return torch.nn.functional.mse_loss(out, y)


class Planted(L.LightningModule):
    def __init__(self, sleeps: Sleeps, manual: bool = False) -> None:
        super().__init__()
        self.sleeps = sleeps
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )
        self.automatic_optimization = not manual

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.sleeps.batch = batch_idx

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = _forward(self.net, self.sleeps, *batch)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()  # type: ignore[union-attr]
        self.manual_backward(loss)
        opt.step()  # type: ignore[union-attr]
        return None

    def configure_optimizers(self) -> Any:
        opt = SlowSGD(self.parameters(), lr=0.01)
        opt.sleeps = self.sleeps
        return opt


class _StepTorchProfiler(L.Callback):
    """A foreign profiler: plain torch.profiler stepped at batch end, no Lightning labels."""

    def __init__(self, prof: torch.profiler.profile) -> None:
        self.prof = prof

    def on_train_batch_end(self, *args: Any) -> None:
        self.prof.step()


def _fit(
    tmp_path: Path, manual: bool = False, accumulate: int = 1, ours: bool = True
) -> tuple[dict[str, Any], Sleeps]:
    sleeps = Sleeps()
    model = Planted(sleeps, manual=manual)
    loader = DataLoader(SlowData(sleeps), batch_size=2, num_workers=0)
    trace_dir = tmp_path / "traces"
    callbacks: list[L.Callback] = []
    prof = None
    if ours:
        callbacks.append(
            ProfilerCallback(
                schedule=ProfileSchedule(epochs=[0], active=4, warmup=1),
                trace=TraceOptions(
                    activities=["cpu"],
                    record_shapes=False,
                    profile_memory=False,
                    output_dir=trace_dir,
                ),
                log_top_k_ops=3,
            )
        )
    else:
        trace_dir.mkdir()
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(trace_dir / "foreign.json")),
        )
        callbacks.append(_StepTorchProfiler(prof))
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        limit_train_batches=N_BATCHES,
        limit_val_batches=0,
        accumulate_grad_batches=accumulate,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if prof is not None:
            with prof:
                trainer.fit(model, loader)
        else:
            trainer.fit(model, loader)
    return analyze_trace(trace_dir, top_k=None), sleeps


def _assert_holds(phase: str, got: float, planted: float, other: float, detail: Any) -> None:
    """``got`` ms of ``phase`` hold its ``planted`` ms of sleeps (-15 %) and, beyond them, at most
    15 % of them or the ``other`` ms the steps spent outside every planted sleep (the code between
    the sleeps, which load stretches), whichever is larger: a sleep of another phase counted here
    would have to come out of that phase, failing its lower bound."""
    assert got >= (1 - TOL) * planted, (phase, "lost planted sleep", got, planted, detail)
    slack = max(TOL * planted, other)
    assert got <= planted + slack, (phase, "holds more than its sleeps", got, planted, detail)


def _check(report: dict[str, Any], sleeps: Sleeps) -> None:
    steps = [s for s in report["steps"] if s["stage"] == "train"]
    assert len(steps) == 4
    expected: dict[str, float] = defaultdict(float)
    for s in steps:
        assert sum(s["phases_ms"].values()) == pytest.approx(s["wall_ms"], abs=1e-3)
        batch = s["number"]
        for phase, secs in sleeps.by_batch[batch].items():
            expected[phase] += 1e3 * secs
        expected["data_wait"] += 1e3 * sleeps.data[batch - 1]
    got = {p: sum(s["phases_ms"][p] for s in steps) for p in steps[0]["phases_ms"]}
    other = sum(s["wall_ms"] for s in steps) - sum(expected.values())
    for phase in ("data_wait", "forward", "backward", "optimizer"):
        _assert_holds(phase, got[phase], expected[phase], other, (got, dict(expected)))


def test_automatic_optimization_with_our_profiler(tmp_path: Path) -> None:
    report, sleeps = _fit(tmp_path)
    _check(report, sleeps)
    # our ProfilerCallback labels Lightning's actions in the trace
    names = {r["name"] for r in report["top_annotations"]}
    assert any(
        n.startswith("[pl][profile][Strategy]") and n.endswith(".training_step") for n in names
    )
    assert any(n.startswith("[pl][profile][Strategy]") and n.endswith(".backward") for n in names)
    assert any(n.startswith("[pl][profile][Callback]ProfilerCallback.") for n in names)


def test_automatic_optimization_foreign_trace_without_lightning_labels(tmp_path: Path) -> None:
    report, sleeps = _fit(tmp_path, ours=False)
    assert not any(r["name"].startswith("[pl]") for r in report["top_annotations"])
    _check(report, sleeps)


def test_manual_optimization(tmp_path: Path) -> None:
    report, sleeps = _fit(tmp_path, manual=True)
    _check(report, sleeps)


def test_manual_optimization_foreign_trace(tmp_path: Path) -> None:
    report, sleeps = _fit(tmp_path, manual=True, ours=False)
    _check(report, sleeps)


def test_gradient_accumulation(tmp_path: Path) -> None:
    report, sleeps = _fit(tmp_path, accumulate=2)
    _check(report, sleeps)
    opt = [s["phases_ms"]["optimizer"] for s in report["steps"]]
    # the optimizer sleeps every second batch only
    assert sum(1 for ms in opt if ms >= 1e3 * OPT_S * (1 - TOL)) == 2


def test_gradient_accumulation_foreign_trace(tmp_path: Path) -> None:
    report, sleeps = _fit(tmp_path, accumulate=2, ours=False)
    _check(report, sleeps)


def test_plain_pytorch_loop(tmp_path: Path) -> None:
    sleeps = Sleeps()
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = SlowSGD(net.parameters(), lr=0.01)
    opt.sleeps = sleeps
    loader = DataLoader(SlowData(sleeps), batch_size=2, num_workers=0)
    out = tmp_path / "plain.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(str(out)),
        ) as prof:
            for i, (x, y) in enumerate(loader):
                sleeps.batch = i
                loss = _forward(net, sleeps, x, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
                if i >= 5:
                    break
    _check(analyze_trace(out), sleeps)


class _SeesProfiler(L.Callback):
    def __init__(self) -> None:
        self.seen: list[tuple[int, bool]] = []

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self.seen.append((int(args[-1]), isinstance(trainer.profiler, ActionStream)))


def test_action_ranges_only_while_a_window_records(tmp_path: Path) -> None:
    sees = _SeesProfiler()
    cb = ProfilerCallback(
        schedule=ProfileSchedule(epochs=[0], active=2, warmup=1),
        trace=TraceOptions(activities=["cpu"], record_shapes=False, profile_memory=False),
        log_top_k_ops=3,
    )
    sleeps = Sleeps()
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        limit_train_batches=N_BATCHES,
        limit_val_batches=0,
        callbacks=[sees, cb],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Planted(sleeps), DataLoader(SlowData(sleeps), batch_size=2))
    # the listener is attached for the window's 3 batches (warm-up + 2) and gone after it
    assert sees.seen == [(i, i < 3) for i in range(N_BATCHES)]
    assert not isinstance(trainer.profiler, ActionStream)
    assert cb.windows[0].batches == (0, 2)


def test_lightning_pytorch_profiler_files(tmp_path: Path) -> None:
    """Lightning's own PyTorchProfiler: its per-stage file labels only some actions."""
    from lightning.pytorch.profilers import PyTorchProfiler

    sleeps = Sleeps()
    out = tmp_path / "pl"
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        limit_train_batches=N_BATCHES,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        profiler=PyTorchProfiler(
            dirpath=out,
            filename="prof",
            export_to_chrome=True,
            schedule=torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1),
        ),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Planted(sleeps), DataLoader(SlowData(sleeps), batch_size=2))
    report = analyze_trace(out, top_k=None)
    # PyTorchProfiler steps the torch profiler when training_step ends, in the middle of
    # Lightning's closure: the first recorded step begins inside spans opened during the warm-up
    # step, which torch does not export. From the second step on, every label is there.
    steps = [s for s in report["steps"] if s["stage"] == "train"][1:]
    assert len(steps) == 3
    # each step holds one sleep of each phase whatever its boundaries, so the 3 steps hold those
    # of 3 consecutive batches (which ones depends on where the boundaries cut a batch; under
    # load one batch's sleep can last several times another's, so a mean is no stand-in)
    for s in steps:
        assert sum(s["phases_ms"].values()) == pytest.approx(s["wall_ms"], abs=1e-3)
    n = len(steps)

    def windows(ms: list[float]) -> list[float]:
        return [sum(ms[i : i + n]) for i in range(len(ms) - n + 1)]

    got = {p: sum(s["phases_ms"][p] for s in steps) for p in ("forward", "backward", "optimizer")}
    planted = {
        p: min(windows([1e3 * b[p] for b in sleeps.by_batch.values()]), key=lambda w: abs(w - ms))
        for p, ms in got.items()
    }
    # the steps' data fetches are 3 consecutive ones too, wherever the analyzer puts them
    data = min(windows([1e3 * ms for ms in sleeps.data.values()]))
    other = sum(s["wall_ms"] for s in steps) - sum(planted.values()) - data
    for phase, ms in got.items():
        _assert_holds(phase, ms, planted[phase], other, [s["phases_ms"] for s in steps])

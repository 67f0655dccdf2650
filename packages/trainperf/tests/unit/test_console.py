"""trainperf.present.console: tables printed above a live RichProgressBar, plain progress lines
without a terminal, tables that fit narrow terminals."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import rich
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.demos.boring_classes import BoringModel
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from trainperf.lightning import PlainProgressBar
from trainperf.lightning.progress_choice import plain_progress_when_not_a_terminal
from trainperf.present.console import fit_table, print_renderable, stdout_is_live

_CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")


def screen(raw: str) -> list[str]:
    """What a terminal shows after ``raw``: enough of VT100 for Rich's live display (carriage
    return, newline, erase line, cursor up / down / to column; colours and cursor visibility
    ignored)."""
    lines: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(raw):
        m = _CSI.match(raw, i)
        if m:
            arg, op = m.group(1), m.group(2)
            n = int(arg) if arg.isdigit() else 1
            if op == "A":
                row = max(0, row - n)
            elif op == "B":
                row += n
            elif op == "G":
                col = n - 1
            elif op == "K":
                while len(lines) <= row:
                    lines.append([])
                lines[row] = [] if arg == "2" else lines[row][:col]
            i = m.end()
            continue
        ch = raw[i]
        i += 1
        while len(lines) <= row:
            lines.append([])
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row, col = row + 1, 0
        elif ch >= " ":
            line = lines[row]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    return ["".join(line).rstrip() for line in lines]


@pytest.fixture
def global_console() -> Iterator[None]:
    """RichProgressBar reconfigures Rich's global console: put it back afterwards."""
    console = rich.get_console()
    saved = dict(console.__dict__)
    yield
    console.__dict__ = saved


class _TableAtEpochEnd(L.Callback):
    def __init__(self, printer: Callable[[Table], None]) -> None:
        self.printer = printer

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        table = Table(title=f"summary {trainer.current_epoch}")
        table.add_column("figure")
        table.add_column("value")
        for i in range(6):
            table.add_row(f"row-{trainer.current_epoch}-{i}", str(i))
        self.printer(table)


def _fit_with_live_bar(printer: Callable[[Table], None], terminal: io.StringIO) -> None:
    bar = RichProgressBar(
        console_kwargs={"file": terminal, "force_terminal": True, "width": 100, "height": 40}
    )
    trainer = L.Trainer(
        max_epochs=2,
        limit_train_batches=3,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        callbacks=[bar, _TableAtEpochEnd(printer)],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(BoringModel())


def _rows(shown: list[str]) -> set[str]:
    return {m for line in shown for m in re.findall(r"row-\d-\d", line)}


@pytest.mark.usefixtures("global_console")
def test_print_renderable_keeps_every_row_above_a_live_progress_bar() -> None:
    terminal = io.StringIO()
    _fit_with_live_bar(print_renderable, terminal)
    shown = screen(terminal.getvalue())
    assert _rows(shown) == {f"row-{e}-{i}" for e in range(2) for i in range(6)}
    assert any(line.startswith("Epoch 1/1") for line in shown)  # the bar itself is there
    # each table starts on a line of its own, not after the bar's text
    assert sum(line.strip() in ("summary 0", "summary 1") for line in shown) == 2


def _table() -> Table:
    table = Table(title="summary")
    table.add_column("figure")
    for i in range(6):
        table.add_row(f"row-0-{i}")
    return table


@pytest.mark.usefixtures("global_console")
@pytest.mark.parametrize("through_global_console", [True, False])
def test_three_line_live_display_erases_rows_of_a_second_console(
    through_global_console: bool,
) -> None:
    # the mechanism, deterministic (Lightning's val + train bars are two or more lines, drawn
    # when its refresh thread ticks): a redraw moves up over the live display's height
    terminal = io.StringIO()
    rich.reconfigure(file=terminal, force_terminal=True, width=80, height=40)
    bars = Group(*(Text(f"bar {i}") for i in range(3)))
    with Live(bars, console=rich.get_console(), auto_refresh=False) as live:
        live.refresh()
        if through_global_console:
            print_renderable(_table())
        else:  # what the callbacks did before: Console().print(table) on the same terminal
            Console(file=terminal, force_terminal=True, width=80).print(_table())
        live.refresh()
    shown = screen(terminal.getvalue())
    if through_global_console:
        assert _rows(shown) == {f"row-0-{i}" for i in range(6)}
    else:
        assert len(_rows(shown)) < 6


def test_print_renderable_without_a_live_display(
    capsys: pytest.CaptureFixture[str], global_console: None
) -> None:
    rich.reconfigure(file=io.StringIO(), width=80)
    out = rich.get_console().file
    print_renderable("plain [bold]text[/bold]")
    assert out.getvalue() == "plain text\n"  # type: ignore[attr-defined]


def test_stdout_is_live_for_terminals_only() -> None:
    assert not stdout_is_live(Console(file=io.StringIO()))
    assert stdout_is_live(Console(file=io.StringIO(), force_terminal=True))


def test_progress_bar_choice() -> None:
    class MyBar(RichProgressBar):
        pass

    lr = L.pytorch.callbacks.LearningRateMonitor()
    rich_bar, tqdm_bar, mine = RichProgressBar(), TQDMProgressBar(), MyBar()
    assert plain_progress_when_not_a_terminal([rich_bar, lr], live=True) == [rich_bar, lr]
    swapped = plain_progress_when_not_a_terminal([rich_bar, lr], live=False)
    assert isinstance(swapped[0], PlainProgressBar)
    assert swapped[1] is lr
    from_tqdm = plain_progress_when_not_a_terminal([tqdm_bar], live=False)
    assert isinstance(from_tqdm[0], PlainProgressBar)
    assert plain_progress_when_not_a_terminal([mine], live=False) == [mine]
    added = plain_progress_when_not_a_terminal([lr], live=False)
    assert isinstance(added[-1], PlainProgressBar)
    assert plain_progress_when_not_a_terminal([lr], live=False, add_if_missing=False) == [lr]


def test_plain_progress_bar_prints_lines_per_interval_and_per_epoch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    trainer = L.Trainer(
        max_epochs=2,
        limit_train_batches=3,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        callbacks=[PlainProgressBar(interval_s=1e-9)],  # every batch
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(BoringModel())
    trainer.test(BoringModel(), verbose=False)
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("Epoch 0/1 train 1/3 (33%) ") for line in lines)
    assert any(line.startswith("Epoch 1/1 train 3/3 (100%) ") for line in lines)
    assert any(line.startswith("Epoch 0/1 val 2/2 (100%) ") for line in lines)
    assert [line.split(" done in ")[0] for line in lines if " done in " in line] == [
        "Epoch 0/1",
        "Epoch 1/1",
        "test",
    ]
    assert any(line.startswith("test 2/") for line in lines) or any(
        line.startswith("test 1/") for line in lines
    )
    assert all("\r" not in line and "\x1b" not in line for line in lines)


class _Ticks:
    """A fake monotonic clock that starts where a long-running machine's would (1:14:39) and
    moves 1 s per read."""

    def __init__(self, start: float = 4479.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_plain_progress_bar_times_a_resumed_epoch_from_the_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fit resumed from a mid-epoch checkpoint gets no on_train_epoch_start for that epoch:
    its "done in" counts from the resume, not from the monotonic clock's zero."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    def fit(callbacks: list[L.Callback], ckpt_path: str | None) -> None:
        trainer = L.Trainer(
            max_epochs=2,
            limit_train_batches=4,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            logger=False,
            enable_model_summary=False,
            accelerator="cpu",
            default_root_dir=tmp_path,
            callbacks=callbacks,
        )
        trainer.fit(BoringModel(), ckpt_path=ckpt_path)

    saver = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=6, save_top_k=-1)
    fit([PlainProgressBar(interval_s=1e9), saver], None)
    [ckpt] = list((tmp_path / "ckpt").glob("*.ckpt"))  # epoch 1, after its batch 2
    assert ckpt.name == "epoch=1-step=6.ckpt"
    capsys.readouterr()
    fit([PlainProgressBar(interval_s=1.5, clock=_Ticks())], str(ckpt))
    lines = capsys.readouterr().out.splitlines()
    [done] = [line for line in lines if " done in " in line]
    assert done.startswith("Epoch 1/1 done in 0:00:0"), done  # a few fake seconds, not 1:14:..
    [progress] = [line for line in lines if line.startswith("Epoch 1/1 train ")]
    # at batch 4 of 4: the 2 batches run since the resume, over the 3 fake seconds since it
    assert progress.startswith("Epoch 1/1 train 4/4 (100%) 0.67 it/s elapsed 0:00:03"), progress


def test_plain_progress_bar_rejects_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        PlainProgressBar(interval_s=0)


def _check_like_table(widths: dict[str, int]) -> Callable[[frozenset[str]], Table]:
    columns = ("figure", "unit", "baseline", "current", "threshold", "status")
    row: dict[str, Any] = {
        "figure": "worker_transform_ms_per_batch",
        "unit": "ms/batch",
        "baseline": "24.075",
        "current": "36.112",
        "threshold": "13.8 %*",
        "status": "regression (p=0.001)",
    }

    def build(dropped: frozenset[str]) -> Table:
        table = Table()
        keep = [c for c in columns if c not in dropped]
        for c in keep:
            if c == "figure":
                table.add_column(c, overflow="fold", min_width=12)
            else:
                table.add_column(c, no_wrap=True)
        table.add_row(*(row[c] for c in keep))
        widths["built"] = widths.get("built", 0) + 1
        return table

    return build


@pytest.mark.parametrize(
    ("width", "dropped"),
    [
        (120, set()),
        (83, set()),  # 14 + 10 + 10 + 9 + 11 + 22 cells and padding, 7 borders
        (80, {"unit"}),
        (70, {"unit", "threshold"}),
        (59, {"unit", "threshold", "baseline"}),
    ],
)
def test_fit_table_drops_columns_in_order_and_never_squeezes(width: int, dropped: set[str]) -> None:
    table = fit_table(_check_like_table({}), ("unit", "threshold", "baseline"), width)
    headers = {str(c.header) for c in table.columns}
    assert not (headers & dropped)
    assert headers >= ({"figure", "unit", "baseline", "current", "threshold", "status"} - dropped)
    out = io.StringIO()
    Console(file=out, width=width).print(table)
    text = out.getvalue()
    assert "regression (p=0.001)" in text
    assert max(len(line) for line in text.splitlines()) <= width

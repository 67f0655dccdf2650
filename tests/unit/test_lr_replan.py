"""Re-planning a restored learning-rate schedule for a longer run (issue 15, point 2)."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.optim.lr_scheduler import OneCycleLR, PolynomialLR

from ocr.lightning_modules.ocr_pl import replan_scheduler


def _restored(factory, total: int, steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    """A scheduler as Lightning leaves it after restoring a run of ``total`` steps stopped at
    ``steps``: fresh objects, then the checkpoint's optimizer and scheduler states loaded."""
    params = [torch.nn.Parameter(torch.zeros(2))]
    opt = torch.optim.AdamW(params, lr=0.01)
    sched = factory(opt, total)
    for _ in range(steps):
        opt.step()
        sched.step()
    opt_state, sched_state = opt.state_dict(), sched.state_dict()
    new_opt = torch.optim.AdamW(params, lr=0.01)
    new_sched = factory(new_opt, 999)
    new_opt.load_state_dict(opt_state)
    new_sched.load_state_dict(sched_state)
    return new_sched


def _uninterrupted_lr(factory, total: int, steps: int) -> float:
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.01)
    sched = factory(opt, total)
    for _ in range(steps):
        opt.step()
        sched.step()
    return opt.param_groups[0]["lr"]


POLY = ("total_iters", lambda opt, n: PolynomialLR(opt, total_iters=n, power=0.9))
ONECYCLE = ("total_steps", lambda opt, n: OneCycleLR(opt, max_lr=0.01, total_steps=n))


@pytest.mark.parametrize(("name", "make"), [POLY, ONECYCLE], ids=["polynomial", "onecycle"])
def test_longer_run_continues_on_the_new_plan(name, make) -> None:
    sched = _restored(make, total=4, steps=4)
    factory = functools.partial(lambda opt, **kw: make(opt, kw[name]))
    old = replan_scheduler(sched, factory, {name: 12})
    assert old == {name: 4}
    assert getattr(sched, name) == 12
    assert sched.last_epoch == 4
    lr = sched.optimizer.param_groups[0]["lr"]
    assert lr == pytest.approx(_uninterrupted_lr(make, 12, 4), rel=1e-9)
    for _ in range(7):  # every added step trains
        sched.optimizer.step()
        sched.step()
        assert sched.optimizer.param_groups[0]["lr"] > 0


def test_restored_polynomial_schedule_is_at_lr_zero_without_replan() -> None:
    """What issue 15 saw: the restored state keeps the old total, so the added steps get 0."""
    sched = _restored(POLY[1], total=4, steps=4)
    sched.optimizer.step()
    sched.step()
    assert sched.optimizer.param_groups[0]["lr"] == 0.0


def test_same_length_is_left_alone() -> None:
    sched = _restored(POLY[1], total=6, steps=3)
    lr = sched.optimizer.param_groups[0]["lr"]
    assert (
        replan_scheduler(
            sched, lambda opt, **kw: POLY[1](opt, kw["total_iters"]), {"total_iters": 6}
        )
        is None
    )
    assert sched.optimizer.param_groups[0]["lr"] == lr

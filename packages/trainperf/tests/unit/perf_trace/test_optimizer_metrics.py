"""The optimizer's own ops, per step and per parameter, for the three AdamW implementations,
and the optimizer finding's gating on the optimizer's share of the step."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from trainperf.analysis.trace import analyze_trace
from trainperf.analysis.trace.trace_metrics import TraceMetrics
from trainperf.analysis.trace.trace_rules import evaluate
from trainperf.core.findings import threshold


def _record(tmp_path: Path, layers: int, **kw: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(layers)])
    opt = torch.optim.AdamW(net.parameters(), **kw)
    x = torch.randn(4, 16)
    path = tmp_path / f"adamw_{layers}_{'_'.join(kw)}.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.profiler.profile(
            schedule=torch.profiler.schedule(wait=0, warmup=1, active=3),
            on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
        ) as prof:
            for _ in range(4):
                loss = net(x).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
    return analyze_trace(path)["metrics"]


@pytest.mark.parametrize(
    ("kw", "impl"),
    [({"foreach": False}, "loop"), ({"foreach": True}, "foreach"), ({"fused": True}, "fused")],
)
def test_ops_per_parameter_by_implementation(tmp_path: Path, kw: dict[str, Any], impl: str) -> None:
    small, large = _record(tmp_path, 2, **kw), _record(tmp_path, 4, **kw)
    assert (small["optimizer_params"], large["optimizer_params"]) == (4, 8)  # weight + bias each
    assert small["optimizer_steps"] == large["optimizer_steps"] == 3
    if impl == "loop":
        # one chain of ops per parameter: the per-parameter figure does not depend on the count
        assert small["optimizer_multi_tensor_ops"] == 0
        assert small["optimizer_ops_per_param"] >= 3
        assert large["optimizer_ops_per_param"] == pytest.approx(small["optimizer_ops_per_param"])
    else:
        # multi-tensor: the same number of multi-tensor ops whatever the number of parameters
        assert small["optimizer_multi_tensor_ops_per_step"] >= 1
        assert (
            large["optimizer_multi_tensor_ops_per_step"]
            == small["optimizer_multi_tensor_ops_per_step"]
        )
        assert large["optimizer_ops_per_param"] < small["optimizer_ops_per_param"]
    if impl == "fused":
        assert small["optimizer_ops_per_step"] == large["optimizer_ops_per_step"] <= 3


def _metrics(pct: float, per_param: float | None = 10.0, per_step: float = 80.0) -> TraceMetrics:
    return TraceMetrics(
        has_gpu=False,
        n_steps=4,
        step_wall_ms=40.0,
        data_wait_pct=0.0,
        optimizer_names=["AdamW"],
        optimizer_ops_per_step=per_step,
        optimizer_params=8 if per_param is not None else None,
        optimizer_ops_per_param=per_param,
        optimizer_pct=pct,
    )


def test_optimizer_advice_only_when_material() -> None:
    share = threshold("optimizer_share_pct")
    fired = [f for f in evaluate(_metrics(share + 10)) if f.id == "optimizer_not_multi_tensor"]
    assert len(fired) == 1
    assert "10.0 ops per parameter, 8 parameters" in fired[0].title
    assert not [f for f in evaluate(_metrics(share / 2)) if f.id == "optimizer_not_multi_tensor"]
    # a multi-tensor figure (below one op per parameter) gets no advice either
    assert not [
        f for f in evaluate(_metrics(share + 10, 0.25)) if f.id == "optimizer_not_multi_tensor"
    ]
    # no parameter count (no backward in the trace): ops per step decide
    assert [f for f in evaluate(_metrics(50.0, None)) if f.id == "optimizer_not_multi_tensor"]

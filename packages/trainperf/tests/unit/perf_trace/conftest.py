"""A real CPU trace recorded with torch.profiler once per session, with its key_averages."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def recorded_cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """(trace path, {key: (count, self_cpu_time_total µs)}) of a tiny CNN trained for 3 profiled
    steps under a schedule, with shapes and memory."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("cpu_trace") / "cpu.pt.trace.json"
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 14 * 14, 4),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(32, 3, 16, 16), torch.randint(0, 4, (32,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    averages: dict[str, Any] = {}

    def ready(prof: Any) -> None:
        # the schedule clears events after the cycle: export and average inside the handler
        prof.export_chrome_trace(str(out))
        for k in prof.key_averages():
            averages[k.key] = (k.count, k.self_cpu_time_total)

    with warnings.catch_warnings():
        # "Profiler clears events at the end of each cycle": expected, the handler ran first
        warnings.simplefilter("ignore", UserWarning)
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=1, active=3),
            record_shapes=True,
            profile_memory=True,
            on_trace_ready=ready,
        ) as prof:
            for i, (x, y) in enumerate(loader):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
                if i >= 5:
                    break
    assert out.exists(), "profiler did not write its trace"
    assert averages, "profiler produced no key_averages"
    return out, averages

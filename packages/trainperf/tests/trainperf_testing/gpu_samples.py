"""GPU phase times, a run config and NVML-like samples for the GPU verdict's tests."""

from __future__ import annotations

from typing import Any

from trainperf_testing.runs import T0

# Per batch (100 batches): the host runs ahead through forward / backward, blocks in the
# optimizer for the backward kernels (30 ms of its 40), then loops 10 ms with the GPU idle.
HOST = {"data_wait": 0.5, "transfer": 0.4, "forward": 1.0, "backward": 1.0, "optimizer": 4.0}


GPU = {"data_wait": 0.5, "transfer": 0.5, "forward": 1.9, "backward": 3.0, "optimizer": 1.0}


CONFIG: dict[str, Any] = {
    "data": {"batch_size": 16, "num_workers": 8, "pin_memory": None},
    "model": {
        "optimizer": {"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 0.001},
        "channels_last": False,
    },
    "trainer": {"precision": "16-mixed", "benchmark": None},
}


def _samples(util: float, n: int = 6) -> list[dict[str, Any]]:
    return [
        {
            "t": T0 + i,
            "phase": "train",
            "epoch": 0,
            "step": i,
            "rank": 0,
            "metrics": {"resources/gpu0_util_percent": util, "resources/system_cpu_percent": 20.0},
        }
        for i in range(n)
    ]

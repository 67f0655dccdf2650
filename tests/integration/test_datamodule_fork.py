"""Regression: DataLoader workers forked after the main process used OpenCV's thread pool.

A forked child inherits the pool's locks mid-state and deadlocks on its first OpenCV call (our
``worker_init`` calls ``cv2.setNumThreads(1)``), so non-persistent workers hung at the first epoch
after a validation postprocess. Run in a fresh interpreter so OpenCV's pool state is the script's
own, with a timeout standing in for the hang.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys
    import cv2
    import numpy as np
    from ocr.data.datamodule import ReceiptDataModule
    from ocr.data.synth import generate_dataset

    root = sys.argv[1]
    generate_dataset(root, splits={"train": 2, "val": 4}, seed=1)

    def use_opencv_pool():
        # What a validation postprocess does in the main process: multi-threaded OpenCV.
        cv2.setNumThreads(4)
        img = np.random.rand(1500, 1500).astype(np.float32)
        for _ in range(3):
            cv2.resize(img, (2500, 2500))
            cv2.GaussianBlur(img, (9, 9), 0)

    use_opencv_pool()
    dm = ReceiptDataModule(dataset_dir=root, canvas_size=128, batch_size=2, num_workers=1,
                           persistent_workers=False)
    dm.setup("fit")
    loader = dm.val_dataloader()
    for epoch in range(2):  # non-persistent: new workers forked each epoch
        batches = sum(1 for _ in loader)
        assert batches == 2, batches
        cv2.GaussianBlur(np.ones((512, 512), np.float32), (9, 9), 0)
    print("done", cv2.getNumThreads())
    """
)


def test_workers_forked_after_opencv_pool_use_do_not_hang(tmp_path: Path) -> None:
    script = tmp_path / "fork_after_pool.py"
    script.write_text(SCRIPT)
    try:
        proc = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "data")],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("DataLoader workers deadlocked after the main process used OpenCV's pool")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The main process keeps OpenCV single-threaded from the first loader with workers on.
    assert proc.stdout.split()[-2:] == ["done", "1"]

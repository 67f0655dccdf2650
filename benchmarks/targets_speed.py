"""DB target generation: the reference algorithm against the production (compiled) one.

Reference: ``tests/reference_targets_numpy.py``, the MhLiao/DB-style numpy implementation the
original project used (per polygon and edge a full ``(h, w)`` distance array). Fast:
``ocr.data.targets.make_db_targets``. Both return fresh maps for the same synthetic receipts
(rotated word boxes laid out in text lines, some perspective-skewed) and, when
``../shared/fixtures/receipts`` is present, the real receipts at 640 px; every case is first
checked to give identical maps. Repetitions interleave all cases and both implementations
(alternating which goes first), because the machine is shared and noisy: only figures from one
run are compared. Also printed: the first call in a fresh process (numba import plus compilation, or
loading the compiled kernels from numba's disk cache).

Prints figures only; never passes or fails on a time.

    python benchmarks/targets_speed.py [--reps 15] [--seed 0]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # tests/ is not an installed package

from ocr.data.targets import make_db_targets, warm_up  # noqa: E402
from tests.reference_targets_numpy import reference_numpy_db_targets  # noqa: E402

MAPS = ("prob_map", "prob_mask", "thresh_map", "thresh_mask")
CASES = ((640, 50), (640, 100), (640, 200), (1024, 100), (1024, 200))

FIRST_CALL = """
import json, time
t0 = time.perf_counter()
import numpy as np
from ocr.data.targets import make_db_targets
t1 = time.perf_counter()
box = np.array([[10.0, 10.0], [60.0, 12.0], [59.0, 30.0], [9.0, 28.0]])
make_db_targets([box], 64, 80)
t2 = time.perf_counter()
make_db_targets([box], 64, 80)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "first": t2 - t1, "second": t3 - t2}))
"""


def real_receipts(canvas: int) -> dict[str, list[np.ndarray]]:
    """The real receipts of ``../shared/fixtures/receipts`` scaled to the canvas, if present."""
    root = Path(os.environ.get("OCR_SHARED_FIXTURES", REPO_ROOT.parent / "shared" / "fixtures"))
    receipts = root / "receipts"
    if not (receipts / "annotations.json").exists():
        return {}
    from PIL import Image

    annotations = json.loads((receipts / "annotations.json").read_text())
    result = {}
    for name, entry in annotations["images"].items():
        with Image.open(receipts / "images" / name) as image:
            scale = canvas / max(image.size)
        result[name] = [
            np.asarray(word["points"], np.float64) * scale for word in entry["words"].values()
        ]
    return result


def receipt_words(rng: np.random.Generator, canvas: int, words: int) -> list[np.ndarray]:
    """``words`` word quadrilaterals (float32 ``(4, 2)``) in text lines on a square canvas.

    Sizes follow the real receipts at 640 px (median word about 35 x 13 px), scaled with the
    canvas; the page is slightly rotated and one word in ten is perspective-skewed.
    """
    scale = canvas / 640
    angle = rng.normal(0.0, 0.05)
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    line_height = 20.0 * scale
    polygons: list[np.ndarray] = []
    y = rng.uniform(5, 15) * scale
    while len(polygons) < words:
        x = rng.uniform(5, 40) * scale
        height = rng.uniform(10, 22) * scale
        while len(polygons) < words:
            width = float(np.clip(rng.lognormal(math.log(40), 0.6), 8, 220)) * scale
            if x + width > canvas - 5 * scale:
                break
            box = np.array([[x, y], [x + width, y], [x + width, y + height], [x, y + height]])
            if rng.random() < 0.1:
                box += rng.uniform(-2, 2, size=(4, 2)) * scale
            centre = np.array([canvas / 2, canvas / 2])
            polygons.append(((box - centre) @ rot.T + centre).astype(np.float32))
            x += width + rng.uniform(6, 18) * scale
        y += line_height + rng.uniform(0, 6) * scale
        if y > canvas - line_height:  # page full: wrap to the top, overlapping earlier lines
            y = rng.uniform(5, 15) * scale
    return polygons


def reference(polygons: list[np.ndarray], size: int) -> dict[str, np.ndarray]:
    return reference_numpy_db_targets(polygons, size, size)


def fast(polygons: list[np.ndarray], size: int) -> dict[str, np.ndarray]:
    targets = make_db_targets(polygons, size, size)
    return {name: getattr(targets, name) for name in MAPS}


IMPLS: dict[str, Callable[[list[np.ndarray], int], dict[str, np.ndarray]]] = {
    "reference": reference,
    "fast": fast,
}


def first_call_times() -> list[tuple[str, dict[str, float]]]:
    """Fresh interpreters: an empty numba cache (compiles), then the same cache (loads)."""
    results = []
    with tempfile.TemporaryDirectory() as cache_dir:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
        for label in ("empty numba cache (compile)", "warm numba cache (load)"):
            proc = subprocess.run(
                [sys.executable, "-c", FIRST_CALL],
                env=env,
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            results.append((label, json.loads(proc.stdout.strip().splitlines()[-1])))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="interleaved repetitions")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic receipts")
    args = parser.parse_args()

    print("First call in a fresh process (import of ocr.data.targets, then make_db_targets):")
    for label, t in first_call_times():
        print(
            f"  {label:30} import {t['import'] * 1e3:7.1f} ms   first call "
            f"{t['first'] * 1e3:7.1f} ms   second call {t['second'] * 1e3:6.2f} ms"
        )
    start = time.perf_counter()
    warm_up()
    print(
        f"  warm_up() in this process (cache state as found): {time.perf_counter() - start:.3f} s"
    )

    rng = np.random.default_rng(args.seed)
    # (label, canvas side, polygons): synthetic receipts, then the real ones if available.
    inputs = [
        (f"synthetic, {words} words", size, receipt_words(rng, size, words))
        for size, words in CASES
    ]
    inputs += [
        (f"real {name}, {len(polygons)} words", 640, polygons)
        for name, polygons in real_receipts(640).items()
    ]
    for label, size, polygons in inputs:
        want, got = reference(polygons, size), fast(polygons, size)
        differing = sum(int(np.count_nonzero(want[m] != got[m])) for m in MAPS)
        if differing:
            raise SystemExit(f"{size}x{size}, {label}: {differing} pixels differ")
        for impl in IMPLS.values():  # warm-up: first-touch allocations, caches
            impl(polygons, size)

    times: dict[tuple[int, str], list[float]] = {
        (k, name): [] for k in range(len(inputs)) for name in IMPLS
    }
    gc.collect()
    for rep in range(args.reps):
        order = list(IMPLS) if rep % 2 == 0 else list(reversed(IMPLS))
        for k, (_, size, polygons) in enumerate(inputs):
            for name in order:
                start_ns = time.perf_counter_ns()
                IMPLS[name](polygons, size)
                times[(k, name)].append((time.perf_counter_ns() - start_ns) / 1e6)

    print(f"\nms per image, {args.reps} interleaved repetitions (all maps identical):")
    print(
        f"{'canvas':>9}  {'input':26} | {'reference':>9} {'fast':>6} {'ratio':>6} (median)"
        f" | {'reference':>9} {'fast':>6} {'ratio':>6} (min)"
    )
    for k, (label, size, _) in enumerate(inputs):
        ref, new = times[(k, "reference")], times[(k, "fast")]
        med_ref, med_new = statistics.median(ref), statistics.median(new)
        min_ref, min_new = min(ref), min(new)
        print(
            f"{size:>4}x{size:<4}  {label:26} | {med_ref:9.2f} {med_new:6.2f} "
            f"{med_ref / med_new:5.1f}x          | {min_ref:9.2f} {min_new:6.2f} "
            f"{min_ref / min_new:5.1f}x"
        )


if __name__ == "__main__":
    main()

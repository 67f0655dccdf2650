"""Compact batches (``ocr.data.compact``): what the workers send, expanded by the
LightningModule's ``on_after_batch_transfer`` (the "device" is the CPU here), is bit for bit the
float32 batch of the float32 pipeline, in a fraction of the bytes and tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from trainperf.probe.worker import tensor_bytes

from ocr.data.collate import DBCollateFN
from ocr.data.compact import expand_batch, sample_bytes
from ocr.data.dataset import ReceiptDataset
from ocr.data.synth import generate_dataset
from ocr.data.transforms import ReceiptTransform
from ocr.lightning_modules.ocr_pl import OCRLightningModule
from ocr.models.dbnet import DBNet

FLOAT_KEYS = ("images", "prob_maps", "prob_masks", "thresh_maps", "thresh_masks")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synthetic")
    generate_dataset(root, splits={"val": 3}, seed=5)
    return root


def _dataset(root: Path, *, compact: bool, train: bool, canvas: int = 256) -> ReceiptDataset:
    transform = ReceiptTransform(canvas_size=canvas, train=train, compact=compact)
    return ReceiptDataset(root / "images" / "val", root / "jsons" / "val.json", transform)


def _batch(root: Path, *, compact: bool, train: bool, canvas: int = 256, **kw: object) -> dict:
    dataset = _dataset(root, compact=compact, train=train, canvas=canvas)
    torch.manual_seed(3)  # the same augmentation for both pipelines
    return DBCollateFN(**kw)([dataset[i] for i in range(len(dataset))])  # type: ignore[arg-type]


def _module(channels_last: bool = False) -> OCRLightningModule:
    net = DBNet({"layers": [1, 1, 1, 1], "widths": [8, 16, 32, 64]}, neck_channels=16)
    return OCRLightningModule(net, channels_last=channels_last)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))
    )


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
def test_expanded_batch_is_bit_equal_to_the_float32_batch(
    synthetic: Path, train: bool, channels_last: bool
) -> None:
    old = _batch(synthetic, compact=False, train=train)
    compact = _batch(synthetic, compact=True, train=train)
    module = _module(channels_last)
    assert module.on_after_batch_transfer(old, 0) is old  # a float32 batch passes as it is
    new = module.on_after_batch_transfer(compact, 0)
    for key in FLOAT_KEYS:
        assert _same_bits(new[key], old[key]), key
    assert new["images"].is_contiguous(
        memory_format=torch.channels_last if channels_last else torch.contiguous_format
    )
    assert "targets" not in new
    assert "normalization" not in new
    assert np.array_equal(new["inverse_matrices"], old["inverse_matrices"].numpy())
    assert new["filenames"] == old["filenames"]
    assert new["prob_maps"].sum() > 0
    assert (new["thresh_masks"] == 1).any()


def test_validation_and_test_steps_read_the_expanded_batch(synthetic: Path) -> None:
    """The module's own steps run on expanded batches: validation (loss, metric) and test
    (predictions mapped back with the host-side inverse matrices)."""
    module = _module()
    batch = module.on_after_batch_transfer(_batch(synthetic, compact=True, train=False), 0)
    pred = module(batch["images"])
    loss, _ = module.loss_fn(
        dict(pred, binary_map=module.net.binarize(pred["prob_map"], pred["thresh_map"])), batch
    )
    assert torch.isfinite(loss)
    inference = _batch(synthetic, compact=True, train=False, inference_mode=True)
    assert set(inference) >= {"images", "normalization", "inverse_matrices"}
    assert "targets" not in inference
    expanded = module.on_after_batch_transfer(inference, 0)
    assert expanded["images"].dtype == torch.float32
    assert list(module.predict_step(expanded, 0)[0]) == ["filename", "polygons", "scores"]


def test_a_640_px_batch_is_3_5x_smaller_in_2_tensors(synthetic: Path) -> None:
    old = _batch(synthetic, compact=False, train=True, canvas=640)
    new = _batch(synthetic, compact=True, train=True, canvas=640)
    old_bytes, old_tensors = tensor_bytes(old)
    new_bytes, new_tensors = tensor_bytes(new)
    assert (old_tensors, new_tensors) == (6, 2)
    assert old_bytes / new_bytes >= 2.5
    # per sample: 3 image bytes + 1 flag byte + 4 threshold bytes per pixel, vs 3 * 4 + 4 * 4
    assert new_bytes == 3 * (640 * 640 * 3 + sample_bytes(640, 640))
    assert old_bytes == 3 * 640 * 640 * 28 + 3 * 9 * 8  # + the float64 inverse matrices


def test_compact_batch_is_built_in_shared_memory_by_a_worker(synthetic: Path) -> None:
    dataset = _dataset(synthetic, compact=True, train=False)
    loader = DataLoader(dataset, batch_size=3, num_workers=1, collate_fn=DBCollateFN())
    (batch,) = list(loader)
    assert batch["images"].dtype == torch.uint8
    assert batch["images"].is_shared()
    assert batch["targets"].is_shared()
    assert _same_bits(
        expand_batch(batch)["thresh_maps"],
        _batch(synthetic, compact=False, train=False)["thresh_maps"],
    )


def test_padding_of_an_odd_canvas_is_zeroed_and_maps_still_match() -> None:
    """H * W not a multiple of 4: the flag plane is padded (zeros, never stale bytes)."""
    polygons = [np.array([[2, 2], [20, 2], [20, 9], [2, 9]], np.float32)]
    item = {
        "polygons": polygons,
        "word_ids": ["0001"],
        "filename": "odd.jpg",
        "inverse_matrix": np.eye(3),
        "raw_size": (23, 13),
    }
    old = DBCollateFN()([{**item, "image": torch.zeros(3, 13, 23)}])
    new = DBCollateFN()([{**item, "image": torch.zeros(13, 23, 3, dtype=torch.uint8)}])
    pad = new["targets"][0, 13 * 23 : sample_bytes(13, 23) - 4 * 13 * 23]
    assert len(pad) == 1
    assert int(pad.sum()) == 0
    expanded = expand_batch(new)
    for key in FLOAT_KEYS[1:]:
        assert _same_bits(expanded[key], old[key]), key


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda b: b.pop("normalization"), "must carry its 'normalization'"),
        (lambda b: b.update(targets=b["targets"][:, :-4]), r"compact targets must be uint8 \(3, "),
        (lambda b: b.update(images=b["images"][..., :2]), r"uint8 \(B, H, W, 3\)"),
    ],
)
def test_malformed_compact_batches_are_named(synthetic: Path, change, match) -> None:  # type: ignore[no-untyped-def]
    batch = _batch(synthetic, compact=True, train=False)
    change(batch)
    with pytest.raises(ValueError, match=match):
        expand_batch(batch)


def test_a_mixed_batch_is_refused() -> None:
    base = {
        "polygons": [],
        "word_ids": [],
        "inverse_matrix": np.eye(3),
        "raw_size": (32, 32),
    }
    items = [
        {**base, "filename": "a.jpg", "image": torch.zeros(3, 32, 32)},
        {**base, "filename": "b.jpg", "image": torch.zeros(32, 32, 3, dtype=torch.uint8)},
    ]
    with pytest.raises(ValueError, match=r"same size and dtype.*a\.jpg.*b\.jpg"):
        DBCollateFN()(items)

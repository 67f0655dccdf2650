"""DBCollateFN: batch layout, target maps, inference mode and input validation."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import ocr.data.collate as collate_module
from ocr.data.collate import DBCollateFN
from ocr.data.targets import make_db_targets

SIZE = 48
MAP_KEYS = ("prob_maps", "prob_masks", "thresh_maps", "thresh_masks")
TARGET_FIELDS = ("prob_map", "prob_mask", "thresh_map", "thresh_mask")


def make_item(index: int, size: int = SIZE, words: int = 3) -> dict:
    rng = np.random.default_rng(index)
    polygons = []
    for _ in range(words):
        x, y = rng.uniform(0, size - 20), rng.uniform(0, size - 10)
        w, h = rng.uniform(8, 20), rng.uniform(4, 10)
        polygons.append(np.array([[x, y], [x + w, y], [x + w, y + h], [x, y + h]], np.float32))
    inverse = np.diag([2.0, 2.0, 1.0])
    return {
        "image": torch.rand(3, size, size),
        "polygons": polygons,
        "word_ids": [f"{k:04d}" for k in range(words)],
        "filename": f"img_{index}.jpg",
        "inverse_matrix": inverse,
        "raw_size": (size * 2, size * 2),
    }


class _Items(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> dict:
        return make_item(index)


def test_batch_layout_and_maps():
    items = [make_item(0), make_item(1, words=0), make_item(2, words=5)]
    batch = DBCollateFN()(items)
    assert set(batch) == {
        "images",
        "polygons",
        "word_ids",
        "filenames",
        "inverse_matrices",
        "raw_sizes",
        *MAP_KEYS,
    }
    assert batch["images"].shape == (3, 3, SIZE, SIZE)
    assert batch["images"].dtype == torch.float32
    assert torch.equal(batch["images"][2], items[2]["image"])
    for key in MAP_KEYS:
        assert batch[key].shape == (3, SIZE, SIZE), key
        assert batch[key].dtype == torch.float32, key
        assert batch[key].is_contiguous()
    assert batch["inverse_matrices"].shape == (3, 3, 3)
    assert batch["inverse_matrices"].dtype == torch.float64
    assert batch["filenames"] == ["img_0.jpg", "img_1.jpg", "img_2.jpg"]
    assert batch["raw_sizes"] == [(96, 96)] * 3
    assert batch["word_ids"][2] == ["0000", "0001", "0002", "0003", "0004"]
    assert batch["polygons"][0] is items[0]["polygons"]  # unchanged, for the metric
    for b, item in enumerate(items):
        want = make_db_targets(item["polygons"], SIZE, SIZE)
        for key, field in zip(MAP_KEYS, TARGET_FIELDS, strict=True):
            assert np.array_equal(batch[key][b].numpy(), getattr(want, field)), (b, key)
    assert batch["prob_maps"][0].sum() > 0
    assert batch["prob_maps"][1].sum() == 0
    assert (batch["prob_masks"][1] == 1).all()
    assert (batch["thresh_maps"][1] == np.float32(0.3)).all()


def test_parameters_reach_the_targets():
    item = make_item(5)
    batch = DBCollateFN(shrink_ratio=0.2, thresh_min=0.1, thresh_max=0.9)([item])
    want = make_db_targets(
        item["polygons"], SIZE, SIZE, shrink_ratio=0.2, thresh_min=0.1, thresh_max=0.9
    )
    assert np.array_equal(batch["thresh_maps"][0].numpy(), want.thresh_map)
    assert np.array_equal(batch["prob_maps"][0].numpy(), want.prob_map)


def test_inference_mode_builds_no_maps(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("target generation must not run in inference mode")

    monkeypatch.setattr(collate_module, "make_db_targets", fail)
    batch = DBCollateFN(inference_mode=True)([make_item(0), make_item(1)])
    assert not set(MAP_KEYS) & set(batch)
    assert batch["images"].shape == (2, 3, SIZE, SIZE)
    assert batch["filenames"] == [
        "img_0.jpg",
        "img_1.jpg",
    ]


def test_mismatched_image_sizes_name_the_files():
    with pytest.raises(ValueError, match=r"same size.*img_0\.jpg.*img_1\.jpg"):
        DBCollateFN()([make_item(0), make_item(1, size=64)])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda item: item.pop("raw_size"), r"img_0\.jpg: .*missing \['raw_size'\]"),
        (lambda item: item.update(extra=1), r"unexpected \['extra'\]"),
        (lambda item: item.update(image=torch.zeros(SIZE, SIZE)), "'image' must be a float32"),
        (
            lambda item: item.update(image=torch.zeros(3, SIZE, SIZE, dtype=torch.float64)),
            "'image'",
        ),
        (lambda item: item.update(word_ids=["a"]), "3 polygons but 1 word_ids"),
        (lambda item: item.update(inverse_matrix=np.eye(2)), "'inverse_matrix'"),
        (lambda item: item.update(polygons=[np.zeros((4, 3))] * 3), r"img_0\.jpg: polygon 0"),
    ],
)
def test_bad_items_raise_clear_errors(change, match):
    item = make_item(0)
    change(item)
    with pytest.raises(ValueError, match=match):
        DBCollateFN()([item])


def test_empty_batch_raises():
    with pytest.raises(ValueError, match="empty batch"):
        DBCollateFN()([])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shrink_ratio": 1.2}, "shrink_ratio"),
        ({"shrink_ratio": 0}, "shrink_ratio"),
        ({"thresh_min": 0.8}, "thresh_min"),
        ({"thresh_max": 2.0}, "thresh_max"),
    ],
)
def test_argument_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DBCollateFN(**kwargs)


def test_picklable_and_works_in_a_worker():
    fn = pickle.loads(pickle.dumps(DBCollateFN(shrink_ratio=0.3)))
    assert fn.shrink_ratio == 0.3
    assert not fn.inference_mode
    loader = DataLoader(_Items(), batch_size=2, num_workers=1, collate_fn=fn)
    batches = list(loader)
    assert len(batches) == 2
    direct = DBCollateFN(shrink_ratio=0.3)([make_item(2), make_item(3)])
    assert torch.equal(batches[1]["prob_maps"], direct["prob_maps"])
    assert torch.equal(batches[1]["thresh_maps"], direct["thresh_maps"])


class _ReportsSharing:
    """Collates with DBCollateFN, then says (inside the worker) which tensors it built in shared
    memory: the batch must not be built in the worker's heap and copied when it is sent."""

    def __init__(self) -> None:
        self.fn = DBCollateFN()

    def __call__(self, items: list[dict]) -> dict:
        batch = self.fn(items)
        batch["built_shared"] = sorted(k for k in ("images", *MAP_KEYS) if batch[k].is_shared())
        return batch


def test_worker_builds_the_batch_in_shared_memory():
    loader = DataLoader(_Items(), batch_size=2, num_workers=1, collate_fn=_ReportsSharing())
    batches = list(loader)
    assert [b["built_shared"] for b in batches] == [sorted(("images", *MAP_KEYS))] * 2
    direct = DBCollateFN()([make_item(2), make_item(3)])
    assert all(not direct[k].is_shared() for k in ("images", *MAP_KEYS))  # main process: heap
    for key in MAP_KEYS:  # (images are torch.rand: not comparable)
        assert torch.equal(batches[1][key], direct[key]), key
    assert batches[1]["images"].shape == direct["images"].shape

"""The speed knobs ``trainperf try`` can measure on our app: ``torch_threads`` and
``model.channels_last``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from ocr.lightning_modules.ocr_pl import OCRLightningModule
from ocr.models.dbnet import DBNet
from ocr.runtime import apply_torch_threads

SMALL = {"layers": [1, 1, 1, 1], "widths": [8, 16, 32, 64]}


@pytest.fixture
def restore_threads() -> Iterator[int]:
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_torch_threads_sets_the_intra_op_threads(restore_threads: int) -> None:
    apply_torch_threads(1)
    assert torch.get_num_threads() == 1
    apply_torch_threads(None)  # null: left as it is
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True])
def test_torch_threads_rejects_what_is_no_count(bad: object, restore_threads: int) -> None:
    with pytest.raises(ValueError, match="torch_threads"):
        apply_torch_threads(bad)
    assert torch.get_num_threads() == restore_threads


def test_channels_last_gives_the_same_maps_in_nhwc() -> None:
    torch.manual_seed(0)
    plain = OCRLightningModule(DBNet(SMALL, neck_channels=16)).eval()
    nhwc = OCRLightningModule(DBNet(SMALL, neck_channels=16), channels_last=True).eval()
    nhwc.load_state_dict(plain.state_dict())
    nhwc.setup("fit")
    conv = next(m for m in nhwc.net.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert not conv.weight.is_contiguous()
    images = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        a, b = plain(images), nhwc(images)
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)
    # the checkpoint is the same either way: same keys, same values
    assert plain.state_dict().keys() == nhwc.state_dict().keys()

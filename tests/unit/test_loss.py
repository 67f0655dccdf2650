"""DBLoss: hand-computed small cases, the no-positive batch, autocast, input checks."""

from __future__ import annotations

import math

import pytest
import torch

from ocr.models.dbnet import DBNet
from ocr.models.loss import DBLoss, _sum_top_k, _sum_top_k_sync_free


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def _bce(logit: float, target: float) -> float:
    # BCE-with-logits: -log(sigmoid(x)) for 1, -log(1 - sigmoid(x)) for 0.
    return _softplus(-logit) if target == 1 else _softplus(logit)


def _pred(
    logits: list[list[float]], binary: list[list[float]] | None = None, thresh: float = 0.5
) -> dict[str, torch.Tensor]:
    lg = torch.tensor(logits, dtype=torch.float32)[None, None]
    return {
        "prob_logits": lg,
        "binary_map": torch.sigmoid(lg) if binary is None else torch.tensor(binary)[None, None],
        "thresh_map": torch.full_like(lg, thresh),
    }


def _batch(gt: list[list[float]], mask: list[list[float]] | None = None) -> dict[str, torch.Tensor]:
    g = torch.tensor(gt, dtype=torch.float32)[None]
    return {
        "prob_maps": g,
        "prob_masks": torch.ones_like(g) if mask is None else torch.tensor(mask)[None],
        "thresh_maps": torch.full_like(g, 0.5),
        "thresh_masks": torch.ones_like(g),
    }


def test_bce_keeps_positives_and_ohem_ratio_hardest_negatives() -> None:
    # 1 positive, 6 negatives in the mask, 1 masked-out pixel with a huge (ignored) loss.
    logits = [[2.0, 3.0, 1.0, -1.0], [0.5, -2.0, -3.0, 9.0]]
    gt = [[1, 0, 0, 0], [0, 0, 0, 0]]
    mask = [[1, 1, 1, 1], [1, 1, 1, 0]]
    loss = DBLoss(ohem_ratio=3.0, eps=1e-6).balanced_bce(
        torch.tensor(logits), torch.tensor(gt, dtype=torch.float32), torch.tensor(mask).float()
    )
    # k = min(6, 3 * 1) = 3 hardest negatives: logits 3.0, 1.0, 0.5.
    expected = (_bce(2.0, 1) + _bce(3.0, 0) + _bce(1.0, 0) + _bce(0.5, 0)) / (1 + 3 + 1e-6)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_bce_takes_all_negatives_when_fewer_than_ratio() -> None:
    logits = [[2.0, -1.0, 0.0, 1.0]]
    gt = [[1, 1, 0, 0]]
    # k = min(#neg = 2, 3 * 2 = 6) = 2.
    loss = DBLoss().balanced_bce(torch.tensor(logits), torch.tensor(gt).float(), torch.ones(1, 4))
    expected = (_bce(2.0, 1) + _bce(-1.0, 1) + _bce(0.0, 0) + _bce(1.0, 0)) / (4 + 1e-6)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_ohem_is_over_the_whole_batch() -> None:
    # Image 0 has the positive, image 1 the hardest negatives: the batch shares one budget.
    logits = torch.tensor([[[0.0, -5.0, -5.0]], [[4.0, 3.0, 2.0]]])
    gt = torch.tensor([[[1.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]]])
    loss = DBLoss(ohem_ratio=2.0, eps=1e-9).balanced_bce(logits, gt, torch.ones_like(gt))
    expected = (_bce(0.0, 1) + _bce(4.0, 0) + _bce(3.0, 0)) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_sync_free_top_k_matches_topk() -> None:
    torch.manual_seed(0)
    scores = torch.rand(1000)
    scores[::7] = -1.0  # non-negatives
    for k in (0, 1, 17, 500, 857):
        expected = scores.topk(k).values.sum()
        kt = torch.tensor(float(k))
        torch.testing.assert_close(_sum_top_k(scores, kt), expected)
        torch.testing.assert_close(_sum_top_k_sync_free(scores, kt), expected)


def test_no_positive_batch_is_finite_with_gradient_on_hardest_negatives() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 1, 16, 16, requires_grad=True)
    pred = {
        "prob_logits": logits,
        "binary_map": torch.sigmoid(logits),
        "thresh_map": torch.full_like(logits, 0.5),
    }
    batch = {
        "prob_maps": torch.zeros(2, 16, 16),
        "prob_masks": torch.ones(2, 16, 16),
        "thresh_maps": torch.full((2, 16, 16), 0.5),
        "thresh_masks": torch.ones(2, 16, 16),
    }
    loss_fn = DBLoss(no_positive_negatives=100)
    total, parts = loss_fn(pred, batch)
    assert torch.isfinite(total)
    top = torch.nn.functional.softplus(logits.detach().flatten()).topk(100).values
    assert parts["loss_prob"].item() == pytest.approx(top.mean().item(), rel=1e-5)
    total.backward()
    assert logits.grad is not None
    # Only BCE has a gradient here (dice of an empty target has none): it reaches exactly the
    # 100 hardest negatives, each pushed towards background.
    assert torch.count_nonzero(logits.grad) == 100
    chosen = logits.detach().flatten().topk(100).indices
    assert torch.all(logits.grad.flatten()[chosen] > 0)


def test_all_masked_out_is_zero_not_nan() -> None:
    pred = _pred([[1.0, -1.0]])
    batch = _batch([[1, 0]], mask=[[0, 0]])
    batch["thresh_masks"] = torch.zeros(1, 1, 2)
    total, parts = DBLoss()(pred, batch)
    assert torch.isfinite(total)
    assert parts["loss_prob"].item() == 0.0
    assert parts["loss_thresh"].item() == 0.0


def test_l1_counts_only_pixels_inside_thresh_mask() -> None:
    pred = _pred([[0.0, 0.0, 0.0, 0.0]])
    pred["thresh_map"] = torch.tensor([0.3, 0.7, 0.9, 0.1])[None, None, None]
    batch = _batch([[1, 1, 0, 0]])
    batch["thresh_maps"] = torch.tensor([[[0.3, 0.5, 0.2, 0.6]]])
    batch["thresh_masks"] = torch.tensor([[[1.0, 1.0, 0.0, 0.0]]])
    _, parts = DBLoss(eps=1e-6)(pred, batch)
    assert parts["loss_thresh"].item() == pytest.approx((0.0 + 0.2) / (2 + 1e-6), rel=1e-5)


def test_dice_inside_prob_mask() -> None:
    pred = _pred([[0.0, 0.0, 0.0, 0.0, 0.0]], binary=[[1.0, 0.5, 0.25, 0.0, 1.0]])
    batch = _batch([[1, 1, 0, 0, 1]], mask=[[1, 1, 1, 1, 0]])
    _, parts = DBLoss(eps=1e-6)(pred, batch)
    # intersection 1.5; |B| = 1.75, |G| = 2 (last pixel masked out).
    assert parts["loss_binary"].item() == pytest.approx(1 - 3.0 / (3.75 + 1e-6), rel=1e-6)


def test_total_is_weighted_sum_of_detached_parts() -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, 1, 8, 8, requires_grad=True)
    pred = {
        "prob_logits": logits,
        "binary_map": torch.sigmoid(logits),
        "thresh_map": torch.sigmoid(logits * 0.5),
    }
    gt = (torch.rand(1, 8, 8) > 0.7).float()
    batch = {
        "prob_maps": gt,
        "prob_masks": torch.ones_like(gt),
        "thresh_maps": torch.rand(1, 8, 8),
        "thresh_masks": (torch.rand(1, 8, 8) > 0.5).float(),
    }
    total, parts = DBLoss(alpha=2.0, beta=5.0)(pred, batch)
    assert set(parts) == {"loss_prob", "loss_binary", "loss_thresh"}
    assert all(not v.requires_grad for v in parts.values())
    expected = parts["loss_prob"] + 2.0 * parts["loss_binary"] + 5.0 * parts["loss_thresh"]
    torch.testing.assert_close(total.detach(), expected)
    assert total.requires_grad


def test_autocast_cpu_bfloat16() -> None:
    torch.manual_seed(0)
    net = DBNet({"layers": [1, 1, 1, 1], "widths": [8, 8, 16, 16]}, neck_channels=16).train()
    gt = torch.zeros(2, 64, 64)
    gt[:, 10:20, 10:40] = 1
    batch = {
        "prob_maps": gt,
        "prob_masks": torch.ones_like(gt),
        "thresh_maps": torch.full_like(gt, 0.3),
        "thresh_masks": torch.ones_like(gt),
    }
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pred = net(torch.randn(2, 3, 64, 64))
        # Predictions in low precision must be handled too (e.g. from another model).
        low = {k: v.to(torch.bfloat16) for k, v in pred.items()}
        total, parts = DBLoss()(pred, batch)
        total_low, _ = DBLoss()(low, batch)
    assert total.dtype == torch.float32
    assert total_low.dtype == torch.float32
    assert torch.isfinite(total)
    assert all(torch.isfinite(v) for v in parts.values())
    total.backward()
    grad = net.backbone.conv1.weight.grad
    assert grad is not None
    assert torch.isfinite(grad).all()
    assert grad.abs().sum() > 0


def test_missing_binary_map_points_to_binarize() -> None:
    pred = _pred([[0.0]])
    del pred["binary_map"]
    with pytest.raises(KeyError, match=r"DBNet\.binarize"):
        DBLoss()(pred, _batch([[1]]))


def test_missing_target_and_shape_mismatch() -> None:
    batch = _batch([[1, 0]])
    del batch["thresh_masks"]
    with pytest.raises(KeyError, match="thresh_masks"):
        DBLoss()(_pred([[0.0, 0.0]]), batch)
    with pytest.raises(ValueError, match=r"batch\['prob_maps'\] has shape \(1, 1, 3\)"):
        DBLoss()(_pred([[0.0, 0.0]]), _batch([[1, 0, 0]]))
    pred = _pred([[0.0, 0.0]])
    pred["prob_logits"] = pred["prob_logits"][:, 0]
    with pytest.raises(ValueError, match="'prob_logits' must be \\(B, 1, H, W\\)"):
        DBLoss()(pred, _batch([[1, 0]]))


@pytest.mark.parametrize(
    "kwargs", [{"alpha": -1.0}, {"beta": -0.1}, {"ohem_ratio": -3}, {"eps": 0.0}]
)
def test_rejects_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        DBLoss(**kwargs)

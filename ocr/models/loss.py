"""DB loss: balanced BCE with hard negative mining on the probability map, dice on the
approximate binary map, masked L1 on the threshold map (Liao et al., DBNet)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ocr.errors import ConfigError

_PRED_KEYS = ("prob_logits", "binary_map", "thresh_map")
_TARGET_KEYS = ("prob_maps", "prob_masks", "thresh_maps", "thresh_masks")


class DBLoss(nn.Module):
    """``total = L_prob + alpha * L_binary + beta * L_thresh``, computed in float32 (autocast is
    disabled inside, whatever the predictions' dtype).

    - ``L_prob``: BCE-with-logits over all positive pixels (``gt * mask``) and the ``k`` hardest
      negative pixels (``(1 - gt) * mask``) of the whole batch,
      ``k = min(#neg, floor(ohem_ratio * #pos))``;
      ``L_prob = (sum_pos + sum_topk_neg) / (#pos + k + eps)``.
      A batch with no positive pixel (e.g. receipts with no words) keeps
      ``min(#neg, no_positive_negatives)`` hardest negatives instead of zero, so the loss stays
      finite and still pushes the most confident false positives down.
    - ``L_binary``: dice loss ``1 - 2|B∩G| / (|B| + |G| + eps)`` inside ``prob_masks``. With no
      positive pixel it is ~1 with zero gradient (the dice of an empty target is undefined).
    - ``L_thresh``: ``sum(|T - G_t| * M_t) / (sum(M_t) + eps)``.

    Targets are read from the batch as float ``(B, H, W)`` tensors ``"prob_maps"``,
    ``"prob_masks"``, ``"thresh_maps"``, ``"thresh_masks"`` (binary probability target and
    masks); predictions are ``(B, 1, H, W)`` tensors ``"prob_logits"``, ``"binary_map"``,
    ``"thresh_map"`` (``DBNet`` in training mode, or ``DBNet.binarize`` for ``binary_map``).

    Hard negatives are picked without a host-device synchronisation on accelerators (a sort of
    the batch's negatives with a rank mask), and with ``topk`` on CPU, where a ``.item()`` is
    free and a full sort is ~3x slower.

    Args:
        alpha: weight of the dice loss on the binary map. Default 1.0.
        beta: weight of the L1 loss on the threshold map. Default 10.0.
        ohem_ratio: hard negatives kept per positive pixel. Default 3.0.
        eps: denominator guard of all three terms. Default 1e-6.
        no_positive_negatives: hardest negatives (pixels) kept when the batch has no positive
            pixel. Default 100.
    """

    def __init__(
        self,
        alpha: float = 1.0,
        beta: float = 10.0,
        ohem_ratio: float = 3.0,
        eps: float = 1e-6,
        no_positive_negatives: int = 100,
    ) -> None:
        super().__init__()
        for name, value in (("alpha", alpha), ("beta", beta), ("ohem_ratio", ohem_ratio)):
            if value < 0:
                raise ConfigError(f"DBLoss: {name} must be >= 0, got {value}")
        if eps <= 0:
            raise ConfigError(f"DBLoss: eps must be > 0, got {eps}")
        if no_positive_negatives < 0:
            raise ConfigError(
                f"DBLoss: no_positive_negatives must be >= 0, got {no_positive_negatives}"
            )
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.ohem_ratio = float(ohem_ratio)
        self.eps = float(eps)
        self.no_positive_negatives = int(no_positive_negatives)

    def forward(
        self, pred: Mapping[str, Tensor], batch: Mapping[str, Any]
    ) -> tuple[Tensor, dict[str, Tensor]]:
        preds = {key: _get(pred, key, "prediction") for key in _PRED_KEYS}
        targets = {key: _get(batch, key, "batch") for key in _TARGET_KEYS}
        device_type = preds["prob_logits"].device.type
        with torch.autocast(device_type=device_type, enabled=False):
            logits, binary, thresh = (_squeeze_pred(preds[k], k) for k in _PRED_KEYS)
            gt, mask, thresh_gt, thresh_mask = (targets[k].float() for k in _TARGET_KEYS)
            for key, target in zip(_TARGET_KEYS, (gt, mask, thresh_gt, thresh_mask), strict=True):
                if target.shape != logits.shape:
                    raise ValueError(
                        f"DBLoss: batch[{key!r}] has shape {tuple(target.shape)}, predictions "
                        f"are {tuple(logits.shape)} after squeezing the channel"
                    )
            loss_prob = self.balanced_bce(logits, gt, mask)
            loss_binary = self.dice(binary, gt, mask)
            loss_thresh = (thresh - thresh_gt).abs().mul(thresh_mask).sum() / (
                thresh_mask.sum() + self.eps
            )
            total = loss_prob + self.alpha * loss_binary + self.beta * loss_thresh
        parts = {
            "loss_prob": loss_prob.detach(),
            "loss_binary": loss_binary.detach(),
            "loss_thresh": loss_thresh.detach(),
        }
        return total, parts

    def balanced_bce(self, logits: Tensor, gt: Tensor, mask: Tensor) -> Tensor:
        """BCE-with-logits over positives plus the hardest negatives (see the class docstring)."""
        positive = gt * mask
        negative = (1.0 - gt) * mask
        bce = F.binary_cross_entropy_with_logits(logits, gt, reduction="none")
        pos_count = positive.sum()
        neg_count = negative.sum()
        k = torch.floor(
            torch.where(
                pos_count > 0,
                torch.minimum(neg_count, pos_count * self.ohem_ratio),
                torch.clamp(neg_count, max=float(self.no_positive_negatives)),
            )
        )
        # Pixels that are not negatives rank below every real negative (BCE >= 0).
        neg_scores = torch.where(negative > 0, bce * negative, -1.0).flatten()
        neg_sum = _sum_top_k(neg_scores, k)
        return ((bce * positive).sum() + neg_sum) / (pos_count + k + self.eps)

    def dice(self, binary: Tensor, gt: Tensor, mask: Tensor) -> Tensor:
        """``1 - 2 * sum(B * G * M) / (sum(B * M) + sum(G * M) + eps)``."""
        intersection = (binary * gt * mask).sum()
        union = (binary * mask).sum() + (gt * mask).sum() + self.eps
        return 1.0 - 2.0 * intersection / union


def _sum_top_k(scores: Tensor, k: Tensor) -> Tensor:
    """Sum of the ``k`` largest of ``scores`` (1-D, ``k`` a 0-d float tensor holding an int)."""
    if scores.device.type == "cpu":
        return scores.topk(int(k.item()), sorted=False).values.sum()
    return _sum_top_k_sync_free(scores, k)


def _sum_top_k_sync_free(scores: Tensor, k: Tensor) -> Tensor:
    # ``topk`` needs ``k`` on the host, which would stall the CPU on the GPU every step (and
    # blur every host-side step timing); a descending sort plus a rank mask does not.
    ordered = torch.sort(scores, descending=True).values
    keep = torch.arange(ordered.numel(), device=ordered.device) < k
    return torch.where(keep, ordered, 0.0).sum()


def _get(source: Mapping[str, Any], key: str, what: str) -> Tensor:
    if key not in source:
        hint = " (DBNet adds it in training mode; else use DBNet.binarize)" * (key == "binary_map")
        raise KeyError(f"DBLoss: {what} has no {key!r}{hint}; keys: {sorted(source)}")
    value = source[key]
    if not isinstance(value, Tensor):
        raise TypeError(f"DBLoss: {what}[{key!r}] must be a Tensor, got {type(value).__name__}")
    return value


def _squeeze_pred(x: Tensor, key: str) -> Tensor:
    if x.ndim != 4 or x.shape[1] != 1:
        raise ValueError(f"DBLoss: prediction {key!r} must be (B, 1, H, W), got {tuple(x.shape)}")
    return x.float().squeeze(1)

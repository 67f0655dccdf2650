"""Text-detection precision / recall / H-mean by one-to-one polygon matching at an IoU threshold.

Conventions:

- A prediction matches a ground-truth polygon when their IoU is strictly greater than the
  threshold (ICDAR 2015's ``> 0.5``). Matching is greedy by descending IoU, one-to-one; ties are
  broken by the lower prediction index, then the lower ground-truth index, so results are
  deterministic.
- Invalid polygons (self-intersecting, e.g. a "bow tie" from a mis-ordered quadrilateral) are
  repaired with ``shapely.make_valid(method="structure", keep_collapsed=False)``, which keeps
  only their polygonal area. Degenerate ones
  (fewer than 3 points, zero area, non-finite coordinates) get IoU 0 with everything: they are
  still counted as predictions / ground truths, but never match.
- Scores are micro-averaged: true positives and counts are summed over the whole dataset before
  dividing (so large receipts weigh more than in a mean of per-image scores).
- 0/0 cases follow ICDAR 2015's per-image convention, applied to the totals: with no ground
  truth, recall is 1 (nothing was missed); with no prediction, precision is 1 if there is no
  ground truth either, else 0. So: nothing and nothing -> P = R = H = 1; predictions but no
  ground truth -> P = 0, R = 1, H = 0; ground truth but no predictions -> P = R = H = 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import shapely
import torch
from torch import Tensor
from torchmetrics import Metric

from ocr.errors import ConfigError


def detection_scores(
    tp: int | Tensor, num_pred: int | Tensor, num_gt: int | Tensor
) -> dict[str, float]:
    """Precision, recall and H-mean from match counts (see the module docstring for 0/0)."""
    tp_, pred_, gt_ = int(tp), int(num_pred), int(num_gt)
    if min(tp_, pred_, gt_) < 0 or tp_ > min(pred_, gt_):
        raise ValueError(
            f"detection_scores: need 0 <= tp <= min(num_pred, num_gt), got tp={tp_}, "
            f"num_pred={pred_}, num_gt={gt_}"
        )
    recall = tp_ / gt_ if gt_ else 1.0
    precision = tp_ / pred_ if pred_ else (1.0 if gt_ == 0 else 0.0)
    denominator = precision + recall
    hmean = 2.0 * precision * recall / denominator if denominator else 0.0
    return {"precision": precision, "recall": recall, "hmean": hmean}


def match_detections(
    preds: Sequence[np.ndarray], gts: Sequence[np.ndarray], iou_threshold: float = 0.5
) -> int:
    """Number of one-to-one matches (IoU > ``iou_threshold``) between predicted and
    ground-truth polygons of one image, each an ``(N, 2)`` array of (x, y) points."""
    if not 0.0 <= iou_threshold < 1.0:
        raise ValueError(f"match_detections: iou_threshold must be in [0, 1), got {iou_threshold}")
    if len(preds) == 0 or len(gts) == 0:
        return 0
    pred_points = [_points(p, "preds", i) for i, p in enumerate(preds)]
    gt_points = [_points(g, "gts", i) for i, g in enumerate(gts)]

    # Only pairs whose bounding boxes overlap with positive area can have IoU > 0.
    pred_boxes, gt_boxes = _bounds(pred_points), _bounds(gt_points)
    overlap = (
        (pred_boxes[:, None, 0] < gt_boxes[None, :, 2])
        & (gt_boxes[None, :, 0] < pred_boxes[:, None, 2])
        & (pred_boxes[:, None, 1] < gt_boxes[None, :, 3])
        & (gt_boxes[None, :, 1] < pred_boxes[:, None, 3])
    )
    pi, gi = np.nonzero(overlap)
    if pi.size == 0:
        return 0

    pred_geoms = _polygons(pred_points, np.unique(pi))
    gt_geoms = _polygons(gt_points, np.unique(gi))
    a, b = pred_geoms[pi], gt_geoms[gi]
    valid = ~(shapely.is_missing(a) | shapely.is_missing(b))
    pi, gi, a, b = pi[valid], gi[valid], a[valid], b[valid]
    intersection = shapely.area(shapely.intersection(a, b))
    union = shapely.area(a) + shapely.area(b) - intersection
    iou = np.divide(intersection, union, out=np.zeros_like(intersection), where=union > 0)

    keep = iou > iou_threshold
    pi, gi, iou = pi[keep], gi[keep], iou[keep]
    order = np.lexsort((gi, pi, -iou))  # last key is primary: IoU descending
    used_pred: set[int] = set()
    used_gt: set[int] = set()
    for p, g in zip(pi[order].tolist(), gi[order].tolist(), strict=True):
        if p not in used_pred and g not in used_gt:
            used_pred.add(p)
            used_gt.add(g)
    return len(used_pred)


def _points(poly: Any, name: str, index: int) -> np.ndarray:
    points = np.asarray(poly, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2:
        # Accept OpenCV's (N, 1, 2) contour layout too.
        if points.ndim == 3 and points.shape[1:] == (1, 2):
            return points[:, 0]
        raise ValueError(
            f"match_detections: {name}[{index}] must be an (N, 2) array of points, "
            f"got shape {points.shape}"
        )
    return points


def _bounds(points: list[np.ndarray]) -> np.ndarray:
    """(N, 4) [xmin, ymin, xmax, ymax]; empty polygons get an empty (NaN) box that overlaps
    nothing."""
    out = np.full((len(points), 4), np.nan)
    for i, p in enumerate(points):
        if len(p):
            out[i, :2] = p.min(axis=0)
            out[i, 2:] = p.max(axis=0)
    return out


def _polygons(points: list[np.ndarray], indices: np.ndarray) -> np.ndarray:
    """Object array of shapely polygons (``None`` where degenerate) for ``indices``."""
    geoms = np.full(len(points), None, dtype=object)
    for i in indices.tolist():
        p = points[i]
        if len(p) < 3 or not np.isfinite(p).all():
            continue
        geom = shapely.Polygon(p)
        if not geom.is_valid:
            # "structure" without collapsed parts keeps only the polygonal area (a bow tie
            # becomes its two triangles; a collapsed polygon becomes empty).
            geom = shapely.make_valid(geom, method="structure", keep_collapsed=False)
        if geom.area > 0:
            geoms[i] = geom
    return geoms


class DetectionMetric(Metric):
    """Micro-averaged detection precision / recall / H-mean over a dataset.

    States are three sum-reduced counters (``tp``, ``num_pred``, ``num_gt``), so a DDP sync sums
    them across ranks and ``compute`` gives the dataset-level score. ``update(preds, targets)``
    takes, per image, the list of predicted and of ground-truth polygons (``(N, 2)`` arrays in the
    same pixel frame). ``compute()`` returns float32 tensors ``"precision"``, ``"recall"``,
    ``"hmean"``; matching and 0/0 conventions are those of ``match_detections`` and
    ``detection_scores``.

    Args:
        iou_threshold: IoU a match must exceed, in [0, 1). Default 0.5.
        **kwargs: passed to ``torchmetrics.Metric`` (e.g. ``dist_sync_on_step``).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    tp: Tensor
    num_pred: Tensor
    num_gt: Tensor

    def __init__(self, iou_threshold: float = 0.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= iou_threshold < 1.0:
            raise ConfigError(
                f"DetectionMetric: iou_threshold must be in [0, 1), got {iou_threshold}"
            )
        self.iou_threshold = float(iou_threshold)
        for name in ("tp", "num_pred", "num_gt"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self, preds: Sequence[Sequence[np.ndarray]], targets: Sequence[Sequence[np.ndarray]]
    ) -> None:
        if len(preds) != len(targets):
            raise ValueError(
                f"DetectionMetric.update: {len(preds)} images of predictions but "
                f"{len(targets)} of targets"
            )
        tp = num_pred = num_gt = 0
        for image_preds, image_gts in zip(preds, targets, strict=True):
            tp += match_detections(image_preds, image_gts, self.iou_threshold)
            num_pred += len(image_preds)
            num_gt += len(image_gts)
        # Counters live on the metric's device; add Python ints (no per-image transfers).
        self.tp += tp
        self.num_pred += num_pred
        self.num_gt += num_gt

    def compute(self) -> dict[str, Tensor]:
        scores = detection_scores(self.tp, self.num_pred, self.num_gt)
        return {
            k: torch.tensor(v, dtype=torch.float32, device=self.tp.device)
            for k, v in scores.items()
        }

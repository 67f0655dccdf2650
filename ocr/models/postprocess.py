"""DB box postprocessing: probability map -> scored quadrilaterals in canvas pixels."""

from __future__ import annotations

import cv2
import numpy as np
import pyclipper
import torch
from torch import Tensor

from ocr.errors import ConfigError


class DBPostProcessor:
    """Turns DBNet probability maps into rotated boxes, following the DB reference.

    Per image: ``bitmap = prob > thresh``; contours of the bitmap (``cv2.findContours``,
    ``RETR_LIST``, ``CHAIN_APPROX_SIMPLE``), at most ``max_candidates`` of them; each contour's
    minimum-area rectangle is dropped if its shorter side is below ``min_size``, scored by the
    mean probability inside it and dropped below ``box_thresh``; it is then grown (pyclipper
    ``JT_ROUND``) by ``area * unclip_ratio / perimeter`` to undo the target shrinking, boxed again
    by a minimum-area rectangle, dropped if its shorter side is below ``min_size + 2``, and
    clipped to the map (x in [0, W], y in [0, H]).

    Boxes are float32 ``(4, 2)`` arrays of (x, y) in the probability map's pixels (= canvas pixels,
    as DBNet predicts at input resolution), ordered clockwise on screen from the top-left corner.

    Args:
        thresh: probability above which a pixel is text in the bitmap. Default 0.3.
        box_thresh: minimum mean probability inside a candidate box. Default 0.6.
        max_candidates: most contours examined per image. Default 1000.
        unclip_ratio: expansion factor of the unclip distance (dimensionless). Default 1.5.
        min_size: minimum shorter side of a candidate box, in pixels. Default 3.
    """

    def __init__(
        self,
        thresh: float = 0.3,
        box_thresh: float = 0.6,
        max_candidates: int = 1000,
        unclip_ratio: float = 1.5,
        min_size: int = 3,
    ) -> None:
        for name, value in (("thresh", thresh), ("box_thresh", box_thresh)):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"DBPostProcessor: {name} must be in [0, 1], got {value}")
        if max_candidates <= 0:
            raise ConfigError(f"DBPostProcessor: max_candidates must be > 0, got {max_candidates}")
        if unclip_ratio <= 0:
            raise ConfigError(f"DBPostProcessor: unclip_ratio must be > 0, got {unclip_ratio}")
        if min_size < 0:
            raise ConfigError(f"DBPostProcessor: min_size must be >= 0, got {min_size}")
        self.thresh = float(thresh)
        self.box_thresh = float(box_thresh)
        self.max_candidates = int(max_candidates)
        self.unclip_ratio = float(unclip_ratio)
        self.min_size = float(min_size)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(thresh={self.thresh}, box_thresh={self.box_thresh}, "
            f"max_candidates={self.max_candidates}, unclip_ratio={self.unclip_ratio}, "
            f"min_size={self.min_size:g})"
        )

    def __call__(self, prob_map: Tensor | np.ndarray) -> list[tuple[list[np.ndarray], list[float]]]:
        """Boxes and scores per image of a ``(B, 1, H, W)`` or ``(B, H, W)`` probability map."""
        if isinstance(prob_map, Tensor):
            # One device-to-host transfer for the whole batch.
            maps = prob_map.detach().to(device="cpu", dtype=torch.float32).numpy()
        else:
            maps = np.asarray(prob_map, dtype=np.float32)
        shape = maps.shape
        if maps.ndim == 4 and shape[1] == 1:
            maps = maps[:, 0]
        if maps.ndim != 3:
            raise ValueError(
                f"DBPostProcessor: prob_map must be (B, 1, H, W) or (B, H, W), got {shape}"
            )
        return [self.boxes_from_map(m) for m in maps]

    def boxes_from_map(self, prob: np.ndarray) -> tuple[list[np.ndarray], list[float]]:
        """Boxes and scores of one ``(H, W)`` float32 probability map."""
        height, width = prob.shape
        bitmap = (prob > self.thresh).astype(np.uint8)
        contours, _ = cv2.findContours(bitmap, cv2.RETR_LIST, cv2.CHAIN_APPROX_SIMPLE)
        boxes: list[np.ndarray] = []
        scores: list[float] = []
        for contour in contours[: self.max_candidates]:
            box, short_side = _min_area_box(contour)
            if short_side < self.min_size:
                continue
            score = _box_score(prob, box)
            if score < self.box_thresh:
                continue
            expanded = self._unclip(box)
            if expanded is None:
                continue
            box, short_side = _min_area_box(expanded)
            if short_side < self.min_size + 2:
                continue
            box[:, 0] = np.clip(box[:, 0], 0, width)
            box[:, 1] = np.clip(box[:, 1], 0, height)
            boxes.append(box)
            scores.append(score)
        return boxes, scores

    def _unclip(self, box: np.ndarray) -> np.ndarray | None:
        perimeter = cv2.arcLength(box, closed=True)
        if perimeter <= 0:
            return None
        distance = cv2.contourArea(box) * self.unclip_ratio / perimeter
        offset = pyclipper.PyclipperOffset()
        offset.AddPath(box.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
        expanded = offset.Execute(distance)
        if not expanded:
            return None
        # Growing a convex quadrilateral gives one polygon; keep the largest to be safe.
        largest = max(expanded, key=lambda p: abs(pyclipper.Area(p)))
        return np.asarray(largest, dtype=np.float32)


def _min_area_box(points: np.ndarray) -> tuple[np.ndarray, float]:
    """Minimum-area rectangle as a (4, 2) float32 array, clockwise from the top-left, and its
    shorter side."""
    rect = cv2.minAreaRect(points.reshape(-1, 1, 2).astype(np.float32))
    corners = cv2.boxPoints(rect)
    # Split into the two left-most and two right-most corners; within each, the upper one
    # (smaller y) comes first: [top-left, top-right, bottom-right, bottom-left].
    by_x = corners[np.argsort(corners[:, 0], kind="stable")]
    left = by_x[:2][np.argsort(by_x[:2, 1], kind="stable")]
    right = by_x[2:][np.argsort(by_x[2:, 1], kind="stable")]
    ordered = np.stack([left[0], right[0], right[1], left[1]]).astype(np.float32)
    return ordered, float(min(rect[1]))


def _box_score(prob: np.ndarray, box: np.ndarray) -> float:
    """Mean probability inside ``box``, computed on its bounding-rectangle crop only."""
    height, width = prob.shape
    xmin = int(np.clip(np.floor(box[:, 0].min()), 0, width - 1))
    xmax = int(np.clip(np.ceil(box[:, 0].max()), 0, width - 1))
    ymin = int(np.clip(np.floor(box[:, 1].min()), 0, height - 1))
    ymax = int(np.clip(np.ceil(box[:, 1].max()), 0, height - 1))
    mask = np.zeros((ymax - ymin + 1, xmax - xmin + 1), dtype=np.uint8)
    shifted = box - np.array([xmin, ymin], dtype=np.float32)
    cv2.fillPoly(mask, [np.round(shifted).astype(np.int32)], 1)
    return float(cv2.mean(prob[ymin : ymax + 1, xmin : xmax + 1], mask)[0])

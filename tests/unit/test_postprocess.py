"""DBPostProcessor on synthetic probability maps."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import shapely
import torch

from ocr.models.postprocess import DBPostProcessor


def _map(height: int = 100, width: int = 160) -> np.ndarray:
    return np.zeros((height, width), dtype=np.float32)


def _expected_unclipped(x0: int, y0: int, x1: int, y1: int, ratio: float = 1.5) -> shapely.Polygon:
    """The box DB's unclip should produce for the filled pixel block [y0:y1, x0:x1].

    The contour runs through the outer pixel centres, so the shrunk box is
    (x0, y0)-(x1 - 1, y1 - 1); unclip grows it by area * ratio / perimeter on every side (the
    round corners disappear in the final minimum-area rectangle).
    """
    w, h = x1 - 1 - x0, y1 - 1 - y0
    d = w * h * ratio / (2 * (w + h))
    return shapely.box(x0 - d, y0 - d, x1 - 1 + d, y1 - 1 + d)


def _iou(box: np.ndarray, expected: shapely.Polygon) -> float:
    poly = shapely.Polygon(box)
    return poly.intersection(expected).area / poly.union(expected).area


def test_two_rectangles_give_two_boxes_at_unclipped_extents() -> None:
    prob = _map()
    rects = [(20, 12, 80, 30), (30, 50, 140, 80)]  # (x0, y0, x1, y1), away from the border
    for x0, y0, x1, y1 in rects:
        prob[y0:y1, x0:x1] = 0.9
    [(boxes, scores)] = DBPostProcessor()(torch.from_numpy(prob)[None, None])
    assert len(boxes) == 2
    assert scores == pytest.approx([0.9, 0.9], abs=1e-4)
    for rect in rects:
        expected = _expected_unclipped(*rect)
        best = max(_iou(box, expected) for box in boxes)
        assert best > 0.8
    for box in boxes:
        assert box.shape == (4, 2)
        assert box.dtype == np.float32


def test_corners_are_clockwise_from_top_left() -> None:
    prob = _map(120, 120)
    rect = ((60.0, 60.0), (70.0, 24.0), 30.0)  # rotated by 30 degrees
    cv2.fillPoly(prob, [np.round(cv2.boxPoints(rect)).astype(np.int32)], 0.95)
    [(boxes, _)] = DBPostProcessor()(prob[None])
    [box] = boxes
    # Positive shoelace area in image coordinates (y down) = clockwise on screen.
    x, y = box[:, 0], box[:, 1]
    assert 0.5 * np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y) > 0
    # The first corner is the upper one of the two left-most corners.
    left_two = np.argsort(box[:, 0])[:2]
    assert 0 in left_two
    assert box[0, 1] == box[left_two, 1].min()


def test_score_filter() -> None:
    prob = _map()
    prob[10:30, 20:80] = 0.9
    prob[50:80, 30:140] = 0.5  # above thresh 0.3 but below box_thresh 0.6
    [(boxes, scores)] = DBPostProcessor(box_thresh=0.6)(prob[None])
    assert len(boxes) == 1
    assert scores[0] == pytest.approx(0.9, abs=1e-4)
    [(boxes, scores)] = DBPostProcessor(box_thresh=0.4)(prob[None])
    assert sorted(round(s, 3) for s in scores) == [0.5, 0.9]


def test_max_candidates_is_respected() -> None:
    prob = _map()
    for i in range(6):
        prob[10 + 14 * i : 20 + 14 * i, 20:100] = 0.9
    assert len(DBPostProcessor()(prob[None])[0][0]) == 6
    assert len(DBPostProcessor(max_candidates=2)(prob[None])[0][0]) == 2


def test_small_blobs_are_dropped() -> None:
    prob = _map()
    prob[40:42, 40:60] = 0.9  # 2 px tall: shorter side 1 < min_size 3
    assert DBPostProcessor()(prob[None]) == [([], [])]
    assert len(DBPostProcessor(min_size=0)(prob[None])[0][0]) == 1


def test_empty_maps_and_batch_layouts() -> None:
    empty = torch.zeros(3, 64, 64)
    assert DBPostProcessor()(empty) == [([], []), ([], []), ([], [])]
    batch = torch.zeros(2, 1, 64, 64, dtype=torch.bfloat16)
    batch[1, 0, 20:40, 10:50] = 0.8
    result = DBPostProcessor()(batch)
    assert len(result[0][0]) == 0
    assert len(result[1][0]) == 1


def test_boxes_are_clipped_to_the_map() -> None:
    prob = _map(64, 96)
    prob[0:20, 0:50] = 0.9  # touches the top-left corner: unclip leaves the map
    [(boxes, _)] = DBPostProcessor()(prob[None])
    [box] = boxes
    assert box[:, 0].min() == 0.0
    assert box[:, 1].min() == 0.0
    assert box[:, 0].max() <= 96
    assert box[:, 1].max() <= 64


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="prob_map must be"):
        DBPostProcessor()(torch.zeros(64, 64))
    with pytest.raises(ValueError, match=r"got \(2, 3, 64, 64\)"):
        DBPostProcessor()(np.zeros((2, 3, 64, 64), dtype=np.float32))
    with pytest.raises(ValueError, match="box_thresh"):
        DBPostProcessor(box_thresh=1.5)
    with pytest.raises(ValueError, match="max_candidates"):
        DBPostProcessor(max_candidates=0)

"""Detection matching, scores and the torchmetrics wrapper."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
import torch

from ocr.metrics.detection import DetectionMetric, detection_scores, match_detections


def box(x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float32)


def _scores(metric: DetectionMetric) -> dict[str, float]:
    return {k: v.item() for k, v in metric.compute().items()}


def test_perfect_match() -> None:
    gts = [box(0, 0, 10, 5), box(20, 0, 40, 5), box(0, 10, 30, 20)]
    metric = DetectionMetric()
    metric.update([list(reversed(gts))], [gts])
    assert _scores(metric) == {"precision": 1.0, "recall": 1.0, "hmean": 1.0}


def test_one_miss_and_one_false_positive() -> None:
    gts = [box(0, 0, 10, 5), box(20, 0, 40, 5)]
    metric = DetectionMetric()
    metric.update([[gts[0]]], [gts])
    assert _scores(metric) == pytest.approx({"precision": 1.0, "recall": 0.5, "hmean": 2 / 3})
    metric.reset()
    metric.update([[*gts, box(50, 50, 60, 60)]], [gts])
    assert _scores(metric) == pytest.approx({"precision": 2 / 3, "recall": 1.0, "hmean": 0.8})


@pytest.mark.parametrize(("width", "matches"), [(4.9, 0), (5.0, 0), (5.1, 1), (10.0, 1)])
def test_iou_threshold_is_strict(width: float, matches: int) -> None:
    # IoU = width / 10: a match needs IoU strictly above 0.5 (ICDAR 2015).
    assert match_detections([box(0, 0, width, 10)], [box(0, 0, 10, 10)]) == matches


def test_iou_threshold_argument() -> None:
    pred, gt = [box(0, 0, 7, 10)], [box(0, 0, 10, 10)]
    assert match_detections(pred, gt, iou_threshold=0.6) == 1
    assert match_detections(pred, gt, iou_threshold=0.75) == 0
    with pytest.raises(ValueError, match="iou_threshold"):
        match_detections(pred, gt, iou_threshold=1.0)


def test_one_to_one() -> None:
    gt = [box(0, 0, 10, 10)]
    assert match_detections([box(0, 0, 10, 10), box(0, 0, 9, 10)], gt) == 1
    metric = DetectionMetric()
    metric.update([[box(0, 0, 10, 10), box(0, 0, 9, 10)]], [gt])
    assert _scores(metric) == pytest.approx({"precision": 0.5, "recall": 1.0, "hmean": 2 / 3})


def test_greedy_by_descending_iou_with_overlapping_ground_truth() -> None:
    gts = [box(0, 0, 10, 1), box(3, 0, 13, 1)]
    # pred 0: IoU 0.67 with gt 0 and 0.82 with gt 1; pred 1 equals gt 0 (IoU 1).
    preds = [box(2, 0, 12, 1), box(0, 0, 10, 1)]
    assert match_detections(preds, gts) == 2


def _brute_force(preds: list[np.ndarray], gts: list[np.ndarray], thr: float = 0.5) -> int:
    pairs = []
    for i, p in enumerate(preds):
        for j, g in enumerate(gts):
            a, b = shapely.Polygon(p), shapely.Polygon(g)
            iou = a.intersection(b).area / a.union(b).area
            if iou > thr:
                pairs.append((-iou, i, j))
    used_p, used_g = set(), set()
    for _, i, j in sorted(pairs):
        if i not in used_p and j not in used_g:
            used_p.add(i)
            used_g.add(j)
    return len(used_p)


def test_prefilter_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        rects = rng.uniform(1, 40, (15, 4))
        gts = [box(x, y, x + w, y + h) for x, y, w, h in rects]
        noisy = rects[:12] + rng.normal(0, 2.0, (12, 4))
        preds = [box(x, y, x + abs(w) + 0.5, y + abs(h) + 0.5) for x, y, w, h in noisy]
        preds += [box(x, y, x + 5, y + 5) for x, y in rng.uniform(0, 60, (5, 2))]
        assert match_detections(preds, gts) == _brute_force(preds, gts)


def test_invalid_and_degenerate_polygons() -> None:
    bow_tie = np.array([[0, 0], [10, 10], [10, 0], [0, 10]], dtype=np.float32)
    # Repaired (two triangles) on both sides: identical areas, IoU 1.
    assert match_detections([bow_tie], [bow_tie]) == 1
    # A bow tie against the square it was meant to be covers half of it: IoU 0.5, no match.
    assert match_detections([bow_tie], [box(0, 0, 10, 10)]) == 0
    line = np.array([[0, 0], [5, 0], [10, 0]], dtype=np.float32)
    two_points = np.array([[0, 0], [10, 10]], dtype=np.float32)
    nan = box(0, 0, 10, 10)
    nan[1, 0] = np.nan
    assert match_detections([line, two_points, nan], [box(0, 0, 10, 10)]) == 0
    metric = DetectionMetric()
    metric.update([[line, box(0, 0, 10, 10)]], [[box(0, 0, 10, 10)]])
    assert metric.num_pred.item() == 2  # degenerate predictions still count
    assert metric.tp.item() == 1


def test_accepts_contour_layout_and_rejects_bad_shapes() -> None:
    contour = box(0, 0, 10, 10).reshape(-1, 1, 2)
    assert match_detections([contour], [box(0, 0, 10, 10)]) == 1
    with pytest.raises(ValueError, match=r"preds\[1\] must be an \(N, 2\) array"):
        match_detections([box(0, 0, 1, 1), np.zeros((4, 3))], [box(0, 0, 1, 1)])


def test_micro_average_differs_from_mean_of_per_image_hmeans() -> None:
    metric = DetectionMetric()
    # Image 1: one word, found (H = 1). Image 2: nine words, none found (H = 0).
    metric.update([[box(0, 0, 10, 10)]], [[box(0, 0, 10, 10)]])
    metric.update([[]], [[box(20 * i, 0, 20 * i + 10, 10) for i in range(9)]])
    scores = _scores(metric)
    # Micro: tp 1, 1 prediction, 10 ground truths.
    assert scores == pytest.approx({"precision": 1.0, "recall": 0.1, "hmean": 2 * 0.1 / 1.1})
    assert scores["hmean"] != pytest.approx((1.0 + 0.0) / 2)


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ((0, 0, 0), (1.0, 1.0, 1.0)),  # nothing to find, nothing found
        ((0, 3, 0), (0.0, 1.0, 0.0)),  # false positives on an empty image
        ((0, 0, 4), (0.0, 0.0, 0.0)),  # everything missed
        ((2, 4, 8), (0.5, 0.25, 1 / 3)),
    ],
)
def test_detection_scores_zero_division(counts: tuple[int, int, int], expected: tuple) -> None:
    scores = detection_scores(*counts)
    assert (scores["precision"], scores["recall"], scores["hmean"]) == pytest.approx(expected)


def test_metric_zero_cases() -> None:
    metric = DetectionMetric()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert _scores(metric) == {"precision": 1.0, "recall": 1.0, "hmean": 1.0}
    metric.update([[], []], [[], []])
    assert _scores(metric) == {"precision": 1.0, "recall": 1.0, "hmean": 1.0}
    metric.update([[box(0, 0, 1, 1)]], [[]])
    assert _scores(metric) == {"precision": 0.0, "recall": 1.0, "hmean": 0.0}


def test_detection_scores_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="tp=3"):
        detection_scores(3, 2, 5)
    with pytest.raises(ValueError, match="num_pred=-1"):
        detection_scores(0, -1, 5)
    assert detection_scores(torch.tensor(1), torch.tensor(2), torch.tensor(2))["hmean"] == 0.5


def test_states_sum_across_processes() -> None:
    # What a DDP sync does: each state is reduced with "sum" across ranks.
    images = [
        ([box(0, 0, 10, 10)], [box(0, 0, 10, 10), box(20, 0, 30, 10)]),
        ([box(0, 0, 10, 10), box(40, 40, 50, 50)], [box(0, 0, 10, 10)]),
        ([], [box(0, 0, 5, 5)]),
    ]
    rank0, rank1, single = DetectionMetric(), DetectionMetric(), DetectionMetric()
    rank0.update([images[0][0]], [images[0][1]])
    rank1.update([p for p, _ in images[1:]], [g for _, g in images[1:]])
    single.update([p for p, _ in images], [g for _, g in images])
    assert all(rank0._reductions[name] is not None for name in ("tp", "num_pred", "num_gt"))
    rank0.merge_state(rank1)
    assert _scores(rank0) == pytest.approx(_scores(single))
    assert (single.tp.item(), single.num_pred.item(), single.num_gt.item()) == (2, 3, 4)


def test_update_rejects_length_mismatch() -> None:
    with pytest.raises(ValueError, match="2 images of predictions but 1 of targets"):
        DetectionMetric().update([[], []], [[]])

"""Ops of detection heads: NonMaxSuppression."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import register

__all__ = ["Nms", "non_max_suppression"]


@dataclass(frozen=True)
class Nms:
    """NonMaxSuppression; ``centers``: boxes as (x center, y center, width, height) instead
    of two corners (center_point_box = 1)."""

    centers: bool


def _corners(boxes, centers):
    b = boxes.astype(np.float64)
    if centers:
        x, y, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=1)
    # two opposite corners in any order
    return np.stack([np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]),
                     np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3])], axis=1)


def non_max_suppression(boxes, scores, keep, iou_threshold, score_threshold, centers=False):
    """Indices of the boxes kept for one class: by descending score (the lower index first
    among equal scores), each dropped when its IoU with a kept one exceeds ``iou_threshold``.

    >>> b = np.array([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3]], np.float32)
    >>> non_max_suppression(b, np.array([0.9, 0.8, 0.7]), 3, 0.5, None)
    [0, 2]
    """
    c = _corners(boxes, centers)
    area = (c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    if score_threshold is not None:
        order = order[scores[order] > score_threshold]
    kept = []
    for i in order:
        if len(kept) >= keep:
            break
        if kept:
            k = np.array(kept)
            inter = (np.clip(np.minimum(c[k, 2], c[i, 2]) - np.maximum(c[k, 0], c[i, 0]), 0, None)
                     * np.clip(np.minimum(c[k, 3], c[i, 3]) - np.maximum(c[k, 1], c[i, 1]), 0,
                               None))
            union = area[k] + area[i] - inter
            iou = np.where(union > 0, inter / np.where(union > 0, union, 1), 0)
            if (iou > iou_threshold).any():
                continue
        kept.append(int(i))
    return kept


def _nms_kernel(node, ctx):
    p = node.params

    def run(inputs, out=None):
        get = (lambda i: inputs[i] if i < len(inputs) and inputs[i] is not None else None)
        boxes, scores = inputs[0], inputs[1]
        if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or \
                scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            ctx.fail(f"boxes {boxes.shape} and scores {scores.shape} must be (batch, boxes, 4) "
                     "and (batch, classes, boxes)")
        keep = get(2)
        keep = 0 if keep is None else int(np.asarray(keep).reshape(-1)[0])
        iou = get(3)
        iou = 0.0 if iou is None else float(np.asarray(iou).reshape(-1)[0])
        floor = get(4)
        floor = None if floor is None else float(np.asarray(floor).reshape(-1)[0])
        rows = [(b, c, i) for b in range(boxes.shape[0]) for c in range(scores.shape[1])
                for i in non_max_suppression(boxes[b], scores[b, c], keep, iou, floor,
                                             p.centers)]
        return [np.array(rows, np.int64).reshape(-1, 3)]
    return run


register("NonMaxSuppression", lambda ctx: Nms(bool(ctx.attr("center_point_box", 0))),
         _nms_kernel, since=10, dynamic=True)

"""Memory reuse for 2-D images: tensors that are never live at once share a block.

>>> sizes = {"a": (8, 4, "float32"), "b": (4, 4, "float32"), "c": (8, 8, "float32")}
>>> blocks, where = reuse_blocks(sizes, {"a": 0, "b": 1, "c": 2}, {"a": 1, "b": 2, "c": 3}, 4)
>>> [(w, h) for w, h, _, _ in blocks], where      # c takes a's block once a is dead
([(8, 8), (4, 4)], {'a': 0, 'b': 1, 'c': 0})
"""

from __future__ import annotations

import numpy as np

__all__ = ["reuse_blocks"]


def reuse_blocks(sizes, first, last, end):
    """``(blocks, where)``: blocks ``[width, height, dtype, kinds]`` and the block of each key.

    ``sizes``: key -> (width, height, dtype); ``first`` / ``last``: the step that first and
    last uses each key (-1: before the first step, ``end``: after the last).  Keys are taken
    in order of their first step; a key takes the free block of its channel type that grows
    least in area (a block grows to the larger width and height), unless a new block would
    add less, and gives its block back after its last step.  Blocks are allocated once, at
    their final size.  ``kinds``: the first element of every key a block holds.
    """
    blocks: list = []
    free: list = []
    where: dict = {}

    def take(key):
        w, h, dt = sizes[key]
        dt = np.dtype(dt)
        best, cost = None, w * h
        for b in free:
            bw, bh, bdt, _ = blocks[b]
            if bdt != dt:
                continue
            added = max(bw, w) * max(bh, h) - bw * bh
            if added < cost or (added == cost and best is not None and
                                bw * bh < blocks[best][0] * blocks[best][1]):
                best, cost = b, added
        if best is None:
            blocks.append([w, h, dt, set()])
            best = len(blocks) - 1
        else:
            free.remove(best)
            blocks[best][0] = max(blocks[best][0], w)
            blocks[best][1] = max(blocks[best][1], h)
        blocks[best][3].add(key[0])
        where[key] = best

    by_first: dict = {}
    for k in sorted(first, key=lambda k: first[k]):
        by_first.setdefault(first[k], []).append(k)
    by_last: dict = {}
    for k, i in last.items():
        by_last.setdefault(i, []).append(k)
    for k in by_first.get(-1, []):
        take(k)
    for i in range(end):
        for k in by_first.get(i, []):
            take(k)
        for k in by_last.get(i, []):
            if k in where and k[0] != "empty":
                free.append(where[k])
    return blocks, where

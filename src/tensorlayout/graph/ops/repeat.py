"""Ops that repeat or regroup elements: Expand and Tile (their shape and repeats may be
computed at run time), DepthToSpace and SpaceToDepth."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import ints, register

__all__ = ["Blocks"]


def _expand_kernel(node, ctx):
    def run(inputs, out=None):
        x, shape = inputs[0], ints(inputs[1])
        try:
            target = np.broadcast_shapes(x.shape, tuple(shape))
        except ValueError:
            ctx.fail(f"shape = {shape} does not broadcast with the input's {x.shape}")
        return [np.array(np.broadcast_to(x, target))]
    return run


def _tile_kernel(node, ctx):
    def run(inputs, out=None):
        x, reps = inputs[0], ints(inputs[1])
        if len(reps) != x.ndim or min(reps, default=0) < 0:
            ctx.fail(f"repeats = {reps}: one non-negative count per axis of {x.shape}")
        return [np.tile(x, reps)]
    return run


register("Expand", None, _expand_kernel, since=8, dynamic=True, any_dtype=True)
register("Tile", None, _tile_kernel, dynamic=True, any_dtype=True)


@dataclass(frozen=True)
class Blocks:
    """DepthToSpace / SpaceToDepth with ``blocksize``; ``crd``: the CRD mode (channel, then
    row and column in the block) instead of DCR (the block's row and column first)."""

    blocksize: int
    crd: bool = False


def _parse_blocks(ctx):
    b = int(ctx.attr("blocksize", 0))
    if b < 1:
        ctx.fail(f"blocksize = {b} is not allowed: a positive integer")
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        ctx.fail(f"mode = {mode!r} is not allowed: DCR or CRD")
    x = ctx.shape(0, 4)
    if ctx.op == "DepthToSpace" and x[1] % (b * b):
        ctx.fail(f"{x[1]} channels do not divide by blocksize^2 = {b * b}")
    if ctx.op == "SpaceToDepth" and (x[2] % b or x[3] % b):
        ctx.fail(f"height and width {x[2]}x{x[3]} do not divide by blocksize {b}")
    return Blocks(b, mode == "CRD")


def _depth_to_space_kernel(node, ctx):
    p = node.params
    b = p.blocksize

    def run(inputs, out=None):
        x = inputs[0]
        n, c, h, w = x.shape
        if p.crd:
            t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        return [np.ascontiguousarray(t).reshape(n, c // (b * b), h * b, w * b)]
    return run


def _space_to_depth_kernel(node, ctx):
    p = node.params
    b = p.blocksize

    def run(inputs, out=None):
        x = inputs[0]
        n, c, h, w = x.shape
        t = x.reshape(n, c, h // b, b, w // b, b)
        t = t.transpose(0, 1, 3, 5, 2, 4) if p.crd else t.transpose(0, 3, 5, 1, 2, 4)
        return [np.ascontiguousarray(t).reshape(n, c * b * b, h // b, w // b)]
    return run


register("DepthToSpace", _parse_blocks, _depth_to_space_kernel, any_dtype=True)
register("SpaceToDepth", _parse_blocks, _space_to_depth_kernel, any_dtype=True)

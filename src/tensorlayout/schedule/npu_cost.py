"""What an NPU program costs: GDMA bytes counted exactly, compute estimated.

Sophgo's BM1684 simulator computes results but keeps no count of cycles that a caller can
read (its statistics functions exist, but the only code that touches their switch turns it
off), so the compute figure is an **estimate** from a documented model, not a measurement:

* each NPU works on its own channels, ``lanes`` float32 elements per cycle, where ``lanes``
  is the chip's alignment over 4 bytes (BM1684: 32, BM1684X: 16, BM1688: 4: the aligned layout
  puts one lane's worth of elements in each aligned block);
* a BDC instruction over an output of ``cpn`` channels in the fullest NPU and ``H x W``
  positions takes ``cpn * ceil(H*W / lanes)`` cycles per element of work: the input channels
  times the kernel for a convolution, the window for pooling and depthwise convolution, K for
  a matmul (per output row, columns per channel over lanes), ``SFU_WORK`` for exp, sigmoid
  and tanh, ``DIV_WORK`` for a division, 1 for the other element-wise instructions;
* a GDMA instruction moves its bytes at ``gdma_bytes_per_s``; the time is the compute at
  ``clock_hz`` plus the GDMA time, as if nothing overlapped (``overlapped``: the larger of the
  two, as if everything did).

``CLOCKS`` holds the clock and GDMA bandwidth each estimate assumes: BM1684's 550 MHz is
the clock at which its 64 NPUs x 32 lanes reach the 2.25 TFLOPS float32 Sophgo quotes; the
bandwidths are assumptions of this model.

>>> from tensorlayout.npu import BM1684
>>> lanes(BM1684)
32
"""

from __future__ import annotations

import math

__all__ = ["CLOCKS", "SFU_WORK", "DIV_WORK", "lanes", "instr_cycles", "estimate", "gdma_totals",
           "group_rows"]

#: (clock in Hz, GDMA bytes per second) each chip's estimate assumes.
CLOCKS = {"BM1684": (550e6, 32e9), "BM1684X": (1000e6, 64e9), "BM1688": (900e6, 32e9)}
_DEFAULT = (550e6, 32e9)
#: Cycles of work per element of the special-function instructions and of a division.
SFU_WORK, DIV_WORK = 20, 10


def lanes(chip) -> int:
    """float32 elements one NPU computes per cycle: the alignment in 4-byte words."""
    return max(chip.align_bytes // 4, 1)


def _cpn(chip, t):
    return -(-(t.start_npu + t.shape[1]) // chip.npus)


def _positions(chip, t):
    return t.shape[0] * _cpn(chip, t) * -(-(t.shape[2] * t.shape[3]) // lanes(chip))


def instr_cycles(chip, ins) -> int:
    """Estimated BDC cycles of one instruction (0 for GDMA and host)."""
    if ins.kind != "bdc":
        return 0
    ops = {role: t for role, _, t in ins.operands}
    out = ops.get("output")
    if out is None:
        return 0
    op = ins.op
    if op == "conv2d":
        c, _, kh, kw = ops["weight"].shape
        return _positions(chip, out) * c * kh * kw
    if op == "depthwise2d":
        return _positions(chip, out) * ops["weight"].shape[2] * ops["weight"].shape[3]
    if op in ("max_pool2d", "avg_pool2d"):
        kh, kw = ins.args["kernel"]
        return _positions(chip, out) * kh * kw
    if op == "matmul":
        m, n = out.matrix_shape
        k = ops["left"].matrix_shape[1]
        cpn = -(-out.shape[1] // chip.npus)
        return m * cpn * -(-out.cols_per_channel // lanes(chip)) * k
    work = SFU_WORK if op in ("sigmoid", "tanh", "exp") else DIV_WORK if op in ("div", "rdiv") else 1
    return _positions(chip, out) * work


def estimate(chip, instrs, clock_hz=None, gdma_bytes_per_s=None) -> dict:
    """The cost of ``instrs``: ``bdc_cycles``, ``macs`` (convolution and matmul
    multiply-adds), ``gdma_bytes``, ``seconds`` (compute plus GDMA) and ``overlapped`` (the
    larger of the two), at the chip's :data:`CLOCKS` unless given."""
    clock, bw = CLOCKS.get(chip.name, _DEFAULT)
    clock = clock_hz or clock
    bw = gdma_bytes_per_s or bw
    cycles = macs = moved = 0
    for ins in instrs:
        cycles += instr_cycles(chip, ins)
        moved += ins.nbytes
        if ins.kind == "bdc" and ins.op in ("conv2d", "matmul", "depthwise2d"):
            ops = {role: t for role, _, t in ins.operands}
            out = ops["output"]
            if ins.op == "conv2d":
                c, _, kh, kw = ops["weight"].shape
                macs += math.prod(out.shape) * c * kh * kw
            elif ins.op == "depthwise2d":
                macs += math.prod(out.shape) * ops["weight"].shape[2] * ops["weight"].shape[3]
            else:
                m, n = out.matrix_shape
                macs += m * n * ops["left"].matrix_shape[1]
    t_bdc, t_gdma = cycles / clock, moved / bw
    return {"bdc_cycles": int(cycles), "macs": int(macs), "gdma_bytes": int(moved),
            "seconds": t_bdc + t_gdma, "overlapped": max(t_bdc, t_gdma), "estimate": True}


def gdma_totals(instrs) -> dict:
    """GDMA bytes by direction: ``load`` (system to local: activations and constants),
    ``store``, ``local`` (local to local), ``system`` (system to system) and ``total``."""
    out = {"load": 0, "store": 0, "local": 0, "system": 0}
    for ins in instrs:
        k = {"load": "load", "store": "store", "copy": "local", "s2s": "system",
             "conv_plan": "load"}.get(ins.kind)
        if k:
            out[k] += ins.nbytes
    out["total"] = sum(out.values())
    return out


def group_rows(schedule) -> list:
    """Per group of ``schedule``: ``index``, ``kind``, ``nodes``, ``images``, ``row_slices``,
    ``constants`` ("resident" or "per use"), ``peak_bytes`` (local, per NPU), ``gdma`` and
    the estimate."""
    chip = schedule.chip
    out = []
    for g in schedule.groups:
        instrs = schedule.instrs[g.first:g.last]
        row = {"index": g.index, "kind": g.kind, "nodes": list(g.nodes), "images": g.images,
               "row_slices": g.row_slices, "constants": "resident" if g.resident else "per use",
               "peak_bytes": g.peak_bytes, "gdma": gdma_totals(instrs)}
        row.update(estimate(chip, instrs))
        out.append(row)
    return out

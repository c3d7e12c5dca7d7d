"""The pieces an NPU schedule is made of: how a node runs (:class:`OpPlan`, with its
:class:`Window` rows and :class:`Param` constants), the instructions it becomes
(:class:`Instr`), tensors in system memory (:class:`SysTensor`) and the local-memory size of
a buffer (:func:`span_of`).

>>> from tensorlayout.npu import BM1684
>>> span_of(BM1684, "aligned", (1, 64, 16, 16)), span_of(BM1684, "aligned", (1, 65, 16, 16))
(1024, 2048)
>>> Window(ext=3, stride=1, top=1, bottom=1, size=8).need(0, 4)   # rows 0..3 read 0..4, 1 pad row
(0, 5, 1, 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..npu.tensor import channels_per_npu

__all__ = ["float_tensor", "Window", "Param", "OpPlan", "Instr", "SysTensor", "NoRoom", "span_of",
           "bdc", "align_up", "Buffer", "SliceInfo", "elementwise", "MOST_SPAD", "MOST_DIL", "MOST_C",
           "MOST_PADDED", "MOST_GROUPS"]


def float_tensor(graph, t) -> bool:
    """Whether ``t`` is a computed float32 tensor of known shape with at least one element:
    the tensors the NPU path holds (others stay with the host)."""
    if not t or t in graph.consts or t not in graph.shapes:
        return False
    dt = graph.dtypes.get(t)
    if dt is None:
        dt = graph.input_dtypes.get(t)
    return dt is not None and np.dtype(dt) == np.float32 and all(int(d) > 0 for d in graph.shapes[t])


#: Instruction limits of BM1684's BDC that the schedule checks before choosing the NPU.
MOST_SPAD = 15          # stride and padding fields
MOST_DIL = 16           # dilation
MOST_C = 4095           # convolution channels in and out
MOST_PADDED = 2047      # padded input H and W of a convolution
#: Most groups a grouped convolution runs as (one convolution instruction per group).
MOST_GROUPS = 512


@dataclass(frozen=True)
class Window:
    """Rows of a sliding window: kernel extent ``ext``, ``stride``, padding ``top`` and
    ``bottom`` (ceil-mode rows included) over an input of ``size`` rows."""

    ext: int
    stride: int
    top: int
    bottom: int
    size: int

    def need(self, lo, hi):
        """Input rows ``[a, b)`` and the padding ``(top, bottom)`` output rows ``[lo, hi)`` read."""
        first = lo * self.stride - self.top
        last = (hi - 1) * self.stride - self.top + self.ext
        return max(first, 0), min(last, self.size), max(-first, 0), max(last - self.size, 0)


@dataclass
class Param:
    """A constant the node loads into local memory: ``key`` (unique in the graph), the BDC
    operand ``role``, ``layout`` ("2IC" conv weights, "compact", "matrix"), the local
    ``shape`` (4-D; a matrix's (rows, cols)), ``cpc`` (a matrix's columns per channel),
    ``npu_offset`` (channels after the output's first: the NPU it starts in), ``make`` (the
    float32 array the host writes into system memory: 2IC packed, compact or the matrix) and
    ``label``, the graph constant it is made from where ``key`` differs."""

    key: str
    role: str
    layout: str
    shape: tuple
    make: object
    cpc: int = 0
    npu_offset: int = 0
    label: str = ""          # the name reports give it (the graph's constant), else the key

    @property
    def name(self) -> str:
        return self.label or self.key

    @property
    def nbytes(self) -> int:
        if self.layout == "2IC":
            c, k, kh, kw = self.shape
            return 4 * 2 * (-(-c // 2)) * k * kh * kw
        return 4 * int(np.prod(self.shape))


@dataclass
class OpPlan:
    """One node's way onto the NPU (see the module's docstring)."""

    node: object
    kind: str
    why: str
    ins: list = field(default_factory=list)       # activation (or expanded constant) names
    reqs: list = field(default_factory=list)      # per input: any | same | aligned | compact
    rows: list = field(default_factory=list)      # per input: None (same rows) | Window | "all"
    whole: bool = False                           # needs whole tensors: no slicing along H
    params: list = field(default_factory=list)
    temps: list = field(default_factory=list)     # per temp: "out" (the output's shape) | "compact"
    out_npu: str = "same"                         # "same" as input 0, or "any"
    emit: object = None
    consts: dict = field(default_factory=dict)    # expanded constant inputs: name -> array
    local: str = ""                               # moves: concat | slice | view
    offsets: tuple = ()                           # slice / split: channel offset of each output
    macs: int = 0



def bdc(op, args=None, **operands):
    """One BDC instruction: its function in :mod:`tensorlayout.npu.bdc`, scalar arguments and
    operands as ``role=(tensor name, NpuTensor)``."""
    return (op, tuple((role, v[0], v[1]) for role, v in operands.items() if v is not None),
            dict(args or {}))


def elementwise(node, x, emit, temps=(), reqs=None, extra=()):
    """The plan of an element-wise node: its inputs in the output's NPU, row for row."""
    return OpPlan(node, "bdc", "", ins=[x, *extra], reqs=reqs or ["same"] * (1 + len(extra)),
                  rows=[None] * (1 + len(extra)), temps=list(temps), emit=emit)


class NoRoom(Exception):
    """The group does not fit (or cannot be cut as asked); the message says why."""


@dataclass(frozen=True)
class SysTensor:
    """A tensor in system memory: byte ``address``, ``shape`` (the graph's) and element ``strides``."""

    address: int
    shape: tuple
    strides: tuple

    @staticmethod
    def continuous(address, shape):
        strides, acc = [], 1
        for d in reversed(shape):
            strides.append(acc)
            acc *= int(d)
        return SysTensor(int(address), tuple(int(d) for d in shape), tuple(reversed(strides)))

    @property
    def is_continuous(self) -> bool:
        return self == SysTensor.continuous(self.address, self.shape)


@dataclass
class Instr:
    """One instruction: ``kind`` (load, store, copy, s2s, bdc, host), the ``node`` it serves,
    ``op`` (the BDC function, or "tensor" / "matrix" for GDMA), ``operands`` ((role, name,
    NpuTensor) ...), ``args`` (the call's other arguments), its ``group`` and ``slice``, and
    ``nbytes``: bytes a GDMA instruction moves; ``holds`` (below)."""

    kind: str
    node: str
    op: str
    operands: tuple = ()
    args: dict = field(default_factory=dict)
    group: int = -1
    slice: int = 0
    nbytes: int = 0
    #: on a node's last BDC instruction of a slice: ((output, its placement, image, first
    #: row), ...), what that slice leaves of the node's outputs in local memory
    holds: tuple = ()


def align_up(chip, v):
    """``v`` bytes rounded up to the chip's alignment."""
    return -(-v // chip.align_bytes) * chip.align_bytes


def span_of(chip, kind, shape, q=0, cpc=1):
    """Bytes per NPU (the fullest) of a buffer: ``kind`` "aligned" (a 4-D image), "compact",
    "2IC" ((C, K, kh, kw) weights) or "matrix" ((rows, cols) with ``cpc``), from start NPU ``q``."""
    X = chip.npus
    if kind == "matrix":
        rows, cols = shape
        c = -(-cols // cpc)
        cs = align_up(chip, 4 * cpc) // 4
        cpn = -(-c // X)
        return 4 * ((rows - 1) * cs * cpn + (cpn - 1) * cs + cpc)
    if kind == "2IC":
        c, k, kh, kw = shape
        cpn = channels_per_npu(chip, q, k)
        return 8 * ((-(-c // 2) - 1) * kh * kw * cpn + (cpn - 1) * kh * kw + kh * kw)
    n, c, h, w = shape
    cpn = channels_per_npu(chip, q, c)
    cs = h * w if kind == "compact" else align_up(chip, 4 * h * w) // 4
    return 4 * ((n - 1) * cs * cpn + (cpn - 1) * cs + h * w)


@dataclass
class Buffer:
    """A local-memory buffer of a layer group: ``key``, ``kind`` (act, param, temp), start
    NPU ``q``, bytes per NPU, the first and last event of one slice that use it, its offset."""

    key: str
    kind: str          # act | param | temp
    q: int             # start NPU
    span: int
    first: int
    last: int
    offset: int = -1


@dataclass
class SliceInfo:
    """One slice of a group: image ``n``, row slice ``index``, and the padding rows at its
    top and bottom that a window instruction adds (only at the image's edges)."""

    n: int
    index: int          # slice along H
    pad_top: int = 0
    pad_bottom: int = 0

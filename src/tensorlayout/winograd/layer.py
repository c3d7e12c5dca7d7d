"""The seed's Caffe-style Winograd layer: fixed algorithm, flat parameters, cached weight transform."""

from __future__ import annotations

import enum

import numpy as np

from ..errors import (AlgorithmError, DTypeError, LayoutError, ShapeError, check_array,
                      check_nonneg_int, check_positive_int)
from .plan import ConvPlan, plan_conv2d

__all__ = ["Algorithm", "WinogradLayer"]


class Algorithm(enum.Enum):
    """Winograd algorithms of the layer: F(m×m, r×r) with an α×α input tile, α = m + r − 1.

    >>> Algorithm.F6X6_3X3.m, Algorithm.F6X6_3X3.r, Algorithm.F6X6_3X3.tile_in
    (6, 3, 8)
    >>> Algorithm.parse("WT_6X6_F_4X4_3X3")
    <Algorithm.F4X4_3X3: (4, 3)>
    """

    F2X2_3X3 = (2, 3)
    F4X4_3X3 = (4, 3)
    F6X6_3X3 = (6, 3)
    F4X4_5X5 = (4, 5)

    @property
    def m(self) -> int:
        return self.value[0]

    @property
    def r(self) -> int:
        return self.value[1]

    @property
    def tile_in(self) -> int:
        return self.value[0] + self.value[1] - 1

    @classmethod
    def parse(cls, alg) -> "Algorithm":
        """An :class:`Algorithm` from itself, its name, or the seed's WT_<α>X<α>_F_<m>X<m>_<r>X<r>."""
        if isinstance(alg, cls):
            return alg
        if isinstance(alg, str):
            name = alg.strip().upper()
            if name in cls.__members__:
                return cls[name]
            for a in cls:
                t = a.tile_in
                if name == f"WT_{t}X{t}_F_{a.m}X{a.m}_{a.r}X{a.r}":
                    return a
        raise AlgorithmError(
            f"alg = {alg!r} is not allowed: convolution algorithm must be one of "
            f"{', '.join(a.name for a in cls)} (or the seed's WT_8X8_F_6X6_3X3 style names)")


class WinogradLayer:
    """Winograd convolution layer after the seed: NCHW data, flat OIHW weights then bias.

    Output size ``(W + 2P − K) / S + 1``; ``ntiles = ceil(out / m)`` per side (the seed's
    formula).  ``forward(data, params)`` transforms the weights on the first call and
    reuses the transform while ``params`` stays equal to the cached copy.

    >>> layer = WinogradLayer(Algorithm.F4X4_3X3, 1, 6, 6, 2, 3, 3, 1, 1, 1, 1)
    >>> layer.out_h, layer.ntiles_h, layer.params_size       # 2*1*9 weights + 1 bias
    (6, 2, 19)
    >>> params = np.r_[np.ones(18), 0.5].astype(np.float32)
    >>> float(layer.forward(np.ones((1, 2, 6, 6), np.float32), params)[0, 0, 2, 2])
    18.5
    """

    def __init__(self, alg, batch_size, in_h, in_w, in_c, k_h, k_w, stride_h, stride_w,
                 out_c, pad, bias=True, tuning=None):
        self.alg = Algorithm.parse(alg)
        self.tuning = tuning
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.in_h = check_positive_int("in_h", in_h)
        self.in_w = check_positive_int("in_w", in_w)
        self.in_c = check_positive_int("in_c", in_c)
        self.k_h = check_positive_int("k_h", k_h)
        self.k_w = check_positive_int("k_w", k_w)
        self.stride_h = check_positive_int("stride_h", stride_h)
        self.stride_w = check_positive_int("stride_w", stride_w)
        self.out_c = check_positive_int("out_c", out_c)
        self.pad = check_nonneg_int("pad", pad)
        if not isinstance(bias, (bool, np.bool_)):
            raise LayoutError(f"bias = {bias!r} is not allowed: it must be True or False")
        self.bias = bool(bias)
        a = self.alg
        if (self.stride_h, self.stride_w) != (1, 1):
            raise AlgorithmError(
                f"stride_h, stride_w = {self.stride_h}, {self.stride_w} is not allowed: "
                f"{a.name} computes stride-1 convolutions only")
        if (self.k_h, self.k_w) != (a.r, a.r):
            raise AlgorithmError(
                f"k_h, k_w = {self.k_h}, {self.k_w} is not allowed: {a.name} needs a "
                f"{a.r}x{a.r} kernel")
        self.out_h = (self.in_h + 2 * self.pad - self.k_h) // self.stride_h + 1
        self.out_w = (self.in_w + 2 * self.pad - self.k_w) // self.stride_w + 1
        if self.out_h < 1 or self.out_w < 1:
            raise ShapeError(
                f"in_h, in_w = {self.in_h}, {self.in_w} with pad = {self.pad} is too small for "
                f"a {self.k_h}x{self.k_w} kernel: the output would be {self.out_h}x{self.out_w}")
        self.tile_h_in = self.tile_w_in = a.tile_in
        self.tile_h_out = self.tile_h_in - self.k_h + 1
        self.tile_w_out = self.tile_w_in - self.k_w + 1
        self.ntiles_h = (max(self.in_h + self.pad - self.tile_h_in + 1, self.out_h)
                         + self.tile_h_out - 1) // self.tile_h_out
        self.ntiles_w = (max(self.in_w + self.pad - self.tile_w_in + 1, self.out_w)
                         + self.tile_w_out - 1) // self.tile_w_out
        self.weight_size = self.out_c * self.in_c * self.k_h * self.k_w
        self.params_size = self.weight_size + (self.out_c if self.bias else 0)
        self._plan: ConvPlan | None = None
        self._params: np.ndarray | None = None
        self.weight_transforms = 0          # how many times the weights were transformed

    @property
    def input_shape(self) -> tuple:
        return (self.batch_size, self.in_c, self.in_h, self.in_w)

    @property
    def output_shape(self) -> tuple:
        return (self.batch_size, self.out_c, self.out_h, self.out_w)

    def _load(self, params) -> ConvPlan:
        p = check_array("params", params, dtypes=(np.float32, np.float64))
        if p.ndim != 1:
            raise ShapeError(f"params has shape {p.shape}: it must be the flat 1-D array of "
                             "OIHW weights followed by the bias")
        if p.shape[0] != self.params_size:
            what = (f"{self.weight_size} weights ({self.out_c}x{self.in_c}x{self.k_h}x{self.k_w})"
                    + (f" + {self.out_c} bias" if self.bias else ", no bias"))
            raise ShapeError(f"params has {p.shape[0]} values: this layer needs "
                             f"{self.params_size} = {what}")
        if (self._plan is not None and self._params.dtype == p.dtype
                and np.array_equal(self._params, p)):
            return self._plan
        w = p[:self.weight_size].reshape(self.out_c, self.in_c, self.k_h, self.k_w)
        b = p[self.weight_size:] if self.bias else None
        self._plan = plan_conv2d(self.input_shape, w, b, padding=self.pad, tuning=self.tuning,
                                 algorithm="winograd", tile=self.alg.m)
        self._params = p.copy()
        self.weight_transforms += 1
        return self._plan

    def forward(self, data, params) -> np.ndarray:
        """Convolve ``data`` (batch, in_c, in_h, in_w) — or the same values flat — with ``params``.

        Returns (batch, out_c, out_h, out_w) in the dtype of ``data`` (which must match
        ``params``: float32 or float64).
        """
        plan = self._load(params)
        d = check_array("data", data, dtypes=(np.float32, np.float64))
        if d.dtype != plan.dtype:
            raise DTypeError(f"data has dtype {d.dtype} but params have {plan.dtype}: "
                             "they must match")
        size = int(np.prod(self.input_shape))
        if d.ndim == 1 and d.shape[0] == size:
            d = d.reshape(self.input_shape)
        elif tuple(d.shape) != self.input_shape:
            raise ShapeError(f"data has shape {d.shape}: this layer takes {self.input_shape} "
                             f"(or {size} values flat)")
        return plan.run(d)

    get_inference_cpu = forward

    def __repr__(self) -> str:
        return (f"WinogradLayer({self.alg.name}, batch={self.batch_size}, "
                f"in={self.in_c}x{self.in_h}x{self.in_w}, out={self.out_c}x{self.out_h}x"
                f"{self.out_w}, k={self.k_h}x{self.k_w}, pad={self.pad}, bias={self.bias})")

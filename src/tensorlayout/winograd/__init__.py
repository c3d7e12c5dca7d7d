"""Winograd convolution: exact transforms, the seed's WinogradLayer, and conv2d.

* :func:`transforms` — exact F(m, r) matrices Aᵀ, G, Bᵀ (Fractions), checked before use;
* :class:`WinogradLayer`, :class:`Algorithm` — the seed's Caffe-style layer;
* :func:`conv2d`, :func:`plan_conv2d` — NCHW/OIHW convolution by Winograd, im2col or
  direct loops, with the choice reported (:class:`ConvInfo`).

>>> from tensorlayout.winograd import conv2d
>>> import numpy as np
>>> y, info = conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), return_info=True)
>>> y.shape, info.algorithm
((1, 1, 3, 3), 'direct')
"""

from .conv import (ALGORITHMS, ConvInfo, ConvPlan, choose_algorithm, conv2d, numba_available,
                   plan_conv2d)
from .layer import Algorithm, WinogradLayer
from .transforms import Transforms, default_points, transforms

__all__ = ["transforms", "Transforms", "default_points", "Algorithm", "WinogradLayer",
           "conv2d", "plan_conv2d", "ConvPlan", "ConvInfo", "choose_algorithm", "ALGORITHMS",
           "numba_available"]

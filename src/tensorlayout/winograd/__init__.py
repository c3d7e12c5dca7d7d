"""Winograd convolution: exact transforms, the seed's WinogradLayer, and conv2d.

* :func:`transforms` — exact F(m, r) matrices Aᵀ, G, Bᵀ (Fractions), checked before use;
* :class:`WinogradLayer`, :class:`Algorithm` — the seed's Caffe-style layer;
* :func:`conv2d`, :func:`plan_conv2d` — NCHW/OIHW convolution by Winograd, im2col or
  direct loops, with the choice reported (:class:`ConvInfo`);
* :class:`Tuning` — every knob of the engine, passed to a plan explicitly.

The package's rooms: ``_args`` (argument checks), ``auto`` (the auto rule), ``plan``
(plans and entry points), ``engine`` (the Winograd driver and its schedules),
``im2col`` and ``direct`` (the other algorithms), ``_kernels`` and ``_codegen``
(compiled loops, generic and generated per F(m, r)), ``_pool`` (threads), ``tuning``.

>>> from tensorlayout.winograd import conv2d
>>> import numpy as np
>>> y, info = conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), return_info=True)
>>> y.shape, info.algorithm
((1, 1, 3, 3), 'direct')
"""

from .auto import choose_algorithm
from .layer import Algorithm, WinogradLayer
from .plan import ALGORITHMS, ConvInfo, ConvPlan, conv2d, numba_available, plan_conv2d
from .transforms import Transforms, default_points, transforms
from .tuning import Tuning

__all__ = ["transforms", "Transforms", "default_points", "Algorithm", "WinogradLayer",
           "conv2d", "plan_conv2d", "ConvPlan", "ConvInfo", "choose_algorithm", "ALGORITHMS",
           "numba_available", "Tuning"]

"""im2col + GEMM: the columns of a band of output rows gathered, then one GEMM per group.

Columns are filled, and the GEMM split by output channels, on our threads with BLAS held
to one thread: BLAS's own worker threads keep spinning after a call and slow down
whatever runs next on the same cores.  Every product of the kernel window is taken,
padded zeros included, so NaN and Inf in weights or input land where PyTorch puts them.
"""

from __future__ import annotations

import numpy as np

from . import _pool, engine


def im2col(plan, x: np.ndarray, use_numba: bool, threads: int) -> np.ndarray:
    C = x.shape[1]
    K, Cg, KH, KW = plan.w.shape
    OW = plan.out_shape[3]
    dt = x.dtype
    rows_per = max(1, min(plan.out_shape[2], (8 << 20) // max(1, C * KH * KW * OW * dt.itemsize)))
    W3 = plan.w.reshape(plan.groups, K // plan.groups, Cg * KH * KW)
    y = np.empty(plan.out_shape, dtype=dt)
    cols_buf = engine.scratch((C * KH * KW, rows_per * OW), dt)   # pages reused between calls
    try:
        if use_numba and engine_used(plan, dt, threads):
            _run_engine(plan, x, y, W3, cols_buf, rows_per, threads)
        else:
            _bands(plan, x, y, W3, cols_buf, rows_per, use_numba, threads if use_numba else 1)
    finally:
        engine.give_back(cols_buf)
    y += plan.bias[None, :, None, None]
    return y


def engine_used(plan, dtype, threads) -> bool:
    """True when a call runs :func:`_kernels.im2col_engine` (float32, from
    ``Tuning.parallel_min_threads`` threads on, BLAS's sgemm found): Python threads
    handing out BLAS calls scale badly past a few cores."""
    return (dtype == np.float32 and threads >= plan.tuning.parallel_min_threads
            and _pool.sgemm_entry() is not None)


def _run_engine(plan, x, y, W3, cols_buf, rows_per, threads):
    from . import _kernels

    KH, KW = plan.w.shape[2:]
    sh, sw = plan.stride
    ph, pw = plan.padding
    dh, dw = plan.dilation
    with engine.on_numba_threads(threads):
        _kernels.im2col_engine(x, W3, y, cols_buf, rows_per, KH, KW, sh, sw, ph, pw, dh, dw,
                               min(cols_buf.shape[0], 4 * threads), _pool.sgemm_entry(), 16)


def _bands(plan, x, y, W3, cols_buf, rows_per, use_nb, nt):
    """Each band of ``rows_per`` output rows: its columns gathered into ``cols_buf`` (numba
    on our threads, or NumPy from a padded copy of ``x``), then one GEMM per group."""
    N, _, H, W = x.shape
    K, Cg, KH, KW = plan.w.shape
    groups = plan.groups
    Kg = K // groups
    C = Cg * groups
    KK = KH * KW
    OH, OW = plan.out_shape[2:]
    sh, sw = plan.stride
    ph, pw = plan.padding
    dh, dw = plan.dilation
    if use_nb:
        from . import _kernels
    else:
        xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dtype=x.dtype)
        xp[:, :, ph:ph + H, pw:pw + W] = x
    for n in range(N):
        yn = y[n].reshape(groups, Kg, OH * OW)
        for oh0 in range(0, OH, rows_per):
            rows = min(rows_per, OH - oh0)
            cols = cols_buf[:, :rows * OW]
            if use_nb:
                _pool.run_split(
                    lambda r0, r1: _kernels.im2col(x, cols, n, oh0, KH, KW, sh, sw, ph, pw,
                                                   dh, dw, OW, r0, r1), C * KK, nt)
            else:
                c5 = cols.reshape(C, KH, KW, rows, OW)
                for kh in range(KH):
                    for kw in range(KW):
                        y0 = oh0 * sh + kh * dh
                        x0 = kw * dw
                        c5[:, kh, kw] = xp[n, :, y0:y0 + sh * (rows - 1) + 1:sh,
                                           x0:x0 + sw * (OW - 1) + 1:sw]
            cols3 = cols.reshape(groups, Cg * KK, rows * OW)
            if use_nb and nt > 1:
                def gemm(k0, k1):
                    with np.errstate(invalid="ignore", over="ignore"):
                        np.matmul(W3[:, k0:k1], cols3,
                                  out=yn[:, k0:k1, oh0 * OW:(oh0 + rows) * OW])

                with _pool.single_threaded_blas():
                    _pool.run_split(gemm, Kg, nt)
            elif use_nb:
                with _pool.single_threaded_blas():
                    np.matmul(W3, cols3, out=yn[:, :, oh0 * OW:(oh0 + rows) * OW])
            else:
                yn[:, :, oh0 * OW:(oh0 + rows) * OW] = np.matmul(W3, cols3)

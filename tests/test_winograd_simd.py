"""The packed-panel SIMD GEMM, the native workers, and a prepared plan under concurrent callers.

Oracles: float64 sums written out here (``oracle_gemm``) for the GEMM, and the float64 direct
convolution loop of ``test_winograd`` for convolutions; concurrent calls are compared with the
same plan's sequential results.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from tensorlayout.errors import LayoutError, ShapeError

pytest.importorskip("llvmlite")
from tensorlayout.winograd import _simd  # noqa: E402

from test_winograd import reference_conv, rel_err  # noqa: E402


def oracle_gemm(a, b):
    """float64 C = A B as one dot product of row i and column j per element."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    c = np.zeros((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            c[i, j] = np.sum(a[i] * b[:, j])
    return c


def _isas():
    best = _simd.isa().name
    order = ("portable", "avx2", "avx512")
    return order[:order.index(best) + 1]


@pytest.fixture(params=_isas())
def isa(request):
    if not _simd.available():
        pytest.skip("llvmlite cannot compile the SIMD module here")
    return request.param


def test_gemm_every_edge_of_the_micro_kernel(isa):
    """Sizes around the micro-kernel's rows (mr) and columns (nr), depth 0 and odd, row strides
    wider than the matrices: the result equals the float64 oracle within float32 rounding, and
    nothing outside C's m × n block is written."""
    t = _simd.module(isa).isa
    mr, nr = t.mr, t.nr
    rng = np.random.default_rng(5)
    for m, n, k in [(1, 1, 1), (mr, nr, 2), (2 * mr + 1, t.lanes, 5), (mr + 3, t.lanes - 1, 4), (mr - 1, nr - 1, 3), (mr + 1, nr + 1, 7),
                    (2 * mr + 3, 2 * nr + 5, 33), (3, nr // 2 + 1, 0), (mr * 3, 1, 64)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b_full = rng.standard_normal((k, n + 7)).astype(np.float32)
        b = b_full[:, 2:n + 2]                                   # row stride n + 7
        c_full = np.full((m + 2, n + 9), 7.5, np.float32)
        c = c_full[1:m + 1, 3:n + 3]
        _simd.gemm(_simd.pack_rows(a, mr), b, m, c=c, isa_name=isa)
        want = oracle_gemm(a, b)
        tol = 1e-5 * max(1, k)
        np.testing.assert_allclose(c, want, rtol=0, atol=tol, err_msg=f"{isa} {m} {n} {k}")
        mask = np.ones(c_full.shape, bool)
        mask[1:m + 1, 3:n + 3] = False
        assert (c_full[mask] == 7.5).all(), f"{isa} {m} {n} {k}: wrote outside C"
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        c1 = c0.copy()
        _simd.gemm(_simd.pack_rows(a, mr), b, m, c=c1, accumulate=True, isa_name=isa)
        np.testing.assert_allclose(c1, c0 + want, rtol=0, atol=tol + 1e-6)


def test_gemm_epilogue_in_the_store(isa):
    """``tl_sgemm_ep``: (A·B + bias) + residual, then none, Relu or Clip, applied once after
    the last slice of the depth (depths past KC included), in every micro-kernel's store
    (full, masked, the pair of panels): equal to the float64 oracle, NaN kept as the CPU
    backend's epilogue keeps it, nothing outside C written, the residual left as it was."""
    mod = _simd.module(isa)
    t = mod.isa
    mr, nr, w = t.mr, t.nr, t.lanes
    i64 = ctypes.c_int64
    fn = ctypes.CFUNCTYPE(None, *[i64] * 13)(mod.addr["tl_sgemm_ep"])
    rng = np.random.default_rng(11)
    lohi = np.array([-0.5, 0.75], np.float32)
    for m, n, k in [(mr, nr, 3), (2 * mr + 3, nr + w + 1, _simd.KC + 9), (mr - 1, w - 3, 2),
                    (3 * mr, 2 * nr, 2 * _simd.KC + 1), (1, 1, 1)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        b[0, n // 2] = np.nan
        bias = rng.standard_normal(m).astype(np.float32)
        ap = _simd.pack_rows(a, mr)
        for act in (0, 1, 2):
            for with_res in (False, True):
                for acc in (False, True):
                    c_full = np.full((m + 2, n + 9), 7.5, np.float32)
                    c = c_full[1:m + 1, 3:n + 3]
                    c0 = rng.standard_normal((m, n)).astype(np.float32)
                    c[...] = c0
                    r_full = rng.standard_normal((m + 2, n + 9)).astype(np.float32)
                    r = r_full[1:m + 1, 3:n + 3]
                    r_before = r_full.copy()
                    fn(m, n, k, ap.ctypes.data, b.ctypes.data, n, c.ctypes.data, n + 9,
                       int(acc) | 4,
                       bias.ctypes.data, r.ctypes.data if with_res else 0, act,
                       lohi.ctypes.data)
                    with np.errstate(invalid="ignore"):
                        z = oracle_gemm(a, b) + (c0 if acc else 0) + bias[:, None]
                        if with_res:
                            z = z + r
                        if act == 1:
                            z = np.where(z < 0, 0, z)
                        elif act == 2:
                            z = np.where(z < lohi[0], lohi[0], np.where(z > lohi[1], lohi[1], z))
                    what = f"{isa} {m} {n} {k} act {act} res {with_res} acc {acc}"
                    np.testing.assert_array_equal(np.isnan(c), np.isnan(z), err_msg=what)
                    ok = ~np.isnan(z)
                    np.testing.assert_allclose(c[ok], z[ok], rtol=0, atol=1e-5 * k + 1e-6,
                                               err_msg=what)
                    mask = np.ones(c_full.shape, bool)
                    mask[1:m + 1, 3:n + 3] = False
                    assert (c_full[mask] == 7.5).all(), what
                    np.testing.assert_array_equal(r_full, r_before)


def test_gemm_nan_and_inf_follow_ieee(isa):
    """A NaN or Inf in B reaches every row of its column (NaN · 0 is NaN), as in float64."""
    t = _simd.module(isa).isa
    rng = np.random.default_rng(6)
    m, n, k = t.mr + 2, t.nr + 3, 9
    a = rng.standard_normal((m, k)).astype(np.float32)
    a[3, :] = 0
    b = rng.standard_normal((k, n)).astype(np.float32)
    b[4, 2] = np.nan
    b[1, n - 1] = np.inf
    c = _simd.gemm(_simd.pack_rows(a, t.mr), b, m, isa_name=isa)
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(c), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(c), np.isinf(want))


def test_gemm_refuses_bad_arguments_by_name():
    ap = _simd.pack_rows(np.ones((3, 4), np.float32))
    with pytest.raises(ShapeError, match="b has shape"):
        _simd.gemm(ap, np.ones((5, 2), np.float32), 3)
    with pytest.raises(ShapeError, match="m = 99 is not allowed"):
        _simd.gemm(ap, np.ones((4, 2), np.float32), 99)
    with pytest.raises(ShapeError, match="a_packed has shape"):
        _simd.gemm(np.ones((3, 4)), np.ones((4, 2), np.float32), 3)
    with pytest.raises(ShapeError, match="c has shape"):
        _simd.gemm(ap, np.ones((4, 2), np.float32), 3, c=np.ones((3, 3), np.float32))
    with pytest.raises(LayoutError, match="isa = 'sse9' is not allowed"):
        _simd.isa("sse9")


def test_workers_run_exactly_the_threads_asked_for():
    """Each of nt parts runs once, on nt distinct OS threads (the caller's among them), and the
    barrier holds every part until all have arrived; several Python threads may call at once."""
    pytest.importorskip("numba")
    from numba import carray, cfunc, types

    from tensorlayout.winograd import _pool
    from tensorlayout.winograd._native import call_i64, call_void, ptr_i64

    workers = _pool.workers()
    if workers is None:
        pytest.skip("no native workers on this platform")
    mod = _simd.module()

    @cfunc(types.void(types.int64, types.int64, types.int64, types.int64))
    def part(ctx, tid, nt, work):
        a = carray(ptr_i64(ctx), (300,))
        a[10 + tid] = call_i64(a[0], (186,))          # gettid(): the OS thread
        call_i64(a[1], (ctx + 8 * 2, 1))                 # arrivals += 1
        call_void(a[3], (ctx + 8 * 4, nt, 1000))         # barrier
        a[150 + tid] = a[2]                              # all nt had arrived

    syscall = ctypes.cast(ctypes.CDLL(None).syscall, ctypes.c_void_p).value
    for nt in (1, 2, 3, 7, 16):
        ctx = np.zeros(300, np.int64)
        ctx[0], ctx[1], ctx[3] = syscall, mod.addr["tl_fetch_add"], mod.addr["tl_barrier"]
        workers.run(part.address, ctx.ctypes.data, nt)
        tids = ctx[10:10 + nt]
        assert len(set(tids)) == nt and (tids > 0).all(), (nt, tids)
        assert (ctx[10 + nt:150] == 0).all()
        assert (ctx[150:150 + nt] == nt).all(), (nt, ctx[150:150 + nt])
    errors = []

    def caller(i):
        for _ in range(50):
            c = np.zeros(300, np.int64)
            c[0], c[1], c[3] = syscall, mod.addr["tl_fetch_add"], mod.addr["tl_barrier"]
            workers.run(part.address, c.ctypes.data, 3)
            if c[2] != 3 or len(set(c[10:13])) != 3:
                errors.append((i, c[:16].tolist()))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_workers_hand_out_units_and_withdraw_posts_no_worker_took():
    """The call's work counter starts at 0 for every call, so the parts that take units from
    it do each unit exactly once; with ``claims`` the posts no worker has taken when the
    caller's part returns are withdrawn (never run later), without it every part runs."""
    pytest.importorskip("numba")
    from numba import carray, cfunc, types

    from tensorlayout.winograd import _pool
    from tensorlayout.winograd._native import fetch_add, ptr_i64

    workers = _pool.workers()
    if workers is None:
        pytest.skip("no native workers on this platform")

    @cfunc(types.void(types.int64, types.int64, types.int64, types.int64))
    def part(ctx, tid, nt, work):
        a = carray(ptr_i64(ctx), (1000,))
        fetch_add(ctx + 8, 1)                            # parts run
        fetch_add(ctx + 8 * (900 + tid), 1)              # part tid run once more
        while True:
            u = fetch_add(work, 1)
            if u >= a[0]:
                break
            fetch_add(ctx + 8 * (8 + u), 1)              # unit u done once more

    for claims in (True, False):
        ran = []
        for nt in (1, 2, 3, 8, 16):
            for units in (0, 1, 5, 300):
                for _ in range(10):
                    ctx = np.zeros(1000, np.int64)
                    ctx[0] = units
                    workers.run(part.address, ctx.ctypes.data, nt, claims=claims)
                    assert (ctx[8:8 + units] == 1).all(), (claims, nt, units, ctx[8:8 + units])
                    assert (ctx[8 + units:900] == 0).all() and (ctx[900 + nt:] == 0).all()
                    parts = ctx[900:900 + nt]
                    # the caller's part always runs, no part runs twice, and the count of
                    # parts run is the parts that ran
                    assert parts[0] == 1 and parts.max() == 1, (claims, nt, parts)
                    assert ctx[1] == parts.sum()
                    ran.append((nt, units, int(ctx[1])))
        if claims:
            # with nothing to do the caller returns at once: most posts are withdrawn
            assert any(r < nt for nt, units, r in ran if units == 0 and nt >= 8), ran
        else:
            assert all(r == nt for nt, units, r in ran), ran
    # after withdrawn posts, a call that needs every part (a barrier) still gets them all
    test_workers_run_exactly_the_threads_asked_for()


def _plans():
    from tensorlayout.winograd import Tuning, plan_conv2d

    rng = np.random.default_rng(47)
    w = (rng.standard_normal((24, 20, 3, 3)) / 13).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    shape = (1, 20, 17, 23)
    now = dict(compile="wait")
    yield "native tiles", plan_conv2d(shape, w, b, padding=1, algorithm="winograd:4",
                                      tuning=Tuning(threads=2, min_block_tiles=4, **now)), w, b
    yield "native split", plan_conv2d(shape, w, b, padding=1, algorithm="winograd:2",
                                      tuning=Tuning(threads=3, min_block_tiles=1 << 20,
                                                    small_weights_bytes=1, **now)), w, b
    yield "blas", plan_conv2d(shape, w, b, padding=1, algorithm="winograd:4",
                              tuning=Tuning(threads=2, gemm="blas", **now)), w, b
    yield "float64", plan_conv2d(shape, w.astype(np.float64), b.astype(np.float64), padding=1,
                                 algorithm="winograd:4", tuning=Tuning(threads=2, **now)), w, b
    yield "im2col", plan_conv2d(shape, w, b, padding=1, algorithm="im2col",
                                tuning=Tuning(threads=2, **now)), w, b
    yield "numpy", plan_conv2d(shape, w, b, padding=1, algorithm="winograd:4",
                               tuning=Tuning(threads=2, use_numba=False)), w, b


@pytest.mark.parametrize("case", ["native tiles", "native split", "blas", "float64", "im2col",
                                  "numpy"])
def test_one_plan_from_several_threads_equals_sequential_runs(case):
    """Issue 21's defect: one prepared plan called from several threads at once, with finite
    inputs and inputs holding NaN or Inf (which send a Winograd call to im2col), gives every
    caller exactly what a sequential call gives, and each thread's last_fallback is its own."""
    pytest.importorskip("numba")
    name, plan, w, b = next(p for p in _plans() if p[0] == case)
    rng = np.random.default_rng(53)
    dt = plan.dtype
    xs = [rng.standard_normal(plan.x_shape).astype(dt) for _ in range(4)]
    xs[1][0, 3, 4, 5] = np.nan
    xs[3][0, 11, 16, 22] = np.inf
    seq = [plan(x) for x in xs]
    for x, y in zip(xs, seq):                       # the sequential runs are right
        ref = reference_conv(x, w, b, 1, 1)
        fin = np.isfinite(ref)
        assert rel_err(y[fin], ref[fin]) < 2e-5
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    winograd = plan.info.algorithm == "winograd"
    bad = []

    def caller(i):
        x = xs[i]
        for _ in range(6):
            y = plan(x)
            if not np.array_equal(y, seq[i], equal_nan=True):
                bad.append((i, "result"))
            recomputed = winograd and not np.isfinite(x).all()
            if (plan.last_fallback is not None) != recomputed:
                bad.append((i, "fallback", plan.last_fallback))

    threads = [threading.Thread(target=caller, args=(i % 4,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad


def _guarded(nbytes):
    """A writable float32 array of nbytes ending exactly where an inaccessible page begins (a
    read past its end faults), and the mapping that keeps it alive."""
    import mmap

    page = mmap.PAGESIZE
    size = -(-nbytes // page) * page
    mem = mmap.mmap(-1, size + page)
    libc = ctypes.CDLL(None, use_errno=True)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(base + size, page, 0) != 0:
        pytest.skip("mprotect is not available")
    arr = np.frombuffer(mem, np.uint8, count=nbytes, offset=size - nbytes).view(np.float32)
    return arr, mem


def test_gemm_never_reads_past_its_operands(isa):
    """A and B placed against an inaccessible page: every tail path (one lone panel, a narrow
    last block of columns) stays inside them."""
    import platform

    if platform.system() != "Linux":
        pytest.skip("guard pages through mprotect")
    t = _simd.module(isa).isa
    rng = np.random.default_rng(7)
    for m, n, k in [(t.mr, t.lanes, 3), (3 * t.mr - 2, 5, 4), (t.mr + 1, t.nr + 3, 2)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        packed = _simd.pack_rows(a, t.mr)
        ga, keep_a = _guarded(packed.nbytes)
        ga[:] = packed.ravel()
        b = rng.standard_normal((k, n)).astype(np.float32)
        gb, keep_b = _guarded(b.nbytes)
        gb[:] = b.ravel()
        c = _simd.gemm(ga.reshape(packed.shape), gb.reshape(k, n), m, isa_name=isa)
        np.testing.assert_allclose(c, oracle_gemm(a, b), rtol=0, atol=1e-4)
        del ga, gb
        keep_a.close()
        keep_b.close()


@pytest.mark.parametrize("m", [2, 4, 6])
def test_one_shot_transforms_each_panel_where_it_is_used(m):
    """A one-shot conv2d in the split schedule transforms every weight panel in the thread that
    uses it, never the whole filter bank: same numbers as a prepared plan (whose panels were
    transformed first, by the same kernel), and as the float64 loop; grouped too."""
    pytest.importorskip("numba")
    import tensorlayout as tl
    from tensorlayout.winograd import Tuning, engine, plan_conv2d

    if not engine.native_ok():
        pytest.skip("no native engine here")
    rng = np.random.default_rng(59)
    for groups, K in ((1, 45), (3, 30)):
        x = rng.standard_normal((1, 24, 9, 11)).astype(np.float32)
        w = rng.standard_normal((K, 24 // groups, 3, 3)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32)
        tuning = Tuning(threads=3, min_block_tiles=1 << 20, small_weights_bytes=1,
                        compile="wait")
        kw = dict(padding=1, groups=groups, algorithm=f"winograd:{m}", tuning=tuning)
        once = plan_conv2d(x.shape, w, b, weights="per-call", **kw)
        assert once.schedule().mode == "split" and once.winograd.packed is None
        y = tl.conv2d(x, w, b, **kw)
        np.testing.assert_array_equal(y, plan_conv2d(x.shape, w, b, **kw)(x))
        assert rel_err(y, reference_conv(x, w, b, 1, 1, 1, groups)) < 3e-5


def test_tap_gemm_sums_every_tap_in_the_registers(isa):
    """``tl_sgemm_taps``: the depth as runs of k rows of B, each run from its own offset, A's
    panels ntaps·k deep: equal to the float64 sum over the taps of A_t · B_t, around the
    micro-kernel's edges (a lone panel, a narrow last block, odd depths), overwriting C or
    adding to it, nothing outside C's block written."""
    mod = _simd.module(isa)
    t = mod.isa
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_int64] * 11)(mod.addr["tl_sgemm_taps"])
    rng = np.random.default_rng(11)
    for m, n, k, ntaps in [(1, 1, 1, 1), (t.mr, t.nr, 3, 9), (2 * t.mr + 1, t.lanes - 1, 4, 2),
                           (t.mr + 3, t.nr + 5, 1, 5), (3 * t.mr, 2 * t.nr + 1, 6, 3)]:
        ldb = n + 13
        offs = np.array([(7 * i) % 11 for i in range(ntaps)], np.int64)
        flat = rng.standard_normal(int(offs.max()) + k * ldb + n).astype(np.float32)
        a = [rng.standard_normal((m, k)).astype(np.float32) for _ in range(ntaps)]
        packed = _simd.pack_rows(np.concatenate(a, axis=1), t.mr)
        want = sum(oracle_gemm(a[i], np.stack([flat[offs[i] + r * ldb:offs[i] + r * ldb + n]
                                               for r in range(k)])) for i in range(ntaps))
        for acc in (0, 1):
            c_full = np.full((m + 2, n + 9), 7.5, np.float32)
            c = c_full[1:m + 1, 3:n + 3]
            fn(m, n, k, packed.ctypes.data, flat.ctypes.data, ldb, c.ctypes.data, n + 9, acc,
               ntaps, offs.ctypes.data)
            np.testing.assert_allclose(c, want + 7.5 * acc, rtol=0, atol=1e-5 * k * ntaps,
                                       err_msg=f"{isa} {m} {n} {k} {ntaps} acc={acc}")
            mask = np.ones(c_full.shape, bool)
            mask[1:m + 1, 3:n + 3] = False
            assert (c_full[mask] == 7.5).all(), f"{isa} {m} {n} {k} {ntaps}: wrote outside C"

"""Numba helpers for compiled code that calls machine code by address (numba required).

The engine's compiled functions receive the addresses of :mod:`._simd`'s functions
(``tl_sgemm``, ``tl_barrier``, ...) as plain integers at run time, never as constants
baked into the code, so numba's on-disk cache stays valid from one process to the next.
These intrinsics turn such integers into calls and typed pointers:

* ``call_void(addr, args)`` calls ``void f(i64, ...)`` with the tuple ``args``;
* ``call_i64(addr, args)`` calls ``i64 f(i64, ...)``;
* ``fetch_add(addr, v)``: an atomic add to the int64 at ``addr``, returning its value before;
* ``ptr_f32(addr)``, ``ptr_f64(addr)``, ``ptr_i64(addr)``: a typed pointer for ``numba.carray``;
* ``f32_exp2(n)``: 2 ** n as a float32 from its exponent bits;
* :class:`Entry`: a function of (context, thread, threads, work counter) made a ``cfunc`` on
  first use.
"""

from __future__ import annotations

import threading

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


def _args(builder, tup_type, tup):
    return [builder.extract_value(tup, i) for i in range(len(tup_type))]


def _check(addr, args):
    if not isinstance(addr, types.Integer) or not isinstance(args, types.BaseTuple):
        return False
    return all(isinstance(t, types.Integer) for t in args)


def _call_codegen(n, returns_i64):
    """Code that calls the address of the first argument with the ``n`` integers of the
    second (each widened to i64), returning its i64 result or nothing."""
    def codegen(context, builder, sig, llargs):
        i64 = ir.IntType(64)
        vals = [builder.sext(v, i64) if v.type.width < 64 else v
                for v in _args(builder, sig.args[1], llargs[1])]
        fnty = ir.FunctionType(i64 if returns_i64 else ir.VoidType(), [i64] * n)
        a = llargs[0] if llargs[0].type.width == 64 else builder.sext(llargs[0], i64)
        got = builder.call(builder.inttoptr(a, fnty.as_pointer()), vals)
        return got if returns_i64 else context.get_dummy_value()

    return codegen


@intrinsic
def call_void(typingctx, addr, args):
    """Call the function at ``addr`` with the integers of ``args`` (as i64); no result."""
    if not _check(addr, args):
        return None
    return types.void(addr, args), _call_codegen(len(args), False)


@intrinsic
def fetch_add(typingctx, addr, v):
    """Add ``v`` to the int64 at ``addr`` atomically (sequentially consistent); its value
    before.  The native workers' parts take units of a call's work with it."""
    if not isinstance(addr, types.Integer) or not isinstance(v, types.Integer):
        return None

    def codegen(context, builder, sig, llargs):
        i64 = ir.IntType(64)
        a, n = (x if x.type.width == 64 else builder.sext(x, i64) for x in llargs)
        return builder.atomic_rmw("add", builder.inttoptr(a, i64.as_pointer()), n, "seq_cst")

    return types.int64(addr, v), codegen


@intrinsic
def call_i64(typingctx, addr, args):
    """Call the function at ``addr`` with the integers of ``args`` (as i64); its i64 result."""
    if not _check(addr, args):
        return None
    return types.int64(addr, args), _call_codegen(len(args), True)


def _ptr(dtype):
    @intrinsic
    def ptr(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None

        def codegen(context, builder, sig, llargs):
            return builder.inttoptr(llargs[0], context.get_value_type(sig.return_type))

        return types.CPointer(dtype)(addr), codegen

    return ptr


@intrinsic
def f32_exp2(typingctx, n):
    """``2.0 ** n`` as a float32, for an integer ``n`` in [-126, 127]: ``n + 127`` written
    into the exponent bits (a shift and a bit cast, so loops of it vectorise)."""
    if not isinstance(n, types.Integer):
        return None

    def codegen(context, builder, sig, llargs):
        i32 = ir.IntType(32)
        v = llargs[0]
        if v.type.width > 32:
            v = builder.trunc(v, i32)
        elif v.type.width < 32:
            v = builder.sext(v, i32)
        bits = builder.shl(builder.add(v, ir.Constant(i32, 127)), ir.Constant(i32, 23))
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(n), codegen


ptr_f32 = _ptr(types.float32)
ptr_i64 = _ptr(types.int64)
ptr_f64 = _ptr(types.float64)


class Entry:
    """A function ``f(ctx, tid, nt, work)`` (all int64) compiled as a numba ``cfunc`` on first use,
    for the native workers to call by :attr:`address`; numba's disk cache keeps it between
    processes.  ``overloads`` and ``_cache`` let :func:`tensorlayout._jit.loadable` tell
    whether using it would compile."""

    def __init__(self, pyfunc):
        self._pyfunc = pyfunc
        self._cf = None
        self._made = None
        self._lock = threading.Lock()

    def _object(self):
        if self._made is None:
            from numba.core import sigutils
            from numba.core.ccallback import CFunc

            sig = sigutils.normalize_signature(types.void(types.int64, types.int64, types.int64,
                                                         types.int64))
            cf = CFunc(self._pyfunc, sig, locals={}, options={})
            cf.enable_caching()
            self._made = cf
        return self._made

    @property
    def _cache(self):
        return self._object()._cache

    @property
    def overloads(self) -> dict:
        return {} if self._cf is None else {"compiled": self._cf}

    @property
    def address(self) -> int:
        """The entry's machine-code address (compiled or loaded now if need be)."""
        if self._cf is None:
            with self._lock:
                if self._cf is None:
                    cf = self._object()
                    cf.compile()
                    self._cf = cf
        return self._cf.address

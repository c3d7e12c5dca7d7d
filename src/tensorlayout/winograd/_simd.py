"""Machine code written as LLVM IR and compiled for this CPU with llvmlite: the packed-panel
GEMM of the Winograd engine, its thread pool's primitives and a peak-rate probe.

The GEMM ``C (m×n) = A (m×k) · B (k×n)`` reads ``A`` packed once into panels of ``mr``
rows: panel ``i`` holds rows ``i·mr … i·mr+mr-1`` as ``k`` groups of ``mr`` consecutive
values (``(k, mr)``, column ``c`` of the panel's rows together; rows past ``m`` zero), see
:func:`pack_rows`.  ``B`` and ``C`` are row-major with any row stride.  A micro-kernel
keeps an ``mr × (nv·lanes)`` block of ``C`` in vector registers through the whole depth
``k``: per step, ``nv`` vector loads of a row of ``B``, ``mr`` broadcasts from the
panel and ``mr·nv`` fused multiply-adds; the last block of columns uses masked loads and
stores.  The vector width is chosen from the CPU's features as llvmlite reports them:

========  =====  ====  ====  ==========================================
isa       lanes  mr    nv    when
========  =====  ====  ====  ==========================================
avx512    16     14    2     ``avx512f`` (28 of the 32 zmm registers hold C)
avx2      8      6     2     ``avx2`` and ``fma``
portable  4      4     2     anything else (SSE2 on x86-64, NEON, ...):
                             multiply-adds fused only where the target has them
========  =====  ====  ====  ==========================================

``TENSORLAYOUT_SIMD=avx2`` (or ``portable``) forces a narrower path, for tests and for
comparison; a wider one than the CPU has is refused.  Arithmetic is IEEE (no fast-math): NaN
and Inf propagate as in any other order of the same sums; a multiply-add is rounded once.

``tl_sgemm_taps`` is the same GEMM over a depth made of runs of B's rows from several
offsets (the taps of a convolution over a shifted input: the CPU backend's shifted GEMM),
all summed in the registers before C is touched.

The same module holds the CPU backend's kernels for the blocked layout NCHW16c
(:mod:`._simd_block`) and what :mod:`tensorlayout.winograd._pool` needs for its native
workers (futex parking, a barrier) and ``tl_peak``, a loop of independent multiply-adds
that measures the core's peak rate with the same vector width (``benchmarks/bench_gemm.py``).
Its object code is kept in the user cache (``tensorlayout._jit.cache_dir``, keyed by the IR,
the target and llvmlite's version), so that a later process loads it instead of compiling
it again (``benchmarks/bench_model_start.py`` times a fresh process's first inference).

>>> import numpy as np
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> b = np.ones((3, 4), np.float32)
>>> gemm(pack_rows(a), b, m=2).tolist()
[[3.0, 3.0, 3.0, 3.0], [12.0, 12.0, 12.0, 12.0]]
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import LayoutError, ShapeError
from ._simd_block import (BLOCK, BLOCK_NAMES, STORE_ACTS, act_block, act_ir, block_ir, direct_ir,
                          direct_shapes, fexp_ir, gemm_at_ir, lanes_below, rows_ir, splat, vt_of)
from ._simd_pool import POOL_WINDOWS, pool_ir

__all__ = ["Isa", "isa", "module", "gemm", "pack_rows", "available"]


@dataclass(frozen=True)
class Isa:
    """One vector path: its ``name``, ``lanes`` (float32 per vector), the micro-kernel's
    ``mr`` rows and ``nv`` vectors of columns, and the LLVM target it compiles for."""

    name: str
    lanes: int
    mr: int
    nv: int
    cpu: str = field(repr=False)
    features: str = field(repr=False)
    #: (mr, nv) of a second micro-kernel of fewer rows (``tl_sgemm_n``), for a GEMM whose
    #: few rows would leave much of a panel of mr empty; None where there is none
    narrow: tuple | None = field(default=None, repr=False)

    @property
    def nr(self) -> int:
        """Columns of C per micro-kernel call."""
        return self.nv * self.lanes


_SHAPES = {"avx512": (16, 14, 2), "avx2": (8, 6, 2), "portable": (4, 4, 2)}
#: The narrow micro-kernel's (mr, nv) per vector path: on AVX-512, 8 rows by 3 vectors (24
#: sums, as many registers as 14 by 2 leaves free): 16, 24, 32 or 48 rows fill whole panels.
_NARROW = {"avx512": (8, 3)}
#: Depth steps ahead at which the micro-kernel asks for B's row and A's panel (a prefetch,
#: which never faults): a layer whose weights or input come from memory, not the cache (a
#: network's deep layers on small maps), otherwise waits on each line.
PREFETCH_STEPS = 32
#: Ask for every line of B's row ahead (nr floats: two 64-byte lines with AVX-512), not
#: its first alone, which left the second to the hardware's prefetchers: an input read from
#: memory in place (the NCHW 1 x 1 layers' planes) waited on it (SqueezeNet 1.1, all NCHW,
#: 1.02x at 224^2 and 1.03x at 96^2, the other networks within 1%: ``python
#: benchmarks/bench_setting.py tensorlayout.winograd._simd.PREFETCH_B_ROW False True ...``,
#: ``benchmarks/results/setting_prefetch_b_row_ci2.txt``).
PREFETCH_B_ROW = True
KC = 128        # depth of one slice of the GEMM (see _gemm_ir)
_ORDER = ("portable", "avx2", "avx512")
_LLVM_READY = False


def _llvm():
    global _LLVM_READY
    import llvmlite.binding as llvm

    if not _LLVM_READY:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _LLVM_READY = True
    return llvm


@functools.lru_cache(maxsize=None)
def _host():
    """(cpu name, feature string, set of enabled features) as llvmlite reports them."""
    llvm = _llvm()
    try:
        feats = llvm.get_host_cpu_features()
        return llvm.get_host_cpu_name(), feats.flatten(), {k for k, v in feats.items() if v}
    except RuntimeError:               # llvmlite cannot read them on this platform
        return "generic", "", set()


def _best(enabled) -> str:
    if "avx512f" in enabled:
        return "avx512"
    if "avx2" in enabled and "fma" in enabled:
        return "avx2"
    return "portable"


def isa(name: str | None = None) -> Isa:
    """The vector path to compile: ``name`` ("avx512", "avx2", "portable"), else
    ``$TENSORLAYOUT_SIMD``, else the widest this CPU has.

    >>> isa("portable").lanes, isa("portable").nr
    (4, 8)
    """
    cpu, features, enabled = _host()
    best = _best(enabled)
    if name is None:
        name = os.environ.get("TENSORLAYOUT_SIMD", "").strip().lower() or best
    if name not in _SHAPES:
        raise LayoutError(f"TENSORLAYOUT_SIMD / isa = {name!r} is not allowed: it must be one "
                          f"of {', '.join(_ORDER)}")
    if _ORDER.index(name) > _ORDER.index(best):
        raise LayoutError(f"isa = {name!r} is not allowed on this CPU: its widest path is "
                          f"{best!r}")
    lanes, mr, nv = _SHAPES[name]
    if name != best:                   # a narrower path: compile for a CPU that has only it
        x86 = platform.machine().lower() in ("x86_64", "amd64")
        cpu, features = (("haswell", "") if name == "avx2" else
                         ("x86-64", "") if x86 else ("generic", ""))
    return Isa(name, lanes, mr, nv, cpu, features, _NARROW.get(name))


# ----------------------------------------------------------------------------- IR text

def _ukernel(name: str, mr: int, nv: int, w: int, masked: bool, pair: bool = False,
             taps: bool = False) -> list:
    """IR of one micro-kernel: C[0:rows, 0:cols] (+)= A-panel (k, mr) · B[0:k, 0:cols].
    With ``pair`` it covers two panels at once (``a`` and ``a2``, 2·mr rows of C).  With
    ``taps`` the depth is ``ntaps`` runs of ``k`` rows of B, run t starting at
    ``b + offs[t]`` (the panel's ``ntaps·k`` steps in order), summed in the registers.
    With bit 4 of ``flags`` the epilogue is applied in the store (see :func:`_store_row`):
    row r's bias ``eb[r]``, with bit 8 the residual at ``er`` (C's places), then the
    activation ``act`` (Relu or Clip, its parameters at ``lohi``)."""
    vt = vt_of(w)
    fma = f"@llvm.fmuladd.v{w}f32"
    rows = 2 * mr if pair else mr
    acc = [(r, v) for r in range(rows) for v in range(nv)]
    L = [f"define internal void @{name}(ptr noalias %a, ptr noalias %a2, ptr noalias %b, "
         f"i64 %ldb, ptr noalias %c, i64 %ldc, i64 %k, i64 %rows, i64 %cols, i64 %flags"
         + (", i64 %ntaps, ptr noalias %offs" if taps else "")
         + ", ptr noalias %eb, ptr noalias %er, i64 %act, ptr noalias %lohi) nounwind {",
         "entry:",
         "  %lhd = alloca [2 x float], align 4",      # read instead of lohi without an epilogue
         "  store [2 x float] zeroinitializer, ptr %lhd, align 4"]
    masks = {}
    if masked:
        splat(L, "%cv", "%cols", w, "i64")
        for v in range(nv):
            lanes_below(L, f"%mask{v}", "", w, v * w, "%cv")
            masks[v] = f"%mask{v}"

    def load_b(dst, ptr, v):
        L.append(f"  {dst}.p = getelementptr inbounds float, ptr {ptr}, i64 {v * w}")
        if masked:
            L.append(f"  {dst} = call {vt} @llvm.masked.load.v{w}f32.p0(ptr {dst}.p, i32 4, "
                     f"<{w} x i1> {masks[v]}, {vt} zeroinitializer)")
        else:
            L.append(f"  {dst} = load {vt}, ptr {dst}.p, align 4")

    def step(tag, ap, ap2, bp, src, dst):
        """One depth step: row of B at bp, panel columns at ap (and ap2); src -> dst."""
        for v in range(nv):
            load_b(f"%b{tag}_{v}", bp, v)
        if tag != "t":
            # B's row and A's panel PREFETCH_STEPS steps ahead asked for now: a layer reading
            # its weights or input from memory, not the cache, otherwise waits on each line
            L.append(f"  %pfo{tag} = mul i64 %ldb, {PREFETCH_STEPS}")
            L.append(f"  %pfb{tag} = getelementptr inbounds float, ptr {bp}, i64 %pfo{tag}")
            lines = -(-nv * w // 16) if PREFETCH_B_ROW else 1
            for i in range(lines):          # a prefetch per 16 floats (a 64-byte line)
                L.append(f"  %pfb{tag}_{i} = getelementptr inbounds float, ptr %pfb{tag}, "
                         f"i64 {16 * i}")
                L.append(f"  call void @llvm.prefetch.p0(ptr %pfb{tag}_{i}, i32 0, i32 3, "
                         "i32 1)")
            L.append(f"  %pfa{tag} = getelementptr inbounds float, ptr {ap}, "
                     f"i64 {PREFETCH_STEPS * mr}")
            L.append(f"  call void @llvm.prefetch.p0(ptr %pfa{tag}, i32 0, i32 3, i32 1)")
        for r in range(rows):
            base, off = (ap, r) if r < mr else (ap2, r - mr)
            L.append(f"  %ap{tag}_{r} = getelementptr inbounds float, ptr {base}, i64 {off}")
            L.append(f"  %as{tag}_{r} = load float, ptr %ap{tag}_{r}, align 4")
            splat(L, f"%av{tag}_{r}", f"%as{tag}_{r}", w)
            for v in range(nv):
                L.append(f"  {dst(r, v)} = call {vt} {fma}({vt} %av{tag}_{r}, "
                         f"{vt} %b{tag}_{v}, {vt} {src(r, v)})")

    # main loop, two depth steps per iteration (inside a loop over the taps: the panel's
    # pointers run on, B restarts at each tap's offset, the sums stay in the registers)
    L.append("  %k2 = ashr i64 %k, 1")
    L.append("  %any2 = icmp sgt i64 %k2, 0")
    pre, a0, c0, b0 = "entry", "%a", "%a2", "%b"
    init = {ra: "zeroinitializer" for ra in acc}
    if taps:
        L.append("  br label %tap")
        L.append("tap:")
        L.append("  %t = phi i64 [0, %entry], [%t.n, %tapend]")
        L.append("  %ta = phi ptr [%a, %entry], [%ta.n, %tapend]")
        L.append("  %tc = phi ptr [%a2, %entry], [%tc.n, %tapend]")
        for r, v in acc:
            L.append(f"  %u{r}_{v} = phi {vt} [zeroinitializer, %entry], [%f{r}_{v}, %tapend]")
        L.append("  %toffp = getelementptr inbounds i64, ptr %offs, i64 %t")
        L.append("  %toff = load i64, ptr %toffp, align 8")
        L.append("  %tb = getelementptr inbounds float, ptr %b, i64 %toff")
        pre, a0, c0, b0 = "tap", "%ta", "%tc", "%tb"
        init = {(r, v): f"%u{r}_{v}" for r, v in acc}
    L.append("  br i1 %any2, label %loop, label %mid")
    L.append("loop:")
    L.append(f"  %i = phi i64 [0, %{pre}], [%i.n, %loop]")
    L.append(f"  %pa = phi ptr [{a0}, %{pre}], [%pa.n, %loop]")
    L.append(f"  %pc = phi ptr [{c0}, %{pre}], [%pc.n, %loop]")
    L.append(f"  %pb = phi ptr [{b0}, %{pre}], [%pb.n, %loop]")
    for r, v in acc:
        L.append(f"  %x{r}_{v} = phi {vt} [{init[r, v]}, %{pre}], [%z{r}_{v}, %loop]")
    step("s0", "%pa", "%pc", "%pb", lambda r, v: f"%x{r}_{v}", lambda r, v: f"%y{r}_{v}")
    L.append(f"  %pa1 = getelementptr inbounds float, ptr %pa, i64 {mr}")
    L.append(f"  %pc1 = getelementptr inbounds float, ptr %pc, i64 {mr}")
    L.append("  %pb1 = getelementptr inbounds float, ptr %pb, i64 %ldb")
    step("s1", "%pa1", "%pc1", "%pb1", lambda r, v: f"%y{r}_{v}", lambda r, v: f"%z{r}_{v}")
    L.append(f"  %pa.n = getelementptr inbounds float, ptr %pa, i64 {2 * mr}")
    L.append(f"  %pc.n = getelementptr inbounds float, ptr %pc, i64 {2 * mr}")
    L.append("  %pb.n = getelementptr inbounds float, ptr %pb1, i64 %ldb")
    L.append("  %i.n = add i64 %i, 1")
    L.append("  %more = icmp slt i64 %i.n, %k2")
    L.append("  br i1 %more, label %loop, label %mid")
    # an odd last step
    L.append("mid:")
    L.append(f"  %qa = phi ptr [{a0}, %{pre}], [%pa.n, %loop]")
    L.append(f"  %qc = phi ptr [{c0}, %{pre}], [%pc.n, %loop]")
    L.append(f"  %qb = phi ptr [{b0}, %{pre}], [%pb.n, %loop]")
    for r, v in acc:
        L.append(f"  %m{r}_{v} = phi {vt} [{init[r, v]}, %{pre}], [%z{r}_{v}, %loop]")
    L.append("  %odd = and i64 %k, 1")
    L.append("  %isodd = icmp ne i64 %odd, 0")
    end = "tapend" if taps else "store"
    L.append(f"  br i1 %isodd, label %last, label %{end}")
    L.append("last:")
    step("t", "%qa", "%qc", "%qb", lambda r, v: f"%m{r}_{v}", lambda r, v: f"%l{r}_{v}")
    L.append(f"  br label %{end}")
    L.append(f"{end}:")
    for r, v in acc:
        L.append(f"  %f{r}_{v} = phi {vt} [%m{r}_{v}, %mid], [%l{r}_{v}, %last]")
    if taps:
        L.append(f"  %tstep = mul i64 %k, {mr}")
        L.append("  %ta.n = getelementptr inbounds float, ptr %ta, i64 %tstep")
        L.append("  %tc.n = getelementptr inbounds float, ptr %tc, i64 %tstep")
        L.append("  %t.n = add i64 %t, 1")
        L.append("  %tmore = icmp slt i64 %t.n, %ntaps")
        L.append("  br i1 %tmore, label %tap, label %store")
        L.append("store:")
    L.append("  %accbit = and i64 %flags, 1")
    L.append("  %add = icmp ne i64 %accbit, 0")
    L.append("  %epbit = and i64 %flags, 4")
    L.append("  %ep = icmp ne i64 %epbit, 0")
    L.append("  %resbit = and i64 %flags, 8")
    L.append("  %hasres = icmp ne i64 %resbit, 0")
    L.append("  %lhp = select i1 %ep, ptr %lohi, ptr %lhd")
    L.append("  %lohi1 = getelementptr inbounds float, ptr %lhp, i64 1")
    L.append("  %lo = load float, ptr %lhp, align 4")
    L.append("  %hi = load float, ptr %lohi1, align 4")
    splat(L, "%lov", "%lo", w)
    splat(L, "%hiv", "%hi", w)
    L.append("  br label %row0")
    for r in range(rows):
        _store_row(L, r, rows, nv, w, masks if masked else None)
    L.append("done:")
    L.append("  ret void")
    L.append("}")
    return L


def _store_row(L, r: int, rows: int, nv: int, w: int, masks) -> None:
    """Row r of a micro-kernel's store: its sums (``%f{r}_{v}``) plus C's row where ``%add``;
    where ``%ep``, plus the row's bias, plus the residual's row (``%hasres``), then the
    activation of code ``%act`` among :data:`STORE_ACTS` (as the CPU backend's epilogue
    computes them: (sum + bias) + residual, NaN handled alike); masked columns by
    ``masks``."""
    vt = vt_of(w)
    nxt = f"row{r + 1}" if r + 1 < rows else "done"
    L.append(f"row{r}:")
    L.append(f"  %ok{r} = icmp sgt i64 %rows, {r}")
    L.append(f"  br i1 %ok{r}, label %st{r}, label %done")
    L.append(f"st{r}:")
    L.append(f"  %co{r} = mul i64 %ldc, {r}")
    L.append(f"  %cr{r} = getelementptr inbounds float, ptr %c, i64 %co{r}")

    def load(dst, p, v):
        if masks:
            L.append(f"  {dst} = call {vt} @llvm.masked.load.v{w}f32.p0(ptr {p}, i32 4, "
                     f"<{w} x i1> {masks[v]}, {vt} zeroinitializer)")
        else:
            L.append(f"  {dst} = load {vt}, ptr {p}, align 4")

    for v in range(nv):
        p = f"%cp{r}_{v}"
        L.append(f"  {p} = getelementptr inbounds float, ptr %cr{r}, i64 {v * w}")
        load(f"%o{r}_{v}", p, v)
        L.append(f"  %s{r}_{v} = fadd {vt} %f{r}_{v}, %o{r}_{v}")
        L.append(f"  %e{r}_{v} = select i1 %add, {vt} %s{r}_{v}, {vt} %f{r}_{v}")
    L.append(f"  br i1 %ep, label %ep{r}, label %put{r}")
    L.append(f"ep{r}:")
    L.append(f"  %ebp{r} = getelementptr inbounds float, ptr %eb, i64 {r}")
    L.append(f"  %ebs{r} = load float, ptr %ebp{r}, align 4")
    splat(L, f"%ebv{r}", f"%ebs{r}", w)
    for v in range(nv):
        L.append(f"  %g{r}_{v} = fadd {vt} %e{r}_{v}, %ebv{r}")
    L.append(f"  br i1 %hasres, label %rs{r}, label %ac{r}")
    L.append(f"rs{r}:")
    L.append(f"  %err{r} = getelementptr inbounds float, ptr %er, i64 %co{r}")
    for v in range(nv):
        L.append(f"  %erp{r}_{v} = getelementptr inbounds float, ptr %err{r}, i64 {v * w}")
        load(f"%rv{r}_{v}", f"%erp{r}_{v}", v)
        L.append(f"  %h{r}_{v} = fadd {vt} %g{r}_{v}, %rv{r}_{v}")
    L.append(f"  br label %ac{r}")
    L.append(f"ac{r}:")
    for v in range(nv):
        L.append(f"  %q{r}_{v} = phi {vt} [%g{r}_{v}, %ep{r}], [%h{r}_{v}, %rs{r}]")
    act_block(L, [f"%q{r}_{v}" for v in range(nv)], [f"%za{r}_{v}" for v in range(nv)],
              f"a{r}", w, STORE_ACTS)
    L.append(f"  br label %put{r}")
    L.append(f"put{r}:")
    for v in range(nv):
        L.append(f"  %x{r}_{v}.s = phi {vt} [%e{r}_{v}, %st{r}], [%za{r}_{v}, %a{r}.aj]")
    for v in range(nv):
        p = f"%cp{r}_{v}"
        if masks:
            L.append(f"  call void @llvm.masked.store.v{w}f32.p0({vt} %x{r}_{v}.s, ptr {p}, "
                     f"i32 4, <{w} x i1> {masks[v]})")
        else:
            L.append(f"  store {vt} %x{r}_{v}.s, ptr {p}, align 4")
    L.append(f"  br label %{nxt}")


def _gemm_ir(mr: int, nv: int, w: int, kc: int, tag: str = "") -> list:
    """IR of ``tl_sgemm(m, n, k, a, b, ldb, c, ldc, flags)`` (every argument an i64).

    The depth is cut into slices of ``kc``: each slice's products are summed in registers
    and added to C (the first slice per ``flags``), so no sum runs longer than ``kc``
    multiply-adds (float32 error grows with the length of a sum: on 512 channels one run
    of 512 lost 1.4x the accuracy of BLAS's blocked sums).  In each slice, panels of A
    are taken two at a time: full blocks of nv·w columns go through
    ``uk_full`` (masked ``uk_mask`` for a last block wider than one vector) for each panel,
    and a last block of at most one vector through ``uk_pair``, 2·mr rows by one vector,
    so that a narrow tail still keeps 2·mr accumulators busy.

    ``tl_sgemm_ep(m, n, k, a, b, ldb, c, ldc, flags, bias, res, act, lohi)`` is the same with,
    where bit 4 of ``flags`` is set (see :func:`_ep_flags`), the CPU backend's epilogue in the
    last slice's store: ``bias`` (m floats, row i's at ``bias[i]``), the residual ``res``
    (C's layout; 0: none), then the activation ``act`` (0 none, 1 Relu, 2 Clip between the
    two floats at ``lohi``).  ``tag`` ends every function's name (the narrow panels' set,
    ``tl_sgemm_n``, is a second shape of micro-kernel in the same module)."""
    return [
        f"define void @tl_sgemm{tag}(i64 %m, i64 %n, i64 %k, i64 %ai, i64 %bi, i64 %ldb, "
        "i64 %ci, i64 %ldc, i64 %flags) nounwind {",
        "  %fl = and i64 %flags, 3",
        f"  call void @sgemm_drive{tag}(i64 %m, i64 %n, i64 %k, i64 %ai, i64 %bi, i64 %ldb, "
        "i64 %ci, i64 %ldc, i64 %fl, i64 0, i64 0, i64 0, i64 0)",
        "  ret void",
        "}",
        f"define void @tl_sgemm_ep{tag}(i64 %m, i64 %n, i64 %k, i64 %ai, i64 %bi, i64 %ldb, "
        "i64 %ci, i64 %ldc, i64 %flags, i64 %bias, i64 %res, i64 %act, i64 %lohi) nounwind {",
    ] + _ep_flags(7) + [
        f"  call void @sgemm_drive{tag}(i64 %m, i64 %n, i64 %k, i64 %ai, i64 %bi, i64 %ldb, "
        "i64 %ci, i64 %ldc, i64 %fe, i64 %bias, i64 %res, i64 %act, i64 %lohi)",
        "  ret void",
        "}",
        f"define internal void @sgemm_drive{tag}(i64 %m, i64 %n, i64 %k, i64 %ai, i64 %bi, "
        "i64 %ldb, i64 %ci, i64 %ldc, i64 %flags, i64 %ebi, i64 %eri, i64 %act, "
        "i64 %lohii) nounwind {",
        "entry:",
        "  %a = inttoptr i64 %ai to ptr",
        "  %b = inttoptr i64 %bi to ptr",
        "  %c = inttoptr i64 %ci to ptr",
        "  %eb = inttoptr i64 %ebi to ptr",
        "  %er = inttoptr i64 %eri to ptr",
        "  %lohi = inttoptr i64 %lohii to ptr",
        "  br label %slice",
        "slice:",
        "  %s0 = phi i64 [0, %entry], [%s0.n, %slice]",
        "  %fl = phi i64 [%flags, %entry], [%fl1, %slice]",
        "  %sleft = sub i64 %k, %s0",
        f"  %sbig = icmp sgt i64 %sleft, {kc}",
        f"  %sk = select i1 %sbig, i64 {kc}, i64 %sleft",
        f"  %saoff = mul i64 %s0, {mr}",
        "  %sa = getelementptr inbounds float, ptr %a, i64 %saoff",
        "  %sboff = mul i64 %s0, %ldb",
        "  %sb = getelementptr inbounds float, ptr %b, i64 %sboff",
        f"  %s0.n = add i64 %s0, {kc}",
        "  %smore = icmp slt i64 %s0.n, %k",
        "  %flq = and i64 %fl, 3",
        "  %fls = select i1 %smore, i64 %flq, i64 %fl",
        f"  call void @sgemm_slice{tag}(i64 %m, i64 %n, i64 %sk, i64 %k, ptr %sa, ptr %sb, "
        "i64 %ldb, ptr %c, i64 %ldc, i64 %fls, ptr %eb, ptr %er, i64 %act, ptr %lohi)",
        "  %fl1 = or i64 %flags, 1",
        "  br i1 %smore, label %slice, label %done",
        "done:",
        "  ret void",
        "}",
    ] + _slice_ir(f"sgemm_slice{tag}", mr, nv, w, taps=False, tag=tag)


def _ep_flags(keep: int) -> list:
    """IR of ``%fe``: the bits ``keep`` of ``%flags`` (1 accumulate, 2 packed B, 4 the
    epilogue) and bit 8 (add the residual) where bit 4 is set and ``%res`` is not 0: how
    ``tl_sgemm_ep`` and ``tl_sgemm_taps_ep`` tell the micro-kernels' store what to do."""
    return ["  %fl = and i64 %flags, " + str(keep),
            "  %epb = and i64 %flags, 4",
            "  %hasep = icmp ne i64 %epb, 0",
            "  %hasres = icmp ne i64 %res, 0",
            "  %both = and i1 %hasep, %hasres",
            "  %rb = select i1 %both, i64 8, i64 0",
            "  %fe = or i64 %fl, %rb"]


def _taps_ir(mr: int, nv: int, w: int, tag: str = "") -> list:
    """IR of ``tl_sgemm_taps(m, n, k, a, b, ldb, c, ldc, flags, ntaps, offs)``: ``tl_sgemm``
    of a depth of ``ntaps`` runs of ``k`` rows of B, run t starting at ``b + offs[t]``
    floats (``offs``: the address of ``ntaps`` int64), A's panels ``ntaps·k`` deep; the
    whole depth summed in registers (a caller keeps ``ntaps·k`` within the sums it wants).
    ``tl_sgemm_taps_ep(..., offs, bias, res, act, lohi)`` is the same with, where bit 4 of
    ``flags`` is set, :func:`_gemm_ir`'s epilogue in the store (after the sums are added to
    C with bit 1).  ``tag`` ends every function's name, as in :func:`_gemm_ir`."""
    return [
        f"define void @tl_sgemm_taps_ep{tag}(i64 %m, i64 %n, i64 %k, i64 %ai, i64 %bi, "
        "i64 %ldb, i64 %ci, i64 %ldc, i64 %flags, i64 %ntaps, i64 %offsi, i64 %ebi, i64 %res, "
        "i64 %act, "
        "i64 %lohii) nounwind {",
        "entry:",
        "  %a = inttoptr i64 %ai to ptr",
        "  %b = inttoptr i64 %bi to ptr",
        "  %c = inttoptr i64 %ci to ptr",
        "  %offs = inttoptr i64 %offsi to ptr",
        "  %eb = inttoptr i64 %ebi to ptr",
        "  %er = inttoptr i64 %res to ptr",
        "  %lohi = inttoptr i64 %lohii to ptr",
        "  %kp = mul i64 %k, %ntaps",
    ] + _ep_flags(5) + [
        f"  call void @sgemm_taps{tag}(i64 %m, i64 %n, i64 %k, i64 %kp, ptr %a, ptr %b, "
        "i64 %ldb, ptr %c, i64 %ldc, i64 %fe, i64 %ntaps, ptr %offs, ptr %eb, ptr %er, i64 %act, "
        "ptr %lohi)",
        "  ret void",
        "}",
        f"define void @tl_sgemm_taps{tag}(i64 %m, i64 %n, i64 %k, i64 %ai, i64 %bi, i64 %ldb, "
        "i64 %ci, i64 %ldc, i64 %flags, i64 %ntaps, i64 %offsi) nounwind {",
        "entry:",
        "  %a = inttoptr i64 %ai to ptr",
        "  %b = inttoptr i64 %bi to ptr",
        "  %c = inttoptr i64 %ci to ptr",
        "  %offs = inttoptr i64 %offsi to ptr",
        "  %kp = mul i64 %k, %ntaps",
        "  %fl = and i64 %flags, 1",
        f"  call void @sgemm_taps{tag}(i64 %m, i64 %n, i64 %k, i64 %kp, ptr %a, ptr %b, "
        "i64 %ldb, ptr %c, i64 %ldc, i64 %fl, i64 %ntaps, ptr %offs, ptr null, ptr null, "
        "i64 0, ptr null)",
        "  ret void",
        "}",
    ] + _slice_ir(f"sgemm_taps{tag}", mr, nv, w, taps=True, tag=tag)


def _slice_ir(name: str, mr: int, nv: int, w: int, taps: bool, tag: str = "") -> list:
    """IR of ``name(m, n, k, kp, a, b, ldb, c, ldc, flags[, ntaps, offs], eb, er, act, lohi)``:
    every panel of A (``kp`` deep) by every block of columns of B through the micro-kernels
    (with ``taps`` their tap variants, each panel's depth ``ntaps`` runs of ``k``); ``eb``
    (m floats) and ``er`` (C's layout) the epilogue's bias and residual (see
    :func:`_ukernel`)."""
    nr = nv * w
    tail = "kpair" if nv > 1 else "kmask"
    sfx, extra, targs = ("_t", ", i64 %ntaps, ptr %offs", ", i64 %ntaps, ptr %offs") if taps \
        else ("", "", "")
    sfx = tag + sfx
    return [
        f"define internal void @{name}(i64 %m, i64 %n, i64 %k, i64 %kp, ptr %a, ptr %b, "
        f"i64 %ldb, ptr %c, i64 %ldc, i64 %flags{extra}, ptr %eb, ptr %er, i64 %act, "
        "ptr %lohi) nounwind {",
        "entry:",
        "  %go = icmp sgt i64 %m, 0",
        "  %gn = icmp sgt i64 %n, 0",
        "  %g = and i1 %go, %gn",
        f"  %pstride = mul i64 %kp, {mr}",
        f"  %cstride = mul i64 %ldc, {mr}",
        "  %pkbit = and i64 %flags, 2",           # B packed: strip j0 starts at b + j0·k
        "  %packed = icmp ne i64 %pkbit, 0",
        "  %bcs = select i1 %packed, i64 %kp, i64 1",
        "  br i1 %g, label %rows, label %exit",
        "rows:",
        "  %i0 = phi i64 [0, %entry], [%i0.n, %rows.end]",
        "  %left = sub i64 %m, %i0",
        f"  %small = icmp slt i64 %left, {mr}",
        f"  %nrow0 = select i1 %small, i64 %left, i64 {mr}",
        f"  %left1 = sub i64 %left, {mr}",
        "  %has1 = icmp sgt i64 %left1, 0",
        f"  %small1 = icmp slt i64 %left1, {mr}",
        f"  %nrow1a = select i1 %small1, i64 %left1, i64 {mr}",
        "  %nrow1 = select i1 %has1, i64 %nrow1a, i64 0",
        "  %nrows = add i64 %nrow0, %nrow1",
        "  %aoff = mul i64 %i0, %kp",
        "  %ap0 = getelementptr inbounds float, ptr %a, i64 %aoff",
        "  %ap1 = getelementptr inbounds float, ptr %ap0, i64 %pstride",
        "  %coff = mul i64 %i0, %ldc",
        "  %cp0 = getelementptr inbounds float, ptr %c, i64 %coff",
        "  %cp1 = getelementptr inbounds float, ptr %cp0, i64 %cstride",
        "  %eb0 = getelementptr float, ptr %eb, i64 %i0",           # the epilogue's rows
        f"  %eb1 = getelementptr float, ptr %eb0, i64 {mr}",
        "  %er0 = getelementptr float, ptr %er, i64 %coff",
        "  %er1 = getelementptr float, ptr %er0, i64 %cstride",
        "  br label %cols",
        "cols:",
        "  %j0 = phi i64 [0, %rows], [%j0.n, %cols.end]",
        "  %rest = sub i64 %n, %j0",
        "  %bj = mul i64 %j0, %bcs",
        "  %bp = getelementptr inbounds float, ptr %b, i64 %bj",
        "  %cq0 = getelementptr inbounds float, ptr %cp0, i64 %j0",
        "  %cq1 = getelementptr inbounds float, ptr %cp1, i64 %j0",
        "  %eq0 = getelementptr float, ptr %er0, i64 %j0",
        "  %eq1 = getelementptr float, ptr %er1, i64 %j0",
        f"  %full = icmp sge i64 %rest, {nr}",
        "  br i1 %full, label %kfull, label %ktail",
        "kfull:",
        f"  call void @uk_full{sfx}(ptr %ap0, ptr %ap0, ptr %bp, i64 %ldb, ptr %cq0, i64 %ldc, "
        f"i64 %k, i64 %nrow0, i64 {nr}, i64 %flags{targs}, "
        f"ptr %eb0, ptr %eq0, i64 %act, ptr %lohi)",
        "  br i1 %has1, label %kfull1, label %cols.end",
        "kfull1:",
        f"  call void @uk_full{sfx}(ptr %ap1, ptr %ap1, ptr %bp, i64 %ldb, ptr %cq1, i64 %ldc, "
        f"i64 %k, i64 %nrow1, i64 {nr}, i64 %flags{targs}, "
        f"ptr %eb1, ptr %eq1, i64 %act, ptr %lohi)",
        "  br label %cols.end",
        "ktail:",
        f"  %narrow = icmp sle i64 %rest, {w}",
        f"  br i1 %narrow, label %{tail}, label %kmask",
        "kpair:",                      # a lone last panel reads itself twice, never past A
        "  %ap1s = select i1 %has1, ptr %ap1, ptr %ap0",
        f"  call void @uk_pair{sfx}(ptr %ap0, ptr %ap1s, ptr %bp, i64 %ldb, ptr %cq0, i64 %ldc, "
        f"i64 %k, i64 %nrows, i64 %rest, i64 %flags{targs}, "
        f"ptr %eb0, ptr %eq0, i64 %act, ptr %lohi)",
        "  br label %cols.end",
        "kmask:",
        f"  call void @uk_mask{sfx}(ptr %ap0, ptr %ap0, ptr %bp, i64 %ldb, ptr %cq0, i64 %ldc, "
        f"i64 %k, i64 %nrow0, i64 %rest, i64 %flags{targs}, "
        f"ptr %eb0, ptr %eq0, i64 %act, ptr %lohi)",
        "  br i1 %has1, label %kmask1, label %cols.end",
        "kmask1:",
        f"  call void @uk_mask{sfx}(ptr %ap1, ptr %ap1, ptr %bp, i64 %ldb, ptr %cq1, i64 %ldc, "
        f"i64 %k, i64 %nrow1, i64 %rest, i64 %flags{targs}, "
        f"ptr %eb1, ptr %eq1, i64 %act, ptr %lohi)",
        "  br label %cols.end",
        "cols.end:",
        f"  %j0.n = add i64 %j0, {nr}",
        "  %cmore = icmp slt i64 %j0.n, %n",
        "  br i1 %cmore, label %cols, label %rows.end",
        "rows.end:",
        f"  %i0.n = add i64 %i0, {2 * mr}",
        "  %rmore = icmp slt i64 %i0.n, %m",
        "  br i1 %rmore, label %rows, label %exit",
        "exit:",
        "  ret void",
        "}",
    ]


def _peak_ir(w: int, chains: int) -> list:
    """IR of ``tl_peak(out, n)``: ``n`` rounds of ``chains`` independent multiply-adds."""
    vt = vt_of(w)
    L = ["define void @tl_peak(i64 %outi, i64 %n) nounwind {", "entry:",
         "  %out = inttoptr i64 %outi to ptr",
         f"  %x = load {vt}, ptr %out, align 4",
         "  %any = icmp sgt i64 %n, 0",
         "  br i1 %any, label %loop, label %done", "loop:",
         "  %i = phi i64 [0, %entry], [%i.n, %loop]"]
    for j in range(chains):
        L.append(f"  %a{j} = phi {vt} [%x, %entry], [%b{j}, %loop]")
    for j in range(chains):
        L.append(f"  %b{j} = call {vt} @llvm.fmuladd.v{w}f32({vt} %a{j}, {vt} %x, {vt} %x)")
    L += ["  %i.n = add i64 %i, 1", "  %more = icmp slt i64 %i.n, %n",
          "  br i1 %more, label %loop, label %done", "done:"]
    for j in range(chains):
        L.append(f"  %r{j} = phi {vt} [%x, %entry], [%b{j}, %loop]")
    prev = "%r0"
    for j in range(1, chains):
        L.append(f"  %s{j} = fadd {vt} {prev}, %r{j}")
        prev = f"%s{j}"
    L += [f"  store {vt} {prev}, ptr %out, align 4", "  ret void", "}"]
    return L


# Thread-pool primitives (used by _pool).  Futex words are i32; FUTEX_WAIT_PRIVATE = 128,
# FUTEX_WAKE_PRIVATE = 129.  A waiter spins for ``spin`` time-stamp-counter ticks, then
# parks in the kernel until woken.
_POOL_IR = r"""
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
declare i64 @llvm.readcyclecounter()

define internal void @relax() nounwind {
  {PAUSE}
  ret void
}

define internal void @futex_wait(ptr %p, i32 %v) nounwind {
  %r = call i64 (i64, ...) @syscall(i64 {FUTEX}, ptr %p, i32 128, i32 %v, ptr null)
  ret void
}

define internal void @futex_wake(ptr %p, i32 %n) nounwind {
  %r = call i64 (i64, ...) @syscall(i64 {FUTEX}, ptr %p, i32 129, i32 %n)
  ret void
}

; wait until the i32 at %p differs from %v: poll for %ticks time-stamp ticks (pausing, and
; every 16th poll giving the core to any other runnable thread), then park in the kernel.
; %fl, where not null, is a worker's parked flag: raised before parking, after which go is
; looked at once more, so that a poster, which raises go and then looks at the flag (both
; sequentially consistent), either sees the flag and wakes the worker or is seen by it: a
; worker still polling costs its poster no system call
define internal i32 @wait_change(ptr %p, i32 %v, i64 %ticks, ptr %fl) nounwind {
entry:
  %t0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %n = phi i64 [0, %entry], [%n.1, %timed]
  %s = load atomic i32, ptr %p acquire, align 4
  %ch = icmp ne i32 %s, %v
  br i1 %ch, label %out, label %more
more:
  %n.1 = add i64 %n, 1
  %low = and i64 %n.1, 15
  %yield = icmp eq i64 %low, 0
  br i1 %yield, label %give, label %pause
give:
  %y = call i32 @sched_yield()
  br label %timed
pause:
  call void @relax()
  br label %timed
timed:
  %t = call i64 @llvm.readcyclecounter()
  %dt = sub i64 %t, %t0
  %long = icmp ugt i64 %dt, %ticks
  br i1 %long, label %park, label %poll
park:
  %flagged = icmp ne ptr %fl, null
  br i1 %flagged, label %raise, label %look
raise:
  store atomic i32 1, ptr %fl seq_cst, align 4
  br label %look
look:
  %q = load atomic i32, ptr %p seq_cst, align 4
  %ch2 = icmp ne i32 %q, %v
  br i1 %ch2, label %out2, label %sleep
sleep:
  call void @futex_wait(ptr %p, i32 %v)
  br label %park
out:
  ret i32 %s
out2:
  br i1 %flagged, label %lower, label %done2
lower:
  store atomic i32 0, ptr %fl seq_cst, align 4
  br label %done2
done2:
  ret i32 %q
}

; A worker slot (64-byte aligned, zeroed before its thread starts, so that a first post
; made before the thread runs is not missed): +0 go (i32), +4 stop (i32), +8 fn, +16 ctx,
; +24 tid, +32 nt, +40 pending (ptr to the i32 count of unfinished workers), +48 spin ticks,
; +56 parked (i32: the worker may be asleep in the kernel), +60 state (i32: 1 posted, 2 taken
; by the worker, 3 withdrawn by the caller).  A worker runs a post only if it turns the
; state from posted to taken: one the caller withdrew first is not run.
define ptr @tl_worker(ptr %slot) nounwind {
entry:
  %fl = getelementptr inbounds i8, ptr %slot, i64 56
  br label %wait
wait:
  %seen = phi i32 [0, %entry], [%g, %done]
  %sp.p = getelementptr inbounds i8, ptr %slot, i64 48
  %spin = load i64, ptr %sp.p, align 8
  %g = call i32 @wait_change(ptr %slot, i32 %seen, i64 %spin, ptr %fl)
  %st.p = getelementptr inbounds i8, ptr %slot, i64 4
  %stop = load atomic i32, ptr %st.p acquire, align 4
  %quit = icmp ne i32 %stop, 0
  br i1 %quit, label %exit, label %take
take:
  %stt.p = getelementptr inbounds i8, ptr %slot, i64 60
  %cx = cmpxchg ptr %stt.p, i32 1, i32 2 acq_rel acquire
  %took = extractvalue { i32, i1 } %cx, 1
  br i1 %took, label %work, label %done
work:
  %fn.p = getelementptr inbounds i8, ptr %slot, i64 8
  %fn = load ptr, ptr %fn.p, align 8
  %ctx.p = getelementptr inbounds i8, ptr %slot, i64 16
  %ctx = load i64, ptr %ctx.p, align 8
  %tid.p = getelementptr inbounds i8, ptr %slot, i64 24
  %tid = load i64, ptr %tid.p, align 8
  %nt.p = getelementptr inbounds i8, ptr %slot, i64 32
  %nt = load i64, ptr %nt.p, align 8
  %pd.p = getelementptr inbounds i8, ptr %slot, i64 40
  %pd = load ptr, ptr %pd.p, align 8
  %wk.p = getelementptr inbounds i8, ptr %pd, i64 64
  %wk = ptrtoint ptr %wk.p to i64
  call void %fn(i64 %ctx, i64 %tid, i64 %nt, i64 %wk)
  %old = atomicrmw sub ptr %pd, i32 1 acq_rel
  %last = icmp eq i32 %old, 1
  br i1 %last, label %wake, label %done
wake:
  call void @futex_wake(ptr %pd, i32 1)
  br label %done
done:
  br label %wait
exit:
  ret ptr null
}

; Run fn(ctx, tid, nt, work) for tid = 0 .. nt-1: tid 0 on the calling thread, the others on
; slots[0 .. nt-2] (each 64 bytes); returns when all have finished.  %pending: an i32, 64-byte
; aligned; work = pending + 64, the call's i64 work counter (zeroed here before any part
; starts: the parts may take units of their work from it with an atomic add, so that a
; thread the system holds back leaves its units to the others).  %claims != 0 says that fn
; takes all its work from that counter and returns when none is left: then once the
; caller's own part has returned, the posts no worker has taken yet are withdrawn (the
; work is done; a worker that has not started, its core taken by another thread, is not
; waited for), and only the workers still inside fn are.
define void @tl_run(i64 %slotsi, i64 %pendi, i64 %fni, i64 %ctx, i64 %nt, i64 %spin,
                    i64 %claims) nounwind {
entry:
  %slots = inttoptr i64 %slotsi to ptr
  %pending = inttoptr i64 %pendi to ptr
  %fn = inttoptr i64 %fni to ptr
  %wk.p = getelementptr inbounds i8, ptr %pending, i64 64
  %wk = ptrtoint ptr %wk.p to i64
  store atomic i64 0, ptr %wk.p release, align 8
  %nw = sub i64 %nt, 1
  %nw32 = trunc i64 %nw to i32
  store atomic i32 %nw32, ptr %pending release, align 4
  %any = icmp sgt i64 %nw, 0
  br i1 %any, label %post, label %mine
post:
  %i = phi i64 [0, %entry], [%i.n, %next]
  %off = mul i64 %i, 64
  %slot = getelementptr inbounds i8, ptr %slots, i64 %off
  %fn.p = getelementptr inbounds i8, ptr %slot, i64 8
  store ptr %fn, ptr %fn.p, align 8
  %ctx.p = getelementptr inbounds i8, ptr %slot, i64 16
  store i64 %ctx, ptr %ctx.p, align 8
  %tid = add i64 %i, 1
  %tid.p = getelementptr inbounds i8, ptr %slot, i64 24
  store i64 %tid, ptr %tid.p, align 8
  %nt.p = getelementptr inbounds i8, ptr %slot, i64 32
  store i64 %nt, ptr %nt.p, align 8
  %pd.p = getelementptr inbounds i8, ptr %slot, i64 40
  store ptr %pending, ptr %pd.p, align 8
  %sp.p = getelementptr inbounds i8, ptr %slot, i64 48
  store i64 %spin, ptr %sp.p, align 8
  %stt.p = getelementptr inbounds i8, ptr %slot, i64 60
  store atomic i32 1, ptr %stt.p release, align 4
  %old = atomicrmw add ptr %slot, i32 1 seq_cst
  %fl.p = getelementptr inbounds i8, ptr %slot, i64 56
  %parked = load atomic i32, ptr %fl.p seq_cst, align 4
  %asleep = icmp ne i32 %parked, 0
  br i1 %asleep, label %rouse, label %next
rouse:
  call void @futex_wake(ptr %slot, i32 1)
  br label %next
next:
  %i.n = add i64 %i, 1
  %more = icmp slt i64 %i.n, %nw
  br i1 %more, label %post, label %mine
mine:
  call void %fn(i64 %ctx, i64 0, i64 %nt, i64 %wk)
  %may = icmp ne i64 %claims, 0
  %some = and i1 %may, %any
  br i1 %some, label %withdraw, label %check
withdraw:
  %j = phi i64 [0, %mine], [%j.n, %wnext]
  %joff = mul i64 %j, 64
  %wslot = getelementptr inbounds i8, ptr %slots, i64 %joff
  %ws.p = getelementptr inbounds i8, ptr %wslot, i64 60
  %wcx = cmpxchg ptr %ws.p, i32 1, i32 3 acq_rel monotonic
  %won = extractvalue { i32, i1 } %wcx, 1
  br i1 %won, label %count, label %wnext
count:
  %wold = atomicrmw sub ptr %pending, i32 1 acq_rel
  br label %wnext
wnext:
  %j.n = add i64 %j, 1
  %wmore = icmp slt i64 %j.n, %nw
  br i1 %wmore, label %withdraw, label %check
check:
  %left = load atomic i32, ptr %pending acquire, align 4
  %zero = icmp eq i32 %left, 0
  br i1 %zero, label %exit, label %wait
wait:
  %x = call i32 @wait_change(ptr %pending, i32 %left, i64 %spin, ptr null)
  br label %check
exit:
  ret void
}

; Barrier of nt threads on a zeroed 8-byte word: +0 arrivals (i32), +4 generation (i32).
define void @tl_barrier(i64 %bi, i64 %nt, i64 %spin) nounwind {
entry:
  %b = inttoptr i64 %bi to ptr
  %gen.p = getelementptr inbounds i8, ptr %b, i64 4
  %gen = load atomic i32, ptr %gen.p acquire, align 4
  %old = atomicrmw add ptr %b, i32 1 acq_rel
  %n32 = trunc i64 %nt to i32
  %lastn = sub i32 %n32, 1
  %last = icmp eq i32 %old, %lastn
  br i1 %last, label %release, label %wait
release:
  store atomic i32 0, ptr %b monotonic, align 4
  %g2 = atomicrmw add ptr %gen.p, i32 1 acq_rel
  call void @futex_wake(ptr %gen.p, i32 2147483647)
  ret void
wait:
  %x = call i32 @wait_change(ptr %gen.p, i32 %gen, i64 %spin, ptr null)
  ret void
}

; Atomic fetch-and-add on an i64 (work counters).
define i64 @tl_fetch_add(i64 %pi, i64 %v) nounwind {
  %p = inttoptr i64 %pi to ptr
  %old = atomicrmw add ptr %p, i64 %v acq_rel
  ret i64 %old
}
"""

_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}


def _gemm_shapes(target: Isa) -> list:
    """``[((mr, nv), tag)]``: the micro-kernel shapes of ``target``'s module and the suffix
    of their GEMMs' names (the main shape's ``""``, the narrow one's ``"_n"``)."""
    return [((target.mr, target.nv), "")] + ([(target.narrow, "_n")] if target.narrow else [])


def _gemm_set(mr: int, nv: int, w: int, tag: str) -> list:
    """IR of one micro-kernel shape's GEMMs, ``tl_sgemm{tag}`` (:func:`_gemm_ir`) and
    ``tl_sgemm_taps{tag}`` (:func:`_taps_ir`), with the full, masked and paired kernels
    each calls."""
    L = []
    for taps, sfx in ((False, ""), (True, "_t")):
        L += _ukernel(f"uk_full{tag}{sfx}", mr, nv, w, masked=False, taps=taps)
        L += _ukernel(f"uk_mask{tag}{sfx}", mr, nv, w, masked=True, taps=taps)
        if nv > 1:
            L += _ukernel(f"uk_pair{tag}{sfx}", mr, 1, w, masked=True, pair=True, taps=taps)
        L += _taps_ir(mr, nv, w, tag) if taps else _gemm_ir(mr, nv, w, KC, tag)
    return L


def _module_ir(target: Isa, with_pool: bool) -> str:
    w, mr, nv = target.lanes, target.mr, target.nv
    vt = vt_of(w)
    L = ["declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
         f"declare {vt} @llvm.fmuladd.v{w}f32({vt}, {vt}, {vt})",
         f"declare {vt} @llvm.masked.load.v{w}f32.p0(ptr, i32, <{w} x i1>, {vt})",
         f"declare void @llvm.masked.store.v{w}f32.p0({vt}, ptr, i32, <{w} x i1>)"]
    for (pm, pn), tag in _gemm_shapes(target):
        L += _gemm_set(pm, pn, w, tag)
    L += _peak_ir(w, {16: 24, 8: 12}.get(w, 8))
    L += [f"declare {vt} @llvm.masked.gather.v{w}f32.v{w}p0(<{w} x ptr>, i32, <{w} x i1>, {vt})",
          f"declare void @llvm.masked.scatter.v{w}f32.v{w}p0({vt}, <{w} x ptr>, i32, "
          f"<{w} x i1>)"]
    L += fexp_ir(w)
    if w != BLOCK:
        vb = vt_of(BLOCK)
        L += [f"declare {vb} @llvm.fmuladd.v{BLOCK}f32({vb}, {vb}, {vb})",
              f"declare {vb} @llvm.masked.load.v{BLOCK}f32.p0(ptr, i32, <{BLOCK} x i1>, {vb})",
              f"declare void @llvm.masked.store.v{BLOCK}f32.p0({vb}, ptr, i32, <{BLOCK} x i1>)",
              f"declare void @llvm.masked.scatter.v{BLOCK}f32.v{BLOCK}p0({vb}, <{BLOCK} x ptr>, "
              f"i32, <{BLOCK} x i1>)"]
    L += block_ir()
    L += gemm_at_ir(mr, nv, w)
    L += gemm_at_ir(2 * mr, 1, w, "tl_gemm_at1", nv * w)
    for R, cw in direct_shapes(mr):     # the direct convolution's panels, strides 1 and 2
        for s in (1, 2):
            L += direct_ir(R, cw, nv, w, s) + direct_ir(R, cw, nv, w, s, 1)
    L += rows_ir()
    L += act_ir(w)
    L += pool_ir()
    src = "\n".join(L)
    if with_pool:
        x86 = platform.machine().lower() in ("x86_64", "amd64")
        pause = "call void @llvm.x86.sse2.pause()" if x86 else ""
        decl = "declare void @llvm.x86.sse2.pause()\n" if x86 else ""
        src += "\n" + decl + (_POOL_IR.replace("{PAUSE}", pause)
                              .replace("{FUTEX}", str(_FUTEX[platform.machine().lower()])))
    return src


# ---------------------------------------------------------------------------- compiling

class Module:
    """The compiled code for one :class:`Isa`: addresses (``addr``) of ``tl_sgemm``,
    ``tl_sgemm_taps``, ``tl_peak``, the blocked layout's kernels and,
    where the platform has futexes (Linux on x86-64 or ARM64), the pool primitives
    (``pool`` False otherwise)."""

    def __init__(self, target: Isa):
        llvm = _llvm()
        self.isa = target
        self.pool = (platform.system() == "Linux"
                     and platform.machine().lower() in _FUTEX)
        if self.pool:
            libc = ctypes.CDLL(None)
            for sym in ("syscall", "sched_yield"):
                llvm.add_symbol(sym, ctypes.cast(getattr(libc, sym), ctypes.c_void_p).value)
        tm = llvm.Target.from_default_triple().create_target_machine(
            cpu=target.cpu, features=target.features, opt=3, jit=True)
        text = _module_ir(target, self.pool)
        # the machine code is kept between processes in the cache, keyed by everything it
        # is made from: a later process loads that object (into an empty module) instead of
        # parsing, optimising and compiling the IR again
        path = _object_path(text, target, llvm)
        cached = _read(path)
        self._optimised = cached is None
        self._text = text
        if cached is None:
            mod = llvm.parse_assembly(text)
            mod.verify()
            self._optimise(mod, tm)
        else:
            mod = llvm.parse_assembly("")
        self._engine = llvm.create_mcjit_compiler(mod, tm)   # owns the code: kept alive
        self._engine.set_object_cache(lambda _m, buf: _write(path, buf),
                                      lambda _m: cached)
        self._engine.finalize_object()
        self._tm, self._mod = tm, mod
        names = [f"tl_sgemm{g}{tag}" for _, tag in _gemm_shapes(target)
                 for g in ("", "_ep", "_taps", "_taps_ep")] + [
                 "tl_peak", "tl_gemm_at", "tl_gemm_at1", "tl_block_mean", "tl_block_scale",
                 "tl_act",
                 *(f"tl_max{k}s2" for k in POOL_WINDOWS), "tl_bmax",
                 *BLOCK_NAMES, *(f"tl_dc{n}{R}x{cw}s{s}" for R, cw in direct_shapes(target.mr)
                                 for s in (1, 2) for n in ("", "n"))] + (["tl_worker", "tl_run", "tl_barrier",
                                            "tl_fetch_add"] if self.pool else [])
        self.addr = {n: self._engine.get_function_address(n) for n in names}
        i64 = ctypes.c_int64
        self.sgemm = ctypes.CFUNCTYPE(None, *[i64] * 9)(self.addr["tl_sgemm"])
        self.peak = ctypes.CFUNCTYPE(None, i64, i64)(self.addr["tl_peak"])

    @staticmethod
    def _optimise(mod, tm) -> None:
        llvm = _llvm()
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
        pb.getModulePassManager().run(mod, pb)

    def assembly(self) -> str:
        """The machine code as assembly text (to read what the compiler made of it)."""
        if not self._optimised:                 # loaded from the cache: compile the IR here
            self._mod = _llvm().parse_assembly(self._text)
            self._optimise(self._mod, self._tm)
            self._optimised = True
        return self._tm.emit_assembly(self._mod)


def _object_path(text: str, target: Isa, llvm) -> str | None:
    """Where the compiled object of IR ``text`` for ``target`` is cached (None: nowhere)."""
    from .._jit import cache_dir

    try:
        import llvmlite

        key = hashlib.sha1("\n".join([text, target.name, target.cpu, target.features,
                                       llvmlite.__version__, platform.machine()])
                           .encode()).hexdigest()[:20]
        return os.path.join(cache_dir(), "simd", f"{target.name}-{key}.o")
    except Exception:  # noqa: BLE001 - no cache: compile every time
        return None


def _read(path):
    """The cached object at ``path``, or None (absent, unreadable, or not what was written:
    each file starts with its object's SHA-1)."""
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    obj = data[20:]
    return obj if len(data) > 20 and hashlib.sha1(obj).digest() == data[:20] else None


def _write(path, buf) -> None:
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(hashlib.sha1(buf).digest() + bytes(buf))
        os.replace(tmp, path)
    except OSError:                      # a read-only cache: compiled again next time
        pass


_MODULES: dict = {}
_LOCK = threading.Lock()
_FAILED: dict = {}


_DEFAULT: list = []


def module(name: str | None = None) -> Module:
    """The compiled :class:`Module` for :func:`isa` ``(name)``, built once per process
    (``$TENSORLAYOUT_SIMD`` is read at the first call without a name)."""
    if name is None and _DEFAULT:
        return _DEFAULT[0]
    target = isa(name)
    with _LOCK:
        got = _MODULES.get(target)
        if got is None:
            got = _MODULES[target] = Module(target)
        if name is None:
            _DEFAULT.append(got)
        return got


def available() -> bool:
    """True when llvmlite compiles the module here (False: the engine uses BLAS instead)."""
    key = os.environ.get("TENSORLAYOUT_SIMD", "")
    if key not in _FAILED:
        try:
            module()
            _FAILED[key] = None
        except Exception as exc:  # noqa: BLE001 - no llvmlite, an old LLVM, an odd platform
            _FAILED[key] = exc
    return _FAILED[key] is None


# ------------------------------------------------------------------------ Python entry

def pack_rows(a, mr: int | None = None, out=None) -> np.ndarray:
    """Rows of ``a`` (m, k) as the panels :func:`gemm` reads: (ceil(m / mr), k, mr), float32,
    rows past m zero.  ``mr`` defaults to this CPU's micro-kernel rows.

    >>> pack_rows(np.arange(6, dtype=np.float32).reshape(3, 2), mr=2)[:, :, :].tolist()
    [[[0.0, 2.0], [1.0, 3.0]], [[4.0, 0.0], [5.0, 0.0]]]
    """
    a = np.asarray(a, dtype=np.float32)
    if a.ndim != 2:
        raise ShapeError(f"a has shape {a.shape}: pack_rows needs a 2-D (m, k) matrix")
    if mr is None:
        mr = isa().mr
    m, k = a.shape
    npan = -(-m // mr)
    p = np.zeros((npan * mr, k), np.float32)
    p[:m] = a
    packed = p.reshape(npan, mr, k).transpose(0, 2, 1)
    if out is None:
        return np.ascontiguousarray(packed)
    out[...] = packed
    return out


def gemm(a_packed, b, m: int, c=None, accumulate: bool = False, isa_name: str | None = None):
    """``C = A · B`` (or ``C += A · B``) with ``A`` given as :func:`pack_rows` panels.

    ``a_packed``: (ceil(m / mr), k, mr) float32; ``b``: (k, n) float32, rows contiguous
    (any row stride); ``c``: (m, n) float32 with contiguous rows, or None for a new array.
    This is the Python face of ``tl_sgemm``; compiled callers pass the same pointers to
    the address ``module().addr["tl_sgemm"]`` (arguments: m, n, k, a, b, ldb, c, ldc,
    flags, all 64-bit integers; flags bit 0 = accumulate; bit 1 = ``b`` packed in strips
    of ``nr`` columns, each strip's k rows of nr floats one after another, ``ldb`` = nr).
    """
    mod = module(isa_name)
    mr = mod.isa.mr
    a_packed = np.asarray(a_packed)
    b = np.asarray(b)
    if a_packed.dtype != np.float32 or a_packed.ndim != 3 or a_packed.shape[2] != mr \
            or not a_packed.flags.c_contiguous:
        raise ShapeError(f"a_packed has shape {a_packed.shape} and dtype {a_packed.dtype}: it "
                         f"must be C-contiguous float32 (panels, k, {mr}) from pack_rows")
    npan, k, _ = a_packed.shape
    if not 0 <= m <= npan * mr:
        raise ShapeError(f"m = {m} is not allowed: a_packed holds {npan * mr} rows")
    if b.dtype != np.float32 or b.ndim != 2 or b.shape[0] != k or (b.size and b.strides[1] != 4):
        raise ShapeError(f"b has shape {b.shape} and dtype {b.dtype}: it must be float32 "
                         f"({k}, n) with contiguous rows")
    n = b.shape[1]
    if c is None:
        c = np.zeros((m, n), np.float32) if accumulate else np.empty((m, n), np.float32)
    elif (c.dtype != np.float32 or c.shape != (m, n) or (c.size and c.strides[1] != 4)
          or not c.flags.writeable):
        raise ShapeError(f"c has shape {c.shape} and dtype {c.dtype}: it must be a writable "
                         f"float32 ({m}, {n}) array with contiguous rows")
    mod.sgemm(m, n, k, a_packed.ctypes.data, b.ctypes.data, b.strides[0] // 4, c.ctypes.data,
              c.strides[0] // 4, 1 if accumulate else 0)
    return c

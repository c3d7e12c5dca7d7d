"""LLVM IR of the CPU backend's kernels for the blocked layout NCHW16c, compiled by
:mod:`._simd` with its GEMM (every argument an int64, pointers as addresses).

``tl_dw_block(pad, prow, w, b, y, OH, OW, KH, KW, sh, sw, dh, dw, x, H, W, ph, pw, act, lohi)``
convolves one block of 16 channels held as a zero-padded plane of 16-float positions (``pad``:
rows of ``prow`` floats, position (r, c) at ``r·prow + 16·c``; with ``x`` not 0 the block's
unpadded (H, W, 16) plane at ``x`` is first copied into it at (ph, pw)) with its window
(``w``: KH·KW taps of 16 floats, row-major) into ``y`` (OH·OW positions of 16 floats), the
bias ``b`` (16 floats) first and the taps in order, as onnxruntime's and the per-plane kernels
sum them.  Each output position's 16 channels are one vector sum kept in the registers over
every tap; four neighbouring positions at a time share each tap's weights.
``tl_dw_block{KH}x{KW}s{s}`` (:data:`BLOCK_SPECIAL`) are the same for one window and stride,
their taps unrolled (:func:`block_function` picks).  ``tl_dw_direct`` (and its unrolled
forms) take the same arguments but read the block's unpadded plane ``x`` (H rows) where it
lies, its output row h's window row i on row h·sh + i·dh - ph, and skip what falls outside
it; ``pad`` is not read.  Relu and Clip (``act`` 1, 2;
``lohi``: the activation's two parameters as floats) are applied in the store.

``tl_gemm_at`` and ``tl_gemm_at1`` are the 1 x 1 convolution's GEMM turned over, reading
their input where it lies (:func:`gemm_at_ir`); ``tl_dc{R}x{cw}s{s}`` the direct
convolution's panels (:func:`direct_ir`); ``tl_block_mean`` and ``tl_block_scale`` a
block's plane means and scaling (:func:`rows_ir`); ``tl_act`` the activations the stores
leave (:data:`POST_ACTS`, :func:`act_ir`).  A vector of 16 floats is one AVX-512 register, two
AVX2 or four SSE/NEON ones: the compiler splits it.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["vt_of", "splat", "lanes_below", "block_ir", "gemm_at_ir", "direct_ir",
           "direct_shapes", "direct_panel", "fexp_ir", "rows_ir", "act_ir", "IR_ACTS", "STORE_ACTS",
           "POST_ACTS", "BLOCK", "BLOCK_NAMES", "BLOCK_SPECIAL", "block_function"]

#: Depth steps ahead at which ``tl_gemm_at`` and the direct convolution ask for their strip
#: of weights (a prefetch of its two lines then, which never faults): a strip's first panel
#: reads it from the last-level cache, which otherwise answers one line at a time (whole
#: networks, 2 threads, 0 against 64: ResNet-50 96^2 1.38x, ResNet-18 224^2 1.15x, VGG-11 96^2
#: 1.09x: ``benchmarks/bench_setting.py tensorlayout.winograd._simd_block.PREFETCH_WEIGHTS
#: 0 64 --nets ...``, ``benchmarks/results/setting_prefetch_weights_ci2.txt``).
PREFETCH_WEIGHTS = 64
#: Whether the direct convolution stores into planes by transposing each vector of 16
#: channels of its panel's positions in registers (16-float vectors), not by scattering.
PLANES_TRANSPOSED = True
#: Whether ``tl_gemm_at`` runs a whole panel of a blocked or an NCHW input through a copy of
#: its loop whose rows lie at constant offsets from one pointer: the general loop's mr row
#: offsets outnumber the registers, and some were reloaded from the stack at every depth
#: step (28 rows: 16 of them).  Whole networks 1.02-1.05x (ResNet-50, the MobileNets,
#: EfficientNet-B0, ShuffleNetV2; ResNet-18, which has few 1 x 1 layers, 0.98x):
#: ``benchmarks/bench_setting.py tensorlayout.winograd._simd_block.FIXED_ROW_PANELS False
#: True --nets ...``, ``benchmarks/results/setting_fixed_row_panels_ci2.txt``.
FIXED_ROW_PANELS = True

#: Channels in one block of the blocked layouts (16 floats: a cache line).
BLOCK = 16
#: The windows with a function of their own: (KH, KW, stride), dilation 1.
BLOCK_SPECIAL = ((3, 3, 1), (3, 3, 2), (5, 5, 1), (5, 5, 2))
#: The exported depthwise functions: on a zero-bordered copy (``tl_dw_block``) and on the
#: blocked input where it lies (``tl_dw_direct``).
BLOCK_NAMES = tuple(f"tl_dw_{kind}{sfx}" for kind in ("block", "direct")
                    for sfx in ("",) + tuple(f"{kh}x{kw}s{s}" for kh, kw, s in BLOCK_SPECIAL))
#: Whether a depthwise convolution whose input is blocked reads it where it lies, the
#: window's rows and columns outside the input skipped, rather than copying each band of
#: its rows into a zero-bordered buffer first (the copy took more time than the sums).
#: 2-core EPYC, whole networks: MobileNetV2 224^2 1.07x, MobileNetV3-Small 1.04x,
#: EfficientNet-B0 1.03x, at 96^2 1.00-1.03x, the outputs bit for bit the same
#: (``benchmarks/bench_setting.py tensorlayout.winograd._simd_block.DW_DIRECT False True
#: --nets ...``, ``benchmarks/results/setting_dw_direct_epyc2.txt``).
DW_DIRECT = True

_V = f"<{BLOCK} x float>"
_FMA = f"@llvm.fmuladd.v{BLOCK}f32"


def vt_of(w: int) -> str:
    """The IR type of a vector of ``w`` floats."""
    return f"<{w} x float>"


def splat(L, name: str, scalar: str, w: int, elem: str = "float") -> None:
    """``name`` = ``w`` copies of ``scalar`` (an ``elem``) in one vector."""
    vt = f"<{w} x {elem}>"
    L.append(f"  {name}.i = insertelement {vt} poison, {elem} {scalar}, i64 0")
    L.append(f"  {name} = shufflevector {vt} {name}.i, {vt} poison, <{w} x i32> zeroinitializer")


def lanes_below(L, name: str, count: str, w: int, first: int = 0, bound: str = "") -> None:
    """``name`` = the mask of the ``w`` lanes numbered from ``first`` that are below
    ``count`` (an i64; its splat named ``bound`` when given, made here otherwise)."""
    if not bound:
        bound = f"{name}.n"
        splat(L, bound, count, w, "i64")
    lanes = "<" + ", ".join(f"i64 {first + i}" for i in range(w)) + ">"
    L.append(f"  {name} = icmp slt <{w} x i64> {lanes}, {bound}")


def _positions(L, tag: str, n: int, mode: str = "pad") -> None:
    """The loop over taps for ``n`` positions starting at position ``%o{tag}`` of output row
    ``%h`` (labels and names suffixed ``tag``), stored at the end; enters at label
    ``{tag}.go`` and leaves to ``{tag}.done``.  ``mode`` "pad": read from the zero-bordered
    plane ``%pad`` (rows of ``%prow`` floats); "direct" or "checked": from the input plane
    ``%x`` where it lies (:func:`_direct_body`), a window row outside it skipped, and,
    "checked" (n = 1), a column outside it too."""
    t, direct, checked = tag, mode != "pad", mode == "checked"
    L += [f"{t}.go:",
          f"  %col{t} = mul i64 %o{t}, %sw"]
    if direct:
        L.append(f"  %cb{t} = sub i64 %col{t}, %pw")
    L += [f"  br label %{t}.kh",
          f"{t}.kh:",
          f"  %i{t} = phi i64 [0, %{t}.go], [%i{t}.n, %{t}.khn]"]
    back, nxt = ("e", "kwn") if direct else ("c", "kwb")
    for p in range(n):
        L.append(f"  %a{t}{p} = phi {_V} [%bv, %{t}.go], [%{back}{t}{p}, %{t}.khn]")
    L += [f"  %ic{t} = icmp slt i64 %i{t}, %KH",
          f"  br i1 %ic{t}, label %{t}.khb, label %{t}.st",
          f"{t}.khb:",
          f"  %ri{t} = mul i64 %i{t}, %dh",
          f"  %r{t} = add i64 %hrow, %ri{t}"]
    if direct:
        L += [f"  %r0{t} = icmp sge i64 %r{t}, 0",
              f"  %r1{t} = icmp slt i64 %r{t}, %H",
              f"  %rok{t} = and i1 %r0{t}, %r1{t}",
              f"  %rb{t} = mul i64 %r{t}, %W",
              f"  %t{t} = mul i64 %i{t}, %KW",
              f"  br i1 %rok{t}, label %{t}.kw, label %{t}.khn"]
    else:
        L += [f"  %rb{t} = mul i64 %r{t}, %prow",
              f"  %t{t} = mul i64 %i{t}, %KW",
              f"  br label %{t}.kw"]
    L += [f"{t}.kw:",
          f"  %j{t} = phi i64 [0, %{t}.khb], [%j{t}.n, %{t}.{nxt}]"]
    for p in range(n):
        L.append(f"  %c{t}{p} = phi {_V} [%a{t}{p}, %{t}.khb], [%d{t}{p}, %{t}.{nxt}]")
    L += [f"  %jc{t} = icmp slt i64 %j{t}, %KW",
          f"  br i1 %jc{t}, label %{t}.kwb, label %{t}.{'kwx' if direct else 'khn'}",
          f"{t}.kwb:",
          f"  %tj{t} = add i64 %t{t}, %j{t}",
          f"  %wo{t} = shl i64 %tj{t}, 4",
          f"  %wp{t} = getelementptr inbounds float, ptr %w, i64 %wo{t}",
          f"  %wv{t} = load {_V}, ptr %wp{t}, align 4",
          f"  %cj{t} = mul i64 %j{t}, %dw",
          f"  %cc{t} = add i64 %{'cb' if direct else 'col'}{t}, %cj{t}"]
    if direct:
        _direct_taps(L, t, n, checked)
    else:
        for p in range(n):
            L += [f"  %cp{t}{p} = add i64 %cc{t}, %sw{p}",
                  f"  %cs{t}{p} = shl i64 %cp{t}{p}, 4",
                  f"  %xo{t}{p} = add i64 %rb{t}, %cs{t}{p}",
                  f"  %xp{t}{p} = getelementptr inbounds float, ptr %pad, i64 %xo{t}{p}",
                  f"  %xv{t}{p} = load {_V}, ptr %xp{t}{p}, align 4",
                  f"  %d{t}{p} = call {_V} {_FMA}({_V} %wv{t}, {_V} %xv{t}{p}, "
                  f"{_V} %c{t}{p})"]
        L += [f"  %j{t}.n = add i64 %j{t}, 1",
              f"  br label %{t}.kw",
              f"{t}.khn:"]
    L += [f"  %i{t}.n = add i64 %i{t}, 1",
          f"  br label %{t}.kh",
          f"{t}.st:"]
    _store_positions(L, t, n)


def _output_rows(L, came: str, hrow: list, runs) -> None:
    """The loop over output rows ``%h`` (entered from label ``came``) to the function's end:
    ``hrow``, the lines that set ``%hrow`` (the first input row of the window's), and
    ``%yrow``; then the row's positions (:func:`_row_runs`, the last run going on to label
    ``row.end``)."""
    L += ["  br label %oh",
          "oh:",
          f"  %h = phi i64 [0, {came}], [%h.n, %row.end]",
          "  %hc = icmp slt i64 %h, %OH",
          "  br i1 %hc, label %ohb, label %exit",
          "ohb:", *hrow,
          "  %yrow = mul i64 %h, %OW",
          f"  br label %{runs[0][0]}"]
    _row_runs(L, runs)
    L += ["row.end:",
          "  %h.n = add i64 %h, 1",
          "  br label %oh",
          "exit:",
          "  ret void",
          "}"]


def _row_runs(L, runs) -> None:
    """An output row's positions in runs, one after another: each ``(tag, first, came, bound,
    n, mode, then)`` runs ``%o{tag}`` from ``first`` (entered from label ``came``) while it is
    below ``bound``, ``n`` positions at a time (:func:`_positions` in ``mode``), then goes to
    label ``then``."""
    for t, first, came, bound, n, mode, then in runs:
        L += [f"{t}:",
              f"  %o{t} = phi i64 [{first}, {came}], [%o{t}.n, %{t}.done]",
              f"  %{t}c = icmp slt i64 %o{t}, {bound}",
              f"  br i1 %{t}c, label %{t}.go, label %{then}"]
        _positions(L, t, n, mode)
        L += [f"{t}.done:",
              f"  %o{t}.n = add i64 %o{t}, {n}",
              f"  br label %{t}"]


def _store_positions(L, tag: str, n: int) -> None:
    """The activation of the sums ``%a{tag}{p}`` of the ``n`` positions from ``%o{tag}`` in
    output row ``%yrow``, stored there; then to label ``{tag}.done``."""
    act_block(L, [f"%a{tag}{p}" for p in range(n)], [f"%z{tag}{p}" for p in range(n)],
              f"{tag}.act", BLOCK, STORE_ACTS)
    for p in range(n):
        L += [f"  %yo{tag}{p} = add i64 %yrow, %o{tag}",
              f"  %yq{tag}{p} = add i64 %yo{tag}{p}, {p}",
              f"  %ys{tag}{p} = shl i64 %yq{tag}{p}, 4",
              f"  %yp{tag}{p} = getelementptr inbounds float, ptr %y, i64 %ys{tag}{p}",
              f"  store {_V} %z{tag}{p}, ptr %yp{tag}{p}, align 4"]
    L.append(f"  br label %{tag}.done")


def _body() -> list:
    """``@dwb``: the kernel with KH and KW as arguments (inlined into each export)."""
    args = ", ".join(f"i64 %{a}" for a in ("prow", "OH", "OW", "KH", "KW", "sh", "sw", "dh",
                                            "dw", "H", "W", "ph", "pw", "act"))
    L = [f"define internal void @dwb(ptr noalias %pad, ptr noalias %w, ptr noalias %b, "
         f"ptr noalias %y, ptr noalias %x, ptr noalias %lohi, {args}) alwaysinline nounwind {{",
         "entry:",
         "  %hasx = icmp ne ptr %x, null",
         "  br i1 %hasx, label %cp.h, label %start",
         # the block's plane (H, W, 16) into the interior of the padded plane
         "cp.h:",
         "  %ch = phi i64 [0, %entry], [%ch.n, %cp.hn]",
         "  %chc = icmp slt i64 %ch, %H",
         "  br i1 %chc, label %cp.hb, label %start",
         "cp.hb:",
         "  %crow = add i64 %ch, %ph",
         "  %crb = mul i64 %crow, %prow",
         "  %cxr = mul i64 %ch, %W",
         "  br label %cp.w",
         "cp.w:",
         "  %cj = phi i64 [0, %cp.hb], [%cj.n, %cp.wb]",
         "  %cjc = icmp slt i64 %cj, %W",
         "  br i1 %cjc, label %cp.wb, label %cp.hn",
         "cp.wb:",
         "  %cxq = add i64 %cxr, %cj",
         "  %cxo = shl i64 %cxq, 4",
         "  %cxp = getelementptr inbounds float, ptr %x, i64 %cxo",
         f"  %cv = load {_V}, ptr %cxp, align 4",
         "  %cpc = add i64 %cj, %pw",
         "  %cpo = shl i64 %cpc, 4",
         "  %cpa = add i64 %crb, %cpo",
         "  %cpp = getelementptr inbounds float, ptr %pad, i64 %cpa",
         f"  store {_V} %cv, ptr %cpp, align 4",
         "  %cj.n = add i64 %cj, 1",
         "  br label %cp.w",
         "cp.hn:",
         "  %ch.n = add i64 %ch, 1",
         "  br label %cp.h",
         "start:",
         f"  %bv = load {_V}, ptr %b, align 4",
         "  %ow4 = and i64 %OW, -4",
         "  %sw0 = add i64 0, 0",
         "  %sw1 = add i64 %sw, 0",
         "  %sw2 = shl i64 %sw, 1",
         "  %sw3 = add i64 %sw2, %sw"]
    act_prologue(L, BLOCK)
    # the row's positions four at a time, then one
    _output_rows(L, "%start", ["  %hrow = mul i64 %h, %sh"],
                 (("q4", "0", "%ohb", "%ow4", 4, "pad", "q1"),
                  ("q1", "%oq4", "%q4", "%OW", 1, "pad", "row.end")))
    return L


def _direct_taps(L, t: str, n: int, checked: bool) -> None:
    """:func:`_positions`' tap of the input read where it lies: each position's input
    vector (for ``checked`` only inside the row, else the sum goes on unchanged) into its
    sum, the next tap; then the end of a window row, its sums ``%e{t}{p}``."""
    for p in range(n):
        L += [f"  %cp{t}{p} = add i64 %cc{t}, %sw{p}",
              f"  %xq{t}{p} = add i64 %rb{t}, %cp{t}{p}",
              f"  %xo{t}{p} = shl i64 %xq{t}{p}, 4"]
    if checked:
        L += [f"  %k0{t} = icmp sge i64 %cp{t}0, 0",
              f"  %k1{t} = icmp slt i64 %cp{t}0, %W",
              f"  %kok{t} = and i1 %k0{t}, %k1{t}",
              f"  br i1 %kok{t}, label %{t}.ld, label %{t}.kwn",
              f"{t}.ld:"]
    for p in range(n):
        L += [f"  %xp{t}{p} = getelementptr inbounds float, ptr %x, i64 %xo{t}{p}",
              f"  %xv{t}{p} = load {_V}, ptr %xp{t}{p}, align 4",
              f"  %f{t}{p} = call {_V} {_FMA}({_V} %wv{t}, {_V} %xv{t}{p}, {_V} %c{t}{p})"]
    L += [f"  br label %{t}.kwn",
          f"{t}.kwn:"]
    src = f"%{t}.ld" if checked else f"%{t}.kwb"
    for p in range(n):
        skip = f", [%c{t}{p}, %{t}.kwb]" if checked else ""
        L.append(f"  %d{t}{p} = phi {_V} [%f{t}{p}, {src}]{skip}")
    L += [f"  %j{t}.n = add i64 %j{t}, 1",
          f"  br label %{t}.kw",
          f"{t}.kwx:",
          f"  br label %{t}.khn",
          f"{t}.khn:"]
    for p in range(n):
        L.append(f"  %e{t}{p} = phi {_V} [%a{t}{p}, %{t}.khb], [%c{t}{p}, %{t}.kwx]")


def _direct_body() -> list:
    """``@dwd``: ``@dwb``'s sums with the input read where it lies, ``%x`` a block's plane
    of ``%H`` rows by ``%W`` positions (16 floats each; null where H is 0) and the window's
    row i of output row h on its row h·sh + i·dh - ph: the rows outside the plane skipped,
    the columns outside it skipped at the row's ends (positions below ``%qL`` and from
    ``%qR``, each checked), none looked at in between (four positions at a time, then one).
    ``%pad`` and ``%prow`` are not used."""
    args = ", ".join(f"i64 %{a}" for a in ("prow", "OH", "OW", "KH", "KW", "sh", "sw", "dh",
                                            "dw", "H", "W", "ph", "pw", "act"))
    L = [f"define internal void @dwd(ptr noalias %pad, ptr noalias %w, ptr noalias %b, "
         f"ptr noalias %y, ptr noalias %x, ptr noalias %lohi, {args}) alwaysinline nounwind {{",
         "entry:",
         f"  %bv = load {_V}, ptr %b, align 4",
         "  %sw0 = add i64 0, 0",
         "  %sw1 = add i64 %sw, 0",
         "  %sw2 = shl i64 %sw, 1",
         "  %sw3 = add i64 %sw2, %sw",
         # qL: the first position whose window starts inside the row; qR: one past the last
         # whose window ends inside it (at least qL, at most OW)
         "  %qa = add i64 %pw, %sw",
         "  %qb = sub i64 %qa, 1",
         "  %qc0 = udiv i64 %qb, %sw",
         "  %qL.lt = icmp slt i64 %qc0, %OW",
         "  %qL = select i1 %qL.lt, i64 %qc0, i64 %OW",
         "  %kw1 = sub i64 %KW, 1",
         "  %kwd = mul i64 %kw1, %dw",
         "  %w1 = sub i64 %W, 1",
         "  %lim0 = sub i64 %w1, %kwd",
         "  %lim = add i64 %lim0, %pw",
         "  %lneg = icmp slt i64 %lim, 0",
         "  %lsafe = select i1 %lneg, i64 0, i64 %lim",
         "  %qd = udiv i64 %lsafe, %sw",
         "  %qd1 = add i64 %qd, 1",
         "  %qr0 = select i1 %lneg, i64 0, i64 %qd1",
         "  %qr.lt = icmp slt i64 %qr0, %OW",
         "  %qr1 = select i1 %qr.lt, i64 %qr0, i64 %OW",
         "  %qr.ge = icmp sge i64 %qr1, %qL",
         "  %qR = select i1 %qr.ge, i64 %qr1, i64 %qL",
         "  %n4a = sub i64 %qR, %qL",
         "  %n4 = and i64 %n4a, -4",
         "  %q4e = add i64 %qL, %n4"]
    act_prologue(L, BLOCK)
    # the row's positions: its left end, checked; four at a time, then one, unchecked; its
    # right end, checked
    _output_rows(L, "%entry", ["  %hs = mul i64 %h, %sh", "  %hrow = sub i64 %hs, %ph"],
                 (("el", "0", "%ohb", "%qL", 1, "checked", "d4"),
                  ("d4", "%qL", "%el", "%q4e", 4, "direct", "d1"),
                  ("d1", "%q4e", "%d4", "%qR", 1, "direct", "ec"),
                  ("ec", "%qR", "%d1", "%OW", 1, "checked", "row.end")))
    return L


def block_ir() -> list:
    """The IR lines of :data:`BLOCK_NAMES` (and the ``@dwb`` they inline); the module
    declares the 16-float intrinsics itself when its vectors are narrower."""
    L = _body() + _direct_body()
    names = ("pad", "prow", "w", "b", "y", "OH", "OW", "KH", "KW", "sh", "sw", "dh", "dw", "x",
             "H", "W", "ph", "pw", "act", "lohi")
    for name, k in zip(BLOCK_NAMES, ((None,) + BLOCK_SPECIAL) * 2):
        body = "@dwb" if name.startswith("tl_dw_block") else "@dwd"
        L += [f"define void @{name}(" + ", ".join(f"i64 %{a}i" for a in names)
              + ") nounwind {",
              "entry:"]
        for a in ("pad", "w", "b", "y", "x", "lohi"):
            L.append(f"  %{a} = inttoptr i64 %{a}i to ptr")
        kh, kw, sh, sw, dh, dw = (("%KHi", "%KWi", "%shi", "%swi", "%dhi", "%dwi") if k is None
                                  else (k[0], k[1], k[2], k[2], 1, 1))
        L += [f"  call void {body}(ptr %pad, ptr %w, ptr %b, ptr %y, ptr %x, ptr %lohi, "
              f"i64 %prowi, i64 %OHi, i64 %OWi, i64 {kh}, i64 {kw}, i64 {sh}, i64 {sw}, "
              f"i64 {dh}, i64 {dw}, i64 %Hi, i64 %Wi, i64 %phi, i64 %pwi, i64 %acti)",
              "  ret void",
              "}"]
    return L


def block_function(KH: int, KW: int, sh: int, sw: int, dh: int, dw: int,
                   direct: bool = False) -> str:
    """The name of the function that runs this window best, on a zero-bordered copy or,
    ``direct``, on the blocked input where it lies."""
    kind = "direct" if direct else "block"
    if (dh, dw) == (1, 1) and sh == sw and (KH, KW, sh) in BLOCK_SPECIAL:
        return f"tl_dw_{kind}{KH}x{KW}s{sh}"
    return f"tl_dw_{kind}"


def _depth_step(L, mr: int, nv: int, w: int, nr: int, a_row, s: str = "") -> None:
    """One depth step of an mr x nv·w micro-kernel inside the loop ``%kl`` (entered from
    ``%run`` with the sums ``%u{r}_{v}``): the sums ``%x{r}_{v}``, the row of B at ``%bk``
    (nr floats; its weights asked for ahead, :func:`_prefetch_weights`), then for each row r
    the float at ``%ap{r}``, which the lines ``a_row(r)`` point at, times that row into
    ``%y{r}_{v}``; every name and label ending in ``s`` (a second copy of the loop)."""
    vt = vt_of(w)
    fma = f"@llvm.fmuladd.v{w}f32"
    for r in range(mr):
        for v in range(nv):
            L.append(f"  %x{r}_{v}{s} = phi {vt} [%u{r}_{v}{s}, %run{s}], "
                     f"[%y{r}_{v}{s}, %kl{s}]")
    for v in range(nv):
        L += [f"  %bp{v}{s} = getelementptr inbounds float, ptr %bk{s}, i64 {v * w}",
              f"  %bv{v}{s} = load {vt}, ptr %bp{v}{s}, align 4"]
    _prefetch_weights(L, nr, s)
    for r in range(mr):
        L += a_row(r) + [f"  %as{r}{s} = load float, ptr %ap{r}{s}, align 4"]
        splat(L, f"%av{r}{s}", f"%as{r}{s}", w)
        for v in range(nv):
            L.append(f"  %y{r}_{v}{s} = call {vt} {fma}({vt} %av{r}{s}, {vt} %bv{v}{s}, "
                     f"{vt} %x{r}_{v}{s})")


def _store_prologue(L, nv: int, w: int) -> None:
    """What a kernel's stores of nv vectors need (:func:`_store_sums`): ``%mask{v}``, the
    lanes below ``%n``; ``%pl{v}``, lane q of vector v's offset (v·w + q)·``%cps`` in planes;
    ``%vo{v}``, vector v's offset (v·w // 16)·``%cbs`` + v·w % 16 in the blocked layout."""
    splat(L, "%cpsv", "%cps", w, "i64")
    splat(L, "%cv", "%n", w, "i64")
    for v in range(nv):
        lanes = "<" + ", ".join(f"i64 {v * w + i}" for i in range(w)) + ">"
        L.append(f"  %pl{v} = mul <{w} x i64> {lanes}, %cpsv")
        lanes_below(L, f"%mask{v}", "", w, v * w, "%cv")
        L += [f"  %vo{v}.b = mul i64 %cbs, {v * w // 16}",
              f"  %vo{v} = add i64 %vo{v}.b, {v * w % 16}"]


def _prefetch_weights(L, nr: int, s: str = "") -> None:
    """At depth step ``%bk`` (a strip's row of nr floats): its row PREFETCH_WEIGHTS steps on
    asked for, a prefetch per 16 floats (see :data:`PREFETCH_WEIGHTS`); names end in ``s``."""
    if not PREFETCH_WEIGHTS:
        return
    for i in range(0, nr, BLOCK):
        L += [f"  %pfw{i}{s} = getelementptr float, ptr %bk{s}, i64 "
              f"{PREFETCH_WEIGHTS * nr + i}",
              f"  call void @llvm.prefetch.p0(ptr %pfw{i}{s}, i32 0, i32 3, i32 1)"]


def gemm_at_ir(mr: int, nv: int, w: int, name: str = "tl_gemm_at", bstride: int = 0) -> list:
    """IR of ``tl_gemm_at(m, n, k, a, ars, aks, runs, rstride, b, c, ldc, cbs, bias, act,
    lohi, cps, res)`` (every argument an int64): C (m x n) = act(A (m x runs·k) · B + bias
    [+ res]), A read
    where it lies, with no packing: element (i, t·k + j) at ``a + i·ars + j·aks + t·rstride``
    floats (an NCHW input's positions: ars 1, aks H·W, one run; a blocked input's: ars 16,
    aks 1, one run of 16 per block); B a strip packed by ``pack_rows`` (row g at
    ``b + g·nr``, nr = nv·w, zero past its columns); n at most nr.  Column j of row i goes
    to ``c + i·ldc + (j // 16)·cbs + j % 16``: a row-major tile with cbs 16, a blocked
    tensor's positions with ldc 16 and cbs its block's size; with ``cps`` not 0 at
    ``c + j·cps + i`` instead (NCHW planes, scattered); the residual ``res`` (same places,
    or 0) added after the bias.  ``bias``:
    nr floats or 0; ``act`` an activation code of :data:`STORE_ACTS` (``lohi``: its two
    parameters as floats; another code: none).
    Panels of mr rows of A, each summed in mr·nv vector registers over the whole depth (a
    last panel's missing rows read its last row again; a whole one of ars 16 or 1 with its
    rows at constant offsets, :data:`FIXED_ROW_PANELS`).  ``name``: the function's name
    (``tl_gemm_at1`` is the same with 2·mr rows by one vector, for strips of one vector);
    ``bstride``: floats from one row of B to the next (default nv·w: the strip's width)."""
    vt = vt_of(w)
    nr = bstride or nv * w
    acc = [(r, v) for r in range(mr) for v in range(nv)]
    L = [f"define void @{name}(i64 %m, i64 %n, i64 %k, i64 %ai, i64 %ars, i64 %aks, "
         "i64 %runs, i64 %rstride, i64 %bi, i64 %ci, i64 %ldc, i64 %cbs, i64 %biasi, "
         "i64 %act, i64 %lohii, i64 %cps, i64 %resi) nounwind {",
         "entry:",
         "  %a = inttoptr i64 %ai to ptr",
         "  %b = inttoptr i64 %bi to ptr",
         "  %c = inttoptr i64 %ci to ptr",
         "  %bias = inttoptr i64 %biasi to ptr",
         "  %res = inttoptr i64 %resi to ptr",
         "  %planes = icmp ne i64 %cps, 0",
         "  %hasres = icmp ne i64 %resi, 0",
         "  %lohi = inttoptr i64 %lohii to ptr",
         "  %hasbias = icmp ne i64 %biasi, 0",
         "  br label %bnds",
         "bnds:"]
    _bias_prologue(L, nv, w)
    _store_prologue(L, nv, w)
    L += [f"  %kb = mul i64 %k, {nr}",
         "  br label %panel",
         "panel:",
         "  %i0 = phi i64 [0, %start], [%i0.n, %pend]",
         "  %left = sub i64 %m, %i0",
         f"  %few = icmp slt i64 %left, {mr}",
         f"  %rows = select i1 %few, i64 %left, i64 {mr}",
         "  %last = sub i64 %rows, 1",
         "  %pao = mul i64 %i0, %ars",
         "  %pa = getelementptr inbounds float, ptr %a, i64 %pao"]
    for r in range(mr):
        L += [f"  %rc{r} = icmp slt i64 {r}, %rows",
              f"  %rr{r} = select i1 %rc{r}, i64 {r}, i64 %last",
              f"  %ro{r} = mul i64 %rr{r}, %ars"]
    # a whole panel of a blocked (ars 16) or an NCHW (ars 1) input takes a copy of the loop
    # whose rows lie at constant offsets (FIXED_ROW_PANELS)
    loops = (("", "%panel", None),)
    if FIXED_ROW_PANELS:
        L += [f"  %full = icmp eq i64 %rows, {mr}",
              "  %isb = icmp eq i64 %ars, 16",
              "  %isp = icmp eq i64 %ars, 1",
              "  %fb = and i1 %full, %isb",
              "  %fp = and i1 %full, %isp",
              "  br i1 %fb, label %run.b, label %disp",
              "disp:",
              "  br i1 %fp, label %run.p, label %run"]
        loops = (("", "%disp", None), (".b", "%panel", 16), (".p", "%disp", 1))
    else:
        L.append("  br label %run")
    for s, pred, ars in loops:
        L += [f"run{s}:",
              f"  %t{s} = phi i64 [0, {pred}], [%t.n{s}, %rend{s}]"]
        for r, v in acc:
            L.append(f"  %u{r}_{v}{s} = phi {vt} [zeroinitializer, {pred}], "
                     f"[%y{r}_{v}{s}, %rend{s}]")
        L += [f"  %rao{s} = mul i64 %t{s}, %rstride",
              f"  %ra{s} = getelementptr inbounds float, ptr %pa, i64 %rao{s}",
              f"  %rbo{s} = mul i64 %t{s}, %kb",
              f"  %rb{s} = getelementptr inbounds float, ptr %b, i64 %rbo{s}",
              f"  br label %kl{s}",
              f"kl{s}:",
              f"  %j{s} = phi i64 [0, %run{s}], [%j.n{s}, %kl{s}]",
              f"  %pk{s} = phi ptr [%ra{s}, %run{s}], [%pk.n{s}, %kl{s}]",
              f"  %bk{s} = phi ptr [%rb{s}, %run{s}], [%bk.n{s}, %kl{s}]"]
        _depth_step(L, mr, nv, w, nr, lambda r, s=s, ars=ars: [
            f"  %ap{r}{s} = getelementptr inbounds float, ptr %pk{s}, i64 "
            + (f"%ro{r}" if ars is None else str(r * ars))], s)
        L += [f"  %pk.n{s} = getelementptr inbounds float, ptr %pk{s}, i64 %aks",
              f"  %bk.n{s} = getelementptr inbounds float, ptr %bk{s}, i64 {nr}",
              f"  %j.n{s} = add i64 %j{s}, 1",
              f"  %kmore{s} = icmp slt i64 %j.n{s}, %k",
              f"  br i1 %kmore{s}, label %kl{s}, label %rend{s}",
              f"rend{s}:",
              f"  %t.n{s} = add i64 %t{s}, 1",
              f"  %tmore{s} = icmp slt i64 %t.n{s}, %runs",
              f"  br i1 %tmore{s}, label %run{s}, label %sums"]
    L.append("sums:")
    for r, v in acc:
        L.append(f"  %z{r}_{v} = phi {vt} " + ", ".join(
            f"[%y{r}_{v}{s}, %rend{s}]" for s, _, _ in loops))
    L.append("  br label %row0")
    for r in range(mr):
        nxt = f"row{r + 1}" if r + 1 < mr else "pend"
        L += [f"row{r}:",
              f"  br i1 %rc{r}, label %st{r}, label %pend",
              f"st{r}:",
              f"  %ci{r} = add i64 %i0, {r}",
              f"  %co{r} = mul i64 %ci{r}, %ldc"]
        splat(L, f"%civ{r}", f"%ci{r}", w, "i64")
        for v in range(nv):
            L.append(f"  %e{r}_{v} = fadd {vt} %z{r}_{v}, %bs{v}")
        L.append(f"  br i1 %planes, label %sp{r}, label %sr{r}")
        # planes: column j of row i at c + j·cps + i, the residual likewise
        L.append(f"sp{r}:")
        _planes_store(L, r, nv, w, f"%civ{r}", f"sp{r}", nxt)
        # rows: vector v at c + i·ldc + %vo{v}, the residual from the same place of res
        L.append(f"sr{r}:")
        for v in range(nv):
            e = f"{r}_{v}"
            L += [f"  %sro{e} = add i64 %co{r}, %vo{v}",
                  f"  %cp{e} = getelementptr inbounds float, ptr %c, i64 %sro{e}",
                  f"  %srp{e} = getelementptr inbounds float, ptr %res, i64 %sro{e}"]
        _store_sums(L, r, nv, w, f"sr{r}", nxt, "s", [f"%cp{r}_{v}" for v in range(nv)],
                    [f"%srp{r}_{v}" for v in range(nv)], False)
    L += ["pend:",
          f"  %i0.n = add i64 %i0, {mr}",
          "  %pmore = icmp slt i64 %i0.n, %m",
          "  br i1 %pmore, label %panel, label %exit",
          "exit:",
          "  ret void",
          "}"]
    return L


def _bias_prologue(L, nv: int, w: int) -> None:
    """At label ``bnds``: the activation's parameters (:func:`act_prologue`) and ``%bs{v}``,
    the bias's nv vectors at ``%bias`` (zeros where ``%hasbias`` is false); on at ``start``."""
    vt = vt_of(w)
    act_prologue(L, w)
    L += ["  br i1 %hasbias, label %biasb, label %start",
          "biasb:"]
    for v in range(nv):
        L += [f"  %bsp{v} = getelementptr inbounds float, ptr %bias, i64 {v * w}",
              f"  %bsl{v} = load {vt}, ptr %bsp{v}, align 4"]
    L += ["  br label %start",
          "start:"]
    for v in range(nv):
        L.append(f"  %bs{v} = phi {vt} [zeroinitializer, %bnds], [%bsl{v}, %biasb]")


def _store_sums(L, r: int, nv: int, w: int, here: str, nxt: str, t: str, out, res,
                scattered: bool) -> None:
    """Row r's sums (``%e{r}_{v}``, the bias added) plus the residual where ``%hasres``, then
    Relu or Clip, stored: vector v to ``out[v]`` with its residual read from ``res[v]``
    (``scattered``: vectors of pointers, gathered and scattered; else each a pointer to w
    consecutive floats); lanes masked by ``%mask{v}``.  ``here``: the label the code is in;
    names and labels tagged ``t``; then on to ``nxt``."""
    vt = vt_of(w)
    L += [f"  br i1 %hasres, label %{t}g{r}, label %{t}k{r}",
          f"{t}g{r}:"]
    for v in range(nv):
        e = f"{r}_{v}"
        read = (f"@llvm.masked.gather.v{w}f32.v{w}p0(<{w} x ptr> {res[v]}" if scattered else
                f"@llvm.masked.load.v{w}f32.p0(ptr {res[v]}")
        L += [f"  %{t}rg{e} = call {vt} {read}, i32 4, <{w} x i1> %mask{v}, "
              f"{vt} zeroinitializer)",
              f"  %{t}er{e} = fadd {vt} %e{e}, %{t}rg{e}"]
    L += [f"  br label %{t}k{r}",
          f"{t}k{r}:"]
    for v in range(nv):
        e = f"{r}_{v}"
        L.append(f"  %{t}eq{e} = phi {vt} [%e{e}, %{here}], [%{t}er{e}, %{t}g{r}]")
    act_block(L, [f"%{t}eq{r}_{v}" for v in range(nv)], [f"%{t}z{r}_{v}" for v in range(nv)],
              f"{t}{r}", w, STORE_ACTS)
    for v in range(nv):
        write = (f"@llvm.masked.scatter.v{w}f32.v{w}p0({vt} %{t}z{r}_{v}, <{w} x ptr> "
                 if scattered else f"@llvm.masked.store.v{w}f32.p0({vt} %{t}z{r}_{v}, ptr ")
        L.append(f"  call void {write}{out[v]}, i32 4, <{w} x i1> %mask{v})")
    L.append(f"  br label %{nxt}")


def _planes_store(L, r: int, nv: int, w: int, pos: str, here: str, nxt: str) -> None:
    """Row r's sums scattered into planes (:func:`_store_sums`): lane q of vector v to
    ``c + %pl{v}[q] + pos`` (``pos``: a splat of the row's position), the residual gathered
    from the same places of ``%res``."""
    for v in range(nv):
        e = f"{r}_{v}"
        L += [f"  %po{e} = add <{w} x i64> %pl{v}, {pos}",
              f"  %pp{e} = getelementptr inbounds float, ptr %c, <{w} x i64> %po{e}",
              f"  %rp{e} = getelementptr inbounds float, ptr %res, <{w} x i64> %po{e}"]
    _store_sums(L, r, nv, w, here, nxt, "q", [f"%pp{r}_{v}" for v in range(nv)],
                [f"%rp{r}_{v}" for v in range(nv)], True)


def _blocked_store(L, r: int, nv: int, w: int, pos: str, here: str, nxt: str) -> None:
    """Row r's sums stored into the blocked layout (:func:`_store_sums`): vector v at
    ``c + pos·16 + %vo{v}`` (``pos``: the row's position), the residual from the same place
    of ``%res``."""
    L.append(f"  %bq{r} = mul i64 {pos}, 16")
    for v in range(nv):
        e = f"{r}_{v}"
        L += [f"  %bo{e} = add i64 %bq{r}, %vo{v}",
              f"  %bp{e} = getelementptr inbounds float, ptr %c, i64 %bo{e}",
              f"  %brp{e} = getelementptr inbounds float, ptr %res, i64 %bo{e}"]
    _store_sums(L, r, nv, w, here, nxt, "b", [f"%bp{r}_{v}" for v in range(nv)],
                [f"%brp{r}_{v}" for v in range(nv)], False)


def transpose16(L, rows, tag: str) -> list:
    """16 vectors of 16 floats, row i of ``rows`` (names, fewer than 16 taken as zeros) into
    its columns: vector c of the result holds element c of every row.  Four rounds of
    shuffles: within each 128-bit lane by pairs of floats and of float pairs, then the lanes
    themselves across groups of four."""
    vt = vt_of(16)
    zero = "zeroinitializer"
    r = list(rows) + [zero] * (16 - len(rows))

    def shuf(dst, a, b, idx):
        m = ", ".join(f"i32 {i}" for i in idx)
        L.append(f"  {dst} = shufflevector {vt} {a}, {vt} {b}, <16 x i32> <{m}>")

    lo = [x for k in range(4) for x in (4 * k, 16 + 4 * k, 4 * k + 1, 16 + 4 * k + 1)]
    hi = [x for k in range(4) for x in (4 * k + 2, 16 + 4 * k + 2, 4 * k + 3, 16 + 4 * k + 3)]
    t = []
    for i in range(8):                  # rows 2i, 2i+1 interleaved by floats
        shuf(f"%{tag}a{2 * i}", r[2 * i], r[2 * i + 1], lo)
        shuf(f"%{tag}a{2 * i + 1}", r[2 * i], r[2 * i + 1], hi)
        t += [f"%{tag}a{2 * i}", f"%{tag}a{2 * i + 1}"]
    plo = [x for k in range(4) for x in (4 * k, 4 * k + 1, 16 + 4 * k, 16 + 4 * k + 1)]
    phi = [x for k in range(4) for x in (4 * k + 2, 4 * k + 3, 16 + 4 * k + 2, 16 + 4 * k + 3)]
    u = [None] * 16
    for i in range(4):                  # then by float pairs: u[4i + j] = column 4k + j
        for j, (x, y, m) in enumerate(((0, 2, plo), (0, 2, phi), (1, 3, plo), (1, 3, phi))):
            shuf(f"%{tag}b{4 * i + j}", t[4 * i + x], t[4 * i + y], m)
            u[4 * i + j] = f"%{tag}b{4 * i + j}"

    def lanes(ks):                      # 128-bit lanes of a, b picked (ks: 4 lane numbers)
        return [4 * k + e for k in ks for e in range(4)]
    out = [None] * 16
    for j in range(4):                  # lane k of u[j], u[4+j], u[8+j], u[12+j] together
        A, B, C, D = u[j], u[4 + j], u[8 + j], u[12 + j]
        shuf(f"%{tag}x{j}", A, B, lanes((0, 1, 4, 5)))
        shuf(f"%{tag}y{j}", A, B, lanes((2, 3, 6, 7)))
        shuf(f"%{tag}z{j}", C, D, lanes((0, 1, 4, 5)))
        shuf(f"%{tag}w{j}", C, D, lanes((2, 3, 6, 7)))
        for k, (P, Q, a0, a1) in enumerate(((f"%{tag}x{j}", f"%{tag}z{j}", 0, 2),
                                            (f"%{tag}x{j}", f"%{tag}z{j}", 1, 3),
                                            (f"%{tag}y{j}", f"%{tag}w{j}", 0, 2),
                                            (f"%{tag}y{j}", f"%{tag}w{j}", 1, 3))):
            shuf(f"%{tag}c{4 * k + j}", P, Q, lanes((a0, a1, 4 + a0, 4 + a1)))
            out[4 * k + j] = f"%{tag}c{4 * k + j}"
    return out


def _planes_transposed(L, R: int, cw: int, nv: int) -> None:
    """At label ``tpl``: the panel's sums stored into planes with 16-float vectors (AVX-512):
    each vector of 16 channels of the R·cw positions transposed (:func:`transpose16`) into
    16 vectors of positions, one per channel, each output row of the panel a masked store of
    its cw floats (the first ``%wv``, rows below ``%hv``) at ``c + q·cps + g·crow``; the
    bias added before, the residual (masked loads from the same places of ``%res``) and
    Relu or Clip after; channels from ``%n`` on not written.  On to ``exit``."""
    vt = vt_of(16)
    mr = R * cw
    splat(L, "%twv", "%wv", 16, "i64")
    for g in range(R):                  # row g's lanes g·cw .. g·cw + wv, where g < hv
        lanes_below(L, f"%tg{g}.hi", "", 16, -g * cw, "%twv")
        row = "<" + ", ".join(f"i1 {int(g * cw <= i)}" for i in range(16)) + ">"
        L += [f"  %tg{g}.in = and <16 x i1> %tg{g}.hi, {row}",
              f"  %tg{g}.h = icmp sgt i64 %hv, {g}",
              f"  %tg{g} = select i1 %tg{g}.h, <16 x i1> %tg{g}.in, <16 x i1> zeroinitializer",
              f"  %tgo{g}.a = mul i64 %crow, {g}",
              f"  %tgo{g} = sub i64 %tgo{g}.a, {g * cw}"]
    for v in range(nv):
        rows = []
        for r in range(mr):
            L.append(f"  %te{r}_{v} = fadd {vt} %y{r}_{v}, %bs{v}")
            rows.append(f"%te{r}_{v}")
        cols = transpose16(L, rows, f"tt{v}.")
        for c in range(16):
            ch = v * 16 + c
            L += [f"  %tq{ch} = mul i64 %cps, {ch}",
                  f"  %tk{ch} = icmp slt i64 {ch}, %n"]
            for g in range(R):
                L += [f"  %tm{ch}_{g} = select i1 %tk{ch}, <16 x i1> %tg{g}, "
                      "<16 x i1> zeroinitializer",
                      f"  %to{ch}_{g} = add i64 %tq{ch}, %tgo{g}"]
        L += [f"  br i1 %hasres, label %tr{v}, label %tn{v}",
              f"tr{v}:"]
        summed = []
        for c in range(16):
            ch = v * 16 + c
            acc = cols[c]
            for g in range(R):
                L += [f"  %trp{ch}_{g} = getelementptr float, ptr %res, i64 %to{ch}_{g}",
                      f"  %trv{ch}_{g} = call {vt} @llvm.masked.load.v16f32.p0(ptr "
                      f"%trp{ch}_{g}, i32 4, <16 x i1> %tm{ch}_{g}, {vt} zeroinitializer)",
                      f"  %tsum{ch}_{g} = fadd {vt} {acc}, %trv{ch}_{g}"]
                acc = f"%tsum{ch}_{g}"
            summed.append(acc)
        L += [f"  br label %tn{v}",
              f"tn{v}:"]
        joined = []
        for c in range(16):
            L.append(f"  %tj{v * 16 + c} = phi {vt} [{cols[c]}, %tpl{'' if v == 0 else f'.{v}'}]"
                     f", [{summed[c]}, %tr{v}]")
            joined.append(f"%tj{v * 16 + c}")
        act_block(L, joined, [f"%tz{v * 16 + c}" for c in range(16)], f"tact{v}", 16,
                  STORE_ACTS)
        for c in range(16):
            ch = v * 16 + c
            for g in range(R):
                L += [f"  %tsp{ch}_{g} = getelementptr float, ptr %c, i64 %to{ch}_{g}",
                      f"  call void @llvm.masked.store.v16f32.p0({vt} %tz{ch}, ptr "
                      f"%tsp{ch}_{g}, i32 4, <16 x i1> %tm{ch}_{g})"]
        if v + 1 < nv:
            L += [f"  br label %tpl.{v + 1}",
                  f"tpl.{v + 1}:"]
    L.append("  br label %exit")


def direct_shapes(mr: int) -> list:
    """The (rows, columns) panels of output positions the direct convolution's kernels take
    on a machine of micro-kernel rows ``mr``: at most mr positions, at most 4 output rows, so
    that a map's rows of any width fill most of some panel (on AVX-512, 14: (1, 14) for rows
    of 14, 28, 56; (1, 12) for 12, 24; (2, 7) for 7; (2, 6) for 6; (3, 4); (4, 3) for 3).

    >>> direct_shapes(14)
    [(1, 14), (1, 12), (2, 7), (2, 6), (3, 4), (4, 3)]
    """
    cws = sorted({c for c in (mr, mr - 2, mr // 2, mr // 2 - 1, mr // 3, mr // 4) if c >= 2},
                 reverse=True)
    return [(min(4, mr // c), c) for c in cws]


def direct_panel(out_h: int, out_w: int, mr: int) -> tuple:
    """``((rows, positions), fill)``: the panel of :func:`direct_shapes` ``(mr)`` whose
    panels waste the least of a map ``out_h`` x ``out_w`` (the larger on a tie), and the
    share of its panels' positions inside the map.

    >>> direct_panel(24, 24, 14), direct_panel(6, 6, 14), direct_panel(56, 56, 14)
    (((1, 12), 1.0), ((2, 6), 1.0), ((1, 14), 1.0))
    >>> direct_panel(3, 3, 14)
    ((3, 4), 0.75)
    """
    def fill(shape):
        R, cw = shape
        return out_w / (-(-out_w // cw) * cw) * out_h / (-(-out_h // R) * R)
    best = max(direct_shapes(mr), key=lambda s: (fill(s), s[0] * s[1]))
    return best, fill(best)


def direct_ir(R: int, cw: int, nv: int, w: int, sw: int, lanes: int = BLOCK) -> list:
    """IR of ``tl_dc{R}x{cw}s{sw}(hv, wv, a, arow, runs, offs, b, c, crow, cps, n, bias, act,
    lohi, res, cbs)`` (every argument an int64): one panel of the direct convolution, R output
    rows of cw positions (the first ``hv`` rows and ``wv`` columns of it kept) by one strip of
    ``n`` <= nv·w output channels.  Position (i, j)'s input, lane l of run t, is the float at
    ``a + i·arow + j·16·sw + offs[t] + l`` (``offs``: ``runs`` int64; a zero-bordered blocked
    input, 16 lanes per run), the strip's weights ``b`` (runs·16 rows of nv·w floats, as
    ``pack_rows`` packs them); all R·cw·nv sums stay in registers over the whole depth.
    Output channel q of position (i, j) goes to ``c + q·cps + i·crow + j`` (planes) or, where
    ``cbs`` is not 0, to ``c + (q // 16)·cbs + (i·crow + j)·16 + q % 16`` (the blocked layout,
    blocks of ``cbs`` floats), the bias (nv·w floats, or 0), the residual at the same places
    of ``res`` (or 0) and Relu or Clip (``act``; ``lohi``: its two parameters) applied in the
    store; channels from ``n`` on are not written.  ``lanes`` 1: ``tl_dcn{R}x{cw}s{sw}``, whose
    runs are one float each, position (i, j)'s of run t at ``a + i·arow + j·sw + offs[t]`` (an
    NCHW input, a run per (channel, kh, kw): a network's first layer of 3 channels)."""
    vt = vt_of(w)
    mr, nr = R * cw, nv * w
    acc = [(r, v) for r in range(mr) for v in range(nv)]
    name = f"tl_dc{R}x{cw}s{sw}" if lanes == BLOCK else f"tl_dcn{R}x{cw}s{sw}"
    L = [f"define void @{name}(i64 %hv, i64 %wv, i64 %ai, i64 %arow, i64 %runs, "
         "i64 %offsi, i64 %bi, i64 %ci, i64 %crow, i64 %cps, i64 %n, i64 %biasi, i64 %act, "
         "i64 %lohii, i64 %resi, i64 %cbs) nounwind {",
         "entry:",
         "  %a = inttoptr i64 %ai to ptr",
         "  %b = inttoptr i64 %bi to ptr",
         "  %c = inttoptr i64 %ci to ptr",
         "  %planes = icmp eq i64 %cbs, 0",
         "  %offs = inttoptr i64 %offsi to ptr",
         "  %bias = inttoptr i64 %biasi to ptr",
         "  %res = inttoptr i64 %resi to ptr",
         "  %lohi = inttoptr i64 %lohii to ptr",
         "  %hasres = icmp ne i64 %resi, 0",
         "  %hasbias = icmp ne i64 %biasi, 0"]
    for g in range(R):                  # each output row's first position
        L += [f"  %go{g} = mul i64 %arow, {g}",
              f"  %ga{g} = getelementptr inbounds float, ptr %a, i64 %go{g}"]
    L += ["  br label %run",
          "run:",
          "  %t = phi i64 [0, %entry], [%t.n, %rend]",
          "  %rb = phi ptr [%b, %entry], [%kb.last, %rend]"]
    for r, v in acc:
        L.append(f"  %u{r}_{v} = phi {vt} [zeroinitializer, %entry], [%y{r}_{v}, %rend]")
    L += ["  %tp = getelementptr inbounds i64, ptr %offs, i64 %t",
          "  %to = load i64, ptr %tp, align 8"]
    for g in range(R):
        L.append(f"  %ra{g} = getelementptr inbounds float, ptr %ga{g}, i64 %to")
    L += ["  br label %kl",
          "kl:",
          "  %j = phi i64 [0, %run], [%j.n, %kl]",
          "  %bk = phi ptr [%rb, %run], [%bk.n, %kl]"]
    _depth_step(L, mr, nv, w, nr, lambda r: [
        f"  %ap{r}.o = add i64 %j, {r % cw * lanes * sw}",
        f"  %ap{r} = getelementptr inbounds float, ptr %ra{r // cw}, i64 %ap{r}.o"])
    L += [f"  %bk.n = getelementptr inbounds float, ptr %bk, i64 {nr}",
          "  %j.n = add i64 %j, 1",
          f"  %kmore = icmp slt i64 %j.n, {lanes}",
          "  br i1 %kmore, label %kl, label %rend",
          "rend:",
          "  %kb.last = phi ptr [%bk.n, %kl]",
          "  %t.n = add i64 %t, 1",
          "  %tmore = icmp slt i64 %t.n, %runs",
          "  br i1 %tmore, label %run, label %bnds",
          "bnds:"]
    _bias_prologue(L, nv, w)
    _store_prologue(L, nv, w)
    transposed = PLANES_TRANSPOSED and w == 16
    L.append("  br i1 %planes, label %tpl, label %row0" if transposed else "  br label %row0")
    for r in range(mr):
        g, q = divmod(r, cw)
        nxt = f"row{r + 1}" if r + 1 < mr else "exit"
        L += [f"row{r}:",
              f"  %okh{r} = icmp sgt i64 %hv, {g}",
              f"  %okw{r} = icmp sgt i64 %wv, {q}",
              f"  %ok{r} = and i1 %okh{r}, %okw{r}",
              f"  br i1 %ok{r}, label %st{r}, label %{nxt}",
              f"st{r}:",
              f"  %pr{r} = mul i64 %crow, {g}",
              f"  %pi{r} = add i64 %pr{r}, {q}"]
        for v in range(nv):
            L.append(f"  %e{r}_{v} = fadd {vt} %y{r}_{v}, %bs{v}")
        L += [f"  br i1 %planes, label %sp{r}, label %sb{r}",
              f"sp{r}:"]
        splat(L, f"%piv{r}", f"%pi{r}", w, "i64")
        _planes_store(L, r, nv, w, f"%piv{r}", f"sp{r}", nxt)
        L.append(f"sb{r}:")
        _blocked_store(L, r, nv, w, f"%pi{r}", f"sb{r}", nxt)
    if transposed:
        L.append("tpl:")
        _planes_transposed(L, R, cw, nv)
    L += ["exit:",
          "  ret void",
          "}"]
    return L


def _f(c: float) -> str:
    """A float32 constant as LLVM IR writes it (the double of the same value, in hex)."""
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(np.float32(c))))[0]


#: The activations the machine code computes (codes of
#: :data:`tensorlayout.backends.cpu_source.ACT`); another (Tanh) is left to the caller.
IR_ACTS = (1, 2, 3, 4, 5, 6, 8)
#: Those its kernels apply in their store (Relu, Clip: a compare and a select); the rest go
#: through ``tl_act`` over what was stored (one copy of their code, not one per store).
STORE_ACTS = (1, 2)
POST_ACTS = tuple(c for c in IR_ACTS if c not in STORE_ACTS)


#: The exponential's multiply-adds fused, each rounded once (False: the multiply and the add
#: rounded one by one, the same bits as the compiled loops' ``fexp``): EfficientNet-B0 1.10x
#: at 224^2 and 1.05x at 96^2 (``python benchmarks/bench_setting.py
#: tensorlayout.winograd._simd_block.EXP_FUSED False True --nets ...``,
#: ``benchmarks/results/setting_exp_fused_ci2.txt``).
EXP_FUSED = True


def fexp_ir(w: int) -> list:
    """``@fexp{w}``: e ** x for ``w`` floats (range reduction by ln 2 in two parts, Cephes'
    degree-6 polynomial; past float32's range inf, below it the least normal float, NaN
    stays NaN), its multiply-adds fused where :data:`EXP_FUSED` (within 2e-7 relative of the
    float64 exponential either way)."""
    vt, iv = vt_of(w), f"<{w} x i32>"

    def fconst(c):
        return "<" + ", ".join(f"float {_f(c)}" for _ in range(w)) + ">"

    def iconst(c):
        return "<" + ", ".join(f"i32 {c}" for _ in range(w)) + ">"

    def mad(dst, a, b, c):
        if EXP_FUSED:
            L.append(f"  {dst} = call {vt} @llvm.fmuladd.v{w}f32({vt} {a}, {vt} {b}, {vt} {c})")
        else:
            L.extend([f"  {dst}.m = fmul {vt} {a}, {b}", f"  {dst} = fadd {vt} {dst}.m, {c}"])
    L = [f"declare {vt} @llvm.floor.v{w}f32({vt})",
         f"define internal {vt} @fexp{w}({vt} %x) alwaysinline nounwind {{",
         "entry:",
         f"  %big = fcmp ogt {vt} %x, {fconst(88.72283)}",
         f"  %lc = fcmp olt {vt} %x, {fconst(-87.33654)}",
         f"  %x1 = select <{w} x i1> %lc, {vt} {fconst(-87.33654)}, {vt} %x",
         f"  %hc = fcmp ogt {vt} %x1, {fconst(88.37626)}",
         f"  %x2 = select <{w} x i1> %hc, {vt} {fconst(88.37626)}, {vt} %x1",
         # NaN: its exponent from 0 (a defined conversion); the polynomial keeps the NaN
         f"  %nan = fcmp uno {vt} %x2, %x2",
         f"  %xs = select <{w} x i1> %nan, {vt} zeroinitializer, {vt} %x2"]
    # k = floor(x / ln 2 + 1/2), r = x - k ln 2 (ln 2 in a short and a small part)
    mad("%t", "%xs", fconst(1.442695), fconst(0.5))
    L += [f"  %kf = call {vt} @llvm.floor.v{w}f32({vt} %t)",
          f"  %k = fptosi {vt} %kf to {iv}"]
    mad("%r1", "%kf", fconst(-0.693359375), "%x2")
    mad("%r", "%kf", fconst(2.12194440e-4), "%r1")
    prev = fconst(1.9875691500e-4)
    for i, c in enumerate((1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                           5.0000001201e-1)):
        mad(f"%p{i}", prev, "%r", fconst(c))
        prev = f"%p{i}"
    L.append(f"  %q0 = fmul {vt} {prev}, %r")                # 1 + r + p r^2
    mad("%q1", "%q0", "%r", "%r")
    L += [f"  %q = fadd {vt} %q1, {fconst(1)}",
          f"  %kb = add {iv} %k, {iconst(127)}",
          f"  %ks = shl {iv} %kb, {iconst(23)}",
          f"  %s = bitcast {iv} %ks to {vt}",
          f"  %e = fmul {vt} %q, %s",
          f"  %y = select <{w} x i1> %big, {vt} {fconst(np.inf)}, {vt} %e",
          f"  ret {vt} %y",
          "}"]
    return L


def act_prologue(L, w: int) -> None:
    """``%lov``, ``%hiv``: the activation's two parameters (``%lohi``: two floats) splat."""
    L += ["  %lohi1 = getelementptr inbounds float, ptr %lohi, i64 1",
          "  %lo = load float, ptr %lohi, align 4",
          "  %hi = load float, ptr %lohi1, align 4"]
    splat(L, "%lov", "%lo", w)
    splat(L, "%hiv", "%hi", w)


def _act_one(L, c: int, v: str, t: str, w: int) -> str:
    """The activation of code ``c`` of vector ``v`` (names prefixed ``%{t}``), as
    ``cpu_source.ACT_EXPR`` defines it (NaN propagating the same way; e ** x by
    :func:`fexp_ir`); its result's name."""
    vt = vt_of(w)
    z, one = "zeroinitializer", "<" + ", ".join(f"float {_f(1)}" for _ in range(w)) + ">"
    if c == 1:
        L += [f"  %{t}c = fcmp olt {vt} {v}, {z}",
              f"  %{t}r = select <{w} x i1> %{t}c, {vt} {z}, {vt} {v}"]
    elif c == 2:
        L += [f"  %{t}c = fcmp olt {vt} {v}, %lov",
              f"  %{t}m = select <{w} x i1> %{t}c, {vt} %lov, {vt} {v}",
              f"  %{t}d = fcmp ogt {vt} %{t}m, %hiv",
              f"  %{t}r = select <{w} x i1> %{t}d, {vt} %hiv, {vt} %{t}m"]
    elif c == 3:
        L += [f"  %{t}c = fcmp oge {vt} {v}, {z}",
              f"  %{t}m = fmul {vt} {v}, %lov",
              f"  %{t}r = select <{w} x i1> %{t}c, {vt} {v}, {vt} %{t}m"]
    elif c in (4, 8):
        L += [f"  %{t}n = fneg {vt} {v}",
              f"  %{t}e = call {vt} @fexp{w}({vt} %{t}n)",
              f"  %{t}d = fadd {vt} {one}, %{t}e",
              f"  %{t}{'r' if c == 4 else 's'} = fdiv {vt} {one}, %{t}d"]
        if c == 8:
            L.append(f"  %{t}r = fmul {vt} {v}, %{t}s")
    else:                                          # 5 HardSwish, 6 HardSigmoid
        L += [f"  %{t}m = fmul {vt} {v}, %lov", f"  %{t}g = fadd {vt} %{t}m, %hiv",
              f"  %{t}l = fcmp olt {vt} %{t}g, {z}",
              f"  %{t}a = select <{w} x i1> %{t}l, {vt} {z}, {vt} %{t}g",
              f"  %{t}h = fcmp ogt {vt} %{t}a, {one}",
              f"  %{t}b = select <{w} x i1> %{t}h, {vt} {one}, {vt} %{t}a"]
        if c == 5:
            L.append(f"  %{t}r = fmul {vt} {v}, %{t}b")
        else:                                      # the clamp itself (x + -0 is x)
            nz = "<" + ", ".join(f"float {_f(-0.0)}" for _ in range(w)) + ">"
            L.append(f"  %{t}r = fadd {vt} %{t}b, {nz}")
    return f"%{t}r"


def act_block(L, srcs, dsts, tag: str, w: int, codes=None) -> None:
    """The activation of code ``%act`` (one of ``codes``, default :data:`IR_ACTS`; another:
    none) of each vector in ``srcs`` into ``dsts`` (:func:`_act_one`): a switch to one block
    per activation, joined at label ``{tag}.aj`` where the caller's code goes on."""
    codes = IR_ACTS if codes is None else codes
    vt = vt_of(w)
    cases = " ".join(f"i64 {c}, label %{tag}.a{c}" for c in codes)
    L += [f"  br label %{tag}.pre",
          f"{tag}.pre:",
          f"  switch i64 %act, label %{tag}.aj [ {cases} ]"]
    out = {}
    for c in codes:
        L.append(f"{tag}.a{c}:")
        out[c] = [_act_one(L, c, v, f"{tag}.{c}.{i}.", w) for i, v in enumerate(srcs)]
        L.append(f"  br label %{tag}.aj")
    L.append(f"{tag}.aj:")
    for i, (v, d) in enumerate(zip(srcs, dsts)):
        inc = ", ".join([f"[{v}, %{tag}.pre]"] + [f"[{out[c][i]}, %{tag}.a{c}]" for c in codes])
        L.append(f"  {d} = phi {vt} {inc}")


def rows_ir() -> list:
    """IR of a blocked tensor's plane means and scaling, one block of 16 channels at a time:
    ``tl_block_mean(x, P, y, lanes)``: y[i] = the mean of lane i over the P positions at x
    (16 floats each; four running sums, each in order, added at the end), times 1/P, for
    the first ``lanes`` lanes (the rest of y untouched); ``tl_block_scale(x, s, y, P, lanes)``:
    each position of x times the 16 factors at s (those past ``lanes`` read as 0) into y."""
    v, m = _V, f"<{BLOCK} x i1>"

    def mask(L):
        lanes_below(L, "%mask", "%lanes", BLOCK)
    L = ["define void @tl_block_mean(i64 %xi, i64 %P, i64 %yi, i64 %lanes) nounwind {",
         "entry:",
         "  %x = inttoptr i64 %xi to ptr",
         "  %y = inttoptr i64 %yi to ptr",
         "  %P4 = and i64 %P, -4",
         "  br label %l4",
         "l4:",
         "  %p = phi i64 [0, %entry], [%p.n, %b4]"]
    L += [f"  %s{j} = phi {v} [zeroinitializer, %entry], [%t{j}, %b4]" for j in range(4)]
    L += ["  %c4 = icmp slt i64 %p, %P4",
          "  br i1 %c4, label %b4, label %l1",
          "b4:"]
    for j in range(4):
        L += [f"  %q{j} = add i64 %p, {j}",
              f"  %o{j} = shl i64 %q{j}, 4",
              f"  %a{j} = getelementptr inbounds float, ptr %x, i64 %o{j}",
              f"  %v{j} = load {v}, ptr %a{j}, align 4",
              f"  %t{j} = fadd {v} %s{j}, %v{j}"]
    L += ["  %p.n = add i64 %p, 4",
          "  br label %l4",
          "l1:",
          "  %r = phi i64 [%p, %l4], [%r.n, %b1]",
          f"  %u = phi {v} [%s0, %l4], [%w, %b1]",
          "  %c1 = icmp slt i64 %r, %P",
          "  br i1 %c1, label %b1, label %done",
          "b1:",
          "  %ro = shl i64 %r, 4",
          "  %ra = getelementptr inbounds float, ptr %x, i64 %ro",
          f"  %rv = load {v}, ptr %ra, align 4",
          f"  %w = fadd {v} %u, %rv",
          "  %r.n = add i64 %r, 1",
          "  br label %l1",
          "done:",
          f"  %h0 = fadd {v} %u, %s1",
          f"  %h1 = fadd {v} %s2, %s3",
          f"  %h = fadd {v} %h0, %h1",
          "  %pf = sitofp i64 %P to float",
          f"  %inv = fdiv float {_f(1)}, %pf"]
    splat(L, "%iv", "%inv", BLOCK)
    L += [f"  %mean = fmul {v} %h, %iv"]
    mask(L)
    L += [f"  call void @llvm.masked.store.v{BLOCK}f32.p0({v} %mean, ptr %y, i32 4, {m} %mask)",
          "  ret void",
          "}",
          "define void @tl_block_scale(i64 %xi, i64 %si, i64 %yi, i64 %P, i64 %lanes) nounwind {",
          "entry:",
          "  %x = inttoptr i64 %xi to ptr",
          "  %s = inttoptr i64 %si to ptr",
          "  %y = inttoptr i64 %yi to ptr"]
    mask(L)
    L += [f"  %f = call {v} @llvm.masked.load.v{BLOCK}f32.p0(ptr %s, i32 4, {m} %mask, "
          f"{v} zeroinitializer)",
          "  br label %l",
          "l:",
          "  %p = phi i64 [0, %entry], [%p.n, %b]",
          "  %c = icmp slt i64 %p, %P",
          "  br i1 %c, label %b, label %done",
          "b:",
          "  %o = shl i64 %p, 4",
          "  %a = getelementptr inbounds float, ptr %x, i64 %o",
          f"  %xv = load {v}, ptr %a, align 4",
          f"  %yv = fmul {v} %xv, %f",
          "  %d = getelementptr inbounds float, ptr %y, i64 %o",
          f"  store {v} %yv, ptr %d, align 4",
          "  %p.n = add i64 %p, 1",
          "  br label %l",
          "done:",
          "  ret void",
          "}"]
    return L


def act_ir(w: int) -> list:
    """IR of ``tl_act(p, n, act, lohi)``: the activation of code ``act`` (one of
    :data:`POST_ACTS`; another: nothing) in place over the ``n`` floats at ``p``: one loop per
    activation over whole vectors of ``w`` lanes, then a masked last one; ``lohi``: its two
    parameters as floats."""
    vt, m = vt_of(w), f"<{w} x i1>"
    L = ["define void @tl_act(i64 %pi, i64 %n, i64 %act, i64 %lohii) nounwind {",
         "entry:",
         "  %p = inttoptr i64 %pi to ptr",
         "  %lohi = inttoptr i64 %lohii to ptr"]
    act_prologue(L, w)
    L += [f"  %nw = and i64 %n, {-w}",
          "  switch i64 %act, label %done [ " + " ".join(f"i64 {c}, label %l{c}"
                                                          for c in POST_ACTS) + " ]"]
    for c in POST_ACTS:
        L += [f"l{c}:",
              f"  %i{c} = phi i64 [0, %entry], [%i{c}.n, %b{c}]",
              f"  %go{c} = icmp slt i64 %i{c}, %nw",
              f"  br i1 %go{c}, label %b{c}, label %t{c}",
              f"b{c}:",
              f"  %a{c} = getelementptr inbounds float, ptr %p, i64 %i{c}",
              f"  %x{c} = load {vt}, ptr %a{c}, align 4"]
        y = _act_one(L, c, f"%x{c}", f"v{c}.", w)
        L += [f"  store {vt} {y}, ptr %a{c}, align 4",
              f"  %i{c}.n = add i64 %i{c}, {w}",
              f"  br label %l{c}",
              f"t{c}:",
              f"  %left{c} = sub i64 %n, %nw",
              f"  %any{c} = icmp sgt i64 %left{c}, 0",
              f"  br i1 %any{c}, label %m{c}, label %done",
              f"m{c}:"]
        lanes_below(L, f"%mask{c}", f"%left{c}", w)
        L += [f"  %ta{c} = getelementptr inbounds float, ptr %p, i64 %nw",
              f"  %tx{c} = call {vt} @llvm.masked.load.v{w}f32.p0(ptr %ta{c}, i32 4, "
              f"{m} %mask{c}, {vt} zeroinitializer)"]
        ty = _act_one(L, c, f"%tx{c}", f"u{c}.", w)
        L += [f"  call void @llvm.masked.store.v{w}f32.p0({vt} {ty}, ptr %ta{c}, i32 4, "
              f"{m} %mask{c})",
              "  br label %done"]
    L += ["done:",
          "  ret void",
          "}"]
    return L

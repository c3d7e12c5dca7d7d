"""IR of max pooling over NCHW planes with a k x k window at stride 2 (k = 2 or 3, no
dilation), the common pooling of image networks (ResNet's and SqueezeNet's 3 x 3 / 2,
VGG's 2 x 2 / 2), written as text for :mod:`._simd`'s module.

``tl_max{k}s2(x, y, H, W, OH, OW, ph, pw, v, top)`` (every argument an i64) pools one plane
``x`` (H, W) into ``y`` (OH, OW), separably, in vectors of 16 floats: for each output row
its window's input rows are reduced into the row ``v`` (column ``c`` of the padded plane at
``v[c]``; ``v``'s border is -inf, its length at least :func:`row_floats`), then each output
is the largest of its k consecutive floats of ``v``, the even and odd columns dealt apart by
two shuffles of two vectors.  A window row outside the plane (top or bottom padding, a
ceil-mode window) reads a row inside it again, which changes no maximum; the comparisons
run in the order of the graph's separable kernel (a later row, then a later column, is
taken where it is greater), so the results are the same bits.  NaN and infinities: the
largest exponent field of the rows read is stored at ``top`` (an i32); where it is all
ones the plane has a NaN or an infinity, and the caller pools it again by the generic
kernel, which gives NaN its place.
"""

from __future__ import annotations

from ._simd_block import lanes_below, splat

__all__ = ["pool_ir", "row_floats", "POOL_WINDOWS"]

#: The windows (k) with a kernel here, each at stride 2 in both directions.
POOL_WINDOWS = (2, 3)

_V = "<16 x float>"
_I = "<16 x i32>"
_M = "<16 x i1>"


def row_floats(OW: int) -> int:
    """Floats of the row ``v`` a plane of ``OW`` output columns needs (the last vector of
    outputs reads two vectors of ``v`` and two more starting two floats on)."""
    return 32 * (-(-OW // 16)) + 34


def _max(L, dst: str, a: str, b: str, nan: bool = False) -> list:
    """dst = b where b > a, else a (the graph kernel's comparison); ``nan``: or where b is
    NaN, so that a NaN on either side stays (a NaN a keeps itself: no b is greater).  Returns
    ``L``."""
    if nan:
        L += [f"  {dst}.g = fcmp ogt {_V} {b}, {a}",
              f"  {dst}.u = fcmp uno {_V} {b}, {b}",
              f"  {dst}.c = or {_M} {dst}.g, {dst}.u"]
    else:
        L.append(f"  {dst}.c = fcmp ogt {_V} {b}, {a}")
    L.append(f"  {dst} = select {_M} {dst}.c, {_V} {b}, {_V} {a}")
    return L


def _function(k: int) -> list:
    ninf = "0xFFF0000000000000"
    even = ", ".join(f"i32 {2 * i}" for i in range(16))
    odd = ", ".join(f"i32 {2 * i + 1}" for i in range(16))
    L = [f"define void @tl_max{k}s2(i64 %xi, i64 %yi, i64 %H, i64 %W, i64 %OH, i64 %OW, "
         "i64 %ph, i64 %pw, i64 %vi, i64 %topi) nounwind {",
         "entry:",
         "  %x = inttoptr i64 %xi to ptr",
         "  %y = inttoptr i64 %yi to ptr",
         "  %v = inttoptr i64 %vi to ptr",
         "  %top = inttoptr i64 %topi to ptr",
         "  %nb = lshr i64 %OW, 4",
         "  %owr = and i64 %OW, 15",
         "  %nbx = icmp ne i64 %owr, 0",
         "  %nb1 = zext i1 %nbx to i64",
         "  %nbt = add i64 %nb, %nb1",
         "  %vw0 = shl i64 %nbt, 5",
         "  %vw = add i64 %vw0, 34",
         "  %vrow = getelementptr inbounds float, ptr %v, i64 %pw",
         "  %Hm = sub i64 %H, 1",
         "  br label %fill",
         # v all -inf: its border stays so, each row writes columns pw..pw+W-1
         "fill:",
         "  %f = phi i64 [0, %entry], [%f.n, %fill]",
         "  %fp = getelementptr inbounds float, ptr %v, i64 %f",
         f"  store float {ninf}, ptr %fp, align 4",
         "  %f.n = add i64 %f, 1",
         "  %fmore = icmp slt i64 %f.n, %vw",
         "  br i1 %fmore, label %fill, label %rows",
         "rows:",
         "  %oh = phi i64 [0, %fill], [%oh.n, %cols.done]",
         f"  %e = phi {_I} [zeroinitializer, %fill], [%e.c, %cols.done]",
         "  %r0 = mul i64 %oh, 2",
         "  %r0p = sub i64 %r0, %ph",
         "  %lo.c = icmp sgt i64 %r0p, 0",
         "  %lo = select i1 %lo.c, i64 %r0p, i64 0",
         f"  %rk = add i64 %r0p, {k - 1}",
         "  %hi.c = icmp slt i64 %rk, %Hm",
         "  %hi = select i1 %hi.c, i64 %rk, i64 %Hm"]
    for t in range(k):              # window row t, clamped into the rows inside the plane
        L += [f"  %q{t} = add i64 %r0p, {t}",
              f"  %q{t}.l = icmp slt i64 %q{t}, %lo",
              f"  %q{t}.a = select i1 %q{t}.l, i64 %lo, i64 %q{t}",
              f"  %q{t}.h = icmp sgt i64 %q{t}.a, %hi",
              f"  %q{t}.b = select i1 %q{t}.h, i64 %hi, i64 %q{t}.a",
              f"  %q{t}.o = mul i64 %q{t}.b, %W",
              f"  %row{t} = getelementptr inbounds float, ptr %x, i64 %q{t}.o"]
    L += ["  br label %down",
          # the window's rows reduced into v (their exponent fields kept)
          "down:",
          "  %j = phi i64 [0, %rows], [%j.n, %down]",
          f"  %ed = phi {_I} [%e, %rows], [%e{k - 1}.m, %down]",
          "  %left = sub i64 %W, %j"]
    lanes_below(L, "%dm", "%left", 16)
    for t in range(k):
        L += [f"  %s{t}.p = getelementptr inbounds float, ptr %row{t}, i64 %j",
              f"  %s{t} = call {_V} @llvm.masked.load.v16f32.p0(ptr %s{t}.p, i32 4, "
              f"{_M} %dm, {_V} zeroinitializer)",
              f"  %b{t} = bitcast {_V} %s{t} to {_I}",
              f"  %x{t} = and {_I} %b{t}, <" + ", ".join(["i32 2139095040"] * 16) + ">"]
        prev = "%ed" if t == 0 else f"%e{t - 1}.m"
        L += [f"  %e{t}.c = icmp sgt {_I} %x{t}, {prev}",
              f"  %e{t}.m = select {_M} %e{t}.c, {_I} %x{t}, {_I} {prev}"]
    acc = "%s0"
    for t in range(1, k):
        _max(L, f"%m{t}", acc, f"%s{t}")
        acc = f"%m{t}"
    L += ["  %vd = getelementptr inbounds float, ptr %vrow, i64 %j",
          f"  call void @llvm.masked.store.v16f32.p0({_V} {acc}, ptr %vd, i32 4, {_M} %dm)",
          "  %j.n = add i64 %j, 16",
          "  %dmore = icmp slt i64 %j.n, %W",
          "  br i1 %dmore, label %down, label %across",
          # each output the largest of its k floats of v: even, odd (and the next even)
          "across:",
          "  %yrow.o = mul i64 %oh, %OW",
          "  %yrow = getelementptr inbounds float, ptr %y, i64 %yrow.o",
          "  br label %cols",
          "cols:",
          "  %c = phi i64 [0, %across], [%c.n, %cols]",
          "  %c2 = shl i64 %c, 1",
          "  %pa = getelementptr inbounds float, ptr %v, i64 %c2",
          f"  %va = load {_V}, ptr %pa, align 4",
          "  %pb = getelementptr inbounds float, ptr %pa, i64 16",
          f"  %vb = load {_V}, ptr %pb, align 4",
          f"  %ev = shufflevector {_V} %va, {_V} %vb, <16 x i32> <{even}>",
          f"  %od = shufflevector {_V} %va, {_V} %vb, <16 x i32> <{odd}>"]
    _max(L, "%h1", "%ev", "%od")
    out = "%h1"
    if k == 3:
        L += ["  %pc = getelementptr inbounds float, ptr %pa, i64 2",
              f"  %vc = load {_V}, ptr %pc, align 4",
              "  %pd = getelementptr inbounds float, ptr %pa, i64 18",
              f"  %vd2 = load {_V}, ptr %pd, align 4",
              f"  %ev2 = shufflevector {_V} %vc, {_V} %vd2, <16 x i32> <{even}>"]
        _max(L, "%h2", "%h1", "%ev2")
        out = "%h2"
    L += ["  %cleft = sub i64 %OW, %c"]
    lanes_below(L, "%cm", "%cleft", 16)
    L += ["  %yp = getelementptr inbounds float, ptr %yrow, i64 %c",
          f"  call void @llvm.masked.store.v16f32.p0({_V} {out}, ptr %yp, i32 4, {_M} %cm)",
          "  %c.n = add i64 %c, 16",
          "  %cmore = icmp slt i64 %c.n, %OW",
          "  br i1 %cmore, label %cols, label %cols.done",
          "cols.done:",
          f"  %e.c = phi {_I} [%e{k - 1}.m, %cols]",
          "  %oh.n = add i64 %oh, 1",
          "  %rmore = icmp slt i64 %oh.n, %OH",
          "  br i1 %rmore, label %rows, label %done",
          "done:",
          f"  %et = call i32 @llvm.vector.reduce.smax.v16i32({_I} %e.c)",
          "  store i32 %et, ptr %top, align 4",
          "  ret void",
          "}"]
    return L


def blocked_ir() -> list:
    """IR of ``tl_bmax(x, y, H, W, OW, ih0, KH, KW, sw, pw, cps, lanes)`` (every argument an
    i64): one output row of max pooling over a block of the blocked layout, ``x`` (H, W, 16)
    floats, any window ``KH`` x ``KW`` at column stride ``sw``, its rows from ``ih0`` (less
    than 0 or past H in the padding), its columns from ``ow·sw - pw``; each output the
    largest of its window's 16-float vectors inside the map (NaN where a lane has one:
    :func:`_max`), stored at ``y + ow·16`` where ``cps`` is 0, else scattered into planes:
    lane l at ``y + l·cps + ow``, the first ``lanes`` lanes only.  A window wholly in the
    padding gives -inf.  A whole 2 x 2 or 3 x 3 window inside the map takes its taps in
    straight lines, a tree of maxima."""
    ninf = "0xFFF0000000000000"
    L = ["define void @tl_bmax(i64 %xi, i64 %yi, i64 %H, i64 %W, i64 %OW, i64 %ih0, i64 %KH, "
         "i64 %KW, i64 %sw, i64 %pw, i64 %cps, i64 %lanes) nounwind {",
         "entry:",
         "  %x = inttoptr i64 %xi to ptr",
         "  %y = inttoptr i64 %yi to ptr",
         "  %planes = icmp ne i64 %cps, 0",
         # the window rows inside the map: kh from max(0, -ih0) to min(KH, H - ih0)
         "  %nih = sub i64 0, %ih0",
         "  %kh0c = icmp sgt i64 %nih, 0",
         "  %kh0 = select i1 %kh0c, i64 %nih, i64 0",
         "  %hrem = sub i64 %H, %ih0",
         "  %kh1c = icmp slt i64 %hrem, %KH",
         "  %kh1 = select i1 %kh1c, i64 %hrem, i64 %KH"]
    lanes_below(L, "%lmask", "%lanes", 16)
    splat(L, "%cpsv", "%cps", 16, "i64")
    L += ["  %lstep = mul <16 x i64> %cpsv, <" + ", ".join(f"i64 {i}" for i in range(16)) + ">",
          "  %any = icmp sgt i64 %OW, 0",
          "  br i1 %any, label %col, label %done",
          "col:",
          "  %ow = phi i64 [0, %entry], [%ow.n, %next]",
          "  %c0 = mul i64 %ow, %sw",
          "  %c = sub i64 %c0, %pw",
          "  %nc = sub i64 0, %c",
          "  %kw0c = icmp sgt i64 %nc, 0",
          "  %kw0 = select i1 %kw0c, i64 %nc, i64 0",
          "  %wrem = sub i64 %W, %c",
          "  %kw1c = icmp slt i64 %wrem, %KW",
          "  %kw1 = select i1 %kw1c, i64 %wrem, i64 %KW",
          "  %rows = icmp slt i64 %kh0, %kh1",
          "  %cols = icmp slt i64 %kw0, %kw1",
          "  %some = and i1 %rows, %cols",
          # a whole 2 x 2 or 3 x 3 window inside the map: its taps in straight lines
          "  %in0 = icmp eq i64 %kh0, 0",
          "  %in1 = icmp eq i64 %kh1, %KH",
          "  %in2 = icmp eq i64 %kw0, 0",
          "  %in3 = icmp eq i64 %kw1, %KW",
          "  %in01 = and i1 %in0, %in1",
          "  %in23 = and i1 %in2, %in3",
          "  %inside = and i1 %in01, %in23",
          "  %sq = icmp eq i64 %KH, %KW",
          "  %whole = and i1 %inside, %sq",
          "  br i1 %whole, label %pick, label %gen",
          "pick:",
          "  %fb0 = mul i64 %ih0, %W",
          "  %fb1 = add i64 %fb0, %c",
          "  %fb = mul i64 %fb1, 16",
          "  %fx = getelementptr inbounds float, ptr %x, i64 %fb",
          "  switch i64 %KH, label %gen [i64 3, label %w3\n i64 2, label %w2]"]
    fin = {}
    for k in (3, 2):
        L.append(f"w{k}:")
        vals = []
        for kh in range(k):
            L.append(f"  %w{k}r{kh} = mul i64 %W, {kh * 16}")
            for kw in range(k):
                L += [f"  %w{k}o{kh}_{kw} = add i64 %w{k}r{kh}, {kw * 16}",
                      f"  %w{k}p{kh}_{kw} = getelementptr inbounds float, ptr %fx, "
                      f"i64 %w{k}o{kh}_{kw}",
                      f"  %w{k}v{kh}_{kw} = load {_V}, ptr %w{k}p{kh}_{kw}, align 4"]
                vals.append(f"%w{k}v{kh}_{kw}")
        n = 0
        while len(vals) > 1:            # a tree of maxima: neighbours paired, an odd one on
            nxt = []
            for i in range(0, len(vals) - 1, 2):
                _max(L, f"%w{k}m{n}", vals[i], vals[i + 1], nan=True)
                nxt.append(f"%w{k}m{n}")
                n += 1
            vals = nxt + vals[2 * len(nxt):]
        fin[k] = vals[0]
        L.append("  br label %put")
    L += ["gen:",
          "  br i1 %some, label %row, label %put",
          "row:",
          "  %kh = phi i64 [%kh0, %gen], [%kh.n, %rowend]",
          f"  %ar = phi {_V} [<" + ", ".join([f"float {ninf}"] * 16) + ">, %gen], "
          "[%ak.last, %rowend]",
          "  %ih = add i64 %ih0, %kh",
          "  %rw = mul i64 %ih, %W",
          "  %rc = add i64 %rw, %c",
          "  br label %tap",
          "tap:",
          "  %kw = phi i64 [%kw0, %row], [%kw.n, %tap]",
          f"  %ak = phi {_V} [%ar, %row], [%am, %tap]",
          "  %at = add i64 %rc, %kw",
          "  %af = mul i64 %at, 16",
          "  %xp = getelementptr inbounds float, ptr %x, i64 %af",
          f"  %xv = load {_V}, ptr %xp, align 4",
          *_max([], "%am", "%ak", "%xv", nan=True),
          "  %kw.n = add i64 %kw, 1",
          "  %kwm = icmp slt i64 %kw.n, %kw1",
          "  br i1 %kwm, label %tap, label %rowend",
          "rowend:",
          f"  %ak.last = phi {_V} [%am, %tap]",
          "  %kh.n = add i64 %kh, 1",
          "  %khm = icmp slt i64 %kh.n, %kh1",
          "  br i1 %khm, label %row, label %put",
          "put:",
          f"  %acc = phi {_V} [<" + ", ".join([f"float {ninf}"] * 16) + ">, %gen], "
          f"[%ak.last, %rowend], [{fin[3]}, %w3], [{fin[2]}, %w2]",
          "  br i1 %planes, label %scat, label %blk",
          "blk:",
          "  %yo = mul i64 %ow, 16",
          "  %yp = getelementptr inbounds float, ptr %y, i64 %yo",
          f"  store {_V} %acc, ptr %yp, align 4",
          "  br label %next",
          "scat:"]
    splat(L, "%owv", "%ow", 16, "i64")
    L += ["  %so = add <16 x i64> %lstep, %owv",
          "  %sp = getelementptr inbounds float, ptr %y, <16 x i64> %so",
          f"  call void @llvm.masked.scatter.v16f32.v16p0({_V} %acc, <16 x ptr> %sp, i32 4, "
          f"{_M} %lmask)",
          "  br label %next",
          "next:",
          "  %ow.n = add i64 %ow, 1",
          "  %owm = icmp slt i64 %ow.n, %OW",
          "  br i1 %owm, label %col, label %done",
          "done:",
          "  ret void",
          "}"]
    return L


def pool_ir() -> list:
    """IR of ``tl_max2s2`` and ``tl_max3s2`` (see the module's docstring) and ``tl_bmax``
    (:func:`blocked_ir`); the caller's module declares the 16-float masked load, store and
    scatter."""
    L = [f"declare i32 @llvm.vector.reduce.smax.v16i32({_I})"]
    for k in POOL_WINDOWS:
        L += _function(k)
    return L + blocked_ir()

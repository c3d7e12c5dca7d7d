"""The compiled kernel of :mod:`tensorlayout._fastcopy`; it defines nothing without numba."""

try:
    import numba
except ImportError:  # the package works without numba: tensorlayout._fastcopy checks for it
    numba = None

copy_kernel = None

if numba is not None:
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def store_streaming(typingctx, arr, idx, val):
        """``arr[idx] = val`` with a non-temporal store: the line is not read first."""
        def codegen(context, builder, sig, args):
            a, i, v = args
            ary = context.make_array(sig.args[0])(context, builder, a)
            ptr = builder.gep(ary.data, [i])
            st = builder.store(v, ptr)
            st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
            return context.get_dummy_value()
        return types.void(arr, idx, val), codegen

    @numba.njit(parallel=True, cache=True, nogil=True, boundscheck=False)
    def copy_kernel(dst, doff, dstr, src, soff, sstr, shape, streaming):  # pragma: no cover
        n0, n1, n2 = shape[0], shape[1], shape[2]
        line = 64 // dst.itemsize  # words in a cache line
        n3, n4, n5 = shape[3], shape[4], shape[5]
        d3, d4, d5 = dstr[3], dstr[4], dstr[5]
        s3, s4, s5 = sstr[3], sstr[4], sstr[5]
        for t in numba.prange(n0 * n1 * n2):
            i0 = t // (n1 * n2)
            r = t - i0 * (n1 * n2)
            i1 = r // n2
            i2 = r - i1 * n2
            db = doff + i0 * dstr[0] + i1 * dstr[1] + i2 * dstr[2]
            sb = soff + i0 * sstr[0] + i1 * sstr[1] + i2 * sstr[2]
            if n5 == 4 and d5 == 1 and d4 == 4 and s4 == 1:
                # Interleave: four unit-stride source rows (channel planes, filter rows) into
                # 4-lane pixels.  The strides are constants here, so LLVM vectorises the loop;
                # on big copies the pixels, written in order, go past the cache.
                for i3 in range(n3):
                    d = db + i3 * d3
                    s = sb + i3 * s3
                    if streaming:
                        for i4 in range(n4):
                            store_streaming(dst, d + 4 * i4, src[s + i4])
                            store_streaming(dst, d + 4 * i4 + 1, src[s + s5 + i4])
                            store_streaming(dst, d + 4 * i4 + 2, src[s + 2 * s5 + i4])
                            store_streaming(dst, d + 4 * i4 + 3, src[s + 3 * s5 + i4])
                    else:
                        for i4 in range(n4):
                            dst[d + 4 * i4] = src[s + i4]
                            dst[d + 4 * i4 + 1] = src[s + s5 + i4]
                            dst[d + 4 * i4 + 2] = src[s + 2 * s5 + i4]
                            dst[d + 4 * i4 + 3] = src[s + 3 * s5 + i4]
            elif n5 == 4 and d5 == 1 and s4 == 1:
                # The same with pixels d4 apart (IN_OUT_HEIGHT, IN_OUT_WIDTH from NHWC).
                for i3 in range(n3):
                    d = db + i3 * d3
                    s = sb + i3 * s3
                    for i4 in range(n4):
                        dst[d + d4 * i4] = src[s + i4]
                        dst[d + d4 * i4 + 1] = src[s + s5 + i4]
                        dst[d + d4 * i4 + 2] = src[s + 2 * s5 + i4]
                        dst[d + d4 * i4 + 3] = src[s + 3 * s5 + i4]
            elif n4 == 4 and s4 == 1 and d5 == 1 and s5 == 4:
                # Deinterleave: 4-lane pixels into four unit-stride destination rows.  On big
                # copies each row is written a cache line (``LINE`` words) at a time past the
                # cache: the four lanes of 16 pixels fill one line of each row in turn.
                for i3 in range(n3):
                    d = db + i3 * d3
                    s = sb + i3 * s3
                    start = 0
                    if streaming:
                        start = n5 - n5 % line
                        for b in range(0, start, line):
                            for lane in range(4):
                                for i5 in range(b, b + line):
                                    store_streaming(dst, d + lane * d4 + i5, src[s + 4 * i5 + lane])
                    for i5 in range(start, n5):
                        dst[d + i5] = src[s + 4 * i5]
                        dst[d + d4 + i5] = src[s + 4 * i5 + 1]
                        dst[d + 2 * d4 + i5] = src[s + 4 * i5 + 2]
                        dst[d + 3 * d4 + i5] = src[s + 4 * i5 + 3]
            elif n4 == 4 and s4 == 1 and d5 == 1:
                # Deinterleave pixels s5 apart.
                for i3 in range(n3):
                    d = db + i3 * d3
                    s = sb + i3 * s3
                    for i5 in range(n5):
                        dst[d + i5] = src[s + s5 * i5]
                        dst[d + d4 + i5] = src[s + s5 * i5 + 1]
                        dst[d + 2 * d4 + i5] = src[s + s5 * i5 + 2]
                        dst[d + 3 * d4 + i5] = src[s + s5 * i5 + 3]
            elif streaming and n5 == 4:
                for i3 in range(n3):
                    for i4 in range(n4):
                        d = db + i3 * d3 + i4 * d4
                        s = sb + i3 * s3 + i4 * s4
                        v0 = src[s]
                        v1 = src[s + s5]
                        v2 = src[s + 2 * s5]
                        v3 = src[s + 3 * s5]
                        store_streaming(dst, d, v0)
                        store_streaming(dst, d + 1, v1)
                        store_streaming(dst, d + 2, v2)
                        store_streaming(dst, d + 3, v3)
            elif streaming:
                for i3 in range(n3):
                    for i4 in range(n4):
                        d = db + i3 * d3 + i4 * d4
                        s = sb + i3 * s3 + i4 * s4
                        for i5 in range(n5):
                            store_streaming(dst, d + i5, src[s + i5 * s5])
            elif d5 == 1 and s5 == 1:
                for i3 in range(n3):
                    for i4 in range(n4):
                        d = db + i3 * d3 + i4 * d4
                        s = sb + i3 * s3 + i4 * s4
                        for i5 in range(n5):
                            dst[d + i5] = src[s + i5]
            else:
                for i3 in range(n3):
                    for i4 in range(n4):
                        d = db + i3 * d3 + i4 * d4
                        s = sb + i3 * s3 + i4 * s4
                        for i5 in range(n5):
                            dst[d + i5 * d5] = src[s + i5 * s5]

/* Buffer <-> RGBA image copies for every MACE image type.
 *
 * The host describes a layout as up to eight axes over the image's pixels (int8 each:
 * s0 radix, s1 x stride, s2 y stride in pixels, s3 buffer stride in elements, s4
 * extent: values past it are padding pixels, s5 weight in the lane dimension's index).
 * The radices multiply to width * height and every pixel is one work-item.  The host
 * orders the axes so that the fastest work-item index walks the buffer's contiguous
 * axis (coalesced loads and stores on GPUs); the image side takes the scattered
 * accesses.  Axes [0, G0) are flattened on NDRange dimension 0, [G0, G1) on 1, the
 * rest on 2.  The four lanes of a pixel are consecutive values of one dimension,
 * lane_stride apart in the buffer.
 *
 * Options: -DBUF_HALF=0/1 (buffer holds float or half), -DIMG_HALF=0/1 (the image is
 * CL_HALF_FLOAT: values are rounded to half, to nearest even, by half_rte below, so the
 * result never depends on the device's own float->half conversion), -DSTAGED=0/1 (the
 * "image" is a plain buffer of pixels in the image's row-major order, copied to or from
 * the real image with clEnqueueCopyBufferToImage / ImageToBuffer: the fast way on CPU
 * devices, where write_imagef is a library call per pixel), -DFULL=1 (no padding pixel
 * or lane anywhere and the NDRange is exact: no checks).  -DSPEC makes the axes
 * compile-time constants.  Half data uses vload_half / vstore_half: no cl_khr_fp16.
 */

#ifndef BUF_HALF
#define BUF_HALF 0
#endif
#ifndef IMG_HALF
#define IMG_HALF 0
#endif
#ifndef STAGED
#define STAGED 0
#endif
#ifndef NAX
#define NAX 8
#endif
#ifndef G0
#define G0 NAX
#endif
#ifndef G1
#define G1 NAX
#endif
#if STAGED && BUF_HALF && IMG_HALF
/* half to half through a pixel buffer: the bits only move, nothing is converted */
#define RAW 1
#define BUF_T ushort
#define PIX_T ushort
#define VEC ushort4
#define LOAD1(p, i) ((p)[i])
#define LOAD4(p, i) vload4(0, (p) + (i))
#define STORE1(v, p, i) ((p)[i] = (v))
#define STORE4(v, p, i) vstore4((v), 0, (p) + (i))
#else
#define RAW 0
#define VEC float4
#if BUF_HALF
#define BUF_T half
#define LOAD1(p, i) vload_half((i), (p))
#define LOAD4(p, i) vload_half4(0, (p) + (i))
#define STORE1(v, p, i) vstore_half((v), (i), (p))
#define STORE4(v, p, i) vstore_half4((v), 0, (p) + (i))
#else
#define BUF_T float
#define LOAD1(p, i) ((p)[i])
#define LOAD4(p, i) vload4(0, (p) + (i))
#define STORE1(v, p, i) ((p)[i] = (v))
#define STORE4(v, p, i) vstore4((v), 0, (p) + (i))
#endif
#if STAGED && IMG_HALF
#define PIX_T ushort          /* half bits, made by half_bits4 */
#elif IMG_HALF
#define PIX_T half
#else
#define PIX_T float
#endif
#endif

/* float -> IEEE half bits, round to nearest even, four lanes without branches: overflow
 * gives +-inf, tiny values half subnormals or signed zero, NaN a quiet NaN. */
inline ushort4 half_bits4(float4 f)
{
    uint4 u = as_uint4(f);
    uint4 s = (u >> 16) & 0x8000u;
    uint4 a = u & 0x7fffffffu;
    uint4 nrm = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;   /* ties to even */
    nrm = min(nrm, (uint4)0x7c00u);
    uint4 sub = convert_uint4(rint(as_float4(a) * 0x1p24f));           /* multiples of 2^-24 */
    uint4 h = select(nrm, sub, a < 0x38800000u);
    h = select(h, (uint4)0x7e00u, a > 0x7f800000u);
    h = select(h, (uint4)0x7c00u, a == 0x7f800000u);
    return convert_ushort4(h | s);
}

#include "half.cl"

#ifdef SPEC
#define A0 ((int8)(SPEC_A0))
#define A1 ((int8)(SPEC_A1))
#define A2 ((int8)(SPEC_A2))
#define A3 ((int8)(SPEC_A3))
#define A4 ((int8)(SPEC_A4))
#define A5 ((int8)(SPEC_A5))
#define A6 ((int8)(SPEC_A6))
#define A7 ((int8)(SPEC_A7))
#define lane_stride (SPEC_LS)
#define lane_len (SPEC_LL)
#define AX_ARGS int8 a0_, int8 a1_, int8 a2_, int8 a3_, int8 a4_, int8 a5_, int8 a6_, int8 a7_, int ls_, int ll_
#else
#define AX_ARGS int8 A0, int8 A1, int8 A2, int8 A3, int8 A4, int8 A5, int8 A6, int8 A7, int lane_stride, int lane_len
#endif

/* axis k: s0 radix, s1 x stride, s2 y stride, s3 buffer stride, s4 extent, s5 lane weight.
 * Axes [0, G0) are flattened on dimension 0, [G0, G1) on dimension 1, the rest on 2. */
#ifndef FULL
#define FULL 0
#endif
#define GLAST(k) ((k) == G0 - 1 || (k) == G1 - 1 || (k) == NAX - 1)
#define AXIS(k, A)                                                         \
    if (NAX > k) {                                                         \
        int q_;                                                            \
        if (k < G0) { if (GLAST(k)) q_ = r0; else { q_ = r0 % (A).s0; r0 /= (A).s0; } } \
        else if (k < G1) { if (GLAST(k)) q_ = r1; else { q_ = r1 % (A).s0; r1 /= (A).s0; } } \
        else { if (GLAST(k)) q_ = r2; else { q_ = r2 % (A).s0; r2 /= (A).s0; } } \
        x += q_ * (A).s1; y += q_ * (A).s2; off += q_ * (A).s3;           \
        if (!FULL) { ok &= q_ < (A).s4; lv += q_ * (A).s5; }               \
    }

#define DECODE                                                           \
    int r0 = get_global_id(0), r1 = get_global_id(1), r2 = get_global_id(2); \
    if (!FULL && (r0 >= n0 || r1 >= n1)) return;                         \
    int x = 0, y = 0, off = 0, lv = 0, ok = 1;                           \
    AXIS(0, A0) AXIS(1, A1) AXIS(2, A2) AXIS(3, A3)                      \
    AXIS(4, A4) AXIS(5, A5) AXIS(6, A6) AXIS(7, A7)                      \
    int nlanes = FULL ? 4 : (ok ? lane_len - lv : 0);

__kernel void buffer_to_image(__global const BUF_T *src,
#if STAGED
                              __global PIX_T *img,
#else
                              __write_only image2d_t img,
#endif
                              int n0, int n1, int width, AX_ARGS)
{
    DECODE
    VEC v = (VEC)(0);
    if ((nlanes >= 4) & (lane_stride == 1)) {   /* both 0 or 1; lane_stride may be a constant */
        v = LOAD4(src, off);
    } else if (nlanes >= 4) {
        v = (VEC)(LOAD1(src, off), LOAD1(src, off + lane_stride),
                     LOAD1(src, off + 2 * lane_stride), LOAD1(src, off + 3 * lane_stride));
    } else if (nlanes > 0) {
        v.x = LOAD1(src, off);
        if (nlanes > 1) v.y = LOAD1(src, off + lane_stride);
        if (nlanes > 2) v.z = LOAD1(src, off + 2 * lane_stride);
    }
#if RAW
    vstore4(v, y * width + x, img);
#elif STAGED && IMG_HALF
    vstore4(half_bits4(v), y * width + x, img);
#elif STAGED
    vstore4(v, y * width + x, img);
#else
#if IMG_HALF
    v = half_rte4(v);                  /* exact in half: write_imagef does not round */
#endif
    write_imagef(img, (int2)(x, y), v);
#endif
}

__kernel void image_to_buffer(
#if STAGED
                              __global const PIX_T *img,
#else
                              __read_only image2d_t img,
#endif
                              __global BUF_T *dst, int n0, int n1, int width, AX_ARGS)
{
    DECODE
    if (nlanes <= 0)
        return;
#if RAW
    VEC v = vload4(y * width + x, img);
#elif STAGED && IMG_HALF
    float4 v = vload_half4(y * width + x, (__global const half *)img);
#elif STAGED
    float4 v = vload4(y * width + x, img);
#else
    float4 v = read_imagef(img, (int2)(x, y));
#endif
    if ((nlanes >= 4) & (lane_stride == 1)) {   /* both 0 or 1; lane_stride may be a constant */
        STORE4(v, dst, off);
    } else {
        STORE1(v.x, dst, off);
        if (nlanes > 1) STORE1(v.y, dst, off + lane_stride);
        if (nlanes > 2) STORE1(v.z, dst, off + 2 * lane_stride);
        if (nlanes > 3) STORE1(v.w, dst, off + 3 * lane_stride);
    }
}

/* Buffer <-> RGBA image copies for every MACE image type.
 *
 * One work-item per pixel (x, y) on a 2-D range sized to the image.  The pixel is
 * decoded into the buffer offset of its lane-0 element with up to three mixed-radix
 * digits along x and three along y (int4: stride in pixels or rows, extent, buffer
 * stride contribution, contribution to the lane dimension's index); the four lanes
 * are consecutive values of one dimension, lane_stride apart in the buffer.  The
 * digits come from the layout core on the host, so the same two kernels serve all
 * nine types and both activation buffer orders.
 *
 * Options: -DBUF_HALF=0/1 (buffer holds float or half), -DIMG_HALF=0/1 (the image is
 * CL_HALF_FLOAT: values are rounded to half, to nearest even, before write_imagef, so
 * the device's own float->half conversion is exact whatever its rounding mode).
 * Half data is read and written with vload_half / vstore_half, which need no
 * cl_khr_fp16.
 */

#ifndef BUF_HALF
#define BUF_HALF 0
#endif
#ifndef IMG_HALF
#define IMG_HALF 0
#endif

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

/* float -> the nearest half value (ties to even), returned as a float.  Overflow gives
 * +-inf, tiny values become half subnormals or signed zero, inf and NaN pass through. */
inline float half_rte(float f)
{
    uint u = as_uint(f);
    uint s = u & 0x80000000u;
    uint a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return f;
    if (a < 0x38800000u)                       /* below 2^-14: multiples of 2^-24 */
        return rint(f * 0x1p24f) * 0x1p-24f;
    a += 0x00000fffu + ((a >> 13) & 1u);       /* drop 13 mantissa bits, ties to even */
    a &= 0xffffe000u;
    if (a >= 0x47800000u)                      /* 65520 and above round to infinity */
        a = 0x7f800000u;
    return as_float(s | a);
}

inline float4 half_rte4(float4 v)
{
    return (float4)(half_rte(v.x), half_rte(v.y), half_rte(v.z), half_rte(v.w));
}

/* Unused digits have extent 0 and are skipped; a stride-1 digit takes the rest
 * without a division (integer division is the costliest step on CPUs). */
#define DIGIT(d, rem, off, lv, ok)                       \
    if ((d).y > 0) {                                     \
        int q_ = (d).x == 1 ? (rem) : (rem) / (d).x;     \
        (rem) -= q_ * (d).x;                             \
        (ok) &= q_ < (d).y;                              \
        (off) += q_ * (d).z;                             \
        (lv) += q_ * (d).w;                              \
    }

#ifdef SPEC   /* the digits as compile-time constants: divisions by constants */
#define dx0 ((int4)(SPEC_DX0))
#define dx1 ((int4)(SPEC_DX1))
#define dx2 ((int4)(SPEC_DX2))
#define dy0 ((int4)(SPEC_DY0))
#define dy1 ((int4)(SPEC_DY1))
#define dy2 ((int4)(SPEC_DY2))
#define lane_stride (SPEC_LS)
#define lane_len (SPEC_LL)
#define DIGIT_ARGS int4 dx0_, int4 dx1_, int4 dx2_, int4 dy0_, int4 dy1_, int4 dy2_, int ls_, int ll_
#else
#define DIGIT_ARGS int4 dx0, int4 dx1, int4 dx2, int4 dy0, int4 dy1, int4 dy2, int lane_stride, int lane_len
#endif

#define DECODE(x, y)                                                   \
    int off = 0, lv = 0, ok = 1, rx = (x), ry = (y);                   \
    DIGIT(dx0, rx, off, lv, ok) DIGIT(dx1, rx, off, lv, ok)            \
    DIGIT(dx2, rx, off, lv, ok) DIGIT(dy0, ry, off, lv, ok)            \
    DIGIT(dy1, ry, off, lv, ok) DIGIT(dy2, ry, off, lv, ok)            \
    ok &= (rx == 0) & (ry == 0);                                       \
    int nlanes = ok ? lane_len - lv : 0;

__kernel void buffer_to_image(__global const BUF_T *src, __write_only image2d_t img,
                              int width, int height,
                              DIGIT_ARGS)
{
    const int x = get_global_id(0), y = get_global_id(1);
    if (x >= width || y >= height)
        return;
    DECODE(x, y)
    float4 v = (float4)(0.0f);
    if (nlanes >= 4 && lane_stride == 1) {
        v = LOAD4(src, off);
    } else if (nlanes >= 4) {
        v = (float4)(LOAD1(src, off), LOAD1(src, off + lane_stride),
                     LOAD1(src, off + 2 * lane_stride), LOAD1(src, off + 3 * lane_stride));
    } else if (nlanes > 0) {
        v.x = LOAD1(src, off);
        if (nlanes > 1) v.y = LOAD1(src, off + lane_stride);
        if (nlanes > 2) v.z = LOAD1(src, off + 2 * lane_stride);
    }
#if IMG_HALF
    v = half_rte4(v);
#endif
    write_imagef(img, (int2)(x, y), v);
}

__kernel void image_to_buffer(__read_only image2d_t img, __global BUF_T *dst,
                              int width, int height,
                              DIGIT_ARGS)
{
    const int x = get_global_id(0), y = get_global_id(1);
    if (x >= width || y >= height)
        return;
    DECODE(x, y)
    if (nlanes <= 0)
        return;
    float4 v = read_imagef(img, (int2)(x, y));
    if (nlanes >= 4 && lane_stride == 1) {
        STORE4(v, dst, off);
    } else {
        STORE1(v.x, dst, off);
        if (nlanes > 1) STORE1(v.y, dst, off + lane_stride);
        if (nlanes > 2) STORE1(v.z, dst, off + 2 * lane_stride);
        if (nlanes > 3) STORE1(v.w, dst, off + 3 * lane_stride);
    }
}

/* Convolution on RGBA images, the way MACE's GPU runtime lays it out.
 *
 * Images (q(x) = (x + 3) / 4):
 *   input   IN_OUT_CHANNEL of NHWC (N, H, W, C):       pixel (c4 * W + w, n * H + h)
 *   filter  CONV2D_FILTER of OIHW (O, I, KH, KW):      pixel (i, o4 * KH * KW + kh * KW + kw)
 *   bias    ARGUMENT of (O,):                          pixel (o4, 0)
 *   output  IN_OUT_CHANNEL of NHWC (N, OH, OW, O)
 *   Winograd, T = M + 2, tiles = N * th * tw:
 *   V       IN_OUT_HEIGHT of NHWC (T*T, C, tiles, 1):  pixel (tile, t * q(C) + c4)
 *   U       WINOGRAD_FILTER of (T*T, O, I):            pixel (i4, t * O + o)
 *   Mt      IN_OUT_HEIGHT of NHWC (T*T, O, tiles, 1):  pixel (tile, t * q(O) + o4)
 * Lanes hold four consecutive channels.  Arithmetic is in float; half images are
 * read with read_imagef and written after rounding to the nearest half.
 * The Winograd transforms (WINO_INPUT_TRANSFORM, WINO_OUTPUT_TRANSFORM) are
 * straight-line code generated on the host from the exact matrices.
 */

#ifndef IMG_HALF
#define IMG_HALF 0      /* output image is CL_HALF_FLOAT */
#endif
#ifndef MID_HALF
#define MID_HALF 0      /* the Winograd V and M images are CL_HALF_FLOAT */
#endif

__constant sampler_t SMP = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;

#include "half.cl"

inline void store(__write_only image2d_t img, int x, int y, float4 v)
{
#if IMG_HALF
    v = half_rte4(v);
#endif
    write_imagef(img, (int2)(x, y), v);
}

inline void store_mid(__write_only image2d_t img, int x, int y, float4 v)
{
#if MID_HALF
    v = half_rte4(v);
#endif
    write_imagef(img, (int2)(x, y), v);
}

/* One work-item: one output pixel, i.e. four output channels at (n, oh, ow). */
__kernel void conv2d_direct(__read_only image2d_t in, __read_only image2d_t filt,
                            __read_only image2d_t bias, __write_only image2d_t out,
                            int N, int H, int W, int C, int OH, int OW, int O,
                            int KH, int KW, int sh, int sw, int ph, int pw, int has_bias)
{
    const int x = get_global_id(0), y = get_global_id(1);
    const int qo = (O + 3) / 4, qc = (C + 3) / 4;
    if (x >= qo * OW || y >= N * OH)
        return;
    const int o4 = x / OW, ow = x - o4 * OW;
    const int n = y / OH, oh = y - n * OH;
    float4 acc = has_bias ? read_imagef(bias, SMP, (int2)(o4, 0)) : (float4)(0.0f);
    /* Every product of the window is taken, the padding's zeros included, as if the input
       were explicitly zero-padded: a NaN or Inf weight meets a padded zero as 0 * Inf = NaN,
       exactly as in PyTorch's convolution. */
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * sh - ph + kh;
        const int in_h = ih >= 0 && ih < H;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = ow * sw - pw + kw;
            const int inside = in_h && iw >= 0 && iw < W;
            const int fy = o4 * KH * KW + kh * KW + kw;
            for (int c4 = 0; c4 < qc; ++c4) {
                const float4 v = inside ? read_imagef(in, SMP, (int2)(c4 * W + iw, n * H + ih))
                                        : (float4)(0.0f);
                const int i = c4 * 4;   /* x past I reads the border colour 0 */
                acc = mad((float4)(v.x), read_imagef(filt, SMP, (int2)(i, fy)), acc);
                acc = mad((float4)(v.y), read_imagef(filt, SMP, (int2)(i + 1, fy)), acc);
                acc = mad((float4)(v.z), read_imagef(filt, SMP, (int2)(i + 2, fy)), acc);
                acc = mad((float4)(v.w), read_imagef(filt, SMP, (int2)(i + 3, fy)), acc);
            }
        }
    }
    store(out, x, y, acc);
}

#ifdef WINO_M
#define T (WINO_M + 2)

/* One work-item: one tile of four input channels -> T*T pixels of V. */
__kernel void wino_input(__read_only image2d_t in, __write_only image2d_t V,
                         int N, int H, int W, int C, int th, int tw, int pt, int pl)
{
    const int tile = get_global_id(0), c4 = get_global_id(1);
    const int qc = (C + 3) / 4;
    if (tile >= N * th * tw || c4 >= qc)
        return;
    const int n = tile / (th * tw), r = tile - n * th * tw;
    const int ty = r / tw, tx = r - ty * tw;
    const int h0 = ty * WINO_M - pt, w0 = tx * WINO_M - pl;
    float4 d[T][T];
    for (int i = 0; i < T; ++i) {
        const int h = h0 + i;
        for (int j = 0; j < T; ++j) {
            const int w = w0 + j;
            d[i][j] = (h >= 0 && h < H && w >= 0 && w < W)
                ? read_imagef(in, SMP, (int2)(c4 * W + w, n * H + h)) : (float4)(0.0f);
        }
    }
    float4 u[T][T];
    WINO_INPUT_TRANSFORM
    for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
            store_mid(V, tile, (i * T + j) * qc + c4, u[i][j]);
}

/* One work-item: TPI tiles x four output channels for one t: Mt = U_t . V_t. */
#ifndef TPI
#define TPI 4
#endif
__kernel void wino_matmul(__read_only image2d_t V, __read_only image2d_t U,
                          __write_only image2d_t Mt, int C, int O, int tiles)
{
    const int tile0 = get_global_id(0) * TPI, y = get_global_id(1);
    const int qc = (C + 3) / 4, qo = (O + 3) / 4;
    if (tile0 >= tiles || y >= T * T * qo)
        return;
    const int t = y / qo, o4 = y - t * qo;
    const int o = o4 * 4;
    float4 acc[TPI];
    for (int k = 0; k < TPI; ++k)
        acc[k] = (float4)(0.0f);
    for (int c4 = 0; c4 < qc; ++c4) {
        /* rows past O would belong to the next t: read them as 0 */
        const float4 f0 = read_imagef(U, SMP, (int2)(c4, t * O + o));
        const float4 f1 = o + 1 < O ? read_imagef(U, SMP, (int2)(c4, t * O + o + 1)) : (float4)(0.0f);
        const float4 f2 = o + 2 < O ? read_imagef(U, SMP, (int2)(c4, t * O + o + 2)) : (float4)(0.0f);
        const float4 f3 = o + 3 < O ? read_imagef(U, SMP, (int2)(c4, t * O + o + 3)) : (float4)(0.0f);
        for (int k = 0; k < TPI; ++k) {
            const float4 v = read_imagef(V, SMP, (int2)(tile0 + k, t * qc + c4));
            acc[k] += (float4)(dot(f0, v), dot(f1, v), dot(f2, v), dot(f3, v));
        }
    }
    for (int k = 0; k < TPI; ++k)
        if (tile0 + k < tiles)
            store_mid(Mt, tile0 + k, y, acc[k]);
}

/* One work-item: one tile of four output channels -> M x M output pixels (+ bias). */
__kernel void wino_output(__read_only image2d_t Mt, __read_only image2d_t bias,
                          __write_only image2d_t out, int N, int OH, int OW, int O,
                          int th, int tw, int has_bias)
{
    const int tile = get_global_id(0), o4 = get_global_id(1);
    const int qo = (O + 3) / 4;
    if (tile >= N * th * tw || o4 >= qo)
        return;
    const int n = tile / (th * tw), r = tile - n * th * tw;
    const int ty = r / tw, tx = r - ty * tw;
    float4 m[T][T];
    for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
            m[i][j] = read_imagef(Mt, SMP, (int2)(tile, (i * T + j) * qo + o4));
    float4 y[WINO_M][WINO_M];
    WINO_OUTPUT_TRANSFORM
    const float4 b = has_bias ? read_imagef(bias, SMP, (int2)(o4, 0)) : (float4)(0.0f);
    for (int i = 0; i < WINO_M; ++i) {
        const int oh = ty * WINO_M + i;
        if (oh >= OH)
            break;
        for (int j = 0; j < WINO_M; ++j) {
            const int ow = tx * WINO_M + j;
            if (ow >= OW)
                break;
            store(out, o4 * OW + ow, n * OH + oh, y[i][j] + b);
        }
    }
}
#endif

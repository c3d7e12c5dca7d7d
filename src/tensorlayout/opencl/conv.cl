/* Convolution on RGBA images, the way MACE's GPU runtime lays it out: a direct kernel for
 * single convolutions (tensorlayout.opencl.conv) and the three Winograd stages that both
 * single convolutions and whole networks (tensorlayout.opencl.network) run.
 *
 * Images, each addressed by its PIXEL_<TYPE> macro (pixels.cl, generated from the
 * image types' rows in tensorlayout.image):
 *   input   IN_OUT_CHANNEL of NHWC (N, H, W, C)
 *   filter  CONV2D_FILTER of OIHW (O, I, KH, KW)
 *   bias    ARGUMENT of (O,)
 *   output  IN_OUT_CHANNEL of NHWC (N, OH, OW, O)
 *   Winograd F(WINO_M x WINO_M, 3 x 3), T = WINO_M + 2, tiles = N * th * tw, numbered
 *   tile = (n * th + ty) * tw + tx:
 *   V       IN_OUT_HEIGHT of NHWC (T*T, C, tiles, 1)
 *   U       WINOGRAD_FILTER of (T*T, O, I)
 *   Mt      IN_OUT_HEIGHT of NHWC (T*T, O, tiles, 1)
 * Lanes hold four consecutive channels.  Arithmetic is in float; half images are
 * read with read_imagef and written after rounding to the nearest half.
 * The Winograd transforms (WINO_INPUT_TRANSFORM, WINO_OUTPUT_TRANSFORM) are
 * straight-line code generated on the host from the exact matrices.
 */

#ifndef MID_HALF
#define MID_HALF 0      /* the Winograd V and M images are CL_HALF_FLOAT */
#endif

/* the sampler, IMG_HALF (the output image is CL_HALF_FLOAT), pixels.cl, activations */
#include "net_common.cl"

inline void store(__write_only image2d_t img, int2 xy, float4 v)
{
#if IMG_HALF
    v = half_rte4(v);
#endif
    write_imagef(img, xy, v);
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
    float4 acc = has_bias ? read_imagef(bias, SMP, PIXEL_ARGUMENT(o4, O)) : (float4)(0.0f);
    /* Every product of the window is taken, the padding's zeros included, as if the input
       were explicitly zero-padded: a NaN or Inf weight meets a padded zero as 0 * Inf = NaN,
       exactly as in PyTorch's convolution. */
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * sh - ph + kh;
        const int in_h = ih >= 0 && ih < H;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = ow * sw - pw + kw;
            const int inside = in_h && iw >= 0 && iw < W;
            for (int c4 = 0; c4 < qc; ++c4) {
                const float4 v = inside ? read_imagef(in, SMP, PIXEL_IN_OUT_CHANNEL(n, ih, iw, c4, N, H, W, C))
                                        : (float4)(0.0f);
                /* input channels 4 * c4 .. + 3; x past I reads the border colour 0 */
                const int i = c4 * 4;
                acc = mad((float4)(v.x), read_imagef(filt, SMP, PIXEL_CONV2D_FILTER(o4, i, kh, kw, O, C, KH, KW)), acc);
                acc = mad((float4)(v.y), read_imagef(filt, SMP, PIXEL_CONV2D_FILTER(o4, i + 1, kh, kw, O, C, KH, KW)), acc);
                acc = mad((float4)(v.z), read_imagef(filt, SMP, PIXEL_CONV2D_FILTER(o4, i + 2, kh, kw, O, C, KH, KW)), acc);
                acc = mad((float4)(v.w), read_imagef(filt, SMP, PIXEL_CONV2D_FILTER(o4, i + 3, kh, kw, O, C, KH, KW)), acc);
            }
        }
    }
    store(out, PIXEL_IN_OUT_CHANNEL(n, oh, ow, o4, N, OH, OW, O), acc);
}

#ifdef WINO_M
#define T (WINO_M + 2)

inline void put_mid(__write_only image2d_t img, int2 xy, float4 v)
{
#if MID_HALF
    v = half_rte4(v);
#endif
    write_imagef(img, xy, v);
}

/* (n, ty, tx) of a tile number: its batch item, tile row and tile column. */
inline int3 wino_tile(int tile, int th, int tw)
{
    const int n = tile / (th * tw), r = tile - n * th * tw;
    const int ty = r / tw;
    return (int3)(n, ty, r - ty * tw);
}

/* One work-item: one tile of four input channels -> T*T pixels of V. */
__kernel void wino_input(__read_only image2d_t in, __write_only image2d_t V,
                         int N, int H, int W, int C, int th, int tw, int pt, int pl)
{
    const int tile = get_global_id(0), c4 = get_global_id(1);
    const int qc = (C + 3) / 4, tiles = N * th * tw;
    if (tile >= tiles || c4 >= qc)
        return;
    const int3 at = wino_tile(tile, th, tw);
    const int h0 = at.y * WINO_M - pt, w0 = at.z * WINO_M - pl;
    /* Padding without a branch: a position outside the tensor reads pixel -1, outside the
     * image, which the clamping sampler returns as 0. */
    float4 d[T][T];
    for (int i = 0; i < T; ++i) {
        const int h = h0 + i;
        const int hin = h >= 0 && h < H;
        for (int j = 0; j < T; ++j) {
            const int w = w0 + j;
            int2 p = PIXEL_IN_OUT_CHANNEL(at.x, h, w, c4, N, H, W, C);
            p.x = select(-1, p.x, hin && w >= 0 && w < W);
            d[i][j] = read_imagef(in, SMP, p);
        }
    }
    float4 u[T][T];
    WINO_INPUT_TRANSFORM
    for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
            put_mid(V, PIXEL_IN_OUT_HEIGHT(i * T + j, c4, tile, 0, T * T, C, tiles, 1), u[i][j]);
}

/* One work-item: NT tiles x NO groups of four output channels for one t: Mt = U_t . V_t,
 * over slice s of S of the input channel blocks (S > 1 where a layer has too few
 * work-items: each slice stores its sums at rows s * T*T * q(O) of Mt, and wino_output
 * adds them).
 * The filter rows are read without a test: rows past O (the next t's, or past the image,
 * read as 0) reach only lanes and groups of channels >= O, which are not stored or are
 * zeroed by wino_output's put.  Three blockings: more tiles per work-item read fewer
 * pixels per multiply-add (large layers), fewer leave more work-items (small ones). */
#define WINO_MATMUL(NAME, NT, NO)                                                                 \
__kernel void NAME(__read_only image2d_t V, __read_only image2d_t U,                             \
                   __write_only image2d_t Mt, int C, int O, int tiles, int S)                     \
{                                                                                                 \
    const int tile0 = get_global_id(0) * NT, g = get_global_id(1);                               \
    const int qc = (C + 3) / 4, qo = (O + 3) / 4, qb = (qo + NO - 1) / NO;                       \
    if (tile0 >= tiles || g >= T * T * qb * S)                                                   \
        return;                                                                                   \
    const int s = S > 1 ? g / (T * T * qb) : 0, y = g - s * T * T * qb;                          \
    const int t = y / qb, o4 = (y - t * qb) * NO;                                                \
    float4 acc[NO][NT];                                                                           \
    for (int b = 0; b < NO; ++b)                                                                  \
        for (int k = 0; k < NT; ++k)                                                              \
            acc[b][k] = (float4)(0.0f);                                                           \
    const int c4a = S > 1 ? s * qc / S : 0, c4b = S > 1 ? (s + 1) * qc / S : qc;                \
    for (int c4 = c4a; c4 < c4b; ++c4) {                                                          \
        float4 f[4 * NO];                                                                         \
        for (int r = 0; r < 4 * NO; ++r)                                                          \
            f[r] = read_imagef(U, SMP, PIXEL_WINOGRAD_FILTER(t, 4 * o4 + r, c4, T * T, O, C));    \
        for (int k = 0; k < NT; ++k) {                                                            \
            const float4 v = read_imagef(V, SMP, PIXEL_IN_OUT_HEIGHT(t, c4, tile0 + k, 0, T * T, C, tiles, 1)); \
            for (int b = 0; b < NO; ++b)                                                          \
                acc[b][k] += (float4)(dot(f[4 * b], v), dot(f[4 * b + 1], v),                     \
                                      dot(f[4 * b + 2], v), dot(f[4 * b + 3], v));                \
        }                                                                                         \
    }                                                                                             \
    for (int b = 0; b < NO && o4 + b < qo; ++b)                                                   \
        for (int k = 0; k < NT && tile0 + k < tiles; ++k)                                         \
            put_mid(Mt, PIXEL_IN_OUT_HEIGHT(s * T * T + t, o4 + b, tile0 + k, 0, S * T * T, O, tiles, 1), \
                    acc[b][k]);                                                                   \
}

WINO_MATMUL(wino_matmul_4x1, 4, 1)
WINO_MATMUL(wino_matmul_8x1, 8, 1)
WINO_MATMUL(wino_matmul_8x2, 8, 2)

/* One work-item: one tile of four output channels -> WINO_M x WINO_M output pixels,
 * plus the bias, then the activation (act, a0, a1 as net_common.cl's activate). */
__kernel void wino_output(__read_only image2d_t Mt, __read_only image2d_t bias,
                          __write_only image2d_t out, int OH, int OW, int O,
                          int th, int tw, int tiles, int S, int has_bias, int act, float a0, float a1)
{
    const int tile = get_global_id(0), o4 = get_global_id(1);
    const int qo = (O + 3) / 4;
    if (tile >= tiles || o4 >= qo)
        return;
    const int3 at = wino_tile(tile, th, tw);
    const int N = tiles / (th * tw);
    float4 m[T][T];
#pragma unroll
    for (int i = 0; i < T; ++i)
#pragma unroll
        for (int j = 0; j < T; ++j)
            m[i][j] = read_imagef(Mt, SMP, PIXEL_IN_OUT_HEIGHT(i * T + j, o4, tile, 0, S * T * T, O, tiles, 1));
    /* the other slices' sums, if the GEMM was split (the slice loop outermost, so that
     * m stays in registers) */
    for (int s = 1; s < S; ++s)
#pragma unroll
        for (int i = 0; i < T; ++i)
#pragma unroll
            for (int j = 0; j < T; ++j)
                m[i][j] += read_imagef(Mt, SMP, PIXEL_IN_OUT_HEIGHT(s * T * T + i * T + j, o4, tile, 0,
                                                                    S * T * T, O, tiles, 1));
    float4 y[WINO_M][WINO_M];
    WINO_OUTPUT_TRANSFORM
    const float4 b = has_bias ? read_imagef(bias, SMP, PIXEL_ARGUMENT(o4, O)) : (float4)(0.0f);
    for (int i = 0; i < WINO_M; ++i) {
        const int oh = at.y * WINO_M + i;
        if (oh >= OH)
            break;
        for (int j = 0; j < WINO_M; ++j) {
            const int ow = at.z * WINO_M + j;
            if (ow >= OW)
                break;
            put(out, PIXEL_IN_OUT_CHANNEL(at.x, oh, ow, o4, N, OH, OW, O),
                activate(y[i][j] + b, act, a0, a1), o4, O);
        }
    }
}
#endif

/* Winograd F(WINO_M x WINO_M, 3 x 3) for a network kept in images: the three stages of
 * MACE's image pipeline, with the bias and the activation fused into the last one.
 *
 *   V  IN_OUT_HEIGHT of (T*T, C, tiles, 1)   pixel (tile, t * q(C) + c4)
 *   U  WINOGRAD_FILTER of (T*T, O, C)        pixel (c4, t * O + o)
 *   M  IN_OUT_HEIGHT of (T*T, O, tiles, 1)   pixel (tile, t * q(O) + o4)
 * T = WINO_M + 2, tiles = N * th * tw.  The host prepends WINO_M and the two transforms
 * (WINO_BT: u = B^T d B, WINO_AT: y = A^T m A) as straight-line code.
 */

#ifndef MID_HALF
#define MID_HALF 0
#endif
#define T (WINO_M + 2)

__constant sampler_t WSMP = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;

#include "net_common.cl"

inline void put_mid(__write_only image2d_t img, int x, int y, float4 v)
{
#if MID_HALF
    v = half_rte4(v);
#endif
    write_imagef(img, (int2)(x, y), v);
}

/* One work-item: one tile of four input channels. */
__kernel void wino_in(__read_only image2d_t in, __write_only image2d_t V,
                      int H, int W, int C, int th, int tw, int tiles, int pt, int pl)
{
    const int tile = get_global_id(0), c4 = get_global_id(1);
    const int qc = (C + 3) / 4;
    if (tile >= tiles || c4 >= qc)
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
                ? read_imagef(in, WSMP, (int2)(c4 * W + w, n * H + h)) : (float4)(0.0f);
        }
    }
    float4 u[T][T];
    WINO_BT
    for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
            put_mid(V, tile, (i * T + j) * qc + c4, u[i][j]);
}

/* One work-item: NT tiles x 4 * NO output channels of one t: M_t = U_t . V_t.  Rows of U
 * past O (the next t's, or zeros past the image) only reach the lanes and pixels of
 * channels >= O, which are not written here or are zeroed by wino_out's put.  Three
 * blockings; the session picks one per layer (by timing when tuned). */
#define WINO_GEMM(NAME, NT, NO)                                                           \
__kernel void NAME(__read_only image2d_t V, __read_only image2d_t U,                      \
                   __write_only image2d_t M, int C, int O, int tiles)                     \
{                                                                                          \
    const int tile0 = NT * get_global_id(0), y = get_global_id(1);                        \
    const int qc = (C + 3) / 4, qo = (O + 3) / 4, qb = (qo + NO - 1) / NO;                \
    if (tile0 >= tiles || y >= T * T * qb)                                                \
        return;                                                                            \
    const int t = y / qb, o4 = NO * (y - t * qb);                                         \
    const int uy = t * O + 4 * o4;                                                        \
    float4 acc[NO][NT];                                                                    \
    for (int b = 0; b < NO; ++b)                                                           \
        for (int j = 0; j < NT; ++j)                                                       \
            acc[b][j] = (float4)(0.0f);                                                    \
    int vy = t * qc;                                                                       \
    for (int c4 = 0; c4 < qc; ++c4, ++vy) {                                                \
        float4 f[4 * NO];                                                                  \
        for (int r = 0; r < 4 * NO; ++r)                                                   \
            f[r] = read_imagef(U, WSMP, (int2)(c4, uy + r));                               \
        for (int j = 0; j < NT; ++j) {                                                     \
            const float4 v = read_imagef(V, WSMP, (int2)(tile0 + j, vy));                  \
            for (int b = 0; b < NO; ++b)                                                   \
                acc[b][j] += (float4)(dot(f[4 * b], v), dot(f[4 * b + 1], v),              \
                                      dot(f[4 * b + 2], v), dot(f[4 * b + 3], v));         \
        }                                                                                  \
    }                                                                                      \
    for (int b = 0; b < NO && o4 + b < qo; ++b)                                            \
        for (int j = 0; j < NT && tile0 + j < tiles; ++j)                                  \
            put_mid(M, tile0 + j, t * qo + o4 + b, acc[b][j]);                             \
}

WINO_GEMM(wino_gemm_4x1, 4, 1)
WINO_GEMM(wino_gemm_8x1, 8, 1)
WINO_GEMM(wino_gemm_8x2, 8, 2)

/* One work-item: one tile of four output channels -> WINO_M x WINO_M output pixels,
 * plus the bias, then the activation. */
__kernel void wino_out(__read_only image2d_t M, __read_only image2d_t bias,
                       __write_only image2d_t out, int OH, int OW, int O,
                       int th, int tw, int tiles, int has_bias, int act, float a0, float a1)
{
    const int tile = get_global_id(0), o4 = get_global_id(1);
    const int qo = (O + 3) / 4;
    if (tile >= tiles || o4 >= qo)
        return;
    const int n = tile / (th * tw), r = tile - n * th * tw;
    const int ty = r / tw, tx = r - ty * tw;
    float4 m[T][T];
    for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
            m[i][j] = read_imagef(M, WSMP, (int2)(tile, (i * T + j) * qo + o4));
    float4 y[WINO_M][WINO_M];
    WINO_AT
    const float4 b = has_bias ? read_imagef(bias, WSMP, (int2)(o4, 0)) : (float4)(0.0f);
    for (int i = 0; i < WINO_M; ++i) {
        const int oh = ty * WINO_M + i;
        if (oh >= OH)
            break;
        for (int j = 0; j < WINO_M; ++j) {
            const int ow = tx * WINO_M + j;
            if (ow >= OW)
                break;
            put(out, o4 * OW + ow, n * OH + oh, activate(y[i][j] + b, act, a0, a1), o4, O);
        }
    }
}

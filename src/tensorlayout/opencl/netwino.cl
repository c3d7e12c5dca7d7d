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

/* One work-item: four tiles x four output channels of one t: M_t = U_t . V_t. */
__kernel void wino_gemm(__read_only image2d_t V, __read_only image2d_t U,
                        __write_only image2d_t M, int C, int O, int tiles)
{
    const int tile0 = 4 * get_global_id(0), y = get_global_id(1);
    const int qc = (C + 3) / 4, qo = (O + 3) / 4;
    if (tile0 >= tiles || y >= T * T * qo)
        return;
    const int t = y / qo, o4 = y - t * qo, o = 4 * o4;
    const int uy = t * O + o;
    /* rows of U past O belong to the next t: use zeros */
    const int r1 = o + 1 < O, r2 = o + 2 < O, r3 = o + 3 < O;
    float4 acc0 = (float4)(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int c4 = 0; c4 < qc; ++c4) {
        const float4 f0 = read_imagef(U, WSMP, (int2)(c4, uy));
        const float4 f1 = r1 ? read_imagef(U, WSMP, (int2)(c4, uy + 1)) : (float4)(0.0f);
        const float4 f2 = r2 ? read_imagef(U, WSMP, (int2)(c4, uy + 2)) : (float4)(0.0f);
        const float4 f3 = r3 ? read_imagef(U, WSMP, (int2)(c4, uy + 3)) : (float4)(0.0f);
        const int vy = t * qc + c4;
        float4 v;
        v = read_imagef(V, WSMP, (int2)(tile0, vy));
        acc0 += (float4)(dot(f0, v), dot(f1, v), dot(f2, v), dot(f3, v));
        v = read_imagef(V, WSMP, (int2)(tile0 + 1, vy));
        acc1 += (float4)(dot(f0, v), dot(f1, v), dot(f2, v), dot(f3, v));
        v = read_imagef(V, WSMP, (int2)(tile0 + 2, vy));
        acc2 += (float4)(dot(f0, v), dot(f1, v), dot(f2, v), dot(f3, v));
        v = read_imagef(V, WSMP, (int2)(tile0 + 3, vy));
        acc3 += (float4)(dot(f0, v), dot(f1, v), dot(f2, v), dot(f3, v));
    }
    put_mid(M, tile0, y, acc0);
    if (tile0 + 1 < tiles) put_mid(M, tile0 + 1, y, acc1);
    if (tile0 + 2 < tiles) put_mid(M, tile0 + 2, y, acc2);
    if (tile0 + 3 < tiles) put_mid(M, tile0 + 3, y, acc3);
}

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

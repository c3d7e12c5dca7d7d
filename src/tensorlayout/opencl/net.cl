/* The kernels of a whole network kept in RGBA images (tensorlayout.opencl.network).
 *
 * Every activation is an IN_OUT_CHANNEL image of an NHWC tensor (N, H, W, C), whose pixel
 * holds channels 4 * c4 .. 4 * c4 + 3 in its four lanes (q(C) = (C + 3) / 4).  A 2-D
 * tensor (N, C) is the image of (N, 1, 1, C).  The image of (N, H, W, C) is also that of
 * (1, N * H, W, C): kernels that run over the rows nh = n * H + h address it so.
 * Weights (lane: the dimension grouped by four):
 *   CONV2D_FILTER    OIHW (O, I, KH, KW)  [I, KH*KW*q(O)]     lane o % 4
 *   DW_CONV2D_FILTER (C, 1, KH, KW)       [KH*KW, q(C)]        lane c % 4
 *   WEIGHT_WIDTH     OIHW (O, C, H, W)    [q(C)*H*W, O]        lane c % 4
 *   ARGUMENT         (L,)                 [q(L), 1]            lane l % 4
 * Every pixel is addressed through its type's PIXEL_<TYPE> macro (pixels.cl).
 * Work-items mostly run over (c4, w or a block of 4 w, n * H + h), as MACE's kernels do.
 * Reads outside an image give the border colour 0 (CLK_ADDRESS_CLAMP).  Lanes past the
 * channel count are written as 0, so that no later kernel meets a stray NaN there.
 * Arithmetic is float; with IMG_HALF the stored values are rounded to the nearest half.
 */

#include "net_common.cl"

/* The pixel of channels 4 * c4 .. at column w of row nh of an IN_OUT_CHANNEL image W wide. */
#define ROW_PIXEL(nh, w, c4, W) PIXEL_IN_OUT_CHANNEL(0, nh, w, c4, 1, 1, W, 4)

/* ------------------------------------------------------------------ host <-> image */
/* NCHW float buffer of CT channels -> IN_OUT_CHANNEL image of its channels c0 .. c0 + C - 1
 * (all of them, or one part of an image split by channels). */
__kernel void upload(__global const float *x, __write_only image2d_t out, int N, int C, int H, int W,
                     int c0, int CT)
{
    const int c4 = get_global_id(0), w = get_global_id(1), nh = get_global_id(2);
    if (c4 >= (C + 3) / 4 || w >= W || nh >= N * H)
        return;
    const int n = nh / H, h = nh - n * H;
    float v[4];
    for (int k = 0; k < 4; ++k) {
        const int c = 4 * c4 + k;
        v[k] = c < C ? x[((n * CT + c0 + c) * H + h) * W + w] : 0.0f;
    }
    put(out, PIXEL_IN_OUT_CHANNEL(n, h, w, c4, N, H, W, C), (float4)(v[0], v[1], v[2], v[3]), c4, C);
}

/* IN_OUT_CHANNEL image of channels c0 .. c0 + C - 1 -> NCHW float buffer of CT channels. */
__kernel void download(__read_only image2d_t in, __global float *y, int N, int C, int H, int W,
                       int c0, int CT)
{
    const int c4 = get_global_id(0), w = get_global_id(1), nh = get_global_id(2);
    if (c4 >= (C + 3) / 4 || w >= W || nh >= N * H)
        return;
    const int n = nh / H, h = nh - n * H;
    const float4 v = get(in, PIXEL_IN_OUT_CHANNEL(n, h, w, c4, N, H, W, C));
    const float a[4] = {v.x, v.y, v.z, v.w};
    for (int k = 0; k < 4 && 4 * c4 + k < C; ++k)
        y[((n * CT + c0 + 4 * c4 + k) * H + h) * W + w] = a[k];
}

/* ------------------------------------------------------------------ convolutions */
/* The start of a kernel whose work-item is four channels x4 of X at a block of four
 * neighbouring output columns ow0 .. ow0 + 3 of the output row nh = n * OH + oh: it returns
 * past the output, and starts the four columns' accumulators at the bias. */
#define BLOCK4_START(x4, X) \
    const int x4 = get_global_id(0), wb = get_global_id(1), nh = get_global_id(2); \
    if (x4 >= (X + 3) / 4 || 4 * wb >= OW || nh >= NOH) \
        return; \
    const int n = nh / OH, oh = nh - n * OH, ow0 = 4 * wb, N = NOH / OH; \
    const float4 b = has_bias ? get(bias, PIXEL_ARGUMENT(x4, X)) : (float4)(0.0f); \
    float4 acc0 = b, acc1 = b, acc2 = b, acc3 = b;

/* The direct convolution's sums over input channel blocks [c4a, c4b) of every tap, into
 * acc0..acc3 (four output columns from ow0, output channels 4 * o4 .. 4 * o4 + 3). */
#define CONV_MACS(c4a, c4b) \
    for (int kh = 0; kh < KH; ++kh) { \
        const int ih = oh * sh - ph + kh * dh; \
        if (ih < 0 || ih >= H) \
            continue; \
        for (int kw = 0; kw < KW; ++kw) { \
            const int4 iw = COLUMNS4(ow0 * sw - pw + kw * dw, sw); \
            const int4 inside = iw >= 0 && iw < W; \
            for (int c4 = (c4a); c4 < (c4b); ++c4) { \
                const int i = 4 * c4; \
                const float4 f0 = get(filt, PIXEL_CONV2D_FILTER(o4, i, kh, kw, O, C, KH, KW)); \
                const float4 f1 = get(filt, PIXEL_CONV2D_FILTER(o4, i + 1, kh, kw, O, C, KH, KW)); \
                const float4 f2 = get(filt, PIXEL_CONV2D_FILTER(o4, i + 2, kh, kw, O, C, KH, KW)); \
                const float4 f3 = get(filt, PIXEL_CONV2D_FILTER(o4, i + 3, kh, kw, O, C, KH, KW)); \
                CONV_COLUMN(acc0, 0) CONV_COLUMN(acc1, 1) CONV_COLUMN(acc2, 2) CONV_COLUMN(acc3, 3) \
            } \
        } \
    }
#define CONV_COLUMN(acc, k) { \
    const float4 v = inside.s##k ? get(in, PIXEL_IN_OUT_CHANNEL(n, ih, iw.s##k, c4, N, H, W, C)) \
                                 : (float4)(0.0f); \
    acc = mad((float4)(v.x), f0, mad((float4)(v.y), f1, mad((float4)(v.z), f2, mad((float4)(v.w), f3, acc)))); }

/* Direct convolution, any kernel, stride, padding, dilation; group 1.
 * One work-item: four output channels at four neighbouring output columns.
 * With CONV_PARTIAL (an input held as several images, one per part of its channels) the
 * kernel runs once per part with that part's filter: it adds the float32 sums of the parts
 * before (from_prev: the image prev) and, but for the last part, stores its sums without
 * the activation; the first part adds the bias. */
#ifndef CONV_PARTIAL
#define CONV_PARTIAL 0
#endif
__kernel void conv2d(__read_only image2d_t in, __read_only image2d_t filt,
                     __read_only image2d_t bias, __write_only image2d_t out,
                     int H, int W, int C, int OH, int OW, int O, int NOH,
                     int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                     int has_bias, int act, float a0, float a1
#if CONV_PARTIAL
                     , __read_only image2d_t prev, int from_prev, int last
#endif
                     )
{
    BLOCK4_START(o4, O)
    const int qc = (C + 3) / 4;
    const int2 xy = PIXEL_IN_OUT_CHANNEL(n, oh, ow0, o4, N, OH, OW, O);
#if CONV_PARTIAL
    if (from_prev) {
        acc0 += get(prev, xy);
        acc1 += get(prev, xy + (int2)(1, 0));
        acc2 += get(prev, xy + (int2)(2, 0));
        acc3 += get(prev, xy + (int2)(3, 0));
    }
#endif
    CONV_MACS(0, qc)
#if CONV_PARTIAL
    if (!last) {
        store4(out, xy, acc0, acc1, acc2, acc3, OW - ow0);
        return;
    }
#endif
    put4(out, xy, acc0, acc1, acc2, acc3, OW - ow0, o4, O, act, a0, a1);
}

/* The direct convolution split over its input channels, for layers with few output
 * blocks and long sums (ResNet's stride-2 layers, 1x1 layers at 7x7): slice s of S sums
 * channel blocks [s * qc / S, (s + 1) * qc / S) and stores its float32 sums in P as batch
 * items s * N .. s * N + N - 1; conv2d_sum adds the slices, the bias and the activation. */
__kernel void conv2d_split(__read_only image2d_t in, __read_only image2d_t filt,
                           __write_only image2d_t P,
                           int H, int W, int C, int OH, int OW, int O, int NOH,
                           int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw, int S)
{
    const int o4 = get_global_id(0), wb = get_global_id(1), g = get_global_id(2);
    if (o4 >= (O + 3) / 4 || 4 * wb >= OW || g >= NOH * S)
        return;
    const int s = g / NOH, nh = g - s * NOH;
    const int n = nh / OH, oh = nh - n * OH, ow0 = 4 * wb, N = NOH / OH;
    const int qc = (C + 3) / 4;
    float4 acc0 = (float4)(0.0f), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    CONV_MACS(s * qc / S, (s + 1) * qc / S)
    /* slice s is batch items s * N .. of an IN_OUT_CHANNEL image of S * N items */
    store4(P, PIXEL_IN_OUT_CHANNEL(s * N + n, oh, ow0, o4, S * N, OH, OW, O),
           acc0, acc1, acc2, acc3, OW - ow0);
}

__kernel void conv2d_sum(__read_only image2d_t P, __read_only image2d_t bias,
                         __write_only image2d_t out, int OH, int OW, int O, int NOH, int S,
                         int has_bias, int act, float a0, float a1)
{
    const int o4 = get_global_id(0), ow = get_global_id(1), nh = get_global_id(2);
    if (o4 >= (O + 3) / 4 || ow >= OW || nh >= NOH)
        return;
    const int n = nh / OH, oh = nh - n * OH, N = NOH / OH;
    const int2 xy = PIXEL_IN_OUT_CHANNEL(n, oh, ow, o4, N, OH, OW, O);
    float4 acc = has_bias ? get(bias, PIXEL_ARGUMENT(o4, O)) : (float4)(0.0f);
    for (int s = 0; s < S; ++s)
        acc += read_imagef(P, SMP, PIXEL_IN_OUT_CHANNEL(s * N + n, oh, ow, o4, S * N, OH, OW, O));
    put(out, xy, activate(acc, act, a0, a1), o4, O);
}

/* Grouped convolution (1 < groups < C): CONV2D_FILTER of (O, C / groups, KH, KW).
 * One work-item: four output channels at one output pixel; each lane reads its group's
 * input channels one by one (they need not start on a pixel boundary). */
__kernel void conv2d_grouped(__read_only image2d_t in, __read_only image2d_t filt,
                             __read_only image2d_t bias, __write_only image2d_t out,
                             int H, int W, int C, int OH, int OW, int O, int NOH,
                             int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                             int groups, int has_bias, int act, float a0, float a1)
{
    const int o4 = get_global_id(0), ow = get_global_id(1), nh = get_global_id(2);
    if (o4 >= (O + 3) / 4 || ow >= OW || nh >= NOH)
        return;
    const int n = nh / OH, oh = nh - n * OH, N = NOH / OH;
    const int cg = C / groups, og = O / groups;
    float acc[4];
    const float4 b = has_bias ? get(bias, PIXEL_ARGUMENT(o4, O)) : (float4)(0.0f);
    acc[0] = b.x; acc[1] = b.y; acc[2] = b.z; acc[3] = b.w;
    for (int k = 0; k < 4; ++k) {
        const int o = 4 * o4 + k;
        if (o >= O)
            break;
        const int c0 = (o / og) * cg;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = oh * sh - ph + kh * dh;
            if (ih < 0 || ih >= H)
                continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int iw = ow * sw - pw + kw * dw;
                if (iw < 0 || iw >= W)
                    continue;
                for (int i = 0; i < cg; ++i) {
                    const int c = c0 + i;
                    const float v = lane(get(in, PIXEL_IN_OUT_CHANNEL(n, ih, iw, c / 4, N, H, W, C)), c % 4);
                    acc[k] = mad(v, lane(get(filt, PIXEL_CONV2D_FILTER(o4, i, kh, kw, O, cg, KH, KW)), k), acc[k]);
                }
            }
        }
    }
    put(out, PIXEL_IN_OUT_CHANNEL(n, oh, ow, o4, N, OH, OW, O),
        activate((float4)(acc[0], acc[1], acc[2], acc[3]), act, a0, a1), o4, O);
}

/* Depthwise convolution (groups = C = O, multiplier 1): DW_CONV2D_FILTER of (C, 1, KH, KW).
 * One work-item: four channels at four neighbouring output columns.
 * Channel offsets: the C channels are pixels ic4 .. of the input image and oc4 .. of the
 * output image, which has OC channels (0, 0, C unless an image is split by channels). */
__kernel void dwconv2d(__read_only image2d_t in, __read_only image2d_t filt,
                       __read_only image2d_t bias, __write_only image2d_t out,
                       int H, int W, int C, int OH, int OW, int NOH,
                       int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                       int has_bias, int act, float a0, float a1, int ic4, int oc4, int OC)
{
    BLOCK4_START(c4, C)
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * sh - ph + kh * dh;
        if (ih < 0 || ih >= H)
            continue;
        for (int kw = 0; kw < KW; ++kw) {
            const float4 f = get(filt, PIXEL_DW_CONV2D_FILTER(0, c4, kh, kw, 1, C, KH, KW));
            const int4 iw = COLUMNS4(ow0 * sw - pw + kw * dw, sw);
            const int4 inside = iw >= 0 && iw < W;
#define MAC_COLUMN(acc, k) \
            if (inside.s##k) acc = mad(get(in, PIXEL_IN_OUT_CHANNEL(n, ih, iw.s##k, c4 + ic4, N, H, W, C)), f, acc);
            MAC_COLUMN(acc0, 0) MAC_COLUMN(acc1, 1) MAC_COLUMN(acc2, 2) MAC_COLUMN(acc3, 3)
#undef MAC_COLUMN
        }
    }
    put4(out, PIXEL_IN_OUT_CHANNEL(n, oh, ow0, c4 + oc4, N, OH, OW, OC), acc0, acc1, acc2, acc3,
         OW - ow0, c4 + oc4, OC, act, a0, a1);
}

/* The dot products of v (four input channels at (h, w)) with the four outputs o .. o + 3 of
 * a WEIGHT_WIDTH image of (O, C, H, W). */
inline float4 dot4(float4 v, __read_only image2d_t wt, int c4, int h, int w, int o, int O, int C,
                   int H, int W)
{
    return (float4)(dot(v, get(wt, PIXEL_WEIGHT_WIDTH(o, c4, h, w, O, C, H, W))),
                    dot(v, get(wt, PIXEL_WEIGHT_WIDTH(o + 1, c4, h, w, O, C, H, W))),
                    dot(v, get(wt, PIXEL_WEIGHT_WIDTH(o + 2, c4, h, w, O, C, H, W))),
                    dot(v, get(wt, PIXEL_WEIGHT_WIDTH(o + 3, c4, h, w, O, C, H, W))));
}

/* Fully connected: y[n, o] = sum over (c, h, w) of x[n, c, h, w] * Wt[o, c, h, w] + b[o].
 * The weight is a WEIGHT_WIDTH image, whose pixel holds the same four channels as the
 * input's pixel at (h, w): one dot product per output and input pixel.
 * One work-item: four outputs of one batch row; the output is the image of (N, 1, 1, O). */
__kernel void fully_connected(__read_only image2d_t in, __read_only image2d_t wt,
                              __read_only image2d_t bias, __write_only image2d_t out,
                              int N, int H, int W, int C, int O, int has_bias,
                              int act, float a0, float a1)
{
    const int o4 = get_global_id(0), n = get_global_id(1);
    if (o4 >= (O + 3) / 4 || n >= N)
        return;
    const int qc = (C + 3) / 4, o = 4 * o4;
    float4 acc = has_bias ? get(bias, PIXEL_ARGUMENT(o4, O)) : (float4)(0.0f);
    for (int h = 0; h < H; ++h)
        for (int w = 0; w < W; ++w)
            for (int c4 = 0; c4 < qc; ++c4)
                acc += dot4(get(in, PIXEL_IN_OUT_CHANNEL(n, h, w, c4, N, H, W, C)), wt, c4, h, w, o, O, C, H, W);
    put(out, PIXEL_IN_OUT_CHANNEL(n, 0, 0, o4, N, 1, 1, O), activate(acc, act, a0, a1), o4, O);
}

/* The same, split over the input: work-item (o4, n * S + s) sums the input pixels
 * [s * chunk, (s + 1) * chunk) of the weight's x order ((h * W + w) * q(C) + c4) into a
 * float32 image of partial sums [q(O), N * S]; fc_reduce adds the S partials, the bias
 * and the activation.  Layers with many inputs get enough work-items this way. */
__kernel void fc_partial(__read_only image2d_t in, __read_only image2d_t wt,
                         __write_only image2d_t part, int N, int H, int W, int C, int O,
                         int S, int chunk)
{
    const int o4 = get_global_id(0), ns = get_global_id(1);
    if (o4 >= (O + 3) / 4 || ns >= N * S)
        return;
    const int n = ns / S, s = ns - n * S;
    const int qc = (C + 3) / 4, o = 4 * o4;
    const int p0 = s * chunk, p1 = min(p0 + chunk, H * W * qc);
    float4 acc = (float4)(0.0f);
    for (int p = p0; p < p1; ++p) {
        const int hw = p / qc, c4 = p - hw * qc;
        const int h = hw / W, w = hw - h * W;
        acc += dot4(get(in, PIXEL_IN_OUT_CHANNEL(n, h, w, c4, N, H, W, C)), wt, c4, h, w, o, O, C, H, W);
    }
    write_imagef(part, PIXEL_IN_OUT_CHANNEL(ns, 0, 0, o4, N * S, 1, 1, O), acc);
}

__kernel void fc_reduce(__read_only image2d_t part, __read_only image2d_t bias,
                        __write_only image2d_t out, int N, int O, int S, int has_bias,
                        int act, float a0, float a1)
{
    const int o4 = get_global_id(0), n = get_global_id(1);
    if (o4 >= (O + 3) / 4 || n >= N)
        return;
    float4 acc = has_bias ? get(bias, PIXEL_ARGUMENT(o4, O)) : (float4)(0.0f);
    for (int s = 0; s < S; ++s)
        acc += get(part, PIXEL_IN_OUT_CHANNEL(n * S + s, 0, 0, o4, N * S, 1, 1, O));
    put(out, PIXEL_IN_OUT_CHANNEL(n, 0, 0, o4, N, 1, 1, O), activate(acc, act, a0, a1), o4, O);
}

/* ------------------------------------------------------------------ element-wise */
/* out = op(a, b) then the activation; op < 0: the activation of a alone.
 * a has the output's shape; b is (BN, BH, BW, BC), each 1 or the output's extent
 * (BC == 1: one value for all channels, in lane 0).  swap: op(b, a).  Channel offsets: the
 * C channels are pixels ac4 .. of a, bc4 .. of b and oc4 .. of the output, which has OC
 * channels (0, 0, 0, C unless an image is split by channels). */
#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3
#define OP_MAX 4
#define OP_MIN 5
__kernel void eltwise(__read_only image2d_t a, __read_only image2d_t b, __write_only image2d_t out,
                      int H, int W, int C, int NH, int BN, int BH, int BW, int BC,
                      int op, int swap, int act, float a0, float a1, int ac4, int bc4, int oc4,
                      int OC)
{
    const int c4 = get_global_id(0), w = get_global_id(1), nh = get_global_id(2);
    if (c4 >= (C + 3) / 4 || w >= W || nh >= NH)
        return;
    float4 v = get(a, ROW_PIXEL(nh, w, c4 + ac4, W));
    if (op >= 0) {
        const int n = nh / H, h = nh - n * H;
        const int bn = BN == 1 ? 0 : n, bh = BH == 1 ? 0 : h, bw = BW == 1 ? 0 : w;
        float4 u;
        if (BC == 1)
            u = (float4)(get(b, PIXEL_IN_OUT_CHANNEL(bn, bh, bw, 0, BN, BH, BW, 1)).x);
        else
            u = get(b, PIXEL_IN_OUT_CHANNEL(bn, bh, bw, c4 + bc4, BN, BH, BW, C));
        float4 x = swap ? u : v, y = swap ? v : u;
        switch (op) {
        case OP_ADD: v = x + y; break;
        case OP_SUB: v = x - y; break;
        case OP_MUL: v = x * y; break;
        case OP_DIV: v = x / y; break;
        case OP_MAX: v = max_nan(x, y); break;
        default: v = min_nan(x, y); break;
        }
    }
    put(out, ROW_PIXEL(nh, w, c4 + oc4, W), activate(v, act, a0, a1), c4 + oc4, OC);
}

/* ------------------------------------------------------------------ pooling */
/* Max or average pooling over windows clipped to the input; the output size (floor or
 * ceil mode) comes from the host.  Average: divided by the in-bounds count, or with
 * count_include_pad by the window's size inside the padded input.  Channel offsets ic4,
 * oc4 and the output's channel count OC as dwconv2d's. */
__kernel void pool2d(__read_only image2d_t in, __write_only image2d_t out,
                     int H, int W, int C, int OH, int OW, int NOH,
                     int KH, int KW, int sh, int sw, int pt, int pl, int pb, int pr,
                     int dh, int dw, int is_max, int count_pad, int ic4, int oc4, int OC)
{
    const int c4 = get_global_id(0), ow = get_global_id(1), nh = get_global_id(2);
    if (c4 >= (C + 3) / 4 || ow >= OW || nh >= NOH)
        return;
    const int n = nh / OH, oh = nh - n * OH, N = NOH / OH;
    float4 acc = is_max ? (float4)(-INFINITY) : (float4)(0.0f);
    int count = 0, padded = 0;
    for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * sh - pt + kh * dh;
        for (int kw = 0; kw < KW; ++kw) {
            const int iw = ow * sw - pl + kw * dw;
            if (ih >= -pt && ih < H + pb && iw >= -pl && iw < W + pr)
                ++padded;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                continue;
            const float4 v = get(in, PIXEL_IN_OUT_CHANNEL(n, ih, iw, c4 + ic4, N, H, W, C));
            acc = is_max ? max_nan(acc, v) : acc + v;
            ++count;
        }
    }
    if (!is_max)
        acc /= (float)(count_pad ? padded : count);
    put(out, PIXEL_IN_OUT_CHANNEL(n, oh, ow, c4 + oc4, N, OH, OW, OC), acc, c4 + oc4, OC);
}

/* Global average or max pooling: one work-item per (four channels, batch row).  Channel
 * offsets ic4, oc4 and the output's channel count OC as dwconv2d's. */
__kernel void global_pool(__read_only image2d_t in, __write_only image2d_t out,
                          int N, int H, int W, int C, int is_max, int ic4, int oc4, int OC)
{
    const int c4 = get_global_id(0), n = get_global_id(1);
    if (c4 >= (C + 3) / 4 || n >= N)
        return;
    float4 acc = is_max ? (float4)(-INFINITY) : (float4)(0.0f);
    for (int h = 0; h < H; ++h)
        for (int w = 0; w < W; ++w) {
            const float4 v = get(in, PIXEL_IN_OUT_CHANNEL(n, h, w, c4 + ic4, N, H, W, C));
            acc = is_max ? max_nan(acc, v) : acc + v;
        }
    if (!is_max)
        acc /= (float)(H * W);
    put(out, PIXEL_IN_OUT_CHANNEL(n, 0, 0, c4 + oc4, N, 1, 1, OC), acc, c4 + oc4, OC);
}

/* Softmax over the channels of each pixel (axis 1 of NCHW, or of a 2-D (N, C)). */
__kernel void softmax_channels(__read_only image2d_t in, __write_only image2d_t out,
                               int H, int W, int C, int NH)
{
    const int w = get_global_id(0), nh = get_global_id(1);
    if (w >= W || nh >= NH)
        return;
    const int qc = (C + 3) / 4;
    float m = -INFINITY;
    for (int c4 = 0; c4 < qc; ++c4) {
        const float4 v = get(in, ROW_PIXEL(nh, w, c4, W));
        for (int k = 0; k < 4 && 4 * c4 + k < C; ++k)
            m = fmax(m, lane(v, k));
    }
    float s = 0.0f;
    for (int c4 = 0; c4 < qc; ++c4) {
        const float4 v = get(in, ROW_PIXEL(nh, w, c4, W));
        for (int k = 0; k < 4 && 4 * c4 + k < C; ++k)
            s += exp(lane(v, k) - m);
    }
    for (int c4 = 0; c4 < qc; ++c4) {
        const float4 v = get(in, ROW_PIXEL(nh, w, c4, W));
        put(out, ROW_PIXEL(nh, w, c4, W), exp(v - (float4)(m)) / s, c4, C);
    }
}

/* ------------------------------------------------------------------ channel moves */
/* Output channel c takes channel src[c] of the sources a, b, c, d laid end to end
 * (b starts at channel S1, c at S2, d at S3).  Concat, Slice and Split along channels
 * and the channel shuffle are all this one kernel with a different table; channel
 * counts need not be multiples of 4 (each lane is picked out of its source pixel). */
inline float pick(__read_only image2d_t img, int s, int W, int w, int nh)
{
    return lane(get(img, ROW_PIXEL(nh, w, s / 4, W)), s % 4);
}

__kernel void gather_channels(__read_only image2d_t a, __read_only image2d_t b,
                              __read_only image2d_t c, __read_only image2d_t d,
                              __global const int *src, __write_only image2d_t out,
                              int W, int NH, int S1, int S2, int S3, int C)
{
    const int c4 = get_global_id(0), w = get_global_id(1), nh = get_global_id(2);
    if (c4 >= (C + 3) / 4 || w >= W || nh >= NH)
        return;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < 4; ++k) {
        const int o = 4 * c4 + k;
        if (o >= C)
            break;
        const int s = src[o];
        if (s < S1)
            v[k] = pick(a, s, W, w, nh);
        else if (s < S2)
            v[k] = pick(b, s - S1, W, w, nh);
        else if (s < S3)
            v[k] = pick(c, s - S2, W, w, nh);
        else
            v[k] = pick(d, s - S3, W, w, nh);
    }
    put(out, ROW_PIXEL(nh, w, c4, W), (float4)(v[0], v[1], v[2], v[3]), c4, C);
}

/* Resize (nearest or bilinear) with the source coordinate sy = (oy + 0.5) / scale - 0.5
 * (half_pixel) or oy / scale (asymmetric); nearest rounds down (floor) like ONNX's
 * asymmetric + floor, or to nearest with half_pixel + round_prefer_floor. */
__kernel void resize2d(__read_only image2d_t in, __write_only image2d_t out,
                       int H, int W, int C, int OH, int OW, int NOH,
                       float scale_h, float scale_w, int linear, int half_pixel)
{
    const int c4 = get_global_id(0), ow = get_global_id(1), nh = get_global_id(2);
    if (c4 >= (C + 3) / 4 || ow >= OW || nh >= NOH)
        return;
    const int n = nh / OH, oh = nh - n * OH, N = NOH / OH;
    float sy = half_pixel ? (oh + 0.5f) / scale_h - 0.5f : oh / scale_h;
    float sx = half_pixel ? (ow + 0.5f) / scale_w - 0.5f : ow / scale_w;
    float4 v;
    if (!linear) {
        int iy = half_pixel ? (int)ceil(sy - 0.5f) : (int)floor(sy);
        int ix = half_pixel ? (int)ceil(sx - 0.5f) : (int)floor(sx);
        iy = clamp(iy, 0, H - 1);
        ix = clamp(ix, 0, W - 1);
        v = get(in, PIXEL_IN_OUT_CHANNEL(n, iy, ix, c4, N, H, W, C));
    } else {
        sy = clamp(sy, 0.0f, (float)(H - 1));
        sx = clamp(sx, 0.0f, (float)(W - 1));
        const int y0 = (int)floor(sy), x0 = (int)floor(sx);
        const int y1 = min(y0 + 1, H - 1), x1 = min(x0 + 1, W - 1);
        const float fy = sy - y0, fx = sx - x0;
        const float4 p00 = get(in, PIXEL_IN_OUT_CHANNEL(n, y0, x0, c4, N, H, W, C));
        const float4 p01 = get(in, PIXEL_IN_OUT_CHANNEL(n, y0, x1, c4, N, H, W, C));
        const float4 p10 = get(in, PIXEL_IN_OUT_CHANNEL(n, y1, x0, c4, N, H, W, C));
        const float4 p11 = get(in, PIXEL_IN_OUT_CHANNEL(n, y1, x1, c4, N, H, W, C));
        v = (p00 * (1.0f - fx) + p01 * fx) * (1.0f - fy) + (p10 * (1.0f - fx) + p11 * fx) * fy;
    }
    put(out, PIXEL_IN_OUT_CHANNEL(n, oh, ow, c4, N, OH, OW, C), v, c4, C);
}

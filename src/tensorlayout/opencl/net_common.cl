/* Shared by net.cl and conv.cl: the sampler, the pixel macros, activations, and the
 * store that zeroes lanes past the channel count (and rounds to half with IMG_HALF). */

#ifndef IMG_HALF
#define IMG_HALF 0
#endif

__constant sampler_t SMP = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;

#include "half.cl"
#include "pixels.cl"

/* Activation codes, fused into the kernel that produces a tensor. */
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_CLIP 2        /* min a0, max a1 (ReLU6: 0, 6) */
#define ACT_LEAKY 3       /* alpha a0 */
#define ACT_SIGMOID 4
#define ACT_HARDSWISH 5   /* x * clamp(a0 * x + a1, 0, 1) */
#define ACT_HARDSIGMOID 6 /* clamp(a0 * x + a1, 0, 1) */
#define ACT_TANH 7

/* Max and min that keep a NaN of either operand, as ONNX's Relu, Clip, HardSigmoid, Max, Min and
 * max pooling do (and onnxruntime's Relu and Clip); OpenCL's fmax and fmin return the other one. */
inline float4 max_nan(float4 a, float4 b)
{
    return select(select(fmax(a, b), a, isnan(a)), b, isnan(b));
}
inline float4 min_nan(float4 a, float4 b)
{
    return select(select(fmin(a, b), a, isnan(a)), b, isnan(b));
}

inline float4 activate(float4 v, int act, float a0, float a1)
{
    switch (act) {
    case ACT_RELU: return max_nan(v, (float4)(0.0f));
    case ACT_CLIP: return min_nan(max_nan(v, (float4)(a0)), (float4)(a1));
    case ACT_LEAKY: return select(v * a0, v, v >= (float4)(0.0f));
    case ACT_SIGMOID: return (float4)(1.0f) / ((float4)(1.0f) + exp(-v));
    case ACT_HARDSWISH: return v * clamp(v * a0 + a1, 0.0f, 1.0f);
    case ACT_HARDSIGMOID: return min_nan(max_nan(v * a0 + a1, (float4)(0.0f)), (float4)(1.0f));
    case ACT_TANH: return tanh(v);
    default: return v;
    }
}

/* Store four channels starting at channel 4 * c4 at pixel xy; lanes at or past C become 0. */
inline void put(__write_only image2d_t img, int2 xy, float4 v, int c4, int C)
{
    const int left = C - 4 * c4;
    if (left < 4) {
        v.w = 0.0f;
        if (left < 3) v.z = 0.0f;
        if (left < 2) v.y = 0.0f;
    }
#if IMG_HALF
    v = half_rte4(v);
#endif
    write_imagef(img, xy, v);
}

inline float4 get(__read_only image2d_t img, int2 xy)
{
    return read_imagef(img, SMP, xy);
}

/* The input columns x0, x0 + step, x0 + 2 step, x0 + 3 step of four neighbouring outputs. */
#define COLUMNS4(x0, step) ((int4)(x0) + (int4)(0, 1, 2, 3) * (step))

/* The activated results of four neighbouring output columns, from pixel xy on; only the
 * `left` columns still inside the output are stored. */
/* Four neighbouring columns' float32 sums as they are (no activation, no rounding to half):
 * partial sums that a later kernel adds. */
inline void store4(__write_only image2d_t img, int2 xy, float4 v0, float4 v1, float4 v2, float4 v3,
                   int left)
{
    write_imagef(img, xy, v0);
    if (left > 1) write_imagef(img, xy + (int2)(1, 0), v1);
    if (left > 2) write_imagef(img, xy + (int2)(2, 0), v2);
    if (left > 3) write_imagef(img, xy + (int2)(3, 0), v3);
}

inline void put4(__write_only image2d_t img, int2 xy, float4 v0, float4 v1, float4 v2, float4 v3,
                 int left, int c4, int C, int act, float a0, float a1)
{
    put(img, xy, activate(v0, act, a0, a1), c4, C);
    if (left > 1) put(img, xy + (int2)(1, 0), activate(v1, act, a0, a1), c4, C);
    if (left > 2) put(img, xy + (int2)(2, 0), activate(v2, act, a0, a1), c4, C);
    if (left > 3) put(img, xy + (int2)(3, 0), activate(v3, act, a0, a1), c4, C);
}

inline float lane(float4 v, int k)
{
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}


/* Shared by the package's OpenCL sources, which pull it in with #include "half.cl"
 * (the loader inlines it, so no include path is needed at build time). */

/* float -> the nearest half value (ties to even), returned as a float.  Overflow gives
 * +-inf, tiny values become half subnormals or signed zero, inf and NaN pass through. */
inline float half_rte(float f)
{
    uint u = as_uint(f);
    uint s = u & 0x80000000u;
    uint a = u & 0x7fffffffu;
    if (a >= 0x7f800000u)
        return f;
    if (a < 0x38800000u)
        return rint(f * 0x1p24f) * 0x1p-24f;
    a += 0x00000fffu + ((a >> 13) & 1u);
    a &= 0xffffe000u;
    if (a >= 0x47800000u)
        a = 0x7f800000u;
    return as_float(s | a);
}
inline float4 half_rte4(float4 v)
{
    return (float4)(half_rte(v.x), half_rte(v.y), half_rte(v.z), half_rte(v.w));
}

/* ct_math.h - branch-free exp, tanh, sigmoid, erf and GELU that GCC vectorises,
 * and lane-split row reductions (sum, dot, max) that GCC vectorises.
 *
 * Why: without -ffast-math GCC cannot vectorise a loop that calls libm's
 * expf/tanhf/erff (they are opaque calls, and errno/rounding rules forbid
 * replacing them), nor a floating-point reduction `s += x[i]` (vectorising
 * changes the order of the additions).  The functions here are static inline
 * straight-line code (selects, no branches, no calls), so a loop calling them
 * vectorises; the reductions keep CT_LANES partial sums, a fixed order that
 * GCC maps onto vector registers.  Results are deterministic: the same on
 * every machine and for both CT_VECTOR_CLONES clones (no FMA contraction:
 * the build uses -std=c11, i.e. -ffp-contract=off).
 *
 * How to adopt (any csrc/ file; nothing else to change):
 *
 *     #include "ct_math.h"
 *     static CT_VECTOR_CLONES void FN(loop)(real *restrict y, const real *restrict x, ct_int n)
 *     {
 *         for (ct_int i = 0; i < n; i++) y[i] = VEXP(x[i]);
 *     }
 *
 * VEXP, VTANH, VSIGMOID, VERF, VGELU(_SLOPE), VGELU_TANH(_SLOPE) are type-generic (_Generic on the argument:
 * float -> the float32 version, double -> the float64 one), so one template
 * source serves both dtypes; pass a `real` (cast when the expression could
 * be promoted to double).  VSUM(x, n), VDOT(x, y, n) and VMAX(x, n) reduce a
 * float or double array into a double; VSUM_ABS(x, n) sums |x|; VMAX(x, n)
 * and VMIN(x, n) (n > 0) give the element type, NaN if any element is NaN;
 * VADD_INTO(acc, x, n) does acc[i] += x[i] (a gradient row accumulated into).
 * Helpers called from a CT_VECTOR_CLONES kernel: declare them CT_INLINE so
 * they are compiled inside each clone.  In the loop body write a select with
 * computed arms as VSELECT(cond, a, b), not `?:` (GCC may turn `?:` into a
 * branch, see ct_select_f32).  Check with `gcc -O3 -fopt-info-vec-optimized`
 * that the loop says "loop vectorized" (32-byte vectors in the AVX2 clone).
 *
 * VROW_DOTS(out, ldo, x, w, bias, K, R) gives R dot products against one
 * shared row w in the element type (decoding's few-row Linear);
 * VROW_DOTS_GRID(out, ldo, x, w, bias, K, R, C) those of R rows against C rows.
 *
 * This header is the one home of these functions in csrc/: no kernel file
 * defines its own exp, tanh, sigmoid, erf, GELU or lane-split sum.
 *
 * Accuracy contracts: written above each function, as the max error in ulp
 * of the result's dtype against a float64 (mpmath for float64) reference
 * over dense sweeps incl. subnormals (measured; tests/test_ct_math.py and
 * tests/test_one_home.py assert them through the kernels).  A correctly
 * rounded result scores <= 0.5 on this scale.  NaN -> NaN everywhere. */
#ifndef CT_MATH_H
#define CT_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- bit casts (memcpy: defined behaviour, compiles to nothing) ---- */
static inline uint32_t ct_bits_f32(float x) { uint32_t u; memcpy(&u, &x, sizeof u); return u; }
static inline float ct_from_bits_f32(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }
static inline uint64_t ct_bits_f64(double x) { uint64_t u; memcpy(&u, &x, sizeof u); return u; }
static inline double ct_from_bits_f64(uint64_t u) { double x; memcpy(&x, &u, sizeof x); return x; }

/* cond ? a : b as a bit blend.  A plain `?:` whose arm is computed (a
 * product, a division) may trap under GCC's default -ftrapping-math, so
 * GCC sinks the computation into a branch and the loop no longer
 * vectorises; the blend keeps both arms unconditional. */
static inline float ct_select_f32(int cond, float a, float b)
{
    uint32_t mask = -(uint32_t)(cond != 0);
    return ct_from_bits_f32((ct_bits_f32(a) & mask) | (ct_bits_f32(b) & ~mask));
}
static inline double ct_select_f64(int cond, double a, double b)
{
    uint64_t mask = -(uint64_t)(cond != 0);
    return ct_from_bits_f64((ct_bits_f64(a) & mask) | (ct_bits_f64(b) & ~mask));
}

/* ======================= exp ======================================== *
 * exp(x) = 2^k exp(r),  k = rint(x / ln2),  r = x - k ln2 in [-ln2/2, ln2/2]
 * (Cody-Waite: ln2 = hi + lo with hi's low bits zero, so k * hi is exact).
 * rint is the add-and-subtract trick with 1.5 * 2^(mantissa bits), which
 * also leaves k in the low bits of the sum.  2^k is built from exponent
 * bits as 2^k1 * 2^k2 with k1 = rint(k / 2), so both factors are normal
 * numbers even when the result is subnormal or k = 128 / 1024 (the last
 * multiply then rounds once, or overflows to inf, as it should).  x is
 * clamped first so k stays in range; out-of-range x is fixed by a final
 * select.  NaN passes the clamps (comparisons with NaN are false) and
 * propagates through the arithmetic.
 * Contract: ct_expf <= 0.94 ulp (subnormal results rounded once), ct_exp
 * <= 1.0 ulp; exp(-inf) = 0 exactly, exp(+inf) = +inf, overflow -> +inf,
 * underflow -> 0 (never a clamped tiny value), exp(NaN) = NaN. */

#define CT_EXPF_BIG 89.0f      /* > ln(FLT_MAX) = 88.72: result +inf */
#define CT_EXPF_SMALL -104.0f  /* < ln(2^-150) = -103.97: result 0 */
#define CT_ROUND_F32 0x1.8p23f /* 1.5 * 2^23 */

/* Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2 (ln2 = 0.693359375 -
 * 2.12194440e-4, Cephes), and exp(r) = 1 + r + r^2 P(r) with Cephes expf's
 * minimax P; returns exp(r) and k (in *kf).  Shared by ct_expf and
 * ct_expf_nonpositive (|x| <= 104 here, so k fits the rounding trick). */
static inline float ct_expf_reduced(float x, float *kf)
{
    float k = (x * 1.44269504088896341f + CT_ROUND_F32) - CT_ROUND_F32;
    float r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    *kf = k;
    return p * (r * r) + r + 1.0f;
}

/* 2^k for an integer k in [-126, 127] held in a float, from the exponent
 * field (bias 127).  k is read from the low mantissa bits of k + 1.5 * 2^23
 * in unsigned arithmetic: a float to int conversion would be undefined for
 * NaN (whose scale factor is then garbage, but the caller's result is NaN). */
static inline float ct_pow2f(float k)
{
    return ct_from_bits_f32((ct_bits_f32(k + CT_ROUND_F32) - ct_bits_f32(CT_ROUND_F32) + 127u) << 23);
}

/* Out-of-range lanes (x > BIG, x < SMALL, -inf) compute exp(0) and are
 * replaced at the end: clamping them to SMALL instead would build a subnormal
 * 2^k product that is thrown away, and on Intel cores every vector holding a
 * subnormal result takes a microcode assist (a masked attention row of -inf
 * ran 8x slower than a finite one).  NaN fails both tests and propagates. */
static inline float ct_expf(float x)
{
    float xc = ct_select_f32((x > CT_EXPF_BIG) | (x < CT_EXPF_SMALL), 0.0f, x);
    float kf;
    float er = ct_expf_reduced(xc, &kf);
    float k1f = (kf * 0.5f + CT_ROUND_F32) - CT_ROUND_F32;
    float y = er * ct_pow2f(k1f) * ct_pow2f(kf - k1f);
    y = ct_select_f32(x > CT_EXPF_BIG, INFINITY, y);
    y = ct_select_f32(x < CT_EXPF_SMALL, 0.0f, y);
    return y;
}

/* The fast variant, for x <= 0 (callers pass -|a|): one clamp and one scale
 * factor where ct_expf needs two of each (for subnormal results and k = 128).
 * Used where exp is the hot loop's cost: the recurrent gates and tanh.
 * Contract: for ln(FLT_MIN) = -87.34 <= x <= 0, ct_expf's reduction and
 * polynomial, so the same <= 0.94 ulp (last binade: subnormal, rounded
 * once); x < -87.34 -> 0 exactly (no smaller subnormals), exp(-inf) = 0,
 * NaN -> NaN.  x > 0 is outside its domain. */
#define CT_EXPF_NORMAL_MIN -87.3365448f /* ln(FLT_MIN) */
static inline float ct_expf_nonpositive(float x)
{
    float xc = ct_select_f32(x < CT_EXPF_NORMAL_MIN, 0.0f, x);
    float kf;
    float er = ct_expf_reduced(xc, &kf);
    return ct_select_f32(x < CT_EXPF_NORMAL_MIN, 0.0f, er * ct_pow2f(kf));
}

#define CT_EXP_BIG 710.0       /* > ln(DBL_MAX) = 709.78: result +inf */
#define CT_EXP_SMALL -746.0    /* < ln(2^-1075) = -745.13: result 0 */
#define CT_ROUND_F64 0x1.8p52  /* 1.5 * 2^52 */

/* Integer k (|k| < 2^51) held in a double, to int64 without cvttpd2qq
 * (AVX-512 only): the low mantissa bits of k + 1.5 * 2^52 are k. */
static inline int64_t ct_f64_to_i64(double k)
{
    return (int64_t)(ct_bits_f64(k + CT_ROUND_F64) - ct_bits_f64(CT_ROUND_F64));
}

static inline double ct_exp(double x)
{
    /* out-of-range lanes compute exp(0), replaced below (see ct_expf) */
    double xc = ct_select_f64((x > CT_EXP_BIG) | (x < CT_EXP_SMALL), 0.0, x);
    double kf = (xc * 1.44269504088896338700e+00 + CT_ROUND_F64) - CT_ROUND_F64;
    double k1f = (kf * 0.5 + CT_ROUND_F64) - CT_ROUND_F64;
    double k2f = kf - k1f;
    /* fdlibm e_exp.c: r = hi - lo, hi = x - k ln2_hi (exact), lo = k ln2_lo,
     * exp(r) = 1 - ((lo - r c / (2 - c)) - hi), c = r - r^2 P(r^2) (Remez,
     * |error| < 2^-59).  Copyright (C) 1993 Sun Microsystems; permission to
     * use, copy, modify and distribute is granted provided this notice is
     * preserved. */
    double hi = xc - kf * 6.93147180369123816490e-01;
    double lo = kf * 1.90821492927058770002e-10;
    double r = hi - lo;
    double t = r * r;
    double c = r - t * (1.66666666666666019037e-01 +
                        t * (-2.77777777770155933842e-03 +
                             t * (6.61375632143793436117e-05 +
                                  t * (-1.65339022054652515390e-06 + t * 4.13813679705723846039e-08))));
    double er = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    double s1 = ct_from_bits_f64((uint64_t)(ct_f64_to_i64(k1f) + 1023) << 52);
    double s2 = ct_from_bits_f64((uint64_t)(ct_f64_to_i64(k2f) + 1023) << 52);
    double y = er * s1 * s2;
    y = ct_select_f64(x > CT_EXP_BIG, INFINITY, y);
    y = ct_select_f64(x < CT_EXP_SMALL, 0.0, y);
    return y;
}

/* ======================= tanh ======================================= *
 * |x| < 0.625: odd polynomial/rational in x (no cancellation near 0);
 * otherwise tanh|x| = (1 - e) / (1 + e) with e = exp(-2|x|) <= 0.29 (no
 * cancellation; float32 takes the fast ct_expf_nonpositive, whose flush to 0
 * below 2^-126 only happens where tanh rounds to 1), double 1 - 2 / (exp(2|x|)
 * + 1), exp overflowing to inf giving exactly 1.  Both are computed and one is
 * selected, for |x|; the sign is copied from x at the end (tanh(-0) = -0).  Coefficients:
 * Cephes tanhf / tanh (Stephen L. Moshier).
 * Contract: ct_tanhf <= 1.5 ulp (1.47 measured), ct_tanh <= 1.0 ulp (relative,
 * also near 0);
 * tanh(+-inf) = +-1 exactly, tanh(-0) = -0, tanh(NaN) = NaN. */
static inline float ct_tanhf(float x)
{
    float ax = fabsf(x);
    float z = ax * ax;
    float small = -5.70498872745e-3f;
    small = small * z + 2.06390887954e-2f;
    small = small * z - 5.37397155531e-2f;
    small = small * z + 1.33314422036e-1f;
    small = small * z - 3.33332819422e-1f;
    small = small * z * ax + ax;
    float e = ct_expf_nonpositive(-2.0f * ax); /* <= 0.29; 0 for |x| > 43.7, where tanh = 1 */
    float big = (1.0f - e) / (1.0f + e);
    return copysignf(ct_select_f32(ax < 0.625f, small, big), x);
}

static inline double ct_tanh(double x)
{
    double ax = fabs(x);
    double z = ax * ax;
    double num = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3;
    double den = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3;
    double small = ax + ax * z * (num / den);
    double big = 1.0 - 2.0 / (ct_exp(2.0 * ax) + 1.0);
    return copysign(ct_select_f64(ax < 0.625, small, big), x);
}

/* ======================= sigmoid ==================================== *
 * With e = exp(-|x|) in (0, 1]:  sigmoid(x) = 1 / (1 + e) for x >= 0 and
 * e / (1 + e) for x < 0.  No overflow, no cancellation, and the negative
 * tail keeps full relative accuracy down to subnormals (sigmoid(-100) is
 * 3.7e-44, not 0).
 * Contract: ct_sigmoidf <= 2.3 ulp (also in the far tails), ct_sigmoid
 * <= 2.0 ulp; sigmoid(-inf) = 0, sigmoid(+inf) = 1 exactly, NaN -> NaN. */
static inline float ct_sigmoidf(float x)
{
    float e = ct_expf(-fabsf(x));
    return ct_select_f32(x >= 0.0f, 1.0f, e) / (1.0f + e);
}

static inline double ct_sigmoid(double x)
{
    double e = ct_exp(-fabs(x));
    return ct_select_f64(x >= 0.0, 1.0, e) / (1.0 + e);
}

/* The fast variant (float32): ct_sigmoidf on ct_expf_nonpositive, for the
 * recurrent gates, where sigmoid is the step's elementwise cost.
 * Contract: <= 2.3 ulp where sigmoid(x) >= FLT_MIN (x >= -87.34), exactly 0
 * below (ct_sigmoidf keeps the subnormal tail); sigmoid(-inf) = 0,
 * sigmoid(+inf) = 1 exactly, NaN -> NaN.  Float64 uses ct_sigmoid. */
static inline float ct_sigmoidf_fast(float x)
{
    float e = ct_expf_nonpositive(-fabsf(x));
    return ct_select_f32(x >= 0.0f, 1.0f, e) / (1.0f + e);
}

/* ======================= erf (float32) ============================== *
 * |x| < 0.921875:  erf(x) = x + x * P(x^2)         (P(0) = 2/sqrt(pi) - 1)
 * |x| >= 0.921875: erf|x| = 1 - exp(Q(|x|) - x^2),  Q ~ log(erfc(t)) + t^2
 * |x| > 3.95 rounds to 1 (erfc(3.95) < 2^-26).  P (degree 6) and Q (degree
 * 7) are our own weighted least-squares / minimax fits in float64 to
 * mpmath's erf (relative error of erf for P; absolute error of erfc for Q),
 * about 1 ulp each in float32 arithmetic.  Float64 uses libm's erf
 * (accuracy first; VERF picks it).
 * Contract: ct_erff <= 1.1 ulp; erf(+-inf) = +-1, erf(-0) = -0, NaN -> NaN. */
static inline float ct_erff(float x)
{
    float ax = fabsf(x);
    float z = x * x;
    float p = 8.37009900116481e-05f;
    p = p * z - 8.14270389259672e-04f;
    p = p * z + 5.201032246071893e-03f;
    p = p * z - 2.6859398235933474e-02f;
    p = p * z + 1.128369549323795e-01f;
    p = p * z - 3.7612633735016665e-01f;
    p = p * z + 1.2837916663740656e-01f;
    float small = x + x * p;
    float t = ct_select_f32(ax > 3.95f, 3.95f, ax); /* NaN stays NaN */
    float q = -2.118421098584733e-05f;
    q = q * t + 4.3547748453809376e-04f;
    q = q * t - 4.175899800452354e-03f;
    q = q * t + 2.5131944731703937e-02f;
    q = q * t - 1.0829909827718576e-01f;
    q = q * t + 3.6667004455230257e-01f;
    q = q * t - 1.1295231556902507e+00f;
    q = q * t + 1.7636132878951857e-04f;
    float big = copysignf(ct_select_f32(ax > 3.95f, 1.0f, 1.0f - ct_expf(q - t * t)), x);
    return ct_select_f32(ax < 0.921875f, small, big);
}

/* Row helpers called from a CT_VECTOR_CLONES kernel must be inlined into
 * it to be compiled (and vectorised) for each clone: mark them CT_INLINE. */
#define CT_INLINE static inline __attribute__((always_inline))

/* ======================= type-generic names ========================= */
#define VEXP(x) _Generic((x), float: ct_expf, double: ct_exp)(x)
/* exp of x <= 0 (a value minus its row's maximum): float32 takes ct_expf_nonpositive, whose results
 * below FLT_MIN are 0 where ct_expf's are subnormal.  A softmax flushes those weights to 0 anyway
 * (normal_or_zero, softmax.c), and in a sum of a row's exps, which holds the maximum's exp(0) = 1,
 * they add under D * 1.2e-38.  float64: ct_exp.  For x > 0 the value is unspecified. */
#define VEXP_NONPOSITIVE(x) _Generic((x), float: ct_expf_nonpositive, double: ct_exp)(x)
#define VTANH(x) _Generic((x), float: ct_tanhf, double: ct_tanh)(x)
#define VSIGMOID(x) _Generic((x), float: ct_sigmoidf, double: ct_sigmoid)(x)
#define VSIGMOID_FAST(x) _Generic((x), float: ct_sigmoidf_fast, double: ct_sigmoid)(x)
#define VERF(x) _Generic((x), float: ct_erff, double: erf)(x)
#define VGELU(x) _Generic((x), float: ct_gelu_f32, double: ct_gelu_f64)(x)
#define VGELU_SLOPE(x) _Generic((x), float: ct_gelu_slope_f32, double: ct_gelu_slope_f64)(x)
#define VGELU_TANH(x) _Generic((x), float: ct_gelu_tanh_f32, double: ct_gelu_tanh_f64)(x)
#define VGELU_TANH_SLOPE(x) _Generic((x), float: ct_gelu_tanh_slope_f32, double: ct_gelu_tanh_slope_f64)(x)
/* cond ? a : b without a branch (see ct_select_f32); a and b of one type */
#define VSELECT(cond, a, b) _Generic((a), float: ct_select_f32, double: ct_select_f64)((cond), (a), (b))

/* ======================= GELU ======================================= *
 * gelu(x)  = x Phi(x) = x/2 (1 + erf(x / sqrt 2))      (torch's default)
 * gelu'(x) = Phi(x) + x phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
 * gelu_tanh(x)  = x/2 (1 + t),  t = tanh(u),  u = sqrt(2/pi) (x + 0.044715 x^3)
 *                 (torch's approximate='tanh')
 * gelu_tanh'(x) = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * Written once for both dtypes on VERF / VEXP / VTANH; nn.GELU's kernel
 * (activation.c) and the feed-forward's bias_act (fused.c) both call these,
 * so they agree bit for bit.
 * Contract (float32, 200,001 points over [-10, 10]; float64 likewise in its
 * ulp): gelu <= 3 ulp for x >= 0; for x < 0, 1 + erf(x / sqrt 2) cancels
 * (torch's formula too), so the bound is |x| 2^-24 + 3 ulp.  gelu(+inf) =
 * +inf, gelu(-inf) = NaN (-inf * 0, as the formula), gelu(-0) = -0; the
 * slopes are NaN at +-inf; NaN -> NaN. */
#define CT_SQRT1_2 0.70710678118654752440      /* 1 / sqrt(2) */
#define CT_INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi), the N(0,1) density at 0 */
#define CT_SQRT_2_PI 0.79788456080286535588    /* sqrt(2 / pi) */
#define CT_GELU_CUBIC 0.044715                 /* cubic coefficient of the tanh approximation */

#define CT_DEFINE_GELU(type, sfx)                                                           \
    static inline type ct_gelu_##sfx(type x)                                                \
    {                                                                                       \
        return (type)0.5 * x * (1 + VERF(x * (type)CT_SQRT1_2));                            \
    }                                                                                       \
    static inline type ct_gelu_slope_##sfx(type x)                                          \
    {                                                                                       \
        type cdf = (type)0.5 * (1 + VERF(x * (type)CT_SQRT1_2));                            \
        type pdf = (type)CT_INV_SQRT_2PI * VEXP((type)-0.5 * x * x);                        \
        return cdf + x * pdf;                                                               \
    }                                                                                       \
    static inline type ct_gelu_tanh_##sfx(type x)                                           \
    {                                                                                       \
        type u = (type)CT_SQRT_2_PI * (x + (type)CT_GELU_CUBIC * x * x * x);                \
        return (type)0.5 * x * (1 + VTANH(u));                                              \
    }                                                                                       \
    static inline type ct_gelu_tanh_slope_##sfx(type x)                                     \
    {                                                                                       \
        type u = (type)CT_SQRT_2_PI * (x + (type)CT_GELU_CUBIC * x * x * x);                \
        type t = VTANH(u);                                                                  \
        type du_dx = (type)CT_SQRT_2_PI * (1 + 3 * (type)CT_GELU_CUBIC * x * x);            \
        return (type)0.5 * (1 + t) + (type)0.5 * x * (1 - t * t) * du_dx;                   \
    }
CT_DEFINE_GELU(float, f32)
CT_DEFINE_GELU(double, f64)
#undef CT_DEFINE_GELU

/* ======================= a double as two reals ======================= *
 * ct_split_of_f32(d): hi = (float)d, lo = (float)(d - hi) (lo = 0 when d is
 * not finite, so that x - d keeps its +-inf or NaN), hi + lo = d to ~2^-48.
 * A float row minus a double statistic (a mean, a log-sum-exp), x - d, is
 * then taken as (x - hi) - lo in float lanes: x - hi is exact where x and hi
 * are within a factor 2 (Sterbenz: a row far from 0), else rounded once, so
 * the result is within 1 ulp of (float)(x - d), where (x - (float)d) alone
 * would be off by up to half an ulp of d.  ct_split_of_f64: hi = d, lo = 0
 * (the same operations as x - d).  layernorm.c and crossentropy.c. */
typedef struct {
    float hi, lo;
} ct_split_f32;
typedef struct {
    double hi, lo;
} ct_split_f64;

static inline ct_split_f32 ct_split_of_f32(double d)
{
    ct_split_f32 s;
    s.hi = (float)d;
    s.lo = isfinite(d) ? (float)(d - (double)s.hi) : 0.0f;
    return s;
}

static inline ct_split_f64 ct_split_of_f64(double d)
{
    ct_split_f64 s = {d, 0.0};
    return s;
}

/* ======================= row reductions ============================= *
 * CT_LANES independent partial results, combined at the end in a fixed
 * order: GCC turns the lane loop into vector operations (it may not
 * reorder a plain `s += x[i]`), and the result is the same on every
 * machine and clone.  Sums accumulate in double for both dtypes. */
#define CT_LANES 8

/* CT_LANE_SUM(result, n, i, term): result (a double) = the sum over
 * i = 0 .. n-1 of term (an expression of the index i, converted to double),
 * added as CT_LANES partial sums (lane k takes i = k mod CT_LANES), the
 * lanes combined in order, then the tail (the last n mod CT_LANES terms) in
 * order.  The one lane-split sum of csrc/: VSUM, VDOT and VSUM_ABS are
 * written with it; the layer-norm moments and gradient sums (layernorm.c)
 * spell the same order out with explicit lane vectors, to sum two rows (or
 * two sums of a row) in one loop, and give its bits. */
#define CT_LANE_SUM(result, n, i, term)                                                     \
    do {                                                                                    \
        double lane_[CT_LANES] = {0}, sum_ = 0;                                             \
        ptrdiff_t n_ = (n), full_ = n_ / CT_LANES * CT_LANES;                               \
        for (ptrdiff_t base_ = 0; base_ < full_; base_ += CT_LANES)                         \
            for (int k_ = 0; k_ < CT_LANES; k_++) {                                         \
                ptrdiff_t i = base_ + k_;                                                   \
                lane_[k_] += (double)(term);                                                \
            }                                                                               \
        for (int k_ = 0; k_ < CT_LANES; k_++) sum_ += lane_[k_];                            \
        for (ptrdiff_t i = full_; i < n_; i++) sum_ += (double)(term);                      \
        (result) = sum_;                                                                    \
    } while (0)

/* ct_<name>(x, n): the extremum of x (n > 0) by `better` (> for max, < for
 * min), NaN if any x[i] is NaN.
 * Compared as integers: an IEEE float's bits b, read as a signed integer
 * and turned into key = b ^ ((b >> (bits - 1)) & magnitude_mask) (the
 * magnitude bits of a negative number flipped), order exactly as the
 * numbers do, -inf lowest, and -0 just below +0.  The extremum of integers
 * is one vector max/min per element on every clone (GCC does not vectorise
 * a float max that must keep NaNs without -ffast-math: written with float
 * compares this loop ran one element at a time), and it is exact, so the
 * order of the lanes does not matter.  NaNs are counted apart, with an
 * integer test of their bits.  The key is its own inverse. */
#define CT_DEFINE_EXTREMUM(type, itype, name, better, start)                                \
    static inline type ct_##name(const type *restrict x, ptrdiff_t n)                       \
    {                                                                                       \
        typedef itype __attribute__((may_alias)) bits_t;                                    \
        const itype sign_shift = (itype)(8 * sizeof(itype) - 1);                            \
        const itype magnitude = (itype)(((u##itype)1 << sign_shift) - 1);                   \
        const itype inf_bits = CT_INF_BITS(type);                                           \
        const bits_t *bits = (const bits_t *)x;                                             \
        itype best = start, nan = 0;                                                        \
        for (ptrdiff_t i = 0; i < n; i++) {                                                 \
            itype b = bits[i], key = b ^ ((b >> sign_shift) & magnitude);                   \
            best = key better best ? key : best;                                            \
            nan |= (b & magnitude) > inf_bits;                                              \
        }                                                                                   \
        if (nan) return (type)NAN;                                                          \
        itype b = best ^ ((best >> sign_shift) & magnitude);                                \
        type m;                                                                             \
        memcpy(&m, &b, sizeof m);                                                           \
        return m;                                                                           \
    }
/* the bits of +inf: a larger magnitude is a NaN */
#define CT_INF_BITS(type) (sizeof(type) == 4 ? (int64_t)0x7F800000 : (int64_t)0x7FF0000000000000)

#define CT_ZERO_TEST_BLOCK 64 /* elements per early-exit test of ct_all_zero */
#define CT_DEFINE_REDUCTIONS(type, itype, sfx)                                                     \
    /* sum_i x[i] */                                                                        \
    static inline double ct_sum_##sfx(const type *restrict x, ptrdiff_t n)                  \
    {                                                                                       \
        double s;                                                                           \
        CT_LANE_SUM(s, n, i, x[i]);                                                         \
        return s;                                                                           \
    }                                                                                       \
    /* sum_i |x[i]| */                                                                      \
    static inline double ct_sum_abs_##sfx(const type *restrict x, ptrdiff_t n)              \
    {                                                                                       \
        double s;                                                                           \
        CT_LANE_SUM(s, n, i, fabs((double)x[i]));                                           \
        return s;                                                                           \
    }                                                                                       \
    /* acc[i] += x[i] (a gradient row accumulated into; no double) */                       \
    static inline void ct_add_into_##sfx(type *restrict acc, const type *restrict x, ptrdiff_t n) \
    {                                                                                       \
        for (ptrdiff_t i = 0; i < n; i++) acc[i] += x[i];                                   \
    }                                                                                       \
    /* sum_i x[i] * y[i] */                                                                 \
    static inline double ct_dot_##sfx(const type *restrict x, const type *restrict y,       \
                                      ptrdiff_t n)                                          \
    {                                                                                       \
        double s;                                                                           \
        CT_LANE_SUM(s, n, i, (double)x[i] * (double)y[i]);                                  \
        return s;                                                                           \
    }                                                                                       \
    /* whether every x[i] == 0 (+0 or -0): one vector loop per block of                     \
     * CT_ZERO_TEST_BLOCK, exiting at the first block that is not (a live row is             \
     * usually decided by its first block) */                                               \
    static inline int ct_all_zero_##sfx(const type *restrict x, ptrdiff_t n)                \
    {                                                                                       \
        for (ptrdiff_t i0 = 0; i0 < n; i0 += CT_ZERO_TEST_BLOCK) {                          \
            ptrdiff_t i1 = i0 + CT_ZERO_TEST_BLOCK < n ? i0 + CT_ZERO_TEST_BLOCK : n;         \
            int nonzero = 0;                                                                \
            for (ptrdiff_t i = i0; i < i1; i++) nonzero |= x[i] != 0;                         \
            if (nonzero) return 0;                                                          \
        }                                                                                   \
        return 1;                                                                           \
    }                                                                                       \
    /* whether no x[i] is inf or NaN (x - x is 0 exactly for the finite ones) */            \
    static inline int ct_all_finite_##sfx(const type *restrict x, ptrdiff_t n)              \
    {                                                                                       \
        int bad = 0;                                                                        \
        for (ptrdiff_t i = 0; i < n; i++) bad |= !(x[i] - x[i] == 0);                        \
        return !bad;                                                                        \
    }                                                                                       \
    /* whether the (rows, cols) block at x, row stride ld, is free of inf and NaN: an       \
     * element's exponent bits all set, tested as integers a 32-byte vector at a time, the   \
     * flags OR-ed over the whole block and read once (a test per row, or sums of x * 0     \
     * through a stack array, cost more than the loads on rows of a few dozen elements) */  \
    static inline int ct_all_finite_rows_##sfx(const type *restrict x, ptrdiff_t ld,         \
                                               ptrdiff_t rows, ptrdiff_t cols)               \
    {                                                                                       \
        typedef u##itype bits_v __attribute__((vector_size(32)));                           \
        enum { lanes_ = 32 / sizeof(type) };                                                \
        const u##itype expo = (u##itype)CT_INF_BITS(type);                                  \
        ptrdiff_t full = cols / lanes_ * lanes_;                                            \
        bits_v bad = {0};                                                                   \
        u##itype bad_tail = 0;                                                              \
        for (ptrdiff_t r = 0; r < rows; r++) {                                              \
            const type *row = x + r * ld;                                                   \
            for (ptrdiff_t c = 0; c < full; c += lanes_) {                                  \
                bits_v b;                                                                   \
                memcpy(&b, row + c, sizeof b);                                              \
                bad |= (bits_v)((b & expo) == expo);                                        \
            }                                                                               \
            for (ptrdiff_t c = full; c < cols; c++) {                                       \
                u##itype b;                                                                 \
                memcpy(&b, row + c, sizeof b);                                              \
                bad_tail |= (b & expo) == expo;                                             \
            }                                                                               \
        }                                                                                   \
        for (int l = 0; l < lanes_; l++) bad_tail |= bad[l];                                \
        return bad_tail == 0;                                                               \
    }                                                                                       \
    /* max_i x[i] and min_i x[i] (n > 0), NaN if any x[i] is NaN */                        \
    CT_DEFINE_EXTREMUM(type, itype, max_##sfx, >, itype##_MIN_KEY)                          \
    CT_DEFINE_EXTREMUM(type, itype, min_##sfx, <, itype##_MAX_KEY)

#define int32_t_MIN_KEY INT32_MIN
#define int32_t_MAX_KEY INT32_MAX
#define int64_t_MIN_KEY INT64_MIN
#define int64_t_MAX_KEY INT64_MAX
CT_DEFINE_REDUCTIONS(float, int32_t, f32)
CT_DEFINE_REDUCTIONS(double, int64_t, f64)
#undef CT_DEFINE_REDUCTIONS
#undef CT_DEFINE_EXTREMUM
#undef CT_INF_BITS
#undef int32_t_MIN_KEY
#undef int32_t_MAX_KEY
#undef int64_t_MIN_KEY
#undef int64_t_MAX_KEY

/* ======================= dot products against one shared row =========== *
 * ct_row_dots_<sfx>(out, ldo, x, w, bias, K, R): for the R rows of x (row i
 * at x + i K; R <= CT_ROW_DOTS_MAX, a constant where it is inlined)
 *     out[i * ldo] = x_i . w + bias        (bias: NULL or one number)
 * reading w once for all R rows: decoding's few-row Linear (decode.c), where
 * the time is that read.  The sibling of CT_LANE_SUM for products: its sums
 * stay in the element type, in the L lanes of a 64-byte vector (L = 16
 * floats, 8 doubles), where VDOT's double lanes took 1.6-6x the time on
 * 2048 x 512 .. 8000 x 512 (2-core Xeon, 1 thread).
 * Order: lane l takes k = l mod L over the whole vectors (FMA where the
 * calling clone has it, CT_FMA_CLONES), the lanes are added as a tree (lane
 * l + width onto lane l, width = L / 2, ..., 1), then the last K mod L
 * terms in order, then the bias.  So an output
 * has the same bits whatever R or the rows beside it.
 * ct_row_dots_grid_<sfx>(out, ldo, x, w, bias, K, R, C) does the same for C
 * (<= CT_ROW_DOTS_COLS) consecutive rows of w at once, out[i * ldo + j], bias
 * NULL or C numbers: R x C sums in registers, the same bits per output.
 * The trees of several outputs run together (ct_lanes_reduce: shuffles
 * that add the same pairs of lanes for L outputs at a time): with a tree
 * per output, 9-24 rows against 512 x 512 ran at 55-60 GFLOP/s on one
 * core of the 2-core Xeon, with the shared trees at 77-110.
 * w is prefetched CT_ROW_DOTS_PREFETCH elements (8 KB of floats) ahead, past
 * its end into the next rows of a weight matrix and into the next matrix of a
 * decoding step (C rows: the next C rows): without it the loads of w stalled
 * the FMAs (perf) and 2-8 rows took 1.6-2x the time.  The distance was 2 KB;
 * on the 2-core AMD EPYC (Zen 4) a d512 decoding step (19 projections, one
 * C call) then took 2.46-2.93 ms, 1.24-1.27x one GEMV over as many bytes in
 * 9 of 10 runs at 1 thread; at 8 KB 1.90-2.26 ms, 0.84-1.10x (2 threads:
 * 1.35-1.39 ms, 0.97-1.02x, against 1.62-1.72 ms, 1.09-1.18x).  4 KB was no
 * better than 2 KB, 16 KB in between (bench/decode_breakdown.py's step and
 * floor, builds alternated).
 * Accuracy: |error| <= (K / L + log2 L + K mod L + 1) eps (sum_k |x_k w_k|
 * + |bias|), eps of the dtype; tests/test_transformer_kv_cache.py checks
 * (K + 2) eps. */
#define CT_ROW_DOTS_MAX 8
#define CT_ROW_DOTS_PREFETCH 2048 /* elements: 8 KB of floats (see above) */
#define CT_ROW_DOTS_COLS 4
#define CT_DEFINE_ROW_VECS(type, sfx)                                                          \
    typedef type ct_row_vec_##sfx __attribute__((vector_size(64)));                           \
    typedef type ct_row_half_##sfx __attribute__((vector_size(32)));                          \
    typedef type ct_row_quarter_##sfx __attribute__((vector_size(16)));                       \
    /* the lanes of v added as the tree above (as halves while they are vectors) */            \
    CT_INLINE type ct_lane_tree_##sfx(ct_row_vec_##sfx v)                                     \
    {                                                                                          \
        ct_row_half_##sfx lo, hi;                                                              \
        memcpy(&lo, &v, sizeof lo);                                                            \
        memcpy(&hi, (const char *)&v + sizeof lo, sizeof hi);                                 \
        lo += hi;                                                                              \
        ct_row_quarter_##sfx lo2, hi2;                                                         \
        memcpy(&lo2, &lo, sizeof lo2);                                                         \
        memcpy(&hi2, (const char *)&lo + sizeof lo2, sizeof hi2);                             \
        lo2 += hi2;                                                                            \
        type lanes[sizeof lo2 / sizeof(type)]; /* 4 floats or 2 doubles */                     \
        memcpy(lanes, &lo2, sizeof lanes);                                                     \
        for (int width = (int)(sizeof lanes / sizeof(type)) / 2; width >= 1; width /= 2)      \
            for (int l = 0; l < width; l++) lanes[l] += lanes[l + width];                      \
        return lanes[0];                                                                       \
    }
CT_DEFINE_ROW_VECS(float, f32)
CT_DEFINE_ROW_VECS(double, f64)
#undef CT_DEFINE_ROW_VECS

/* ct_lanes_reduce_<sfx>(v, n, sums): the lane trees of v[0 .. n-1] (n <= L),
 * sums[i] = ct_lane_tree(v[i]) to the bit, for L vectors at the price of a
 * few: each level adds the two halves of every group of lanes for two
 * vectors at once (the shuffles pick the halves), so after log2 L levels
 * one vector holds the L sums in order.  The same additions as the tree
 * (lane l + width onto lane l), so the same bits.  Padded with zero vectors. */
typedef int32_t ct_row_idx_f32 __attribute__((vector_size(64)));
typedef int64_t ct_row_idx_f64 __attribute__((vector_size(64)));
#define CT_HALVES_ADD(u, v, lo, hi) (__builtin_shuffle((u), (v), (lo)) + __builtin_shuffle((u), (v), (hi)))
CT_INLINE void ct_lanes_reduce_f32(const ct_row_vec_f32 *v, int n, float *sums)
{
    const ct_row_idx_f32 lo8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const ct_row_idx_f32 lo4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    const ct_row_idx_f32 lo2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
    const ct_row_idx_f32 lo1 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    ct_row_vec_f32 a[16], b[8], c[4], d[2], out;
    for (int i = 0; i < 16; i++) a[i] = i < n ? v[i] : (ct_row_vec_f32){0};
    for (int i = 0; i < 8; i++) b[i] = CT_HALVES_ADD(a[2 * i], a[2 * i + 1], lo8, lo8 + 8);
    for (int i = 0; i < 4; i++) c[i] = CT_HALVES_ADD(b[2 * i], b[2 * i + 1], lo4, lo4 + 4);
    for (int i = 0; i < 2; i++) d[i] = CT_HALVES_ADD(c[2 * i], c[2 * i + 1], lo2, lo2 + 2);
    out = CT_HALVES_ADD(d[0], d[1], lo1, lo1 + 1);
    memcpy(sums, &out, (size_t)n * sizeof(float));
}
CT_INLINE void ct_lanes_reduce_f64(const ct_row_vec_f64 *v, int n, double *sums)
{
    const ct_row_idx_f64 lo4 = {0, 1, 2, 3, 8, 9, 10, 11};
    const ct_row_idx_f64 lo2 = {0, 1, 4, 5, 8, 9, 12, 13};
    const ct_row_idx_f64 lo1 = {0, 2, 4, 6, 8, 10, 12, 14};
    ct_row_vec_f64 a[8], c[4], d[2], out;
    for (int i = 0; i < 8; i++) a[i] = i < n ? v[i] : (ct_row_vec_f64){0};
    for (int i = 0; i < 4; i++) c[i] = CT_HALVES_ADD(a[2 * i], a[2 * i + 1], lo4, lo4 + 4);
    for (int i = 0; i < 2; i++) d[i] = CT_HALVES_ADD(c[2 * i], c[2 * i + 1], lo2, lo2 + 2);
    out = CT_HALVES_ADD(d[0], d[1], lo1, lo1 + 1);
    memcpy(sums, &out, (size_t)n * sizeof(double));
}
#undef CT_HALVES_ADD

#define CT_DEFINE_ROW_DOTS(type, sfx)                                                          \
    /* R rows of x against C consecutive rows of w (row j at w + j K):          \
     * out[i * ldo + j] = x_i . w_j + bias[j]; each output in the order above */ \
    CT_INLINE void ct_row_dots_grid_##sfx(type *out, ptrdiff_t ldo, const type *x, const type *w,  \
                                          const type *bias, ptrdiff_t K, const int R, const int C)  \
    {                                                                                          \
        enum { LANES = 64 / sizeof(type) };                                                    \
        ct_row_vec_##sfx sums[CT_ROW_DOTS_MAX][CT_ROW_DOTS_COLS], wk[CT_ROW_DOTS_COLS], xk;    \
        ptrdiff_t whole = K / LANES * LANES;                                                   \
        /* one row: 2 KB ahead; C rows: the next C rows, read next */                          \
        ptrdiff_t ahead = C == 1 ? CT_ROW_DOTS_PREFETCH : C * K;                             \
        for (int i = 0; i < R; i++)                                                            \
            for (int j = 0; j < C; j++) sums[i][j] = (ct_row_vec_##sfx){0};                    \
        for (ptrdiff_t k = 0; k < whole; k += LANES) {                                         \
            for (int j = 0; j < C; j++) {                                                      \
                __builtin_prefetch(w + j * K + k + ahead, 0, 3);                               \
                memcpy(&wk[j], w + j * K + k, sizeof wk[j]);                                   \
            }                                                                                  \
            for (int i = 0; i < R; i++) {                                                      \
                memcpy(&xk, x + i * K + k, sizeof xk);                                         \
                for (int j = 0; j < C; j++) sums[i][j] += xk * wk[j];                          \
            }                                                                                  \
        }                                                                                      \
        type dots[CT_ROW_DOTS_MAX * CT_ROW_DOTS_COLS];                                         \
        if (R * C == 1)                                                                        \
            dots[0] = ct_lane_tree_##sfx(sums[0][0]);                                          \
        else                                                                                   \
            for (int g = 0; g < R * C; g += LANES) {                                           \
                ct_row_vec_##sfx group[LANES];                                                 \
                int n = R * C - g < LANES ? R * C - g : LANES;                                 \
                for (int t = 0; t < n; t++) group[t] = sums[(g + t) / C][(g + t) % C];         \
                ct_lanes_reduce_##sfx(group, n, dots + g);                                     \
            }                                                                                  \
        for (int i = 0; i < R; i++)                                                            \
            for (int j = 0; j < C; j++) {                                                      \
                type dot = dots[i * C + j];                                                    \
                for (ptrdiff_t k = whole; k < K; k++) dot += x[i * K + k] * w[j * K + k];      \
                out[i * ldo + j] = bias != NULL ? dot + bias[j] : dot;                         \
            }                                                                                  \
    }                                                                                          \
    CT_INLINE void ct_row_dots_##sfx(type *out, ptrdiff_t ldo, const type *x, const type *w,   \
                                     const type *bias, ptrdiff_t K, const int R)               \
    {                                                                                          \
        ct_row_dots_grid_##sfx(out, ldo, x, w, bias, K, R, 1);                                 \
    }
CT_DEFINE_ROW_DOTS(float, f32)
CT_DEFINE_ROW_DOTS(double, f64)
#undef CT_DEFINE_ROW_DOTS
#define VSUM(x, n) _Generic((x)[0], float: ct_sum_f32, double: ct_sum_f64)((x), (n))
#define VDOT(x, y, n) _Generic((x)[0], float: ct_dot_f32, double: ct_dot_f64)((x), (y), (n))
#define VMAX(x, n) _Generic((x)[0], float: ct_max_f32, double: ct_max_f64)((x), (n))
#define VALL_ZERO(x, n) _Generic((x)[0], float: ct_all_zero_f32, double: ct_all_zero_f64)((x), (n))
#define VALL_FINITE(x, n) _Generic((x)[0], float: ct_all_finite_f32, double: ct_all_finite_f64)((x), (n))
#define VALL_FINITE_ROWS(x, ld, rows, cols) \
    _Generic((x)[0], float: ct_all_finite_rows_f32, double: ct_all_finite_rows_f64)((x), (ld), (rows), (cols))
#define VMIN(x, n) _Generic((x)[0], float: ct_min_f32, double: ct_min_f64)((x), (n))
#define VSUM_ABS(x, n) _Generic((x)[0], float: ct_sum_abs_f32, double: ct_sum_abs_f64)((x), (n))
#define VROW_DOTS(out, ldo, x, w, bias, K, R) \
    _Generic((x)[0], float: ct_row_dots_f32, double: ct_row_dots_f64)((out), (ldo), (x), (w), (bias), (K), (R))
#define VROW_DOTS_GRID(out, ldo, x, w, bias, K, R, C)                                            \
    _Generic((x)[0], float: ct_row_dots_grid_f32, double: ct_row_dots_grid_f64)((out), (ldo), (x), (w), (bias), \
                                                                                 (K), (R), (C))
#define VADD_INTO(acc, x, n) _Generic((acc)[0], float: ct_add_into_f32, double: ct_add_into_f64)((acc), (x), (n))

#endif /* CT_MATH_H */

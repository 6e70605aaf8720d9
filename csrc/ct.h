/* ct.h - shared types, macros and helpers for every ctransformer kernel.
 *
 * The maths files (csrc/<family>.c) include only this header (and ct_blas.h); they
 * know nothing of Python.  Each maths file is a *template*: it is written
 * once in terms of
 *
 *     real      the element type (float or double)
 *     acc_t     the accumulation type for long reductions (always double)
 *     FN(name)  the exported name with a dtype suffix: name_f32 / name_f64
 *     SQRT, FABS, POW   libm functions of `real` (exp, tanh, sigmoid, erf, GELU
 *               and the lane-split sums: ct_math.h, their one home)
 *     GEMM      cblas_sgemm / cblas_dgemm (through ct_blas.h)
 *
 * and is instantiated for both dtypes by ct_template.h (see there).
 * Conventions, in the spirit of llm.c:
 *   - a `*_forward` / `*_backward` pair per kernel, shapes in a comment above;
 *   - forward writes what backward needs into caller-provided buffers;
 *   - backward ACCUMULATES (+=) into gradient buffers, never overwrites;
 *   - all arrays are C-contiguous; sizes are ct_int (ptrdiff_t);
 *   - functions that can fail (allocation) return 0 on success, -1 on error.
 */
#ifndef CT_H
#define CT_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

typedef ptrdiff_t ct_int;

#define CT_CAT_(a, b) a##b
#define CT_CAT(a, b) CT_CAT_(a, b)

/* Runtime dispatch on vector width for hot elementwise loops: the compiler
 * emits an AVX2 clone and a baseline clone, and the loader picks one.  The
 * default build never uses -march=native. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(CT_NO_CLONES)
#define CT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CT_VECTOR_CLONES
#endif

#define CT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- counter-based random numbers (dropout) ----------------------------
 * ct_random_u64(seed, counter) is a pure function: element i of a dropout
 * mask depends only on (seed, i), so the mask is the same whatever the
 * thread count or the order in which elements are visited.  It is the
 * SplitMix64 finaliser applied to a Weyl sequence keyed by the seed. */
static inline uint64_t ct_random_u64(uint64_t seed, uint64_t counter)
{
    uint64_t z = seed * 0xD1B54A32D192ED03ull + (counter + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double ct_random_uniform(uint64_t seed, uint64_t counter)
{
    return (double)(ct_random_u64(seed, counter) >> 11) * (1.0 / 9007199254740992.0);
}

/* The same test as ct_random_uniform(seed, counter) >= p, in integers:
 * u = k / 2^53 with k = u64 >> 11, and k / 2^53 >= p  <=>  k >= ceil(p 2^53)
 * (p 2^53 is exact in double: a power-of-two scaling; k is an integer).
 * ct_random_threshold(p) is that ceil(p 2^53), for 0 <= p <= 1 (2^53 at
 * p = 1: nothing is kept); it saves the u64 -> double conversion, which
 * SSE2/AVX2 lack, in the per-element loops. */
static inline uint64_t ct_random_threshold(double p)
{
    if (!(p > 0)) return 0;
    if (p >= 1) return 9007199254740992ull;
    return (uint64_t)ceil(p * 9007199254740992.0);
}

/* ct_random_uniform(seed, counter) >= p, given threshold = ct_random_threshold(p). */
static inline int ct_random_kept(uint64_t seed, uint64_t counter, uint64_t threshold)
{
    return (ct_random_u64(seed, counter) >> 11) >= threshold;
}

#endif /* CT_H */

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
/* Functions that make dropout masks add an x86-64-v4 clone (AVX-512 DQ):
 * its 64-bit vector multiply runs the hash of ct_random_keep_range 2.2x
 * faster than AVX-512F's emulation of it.  Only for integer work and lone
 * float products: that clone may fuse a * b + c into an FMA, which would
 * round differently from the other clones. */
#define CT_RANDOM_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx512f", "avx2", "default")))
/* The attention slices' score products (attention.c) add x86-64-v3 and v4
 * clones with FMA contraction (the build's -std=c11 turns it off elsewhere):
 * a product's sum then takes one instruction per term.  Their results
 * differ from the baseline clone's in the last bits, as OpenBLAS's kernels
 * differ between CPUs; on one machine they are the same on any thread count. */
#define CT_FMA_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), optimize("fp-contract=fast")))
#else
#define CT_VECTOR_CLONES
#define CT_RANDOM_CLONES
#define CT_FMA_CLONES
#endif

/* ---- subnormals flushed to zero, in a bounded region -----------------------
 * Between ct_flush_subnormals_begin() and ct_flush_subnormals_end(state) this
 * thread's SSE arithmetic reads subnormal operands as 0 (DAZ) and writes 0
 * for subnormal results (FTZ); _end restores the caller's mode, so nothing
 * leaks into NumPy or the caller's own code.  Why: on x86 every subnormal
 * operand or result of a multiply or an FMA costs a microcode assist of ~100+
 * cycles.  A trained model's attention has weights below FLT_MIN (scores
 * 87+ under the row's maximum): measured on the demo's Transformer after 400
 * steps, one self-attention backward took 5.0 ms with them and 0.78 ms
 * flushed.  The price is an absolute error below FLT_MIN (1.2e-38; DBL_MIN,
 * 2.2e-308, in float64) per term, which no tolerance can see.  Only where
 * measured: the attention slices (attention.c, run_slices) and, to give the
 * same weights, cached decoding's attend_step (decode.c).  Elsewhere
 * (other CPUs, other compilers) both calls do nothing. */
#if defined(__x86_64__) && defined(__SSE2__)
#include <xmmintrin.h>
#define CT_MXCSR_FTZ_DAZ 0x8040u /* bit 15 flush-to-zero, bit 6 denormals-are-zero */
typedef unsigned int ct_fp_mode;
static inline ct_fp_mode ct_flush_subnormals_begin(void)
{
    ct_fp_mode saved = _mm_getcsr();
    _mm_setcsr(saved | CT_MXCSR_FTZ_DAZ);
    return saved;
}
static inline void ct_flush_subnormals_end(ct_fp_mode saved) { _mm_setcsr(saved); }
#else
typedef int ct_fp_mode;
static inline ct_fp_mode ct_flush_subnormals_begin(void) { return 0; }
static inline void ct_flush_subnormals_end(ct_fp_mode saved) { (void)saved; }
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

/* The uniform of element `counter`: u = k / 2^32, k the 32-bit half
 * (counter & 1: low half for even counters, high half for odd) of
 * ct_random_u64(seed, counter >> 1).  One 64-bit hash serves two elements:
 * the hash's 64-bit multiplies, which SSE2/AVX2 lack, are most of a dropout
 * mask's cost.  Each half of SplitMix64's output is itself a good 32-bit
 * generator; 2^-32 resolution in p is far below any dropout rate's meaning. */
static inline uint64_t ct_random_u32_of(uint64_t word, uint64_t counter)
{
    return (counter & 1) ? word >> 32 : word & 0xFFFFFFFFull;
}

/* Element `counter` is kept iff u >= p  <=>  k >= ceil(p 2^32) (p 2^32 is
 * exact in double; k an integer).  ct_random_threshold(p) is that ceil, for
 * 0 <= p <= 1 (2^32 at p = 1: nothing is kept); integer compares keep the
 * u64 -> double conversion out of the per-element loops. */
static inline uint64_t ct_random_threshold(double p)
{
    if (!(p > 0)) return 0;
    if (p >= 1) return 4294967296ull;
    return (uint64_t)ceil(p * 4294967296.0);
}

/* Whether element `counter` is kept, given threshold = ct_random_threshold(p). */
static inline int ct_random_kept(uint64_t seed, uint64_t counter, uint64_t threshold)
{
    return ct_random_u32_of(ct_random_u64(seed, counter >> 1), counter) >= threshold;
}

/* keep[i] = ct_random_kept(seed, start + i, threshold) for i < n, one hash
 * per pair of elements (an odd start or an odd end takes one alone). */
static inline void ct_random_keep_range(uint8_t *keep, int64_t n, uint64_t seed, uint64_t start,
                                        uint64_t threshold)
{
    int64_t i = 0;
    if (n > 0 && (start & 1)) {
        keep[0] = (uint8_t)ct_random_kept(seed, start, threshold);
        i = 1;
    }
    for (; i + 1 < n; i += 2) {  /* start + i is even here */
        uint64_t word = ct_random_u64(seed, (start + (uint64_t)i) >> 1);
        keep[i] = (uint8_t)((word & 0xFFFFFFFFull) >= threshold);
        keep[i + 1] = (uint8_t)((word >> 32) >= threshold);
    }
    if (i < n) keep[i] = (uint8_t)ct_random_kept(seed, start + (uint64_t)i, threshold);
}

#endif /* CT_H */

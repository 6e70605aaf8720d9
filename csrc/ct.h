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
#define CT_RANDOM_CLONES_ON 1
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
#define CT_RANDOM_GAMMA 0x9E3779B97F4A7C15ull /* the Weyl step */
/* The Weyl sequence's term of `counter` (wrapping: term(c + j) = term(c) + j * gamma exactly) */
#define CT_RANDOM_WEYL(seed, counter) ((seed) * 0xD1B54A32D192ED03ull + ((counter) + 1) * CT_RANDOM_GAMMA)
/* SplitMix64's finaliser of z in place: the one spelling, for a uint64_t or a GCC vector of them */
#define CT_RANDOM_MIX(z)                                                                     \
    do {                                                                                     \
        (z) = ((z) ^ ((z) >> 30)) * 0xBF58476D1CE4E5B9ull;                                   \
        (z) = ((z) ^ ((z) >> 27)) * 0x94D049BB133111EBull;                                   \
        (z) = (z) ^ ((z) >> 31);                                                             \
    } while (0)
static inline uint64_t ct_random_u64(uint64_t seed, uint64_t counter)
{
    uint64_t z = CT_RANDOM_WEYL(seed, counter);
    CT_RANDOM_MIX(z);
    return z;
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

/* keep[0 .. 16) <- whether each 32-bit half of z, 8 words as a GCC vector,
 * reaches the threshold (< 2^32).  Read as 16 halves on a little-endian
 * machine (x86), half j is element j's (the low half of word j / 2 for even j, as
 * ct_random_u32_of), so the 16 compares are one vector compare, in order. */
#define CT_RANDOM_FLAGS(keep, z, threshold)                                                  \
    do {                                                                                     \
        typedef uint32_t halves_t_ __attribute__((vector_size(64)));                         \
        typedef int32_t flags_t_ __attribute__((vector_size(64)));                           \
        typedef uint8_t bytes_t_ __attribute__((vector_size(16)));                           \
        flags_t_ kept_ = (halves_t_)(z) >= (uint32_t)(threshold); /* -1 or 0 */              \
        bytes_t_ bytes_ = __builtin_convertvector(kept_, bytes_t_) & 1;                      \
        memcpy((keep), &bytes_, sizeof bytes_);                                              \
    } while (0)

/* keep[i] = ct_random_kept(seed, start + i, threshold) for i < n, one hash
 * per pair of elements (an odd start or an odd end takes one alone).
 * With GCC on x86-64 with AVX-512 DQ, 32 elements at a time: two vectors of
 * 8 consecutive words (a word's Weyl term is the first one's + j * gamma: an
 * add, not a multiply), two independent chains of multiplies that overlap,
 * then CT_RANDOM_FLAGS.  Measured against the pairs loop alone (one thread,
 * same bits): dropout_forward of 131072 / 524288 floats 0.71 / 0.80 of the
 * time; it wrote each pair's two flags apart, which took more shuffles than
 * the hash took multiplies.  Always inlined: out of line, GCC compiled one
 * baseline copy, and the AVX-512 clones of the callers called it (2.8x slower). */
static inline __attribute__((always_inline)) void ct_random_keep_range(uint8_t *keep, int64_t n, uint64_t seed,
                                                                      uint64_t start, uint64_t threshold)
{
    int64_t i = 0;
    if (n > 0 && (start & 1)) {
        keep[0] = (uint8_t)ct_random_kept(seed, start, threshold);
        i = 1;
    }
#if defined(__x86_64__) && defined(__GNUC__) && (defined(__AVX512DQ__) || defined(CT_RANDOM_CLONES_ON))
    /* only where vectors multiply 64-bit words: AVX-512 DQ, which with clones
     * means the x86-64-v4 clone of the CT_RANDOM_CLONES callers.  Emulated
     * (SSE2, AVX2), the vectors took 1.16x / 1.5x the pairs loop's time.
     * p = 1 (threshold 2^32) also takes the pairs loop. */
    if (threshold <= 0xFFFFFFFFull && __builtin_cpu_supports("avx512dq")) {
        typedef uint64_t words_t __attribute__((vector_size(64)));
        const words_t steps = (words_t){0, 1, 2, 3, 4, 5, 6, 7} * CT_RANDOM_GAMMA;
        for (; i + 32 <= n; i += 32) { /* start + i is even here; two independent blocks */
            uint64_t first = (start + (uint64_t)i) >> 1;
            words_t z0 = CT_RANDOM_WEYL(seed, first) + steps, z1 = CT_RANDOM_WEYL(seed, first + 8) + steps;
            CT_RANDOM_MIX(z0);
            CT_RANDOM_MIX(z1);
            CT_RANDOM_FLAGS(keep + i, z0, threshold);
            CT_RANDOM_FLAGS(keep + i + 16, z1, threshold);
        }
    }
#endif
    for (; i + 1 < n; i += 2) {  /* start + i is even here */
        uint64_t word = ct_random_u64(seed, (start + (uint64_t)i) >> 1);
        keep[i] = (uint8_t)((word & 0xFFFFFFFFull) >= threshold);
        keep[i + 1] = (uint8_t)((word >> 32) >= threshold);
    }
    if (i < n) keep[i] = (uint8_t)ct_random_kept(seed, start + (uint64_t)i, threshold);
}

#endif /* CT_H */

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
/* Functions that make dropout masks (ct_random_keep_range, inlined): the same
 * clones, which vectorise its 32-bit lane hash.  Only for integer work and
 * lone float products. */
#define CT_RANDOM_CLONES CT_VECTOR_CLONES
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
 * Element `counter` of a dropout mask gets a 32-bit uniform that depends only
 * on (seed, counter), so the mask is the same whatever the thread count or the
 * order in which elements are visited.  Two levels:
 *   block key:  the 32 counters 32 b .. 32 b + 31 share key = SplitMix64's
 *               finaliser of a Weyl sequence keyed by the seed, at term b;
 *   lane:       counter 32 b + l (l < 32) takes lowbias32 (Wellons' 32-bit
 *               finaliser, two multiplies) of key's low half ^ l * golden32,
 *               with key's high half mixed in between the multiplies.
 * For a fixed key the lane map is a bijection of 32-bit words (distinct lanes,
 * distinct draws); keys of different blocks are SplitMix64 outputs.  Why two
 * levels: the 64-bit multiplies of a hash per element, which SSE2/AVX2 lack,
 * were most of a mask's cost (0.70 ns per element on a Zen 3 core with AVX2);
 * the lanes' 32-bit multiplies vectorise everywhere (vpmulld), and one 64-bit
 * hash per 32 elements is noise.  2^-32 resolution in p is far below any
 * dropout rate's meaning. */
#define CT_RANDOM_GAMMA 0x9E3779B97F4A7C15ull /* the Weyl step */
#define CT_RANDOM_BLOCK 32                    /* counters per block key */
/* SplitMix64's finaliser of a Weyl sequence keyed by the seed, at term `block` */
static inline uint64_t ct_random_block_key(uint64_t seed, uint64_t block)
{
    uint64_t z = seed * 0xD1B54A32D192ED03ull + (block + 1) * CT_RANDOM_GAMMA;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The 32-bit draw of lane `lane` (< 32) of the block whose key halves are key_lo, key_hi */
static inline uint32_t ct_random_lane(uint32_t key_lo, uint32_t key_hi, uint32_t lane)
{
    uint32_t x = key_lo ^ (lane * 0x9E3779B9u);
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= (x >> 15) ^ key_hi;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}

/* Element `counter` is kept iff u >= p  <=>  k >= ceil(p 2^32), with k the lane's
 * 32-bit draw and u = k / 2^32 (p 2^32 is exact in double; k an integer).
 * ct_random_threshold(p) is that ceil, for 0 <= p <= 1 (2^32 at p = 1: nothing
 * is kept); integer compares keep the conversion out of the per-element loops. */
static inline uint64_t ct_random_threshold(double p)
{
    if (!(p > 0)) return 0;
    if (p >= 1) return 4294967296ull;
    return (uint64_t)ceil(p * 4294967296.0);
}

/* Whether element `counter` is kept, given threshold = ct_random_threshold(p): the
 * generator's definition for one element, the name the kernels' comments use;
 * ct_random_keep_range makes the same flags a block at a time. */
static inline int ct_random_kept(uint64_t seed, uint64_t counter, uint64_t threshold)
{
    uint64_t key = ct_random_block_key(seed, counter / CT_RANDOM_BLOCK);
    uint32_t draw = ct_random_lane((uint32_t)key, (uint32_t)(key >> 32), (uint32_t)(counter % CT_RANDOM_BLOCK));
    return draw >= threshold;
}

/* keep[i] = ct_random_kept(seed, start + i, threshold) for i < n, block by
 * block: one key, then the block's lanes in a loop that vectorises (8 lanes per
 * AVX2 multiply, 16 per AVX-512).  Always inlined, so that each vector clone of
 * a caller (CT_RANDOM_CLONES) compiles its own copy: out of line, GCC compiled
 * one baseline copy, and the AVX-512 clones of the callers called it. */
static inline __attribute__((always_inline)) void ct_random_keep_range(uint8_t *keep, int64_t n, uint64_t seed,
                                                                      uint64_t start, uint64_t threshold)
{
    if (threshold > 0xFFFFFFFFull) { /* p = 1: no draw reaches 2^32 */
        if (n > 0) memset(keep, 0, (size_t)n);
        return;
    }
    uint32_t limit = (uint32_t)threshold;
    for (int64_t i = 0; i < n;) {
        uint64_t counter = start + (uint64_t)i;
        uint32_t lane0 = (uint32_t)(counter % CT_RANDOM_BLOCK);
        int64_t len = CT_RANDOM_BLOCK - lane0 < n - i ? CT_RANDOM_BLOCK - lane0 : n - i;
        uint64_t key = ct_random_block_key(seed, counter / CT_RANDOM_BLOCK);
        uint32_t key_lo = (uint32_t)key, key_hi = (uint32_t)(key >> 32);
        uint8_t *out = keep + i;
        for (int64_t l = 0; l < len; l++)
            out[l] = (uint8_t)(ct_random_lane(key_lo, key_hi, lane0 + (uint32_t)l) >= limit);
        i += len;
    }
}

#endif /* CT_H */

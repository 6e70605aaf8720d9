/* packed_gemm.h - float32 GEMM against a weight packed once and reused by
 * many small products (the per-step recurrent GEMM of an RNN / LSTM / GRU).
 *
 * Why: OpenBLAS packs both operands on every call.  A recurrent layer
 * multiplies the same W_hh (4 MB for H = 512, LSTM) by a small (B, H) state
 * at every step, so each step re-reads and re-writes all of W_hh just to
 * pack it (a fifth of an LSTM forward).  Packing it once per sequence and
 * streaming the packed panels through a register-blocked kernel is ~1.4x
 * faster than sgemm on these shapes (bench/bench_rnn.py).
 *
 * Only float32, only x86-64 with AVX2+FMA or AVX-512F (chosen at run time,
 * no -march flags); elsewhere ct_packed_init returns 1 and the caller keeps
 * its BLAS GEMM.  Summation is in k order, one FMA per term, in float32. */
#ifndef CT_PACKED_GEMM_H
#define CT_PACKED_GEMM_H
#include "ct.h"

/* A weight seen as op(W) of shape (K, N), packed in panels of `nr` output
 * columns: panels[p][k][j] = op(W)[k][p * nr + j], zero past column N. */
typedef struct {
    float *panels;
    ct_int N, K;
    int nr;  /* columns per panel: 32 (AVX-512) or 16 (AVX2) */
    int isa; /* CT_PACKED_AVX512 / CT_PACKED_AVX2 */
} ct_packed;

enum { CT_PACKED_OFF = 0, CT_PACKED_AVX2 = 1, CT_PACKED_AVX512 = 2, CT_PACKED_AUTO = 3 };

/* Which kernel ct_packed_init picks: CT_PACKED_AUTO (the widest the CPU
 * runs), or forced to AVX2 / OFF (tests compare every path).  Returns the
 * previous setting; a forced ISA the CPU lacks falls back to OFF. */
int ct_packed_set_mode(int mode);
int ct_packed_mode(void);
/* The ISA ct_packed_init would use now (CT_PACKED_OFF: none). */
int ct_packed_active_isa(void);
/* The best kernel this CPU has, whatever the mode (CT_PACKED_AVX512 / AVX2 / OFF). */
int ct_packed_cpu_isa(void);

/* Pack w for products with op(w) (K, N):
 *   w_is_nk = 1: w is (N, K) row-major, op(w) = w^T   (a Linear weight: out = a w^T)
 *   w_is_nk = 0: w is (K, N) row-major, op(w) = w
 * Returns 0, 1 when no packed kernel runs here (nothing allocated), -1 when
 * out of memory. */
int ct_packed_init(ct_packed *p, const float *w, ct_int N, ct_int K, int w_is_nk);
void ct_packed_free(ct_packed *p);

/* dst (cols, rows; ld_dst) = src (rows, cols; ld_src) transposed:
 * dst[k * ld_dst + j] = src[j * ld_src + k]. */
void ct_transpose_f32(float *dst, ct_int ld_dst, const float *src, ct_int ld_src, ct_int rows, ct_int cols);

/* c (M rows, ldc apart) [0:N] = (accumulate ? c : 0) + a (M, K; lda) @ op(w) + bias
 * bias (N) or NULL. */
void ct_packed_gemm(float *c, ct_int ldc, const float *a, ct_int lda, ct_int M,
                    const ct_packed *p, const float *bias, int accumulate);

/* The same product, for an `a` read once from memory (a Linear's weight
 * rows against a few packed input rows: linear.c's streamed path): while a
 * block of rows is multiplied, the next block's rows are asked for (AVX-512
 * kernel, rows of at most 1024 floats), a line of each per 16 columns; the
 * bits are ct_packed_gemm's. */
void ct_packed_gemm_streamed(float *c, ct_int ldc, const float *a, ct_int lda, ct_int M,
                             const ct_packed *p, const float *bias, int accumulate);

#endif

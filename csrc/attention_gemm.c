/* attention_gemm.c - the products of attention's (batch, head) slices
 * (attention.c's head_probs, head_forward, head_backward): attn_gemm, a GEMM
 * whose small products run on loops of their own (below). */
#ifndef CT_TEMPLATE_PASS
#include "attention.h"

#include "packed_gemm.h" /* ct_packed_cpu_isa: the CPU's vector ISA */

#define CT_TEMPLATE_FILE "attention_gemm.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* ---- the slices' score products ---------------------------------------------
 * The scores S = scale Q K^T (forward) and dPd = dO V^T (backward) are
 * row-major NT products, which OpenBLAS runs through its full driver
 * (packing both operands, a buffer behind a mutex).  For narrow heads that
 * costs more than the arithmetic, so when the head is at most CT_SMALL_DEPTH
 * wide and the product at most CT_SMALL_PRODUCT multiply-adds, they are
 * direct loops: B^T is copied (zero-padded to whole vectors) into a stack
 * panel, then each block of CT_ROWS rows of C is a sum over k of rows of the
 * panel.  Measured in one process against OpenBLAS (sdpa forward + backward
 * per (b, h) slice, causal, float32, at 1 / 2 threads): T 11, Dh 16 0.80 /
 * 0.52 of its time; T 16, Dh 16 1.04 / 0.63; T 12, Dh 8 0.90 / 0.49; but
 * Dh 32 1.1-1.3 and Dh 64 1.4-1.8, where the panel's copy costs as much as
 * the product.  Wider heads' score products, up to CT_NT_VIA_NN
 * multiply-adds with K^T (V^T) fitting the panel, go to OpenBLAS as NN
 * products of a transposed copy (gemm_nt_via_nn, tiles transposed by
 * shuffles): its row-major NT path for small products (sgemm_small_kernel_b0_tn)
 * took 2.2x the time of its NN one on 32 x 32 x 32 (perf, sdpa at T 32, Dh 32).
 * sdpa forward + backward per slice, in one process against the OpenBLAS NT
 * build, 1 thread, dropout 0.1: T 32 Dh 32 0.79-0.83; T 32 Dh 64 0.87-0.92;
 * T 64 Dh 32 / 64 0.89-0.91.  In small_gemm_nt each element of C is
 * sum_k a_k b_k in the order of k (FMA where the clone has it), times alpha.
 *
 * The slices' other products, P V and dS K (NN), P^T dO and dS^T Q (TN),
 * up to CT_SMALL_XN_PRODUCT multiply-adds with B in the panel, run on the
 * same blocks (small_gemm_xn: B's rows copied, no transpose; beta 0 or 1).
 * On a 2-core AVX-512 Xeon they were no faster than OpenBLAS (0.96-1.21 of
 * its time); on a 2-core Zen 3 EPYC (AVX2), in one process against the
 * OpenBLAS build (bench/ab_step.py), the demo's training step (T 12, Dh 16)
 * took 0.927 of the time at 1 thread and 0.983 at 2, and bench_transformer
 * (b)'s d128 step (T 32, Dh 32) 0.999 at 1 thread: so on AVX2 without
 * AVX-512 only (ct_packed_cpu_isa), where OpenBLAS's per-call work (its beta
 * pass, both operands' packing) weighs more against its slower kernel. */
#ifndef CT_SMALL_PRODUCT
#define CT_SMALL_PRODUCT 32768
#endif
#ifndef CT_SMALL_DEPTH
#define CT_SMALL_DEPTH 16
#endif
#define CT_SMALL_PANEL 4096
#ifndef CT_SMALL_XN_PRODUCT
#define CT_SMALL_XN_PRODUCT 32768
#endif

/* GCC's vector extension: 32 bytes of `real` (lowered to two SSE registers
 * in the baseline clone).  GCC's auto-vectoriser split a 16-column sum into
 * 8 + 4 + 2 + 1 + 1 lanes; explicit vectors it cannot. */
typedef real FN(vec) __attribute__((vector_size(32)));
#define CT_VEC_LEN ((ct_int)(32 / sizeof(real)))
#define CT_CHUNK (2 * CT_VEC_LEN) /* the columns of one block: 16 floats, 8 doubles */
#define CT_ROWS 4                 /* its rows: 2 * CT_ROWS independent sums hide the adds' latency */

/* c[0 .. CT_VEC_LEN) (+)= sum (+= when accumulate), straight from the register. */
CT_INLINE void FN(store_vec)(real *c, FN(vec) sum, int accumulate)
{
    if (accumulate) {
        FN(vec) old;
        memcpy(&old, c, sizeof old);
        sum = old + sum;
    }
    memcpy(c, &sum, sizeof sum);
}

/* R (<= CT_ROWS) rows and the first `cols` (<= CT_CHUNK) of CT_CHUNK columns of
 *   C[r, :] (+)= alpha sum_k A[r * lda + k * ldk] x[k * ldx ..]   (k in order, from 0;
 *   += when accumulate).  A's rows are strided by lda and its k by ldk: A
 *   itself (ldk 1), or the transpose of a stored (K, M) operand (lda 1).
 * R is a constant at each call, so the 2R partial sums stay in registers. */
CT_INLINE void FN(mix_block)(real *C, ct_int ldc, ct_int cols, const real *A, ct_int lda, ct_int ldk,
                             const real *x, ct_int ldx, ct_int K, real alpha, int accumulate, const int R)
{
    FN(vec) s[CT_ROWS][2];
    for (int r = 0; r < R; r++) s[r][0] = s[r][1] = (FN(vec)){0};
    for (ct_int k = 0; k < K; k++) {
        FN(vec) x0, x1;
        memcpy(&x0, x + k * ldx, sizeof x0);
        memcpy(&x1, x + k * ldx + CT_VEC_LEN, sizeof x1);
        for (int r = 0; r < R; r++) {
            real ark = A[r * lda + k * ldk];
            s[r][0] += ark * x0;
            s[r][1] += ark * x1;
        }
    }
    /* alpha * sums, then whole vectors straight to C, the last partial vector
     * element by element from the register.  Through a buffer, the sums were
     * spilled in 16-byte halves and read back as 32-byte vectors: the loads
     * missed store-to-load forwarding, and that stall was a third of
     * small_gemm_xn's time at the d128 step (perf annotate, Zen 3). */
    if (cols == CT_CHUNK) { /* whole chunks (most blocks): no per-vector width test */
        for (int r = 0; r < R; r++)
            for (int h = 0; h < 2; h++) FN(store_vec)(C + r * ldc + h * CT_VEC_LEN, alpha * s[r][h], accumulate);
        return;
    }
    for (int r = 0; r < R; r++) {
        real *c = C + r * ldc;
        for (int h = 0; h < 2; h++) {
            ct_int first = h * CT_VEC_LEN, n = CT_MIN(cols - first, CT_VEC_LEN);
            FN(vec) sum = alpha * s[r][h];
            if (n == CT_VEC_LEN) {
                FN(store_vec)(c + first, sum, accumulate);
            } else if (accumulate) {
                for (ct_int l = 0; l < n; l++) c[first + l] += sum[l];
            } else {
                for (ct_int l = 0; l < n; l++) c[first + l] = sum[l];
            }
        }
    }
}

CT_INLINE void FN(mix_panel)(ct_int M, ct_int N, ct_int K, real alpha, const real *A, ct_int lda, ct_int ldk,
                             const real *bt, ct_int Np, int accumulate, real *C, ct_int ldc);
static CT_FMA_CLONES void FN(transpose_into)(real *restrict bt, ct_int ldt, const real *restrict B, ct_int ldb,
                                             ct_int N, ct_int K);

/* Columns of B^T padded to whole chunks. */
static ct_int FN(padded)(ct_int N) { return (N + CT_CHUNK - 1) / CT_CHUNK * CT_CHUNK; }

/* C (M, N) = alpha A B^T:  A (M, K), B (N, K), K * padded(N) <= CT_SMALL_PANEL:
 * B^T into a stack panel (transpose_into: tiles by shuffles, each row of B read
 * along itself), then the direct loops (mix_panel).  attn_gemm sends it the
 * narrow heads' score products, and on AVX2 the wider ones whose keys are whole
 * chunks.  aligned(64): its inner loop is a few dozen bytes; where code added later in
 * the file moved its start, the demo's slices (T 12, Dh 16) took 1.07-1.14x
 * the time (in one process against the previous build), and 0.97-1.03x aligned. */
static CT_FMA_CLONES __attribute__((aligned(64))) void FN(small_gemm_nt)(ct_int M, ct_int N, ct_int K, real alpha,
                                                                         const real *A, ct_int lda, const real *B,
                                                                         ct_int ldb, real *C, ct_int ldc)
{
    ct_int Np = FN(padded)(N);
    real bt[CT_SMALL_PANEL]; /* bt (K, Np) = B^T, zero columns past N */
    if (Np != N)
        for (ct_int k = 0; k < K; k++) memset(bt + k * Np + N, 0, (size_t)(Np - N) * sizeof(real));
    FN(transpose_into)(bt, Np, B, ldb, N, K);
    FN(mix_panel)(M, N, K, alpha, A, lda, 1, bt, Np, 0, C, ldc);
}

/* C (M, N) (+)= alpha op(A) bt over the padded panel bt (K, Np), by blocks of
 * CT_ROWS rows and CT_CHUNK columns (mix_block; A's strides as there). */
CT_INLINE void FN(mix_panel)(ct_int M, ct_int N, ct_int K, real alpha, const real *A, ct_int lda, ct_int ldk,
                             const real *bt, ct_int Np, int accumulate, real *C, ct_int ldc)
{
    for (ct_int d = 0; d < N; d += CT_CHUNK) {
        ct_int cols = CT_MIN(CT_CHUNK, N - d), m = 0;
        for (; m + CT_ROWS <= M; m += CT_ROWS)
            FN(mix_block)(C + m * ldc + d, ldc, cols, A + m * lda, lda, ldk, bt + d, Np, K, alpha, accumulate,
                          CT_ROWS);
        for (; m < M; m++)
            FN(mix_block)(C + m * ldc + d, ldc, cols, A + m * lda, lda, ldk, bt + d, Np, K, alpha, accumulate, 1);
    }
}

/* C (M, N) (+)= alpha op(A) B:  B (K, N) row-major, K * padded(N) <= CT_SMALL_PANEL;
 * op(A) = A (M, K) with lda, or (a_trans) the transpose of A stored (K, M) with lda.
 * B is copied (zero-padded to whole chunks) into a stack panel by vectors, unless
 * it is one already (N whole chunks and ldb == N: the block loads read whole
 * chunks, so a partial chunk read in place would run past the head, and past
 * B's end at its last row).  Read in place, the rows of a head in a
 * sequence-first projection lie B * 3E floats apart, a multiple of 4 KiB: every
 * row falls in the same L1 set, and the blocks re-read them from L2.  With the
 * copy and mix_block's vector epilogue, nn.MultiheadAttention forward + backward
 * (sequence-first, key padding, dropout 0.1, 1 thread, Zen 3) took 0.88 of the
 * previous build's time at E 128, T 32, B 32 and 0.94 at the demo's E 64, T 12,
 * B 64 (in one process, 60 rounds).  The copy's loops must stay
 * loops: as memcpy / memset calls per row (GCC's loop-distribution turns them
 * into such calls, hence the optimize attribute) they were 3 % of the demo's
 * step, in libc.  Each element is sum_k in the order of k, times alpha. */
#define CT_NO_LIBC_LOOPS optimize("no-tree-loop-distribute-patterns")
static CT_FMA_CLONES __attribute__((aligned(64), CT_NO_LIBC_LOOPS)) void FN(small_gemm_xn)(
    ct_int M, ct_int N, ct_int K, real alpha, const real *A, ct_int lda, int a_trans, const real *B, ct_int ldb,
    int accumulate, real *C, ct_int ldc)
{
    ct_int Np = FN(padded)(N), ldp = ldb;
    const real *panel = B;
    real bt[CT_SMALL_PANEL];
    ct_int whole = N / CT_VEC_LEN * CT_VEC_LEN;
    int copy = Np != N || ldb != Np; /* in place only as a whole-chunk panel: padded reads stay inside B */
    for (ct_int k = 0; copy && k < K; k++) { /* by whole vectors, then the tail zero-padded */
        real *dst = bt + k * Np;
        const real *src = B + k * ldb;
        for (ct_int n = 0; n < whole; n += CT_VEC_LEN) {
            FN(vec) v;
            memcpy(&v, src + n, sizeof v);
            memcpy(dst + n, &v, sizeof v);
        }
        for (ct_int n = whole; n < Np; n += CT_VEC_LEN) {
            FN(vec) v = {0};
            for (ct_int l = 0; l < CT_VEC_LEN && n + l < N; l++) v[l] = src[n + l];
            memcpy(dst + n, &v, sizeof v);
        }
    }
    if (copy) panel = bt, ldp = Np;
    if (a_trans) /* the strides as constants in each inlined copy */
        FN(mix_panel)(M, N, K, alpha, A, 1, lda, panel, ldp, accumulate, C, ldc);
    else
        FN(mix_panel)(M, N, K, alpha, A, lda, 1, panel, ldp, accumulate, C, ldc);
}

#ifndef CT_NT_VIA_NN
#define CT_NT_VIA_NN 262144 /* 64^3: T 64, Dh 64 gained (0.90); larger products were not measured */
#endif

/* ---- the transposed score products (see attn_gemm) ---- */

/* One CT_VEC_LEN x CT_VEC_LEN tile: bt[k * ldt + n] = B[n * ldb + k] for
 * n, k < CT_VEC_LEN, by shuffles of whole rows (8 x 8 floats, 4 x 4 doubles). */
CT_INLINE void FN(transpose_tile)(real *bt, ct_int ldt, const real *B, ct_int ldb)
{
    FN(vec) r[CT_VEC_LEN], c[CT_VEC_LEN];
    for (int i = 0; i < CT_VEC_LEN; i++) memcpy(&r[i], B + i * ldb, sizeof r[i]);
#if CT_DTYPE_IS_F32
    FN(vec) t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
    }
    for (int i = 0; i < 4; i++) {
        c[i] = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        c[i + 4] = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
#else
    FN(vec) t[4];
    for (int i = 0; i < 4; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 4, 2, 6);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 1, 5, 3, 7);
    }
    c[0] = __builtin_shufflevector(t[0], t[2], 0, 1, 4, 5);
    c[2] = __builtin_shufflevector(t[0], t[2], 2, 3, 6, 7);
    c[1] = __builtin_shufflevector(t[1], t[3], 0, 1, 4, 5);
    c[3] = __builtin_shufflevector(t[1], t[3], 2, 3, 6, 7);
#endif
    for (int i = 0; i < CT_VEC_LEN; i++) memcpy(bt + i * ldt, &c[i], sizeof c[i]);
}

/* bt (K, N), row stride ldt, <- B^T of B (N, K), row stride ldb: whole tiles
 * by shuffles, the edges element by element, each row of B read along itself
 * (a head's rows in a sequence-first projection are a multiple of 4 KiB apart
 * and share one L1 set: read down its columns, every load missed, half of
 * small_gemm_nt's time at the demo's step, perf annotate, Zen 3). */
static CT_FMA_CLONES void FN(transpose_into)(real *restrict bt, ct_int ldt, const real *restrict B, ct_int ldb,
                                             ct_int N, ct_int K)
{
    ct_int Nt = N / CT_VEC_LEN * CT_VEC_LEN, Kt = K / CT_VEC_LEN * CT_VEC_LEN;
    for (ct_int n = 0; n < Nt; n += CT_VEC_LEN)
        for (ct_int k = 0; k < Kt; k += CT_VEC_LEN) FN(transpose_tile)(bt + k * ldt + n, ldt, B + n * ldb + k, ldb);
    for (ct_int n = 0; n < N; n++)
        for (ct_int k = n < Nt ? Kt : 0; k < K; k++) bt[k * ldt + n] = B[n * ldb + k];
}

/* C (M, N) = alpha A B^T + beta C as the NN product A (B^T), B^T copied
 * into a stack panel (K * N <= CT_SMALL_PANEL). */
static __attribute__((noinline)) void FN(gemm_nt_via_nn)(ct_int M, ct_int N, ct_int K, real alpha, const real *A,
                                                         ct_int lda, const real *B, ct_int ldb, real beta, real *C,
                                                         ct_int ldc)
{
    real bt[CT_SMALL_PANEL];
    FN(transpose_into)(bt, N, B, ldb, N, K);
    GEMM(CT_ROWMAJOR, CT_NOTRANS, CT_NOTRANS, (int)M, (int)N, (int)K, alpha, A, (int)lda, bt, (int)N, beta, C,
         (int)ldc);
}

/* C (M, N) = alpha op(A) op(B) + beta C, row-major with leading dimensions;
 * empty products are handled here (BLAS rejects zero leading dimensions),
 * small score products (beta 0) by small_gemm_nt, wider ones by gemm_nt_via_nn,
 * small NN / TN products (beta 0 or 1) on AVX2 without AVX-512 by small_gemm_xn,
 * and there also the wider score products whose keys are whole chunks by
 * small_gemm_nt (the d128 step's T 32, Dh 32: nn.MultiheadAttention
 * forward + backward 0.976 of the time with OpenBLAS's NN product, 80 rounds
 * in one process, 1 thread; bench_transformer (b)'s step 0.989). */
void FN(attn_gemm)(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, ct_int M, ct_int N, ct_int K, real alpha,
                   const real *A, ct_int lda, const real *Bm, ct_int ldb, real beta, real *C, ct_int ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) {
        if (beta == 0)
            for (ct_int m = 0; m < M; m++) memset(C + m * ldc, 0, (size_t)N * sizeof(real));
        return;
    }
    if (ta == CT_NOTRANS && tb == CT_TRANS && K <= CT_SMALL_DEPTH && M * N * K <= CT_SMALL_PRODUCT &&
        K * FN(padded)(N) <= CT_SMALL_PANEL && beta == 0) {
        FN(small_gemm_nt)(M, N, K, alpha, A, lda, Bm, ldb, C, ldc);
        return;
    }
    if (tb == CT_NOTRANS && (beta == 0 || beta == 1) && M * N * K <= CT_SMALL_XN_PRODUCT &&
        K * FN(padded)(N) <= CT_SMALL_PANEL && ct_packed_cpu_isa() == CT_PACKED_AVX2) {
        FN(small_gemm_xn)(M, N, K, alpha, A, lda, ta == CT_TRANS, Bm, ldb, beta == 1, C, ldc);
        return;
    }
    if (ta == CT_NOTRANS && tb == CT_TRANS && beta == 0 && N % CT_CHUNK == 0 && K * N <= CT_SMALL_PANEL &&
        M * N * K <= CT_SMALL_XN_PRODUCT && ct_packed_cpu_isa() == CT_PACKED_AVX2) {
        FN(small_gemm_nt)(M, N, K, alpha, A, lda, Bm, ldb, C, ldc);
        return;
    }
    if (ta == CT_NOTRANS && tb == CT_TRANS && K * N <= CT_SMALL_PANEL && M * N * K <= CT_NT_VIA_NN) {
        FN(gemm_nt_via_nn)(M, N, K, alpha, A, lda, Bm, ldb, beta, C, ldc);
        return;
    }
    GEMM(CT_ROWMAJOR, ta, tb, (int)M, (int)N, (int)K, alpha, A, (int)lda, Bm, (int)ldb, beta, C,
         (int)ldc);
}

#endif

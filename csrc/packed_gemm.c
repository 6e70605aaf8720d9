/* packed_gemm.c - see packed_gemm.h.
 *
 * Kernel shape.  c (M, N) = a (M, K) @ B, B = op(w) (K, N) packed in panels
 * of NR columns.  A micro-kernel keeps an (MR rows) x (NR columns) block of
 * c in registers and walks k: per k it loads NR values of the panel (2
 * vectors) and, per row, broadcasts a[r][k] into one FMA per vector.
 *   AVX-512: NR = 32 (2 zmm), MR = 12 -> 24 accumulators + 2 + 1 of 32 registers
 *   AVX2:    NR = 16 (2 ymm), MR = 6  -> 12 accumulators + 2 + 1 of 16
 * Rows left over after the MR blocks go through the same kernel with fewer
 * rows (8, 4, 2, 1).  Loop order: panel outer, row block inner, so a panel
 * (K x NR floats: 64 KB at K = 512) stays in L2 while every row block uses it;
 * a (M x K) is small (a recurrent state) and stays in L2 too. */
#include "packed_gemm.h"
#include "parallel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CT_PACKED_X86 1
#include <immintrin.h>
#endif

static int packed_mode = CT_PACKED_AUTO;

static int cpu_isa(void)
{
#ifdef CT_PACKED_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return CT_PACKED_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CT_PACKED_AVX2;
#endif
    return CT_PACKED_OFF;
}

int ct_packed_cpu_isa(void) { return cpu_isa(); }

int ct_packed_mode(void) { return packed_mode; }

int ct_packed_set_mode(int mode)
{
    int previous = packed_mode;
    packed_mode = mode;
    return previous;
}

int ct_packed_active_isa(void)
{
    int best = cpu_isa();
    if (packed_mode == CT_PACKED_AUTO) return best;
    return packed_mode <= best ? packed_mode : CT_PACKED_OFF;
}

#ifdef CT_PACKED_X86
/* dst[k * ld_dst + j] = src[j * ld_src + k] for j, k < 16: the 16 x 16 block
 * transposed in registers (32-bit, 64-bit and two 128-bit-lane shuffle
 * stages).  The scalar transpose was 1.2-1.8 % of the d128 training step
 * (a Linear forward packs its weight on every call). */
__attribute__((target("avx512f"))) static void transpose16_avx512(float *dst, ct_int ld_dst, const float *src,
                                                                   ct_int ld_src)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ld_src);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + 4 + i], 0x88);
            t[h + 4 + i] = _mm512_shuffle_f32x4(r[h + i], r[h + 4 + i], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    }
    for (int k = 0; k < 16; k++) _mm512_storeu_ps(dst + k * ld_dst, r[k]);
}
#endif

/* dst[k * ld_dst + j] = src[j * ld_src + k] for j < rows, k < cols: whole
 * 16 x 16 blocks with transpose16_avx512 where the CPU has AVX-512, the
 * edges one by one (an exact copy either way).  Packs a Linear weight's
 * panels and turns the streamed forward's block back (linear.c). */
void ct_transpose_f32(float *dst, ct_int ld_dst, const float *src, ct_int ld_src, ct_int rows, ct_int cols)
{
    ct_int whole_rows = 0, whole_cols = 0;
#ifdef CT_PACKED_X86
    if (cpu_isa() == CT_PACKED_AVX512) {
        whole_rows = rows / 16 * 16, whole_cols = cols / 16 * 16;
        for (ct_int j = 0; j < whole_rows; j += 16)
            for (ct_int k = 0; k < whole_cols; k += 16)
                transpose16_avx512(dst + k * ld_dst + j, ld_dst, src + j * ld_src + k, ld_src);
    }
#endif
    for (ct_int k = 0; k < cols; k++) /* the edges: rows past whole_rows, or columns past whole_cols */
        for (ct_int j = k < whole_cols ? whole_rows : 0; j < rows; j++) dst[k * ld_dst + j] = src[j * ld_src + k];
}

typedef struct {
    const ct_packed *p;
    const float *w;
    int w_is_nk;
} pack_job;

/* Panels [p0, p1) of the packed weight (a block of ct_parallel_rows). */
static void pack_panels(void *ctx, ptrdiff_t p0, ptrdiff_t p1)
{
    const pack_job *j = ctx;
    const ct_packed *p = j->p;
    const float *w = j->w;
    int nr = p->nr;
    ct_int K = p->K, N = p->N;
    for (ct_int panel = (ct_int)p0; panel < (ct_int)p1; panel++) {
        float *dst = p->panels + panel * K * nr;
        ct_int n0 = panel * nr, cols = CT_MIN(nr, N - n0);
        if (cols < nr) memset(dst, 0, (size_t)K * nr * sizeof(float));
        if (j->w_is_nk) /* column c of the panel is row n0 + c of w */
            ct_transpose_f32(dst, nr, w + n0 * K, K, cols, K);
        else /* row k of the panel is a slice of row k of w */
            for (ct_int k = 0; k < K; k++)
                memcpy(dst + k * nr, w + k * N + n0, (size_t)cols * sizeof(float));
    }
}

/* The panels are independent: packed on the pool (a Linear forward's packing
 * ran on the caller alone while the worker waited, 1.8 % of its time in the
 * d128 training step at 2 threads). */
int ct_packed_init(ct_packed *p, const float *w, ct_int N, ct_int K, int w_is_nk)
{
    p->panels = NULL;
    p->isa = ct_packed_active_isa();
    if (p->isa == CT_PACKED_OFF) return 1;
    p->nr = p->isa == CT_PACKED_AVX512 ? 32 : 16;
    p->N = N, p->K = K;
    ct_int n_panels = (N + p->nr - 1) / p->nr;
    size_t bytes = (size_t)CT_MAX(n_panels * K * p->nr, 1) * sizeof(float);
    p->panels = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p->panels == NULL) return -1;
    pack_job job = {p, w, w_is_nk};
    ct_parallel_rows(n_panels, 4.0 * (double)N * (double)K, pack_panels, &job);
    return 0;
}

void ct_packed_free(ct_packed *p)
{
    free(p->panels);
    p->panels = NULL;
}

#ifdef CT_PACKED_X86
/* ---- AVX-512: ROWS x 32 block; cols (<= 32) of it are stored. -------- */
__attribute__((target("avx512f"), always_inline)) static inline void
block_avx512(const int ROWS, ct_int K, const float *a, ct_int lda, const float *panel, float *c,
             ct_int ldc, int cols, const float *bias, int accumulate, const float *next_a)
{
    __m512 acc[12][2];
    for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
#define CT_BLOCK_STEP(k)                                                                  \
    do {                                                                                  \
        __m512 b0 = _mm512_load_ps(panel + (k) * 32), b1 = _mm512_load_ps(panel + (k) * 32 + 16); \
        for (int r = 0; r < ROWS; r++) {                                                  \
            __m512 x = _mm512_set1_ps(a[r * lda + (k)]);                                  \
            acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);                                \
            acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);                                \
        }                                                                                 \
    } while (0)
    if (next_a == NULL) {
        for (ct_int k = 0; k < K; k++) CT_BLOCK_STEP(k);
    } else { /* the same steps; first, per 16 columns, a line of each of the next block's rows (into L2) */
        ct_int k = 0;
        for (; k + 16 <= K; k += 16) {
            for (int r = 0; r < ROWS; r++) _mm_prefetch((const char *)(next_a + r * lda + k), _MM_HINT_T1);
            for (int j = 0; j < 16; j++) CT_BLOCK_STEP(k + j);
        }
        for (; k < K; k++) CT_BLOCK_STEP(k);
    }
#undef CT_BLOCK_STEP
    __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
    __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int r = 0; r < ROWS; r++) {
        float *row = c + r * ldc;
        __m512 y0 = _mm512_add_ps(acc[r][0], bias0), y1 = _mm512_add_ps(acc[r][1], bias1);
        if (accumulate) {
            y0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, row), y0);
            y1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, row + 16), y1);
        }
        _mm512_mask_storeu_ps(row, m0, y0);
        _mm512_mask_storeu_ps(row + 16, m1, y1);
    }
}

/* ---- AVX2: ROWS x 16 block; cols (<= 16) of it are stored. ---------- */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256i lane_mask(int cols)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lanes); /* lane < cols */
}

__attribute__((target("avx2,fma"), always_inline)) static inline void
block_avx2(const int ROWS, ct_int K, const float *a, ct_int lda, const float *panel, float *c,
           ct_int ldc, int cols, const float *bias, int accumulate, const float *next_a)
{
    (void)next_a; /* (the AVX-512 kernel's prefetch; not tried on AVX2) */
    __m256 acc[8][2]; /* 6 rows used; 8 keeps the driver's dead 8-row branch in bounds */
    for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (ct_int k = 0; k < K; k++) {
        __m256 b0 = _mm256_load_ps(panel + k * 16), b1 = _mm256_load_ps(panel + k * 16 + 8);
        for (int r = 0; r < ROWS; r++) {
            __m256 x = _mm256_broadcast_ss(a + r * lda + k);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
    if (cols == 16) { /* a whole panel: plain loads and stores (see below) */
        __m256 bias0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
        __m256 bias1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
        for (int r = 0; r < ROWS; r++) {
            float *row = c + r * ldc;
            __m256 y0 = _mm256_add_ps(acc[r][0], bias0), y1 = _mm256_add_ps(acc[r][1], bias1);
            if (accumulate) {
                y0 = _mm256_add_ps(_mm256_loadu_ps(row), y0);
                y1 = _mm256_add_ps(_mm256_loadu_ps(row + 8), y1);
            }
            _mm256_storeu_ps(row, y0);
            _mm256_storeu_ps(row + 8, y1);
        }
        return;
    }
    /* The last, partial panel: masked.  (Masked stores, vmaskmovps, are slow on
     * AMD Zen: masking every panel made linear_forward's packed path 1.12-1.20x
     * sgemm's time at K 64-128 on a 2-core Zen 3 EPYC, one thread; whole panels
     * stored plainly, 0.88-1.00.) */
    __m256i m0 = lane_mask(cols), m1 = lane_mask(cols - 8);
    __m256 bias0 = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
    __m256 bias1 = bias ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
    for (int r = 0; r < ROWS; r++) {
        float *row = c + r * ldc;
        __m256 y0 = _mm256_add_ps(acc[r][0], bias0), y1 = _mm256_add_ps(acc[r][1], bias1);
        if (accumulate) {
            y0 = _mm256_add_ps(_mm256_maskload_ps(row, m0), y0);
            y1 = _mm256_add_ps(_mm256_maskload_ps(row + 8, m1), y1);
        }
        _mm256_maskstore_ps(row, m0, y0);
        _mm256_maskstore_ps(row + 8, m1, y1);
    }
}

/* ---- The driver of one ISA: output panels [panel_begin, panel_end) of NR
 * columns, each by blocks of MR rows, then 8, 4, 2, 1 rows (BLOCK inlined
 * with a constant row count, so every variant keeps its block in registers). */
#define CT_PACKED_DRIVER(NAME, TARGET, BLOCK, NR, MR)                                              \
    __attribute__((target(TARGET))) static void NAME(                                              \
        float *c, ct_int ldc, const float *a, ct_int lda, ct_int M, const ct_packed *p,            \
        const float *bias, int accumulate, ct_int panel_begin, ct_int panel_end, int stream_a)     \
    {                                                                                              \
        for (ct_int n0 = panel_begin * NR; n0 < CT_MIN(p->N, panel_end * NR); n0 += NR) {          \
            const float *panel = p->panels + (n0 / NR) * p->K * NR;                                \
            int cols = (int)CT_MIN(NR, p->N - n0);                                                 \
            const float *bias_n = bias ? bias + n0 : NULL;                                         \
            ct_int m = 0;                                                                          \
            for (; m + MR <= M; m += MR) BLOCK(MR);                                                \
            if (MR > 8 && m + 8 <= M) BLOCK(8), m += 8;                                            \
            if (m + 4 <= M) BLOCK(4), m += 4;                                                      \
            if (m + 2 <= M) BLOCK(2), m += 2;                                                      \
            if (m < M) BLOCK(1);                                                                   \
        }                                                                                          \
    }

#define CT_BLOCK_ARGS(R) \
    R, p->K, a + m * lda, lda, panel, c + m * ldc + n0, ldc, cols, bias_n, accumulate, \
        stream_a && m + (R) < M ? a + (m + (R)) * lda : NULL
#define CT_BLOCK_AVX512(R) block_avx512(CT_BLOCK_ARGS(R))
#define CT_BLOCK_AVX2(R) block_avx2(CT_BLOCK_ARGS(R))
CT_PACKED_DRIVER(gemm_avx512, "avx512f", CT_BLOCK_AVX512, 32, 12)
CT_PACKED_DRIVER(gemm_avx2, "avx2,fma", CT_BLOCK_AVX2, 16, 6)
#endif

/* Panels [panel_begin, panel_end) of the product (their output columns only). */
static void gemm_panels(float *c, ct_int ldc, const float *a, ct_int lda, ct_int M,
                        const ct_packed *p, const float *bias, int accumulate, ct_int panel_begin,
                        ct_int panel_end, int stream_a)
{
    if (M <= 0 || panel_begin >= panel_end) return;
#ifdef CT_PACKED_X86
    if (p->isa == CT_PACKED_AVX512)
        gemm_avx512(c, ldc, a, lda, M, p, bias, accumulate, panel_begin, panel_end, stream_a);
    else if (p->isa == CT_PACKED_AVX2)
        gemm_avx2(c, ldc, a, lda, M, p, bias, accumulate, panel_begin, panel_end, stream_a);
#else
    (void)c, (void)ldc, (void)a, (void)lda, (void)p, (void)bias, (void)accumulate, (void)stream_a;
#endif
}

static ct_int panel_count(const ct_packed *p) { return (p->N + p->nr - 1) / p->nr; }

void ct_packed_gemm(float *c, ct_int ldc, const float *a, ct_int lda, ct_int M,
                    const ct_packed *p, const float *bias, int accumulate)
{
    gemm_panels(c, ldc, a, lda, M, p, bias, accumulate, 0, panel_count(p), 0);
}

/* The AVX-512 kernel reads 12 rows of `a` at a time, one float of each per
 * step: a dozen streams too short for the hardware prefetcher to find.
 * linear_forward's streamed path against the build without the prefetch, in
 * one process, alternating (each call after a 64 MB read: cold; or
 * repeated: hot), this / before:
 *   K 512, M 12-32, N 512-2048: 0.80-0.90 cold, 0.85-0.99 hot at 1 thread;
 *   0.65-0.80 cold, 0.89-0.99 hot at 2;
 *   but K 2048 (rows 8 KB apart, sharing L1 sets): 1.03-1.06 cold,
 *   1.01-1.09 hot at 1 thread; hence rows of at most
 *   CT_PACKED_STREAM_AHEAD_MAX_LDA floats apart. */
#define CT_PACKED_STREAM_AHEAD_MAX_LDA 1024

void ct_packed_gemm_streamed(float *c, ct_int ldc, const float *a, ct_int lda, ct_int M,
                             const ct_packed *p, const float *bias, int accumulate)
{
    gemm_panels(c, ldc, a, lda, M, p, bias, accumulate, 0, panel_count(p), lda <= CT_PACKED_STREAM_AHEAD_MAX_LDA);
}

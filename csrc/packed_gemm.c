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
    for (ct_int panel = 0; panel < n_panels; panel++) {
        float *dst = p->panels + panel * K * p->nr;
        for (ct_int k = 0; k < K; k++)
            for (ct_int j = 0; j < p->nr; j++) {
                ct_int n = panel * p->nr + j;
                dst[k * p->nr + j] = n >= N ? 0.0f : w_is_nk ? w[n * K + k] : w[k * N + n];
            }
    }
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
             ct_int ldc, int cols, const float *bias, int accumulate)
{
    __m512 acc[12][2];
    for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (ct_int k = 0; k < K; k++) {
        __m512 b0 = _mm512_load_ps(panel + k * 32), b1 = _mm512_load_ps(panel + k * 32 + 16);
        for (int r = 0; r < ROWS; r++) {
            __m512 x = _mm512_set1_ps(a[r * lda + k]);
            acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
        }
    }
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

__attribute__((target("avx512f"))) static void
gemm_avx512(float *c, ct_int ldc, const float *a, ct_int lda, ct_int M, const ct_packed *p,
            const float *bias, int accumulate)
{
    for (ct_int n0 = 0; n0 < p->N; n0 += 32) {
        const float *panel = p->panels + (n0 / 32) * p->K * 32;
        int cols = (int)CT_MIN(32, p->N - n0);
        const float *bias_n = bias ? bias + n0 : NULL;
        ct_int m = 0;
#define CT_BLOCK(R) block_avx512(R, p->K, a + m * lda, lda, panel, c + m * ldc + n0, ldc, cols, bias_n, accumulate)
        for (; m + 12 <= M; m += 12) CT_BLOCK(12);
        if (m + 8 <= M) CT_BLOCK(8), m += 8;
        if (m + 4 <= M) CT_BLOCK(4), m += 4;
        if (m + 2 <= M) CT_BLOCK(2), m += 2;
        if (m < M) CT_BLOCK(1);
#undef CT_BLOCK
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
           ct_int ldc, int cols, const float *bias, int accumulate)
{
    __m256 acc[6][2];
    for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (ct_int k = 0; k < K; k++) {
        __m256 b0 = _mm256_load_ps(panel + k * 16), b1 = _mm256_load_ps(panel + k * 16 + 8);
        for (int r = 0; r < ROWS; r++) {
            __m256 x = _mm256_broadcast_ss(a + r * lda + k);
            acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
        }
    }
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

__attribute__((target("avx2,fma"))) static void
gemm_avx2(float *c, ct_int ldc, const float *a, ct_int lda, ct_int M, const ct_packed *p,
          const float *bias, int accumulate)
{
    for (ct_int n0 = 0; n0 < p->N; n0 += 16) {
        const float *panel = p->panels + (n0 / 16) * p->K * 16;
        int cols = (int)CT_MIN(16, p->N - n0);
        const float *bias_n = bias ? bias + n0 : NULL;
        ct_int m = 0;
#define CT_BLOCK(R) block_avx2(R, p->K, a + m * lda, lda, panel, c + m * ldc + n0, ldc, cols, bias_n, accumulate)
        for (; m + 6 <= M; m += 6) CT_BLOCK(6);
        if (m + 4 <= M) CT_BLOCK(4), m += 4;
        if (m + 2 <= M) CT_BLOCK(2), m += 2;
        if (m < M) CT_BLOCK(1);
#undef CT_BLOCK
    }
}
#endif

void ct_packed_gemm(float *c, ct_int ldc, const float *a, ct_int lda, ct_int M,
                    const ct_packed *p, const float *bias, int accumulate)
{
    if (M <= 0 || p->N <= 0) return;
#ifdef CT_PACKED_X86
    if (p->isa == CT_PACKED_AVX512) gemm_avx512(c, ldc, a, lda, M, p, bias, accumulate);
    else if (p->isa == CT_PACKED_AVX2) gemm_avx2(c, ldc, a, lda, M, p, bias, accumulate);
#else
    (void)c, (void)ldc, (void)a, (void)lda, (void)bias, (void)accumulate;
#endif
}

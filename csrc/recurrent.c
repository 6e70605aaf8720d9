/* recurrent.c - Elman RNN (tanh / relu), LSTM and GRU, with torch's maths and
 * weight layout (https://pytorch.org/docs/stable/generated/torch.nn.LSTM.html).
 *
 * One single-layer, single-direction kernel runs a whole (padded) sequence:
 *   - the input projection of every step is ONE GEMM  (T*B, I) x (I, G*H);
 *   - each step is one recurrent GEMM  (B, H) x (H, G*H)  and one fused loop
 *     over the batch that applies the gate maths (row_forward);
 *   - sequences shorter than T (lengths) neither update their state nor
 *     receive gradient on padded steps; reverse runs each sequence from its
 *     own last real step back to 0, as torch's packed bidirectional layers.
 * A cell (one step, step-by-step decoders) is this kernel with T = 1.
 *
 * Gate maths, a = x W_ih^T + b_ih, p = h W_hh^T + b_hh (G*H wide each):
 *   rnn:  h' = act(a + p)                                    act = tanh | relu
 *   lstm: i, f, g, o = s(a+p)[0:H], s(a+p)[H:2H], tanh(a+p)[2H:3H], s(a+p)[3H:]
 *         c' = f * c + i * g,   h' = o * tanh(c')            s = sigmoid
 *   gru:  r = s(a_r + p_r),  z = s(a_z + p_z),  n = tanh(a_n + r * p_n)
 *         h' = (1 - z) * n + z * h
 */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "recurrent.c"
#include "ct_template.h"
#else
#include "linear.h"
#include "packed_gemm.h"
#include "parallel.h"
#include "recurrent.h"

#include "ct_math.h"

/* The gate functions are ct_math.h's branch-free VSIGMOID_FAST and VTANH (exact
 * limits: sigmoid(-inf) = 0, tanh(+-inf) = +-1), and the relu selects are
 * VSELECTs, so the gate loops vectorise. */

/* ---------------------------------------------------------------------------
 * Gate maths of one row (one sequence, one step).  Shared by the sequence
 * kernel and, through it, by the cell.
 *   xg        in: x W_ih^T + b_ih (G*H); out: what backward needs, in place:
 *             rnn h' (H); lstm i,f,g,o (4H); gru r,z,n,p_n (4H, p_n = h W_hn^T + b_hn)
 *   hp (G*H)  h W_hh^T + b_hh
 *   h, c (H)  state before the step    h_new, c_new (H)  state after
 * c and c_new are lstm only (may be NULL otherwise). */
static CT_VECTOR_CLONES void FN(row_forward)(int mode, ct_int H, real *restrict xg,
                                             const real *restrict hp, const real *restrict h,
                                             const real *restrict c, real *restrict h_new,
                                             real *restrict c_new)
{
    switch (mode) {
    case CT_RNN_TANH:
        for (ct_int k = 0; k < H; k++) h_new[k] = xg[k] = VTANH(xg[k] + hp[k]);
        break;
    case CT_RNN_RELU:
        for (ct_int k = 0; k < H; k++) {
            real a = xg[k] + hp[k];
            h_new[k] = xg[k] = VSELECT(a < 0, (real)0, a); /* NaN stays NaN */
        }
        break;
    case CT_LSTM:
        for (ct_int k = 0; k < H; k++) {
            real i = VSIGMOID_FAST(xg[k] + hp[k]);
            real f = VSIGMOID_FAST(xg[H + k] + hp[H + k]);
            real g = VTANH(xg[2 * H + k] + hp[2 * H + k]);
            real o = VSIGMOID_FAST(xg[3 * H + k] + hp[3 * H + k]);
            c_new[k] = f * c[k] + i * g;
            h_new[k] = o * VTANH(c_new[k]);
            xg[k] = i, xg[H + k] = f, xg[2 * H + k] = g, xg[3 * H + k] = o;
        }
        break;
    default: /* CT_GRU */
        for (ct_int k = 0; k < H; k++) {
            real r = VSIGMOID_FAST(xg[k] + hp[k]);
            real z = VSIGMOID_FAST(xg[H + k] + hp[H + k]);
            real pn = hp[2 * H + k];
            real n = VTANH(xg[2 * H + k] + r * pn);
            h_new[k] = (1 - z) * n + z * h[k];
            xg[k] = r, xg[H + k] = z, xg[2 * H + k] = n, xg[3 * H + k] = pn;
        }
        break;
    }
}

/* Backward of row_forward.
 *   gates     what row_forward left in xg;  h, h_new, c, c_new as in the forward
 *   dh (H)    in: dL/dh_new;  out: the part of dL/dh that bypasses W_hh (gru: dh' z)
 *   dc (H)    lstm: in dL/dc_new, out dL/dc
 *   dgi (G*H) written: dL/da, a = x W_ih^T + b_ih; for rnn and lstm this is also
 *             dL/dp, p = h W_hh^T + b_hh
 *   dgh (G*H) gru only, written: dL/dp (differs from dL/da in the n block) */
static CT_VECTOR_CLONES void FN(row_backward)(int mode, ct_int H, const real *restrict gates,
                                              const real *restrict h,
                                              const real *restrict h_new,
                                              const real *restrict c,
                                              const real *restrict c_new, real *restrict dh,
                                              real *restrict dc, real *restrict dgi,
                                              real *restrict dgh)
{
    switch (mode) {
    case CT_RNN_TANH: /* tanh' = 1 - h'^2 */
        for (ct_int k = 0; k < H; k++) {
            dgi[k] = dh[k] * (1 - h_new[k] * h_new[k]);
            dh[k] = 0;
        }
        break;
    case CT_RNN_RELU: /* relu' = [h' > 0] */
        for (ct_int k = 0; k < H; k++) {
            dgi[k] = VSELECT(h_new[k] <= 0, (real)0, dh[k]);
            dh[k] = 0;
        }
        break;
    case CT_LSTM:
        for (ct_int k = 0; k < H; k++) {
            real i = gates[k], f = gates[H + k], g = gates[2 * H + k], o = gates[3 * H + k];
            real tc = VTANH(c_new[k]);
            /* total dL/dc' = through h' = o tanh(c') plus from the next step */
            real dct = dc[k] + dh[k] * o * (1 - tc * tc);
            dgi[k] = dct * g * i * (1 - i);
            dgi[H + k] = dct * c[k] * f * (1 - f);
            dgi[2 * H + k] = dct * i * (1 - g * g);
            dgi[3 * H + k] = dh[k] * tc * o * (1 - o);
            dc[k] = dct * f, dh[k] = 0;
        }
        break;
    default: /* CT_GRU */
        for (ct_int k = 0; k < H; k++) {
            real r = gates[k], z = gates[H + k], n = gates[2 * H + k], pn = gates[3 * H + k];
            real dhk = dh[k];
            real d_n = dhk * (1 - z) * (1 - n * n); /* d(a_n + r p_n) */
            real d_z = dhk * (h[k] - n) * z * (1 - z);
            real d_r = d_n * pn * r * (1 - r);
            dgi[k] = d_r, dgi[H + k] = d_z, dgi[2 * H + k] = d_n;
            dgh[k] = d_r, dgh[H + k] = d_z, dgh[2 * H + k] = d_n * r;
            dh[k] = dhk * z;
        }
        break;
    }
}


/* ---------------------------------------------------------------------------
 * Thread policy.  OpenBLAS splits any GEMM above a small size over all its
 * threads; for the per-step GEMMs of a small layer (the seq2seq tutorial:
 * B = 8, H = 128, ~1 MFLOP) waking the other thread costs more than the
 * work, and on a busy machine a descheduled helper thread stalls every step
 * (measured: 15x slower).  GEMMs under CT_RNN_SMALL_GEMM flops therefore
 * run on the calling thread: this thread's calls are capped at one thread
 * around them (ct_threads_cap_set, parallel.h). */
#ifndef CT_RNN_THREADS
#define CT_RNN_THREADS
#define CT_RNN_SMALL_GEMM 16.0e6

/* Returns the cap to give back with ct_rnn_threads_leave (-1: none set). */
static int ct_rnn_threads_enter(double flops)
{
    if (flops >= CT_RNN_SMALL_GEMM) return -1;
    return ct_threads_cap_set(1);
}

static void ct_rnn_threads_leave(int saved)
{
    if (saved >= 0) ct_threads_cap_set(saved);
}
#endif

/* ---------------------------------------------------------------------------
 * The per-step product with W_hh.  In float32 W_hh is packed once per call
 * and every step runs the packed kernel (packed_gemm.h: OpenBLAS would
 * re-pack all of W_hh at every step); otherwise (float64, a CPU without
 * AVX2) each step is a BLAS GEMM.
 *   forward:  out (M, GH)  = h (M, H) @ W_hh^T + b_hh      (n = GH, k = H)
 *   backward: out (M, H)  += d (M, GH) @ W_hh              (n = H, k = GH)
 * M is the caller's block of batch rows (see sweep_threads). */
typedef struct {
    const real *w_hh;
    ct_int GH, H;
    int transposed; /* backward's product */
    int packed;     /* 1: pk holds W_hh packed */
    ct_packed pk;
} FN(step_weight);

/* Packing W_hh costs about one product, so a sequence shorter than this
 * (a step-by-step decoder calls with T = 1) keeps the BLAS GEMM: measured
 * B 8, H 128 LSTM forward, T 1: 63 us packed, 44 us BLAS; T 8: 288 / 307. */
#define CT_RNN_PACK_MIN_STEPS 3

/* Returns 0, or -1 when out of memory. */
static int FN(step_weight_init)(FN(step_weight) *sw, const real *w_hh, ct_int GH, ct_int H,
                                ct_int T, int transposed)
{
    sw->w_hh = w_hh, sw->GH = GH, sw->H = H, sw->transposed = transposed, sw->packed = 0;
#if CT_DTYPE_IS_F32
    if (T < CT_RNN_PACK_MIN_STEPS) return 0;
    int status = transposed ? ct_packed_init(&sw->pk, w_hh, H, GH, 0)
                            : ct_packed_init(&sw->pk, w_hh, GH, H, 1);
    if (status < 0) return -1;
    sw->packed = status == 0;
#endif
    return 0;
}

static void FN(step_weight_free)(FN(step_weight) *sw)
{
#if CT_DTYPE_IS_F32
    if (sw->packed) ct_packed_free(&sw->pk);
#endif
    sw->packed = 0;
}

static void FN(step_product)(const FN(step_weight) *sw, real *out, const real *inp, const real *bias,
                             ct_int M)
{
#if CT_DTYPE_IS_F32
    if (sw->packed) {
        ct_int ld = sw->transposed ? sw->H : sw->GH;
        ct_packed_gemm(out, ld, inp, sw->transposed ? sw->GH : sw->H, M, &sw->pk, bias,
                       sw->transposed);
        return;
    }
#endif
    if (sw->transposed) FN(linear_backward)(out, NULL, NULL, inp, NULL, sw->w_hh, M, sw->H, sw->GH, 1);
    else FN(linear_forward)(out, inp, sw->w_hh, bias, M, sw->H, sw->GH);
}

/* Threads for the time loop.  The sequences of a batch never interact, so
 * each thread runs the whole loop for its own block of rows and the threads
 * meet once, at the end.  Only with the packed product (a BLAS GEMM per step
 * would start its own threads) and only for steps of >= CT_RNN_SMALL_GEMM
 * flops with >= CT_RNN_MIN_ROWS rows per thread. */
#define CT_RNN_MIN_ROWS 8
static int FN(sweep_threads)(const FN(step_weight) *sw, ct_int B)
{
    int threads = ct_threads_ceiling_here();
    if (!sw->packed || threads <= 1 || 2.0 * B * sw->H * sw->GH < CT_RNN_SMALL_GEMM) return 1;
    return (int)CT_MAX(1, CT_MIN(threads, B / CT_RNN_MIN_ROWS));
}

/* ---------------------------------------------------------------------------
 * The saved buffer (see ct_rnn_saved_size): step-indexed states, time-indexed
 * gates.  For rnn the "gates" are the output itself (out, (T, B, H)). */
typedef struct {
    real *hs;    /* (T+1, B, H)  state before step s at [s] */
    real *cs;    /* (T+1, B, H)  lstm, else NULL */
    real *gates; /* (T, B, SG*H) lstm / gru, else NULL */
} FN(rnn_saved);

static FN(rnn_saved) FN(saved_views)(real *saved, const ct_rnn_shape *s)
{
    FN(rnn_saved) v;
    ct_int states = (s->T + 1) * s->B * s->H;
    v.hs = saved;
    v.cs = s->mode == CT_LSTM ? saved + states : NULL;
    v.gates = ct_rnn_saved_gate_count(s->mode) ? (v.cs ? v.cs : v.hs) + states : NULL;
    return v;
}

/* dst rows (M rows, ld apart) [0:N] = inp (M, K) @ weight (N, K)^T + bias (N or NULL).
 * A linear layer writing into a wider row (gru's gates keep a 4th block). */
static void FN(project)(real *dst, ct_int ld, const real *inp, const real *weight,
                        const real *bias, ct_int M, ct_int K, ct_int N)
{
    if (M == 0 || N == 0) return;
    for (ct_int m = 0; m < M; m++) {
        if (bias) memcpy(dst + m * ld, bias, (size_t)N * sizeof(real));
        else memset(dst + m * ld, 0, (size_t)N * sizeof(real));
    }
    if (K > 0)
        GEMM(CT_ROWMAJOR, CT_NOTRANS, CT_TRANS, (int)M, (int)N, (int)K, 1, inp, (int)K, weight,
             (int)K, 1, dst, (int)ld);
}

/* Row of the time-indexed x-projection / gate buffer: out for rnn, else gates. */
static real *FN(xg_row)(const ct_rnn_shape *s, FN(rnn_saved) v, real *out, ct_int t, ct_int b)
{
    ct_int row = t * s->B + b;
    return v.gates ? v.gates + row * ct_rnn_saved_gate_count(s->mode) * s->H : out + row * s->H;
}

/* The time loop of rows [b0, b1) of the batch: what one thread runs.
 * Forward uses hproj, out, b_hh; backward dout, dh, dc, dgi, dgh. */
typedef struct {
    const ct_rnn_shape *shape;
    FN(rnn_saved) v;
    const FN(step_weight) *sw;
    real *hproj, *out;
    const real *b_hh;
    const real *dout;
    real *dh, *dc, *dgi, *dgh;
} FN(sweep);

/* The sweepers, each on its block of batch rows (the rows are independent),
 * sized by the threads' measured speeds (ct_parallel_shares). */
static void FN(run_sweeps)(FN(sweep) *w, int sweepers, ct_rows_fn fn)
{
    ct_parallel_shares(w->shape->B, sweepers, sweepers, CT_RNN_MIN_ROWS, fn, w);
}

/* One forward step s over rows [b0, b1).
 *   hproj (B, G*H) = hs[s] W_hh^T + b_hh;  reads v.hs[s], v.cs[s], writes [s+1]
 *   out (T, B, H) time-indexed; gates / out rows hold the x-projection until visited.
 * A row past its length keeps its state; its time slot s is padding: out = 0. */
static void FN(step_forward)(const ct_rnn_shape *s, ct_int step, const real *hproj,
                             FN(rnn_saved) v, real *out, ct_int b0, ct_int b1)
{
    ct_int B = s->B, H = s->H, GH = ct_rnn_gate_count(s->mode) * H;
    for (ct_int b = b0; b < b1; b++) {
        ct_int len = ct_rnn_length(s, b), row = step * B + b, next = row + B;
        const real *h = v.hs + row * H, *c = v.cs ? v.cs + row * H : NULL;
        real *h_new = v.hs + next * H, *c_new = v.cs ? v.cs + next * H : NULL;
        if (step >= len) {
            memcpy(h_new, h, (size_t)H * sizeof(real));
            if (c) memcpy(c_new, c, (size_t)H * sizeof(real));
            memset(out + row * H, 0, (size_t)H * sizeof(real));
            continue;
        }
        ct_int t = ct_rnn_time(s, len, step);
        FN(row_forward)(s->mode, H, FN(xg_row)(s, v, out, t, b), hproj + b * GH, h, c, h_new,
                        c_new);
        if (v.gates) memcpy(out + (t * B + b) * H, h_new, (size_t)H * sizeof(real));
    }
}

/* The time loop of batch rows [b0, b1). */
static void FN(forward_sweep)(void *ctx, ptrdiff_t b0, ptrdiff_t b1)
{
    const FN(sweep) *w = ctx;
    ct_int B = w->shape->B, H = w->shape->H;
    for (ct_int step = 0; step < w->shape->T; step++) {
        FN(step_product)(w->sw, w->hproj + b0 * w->sw->GH, w->v.hs + (step * B + b0) * H, w->b_hh,
                         b1 - b0);
        FN(step_forward)(w->shape, step, w->hproj, w->v, w->out, b0, b1);
    }
}

/* rnn_forward (returns 0, or -1 when out of memory)
 *   x      (T, B, I)     time-major input
 *   h0, c0 (B, H)        initial state, NULL = zeros (c0: lstm only)
 *   w_ih   (G*H, I), w_hh (G*H, H), b_ih, b_hh (G*H) or NULL; G = 1, 4, 3
 *   out    (T, B, H)     h at every real step, 0 on padding
 *   h_n, c_n (B, H)      each sequence's state after its last real step (NULL: skipped)
 *   saved  (ct_rnn_saved_size)  for rnn_backward
 * The input projection of all steps is one GEMM written straight into the
 * gate buffer (rnn: into out), which the gate maths then overwrites in place. */
int FN(rnn_forward)(real *out, real *h_n, real *c_n, real *saved, const real *x, const real *h0,
                    const real *c0, const real *w_ih, const real *w_hh, const real *b_ih,
                    const real *b_hh, const ct_rnn_shape *shape)
{
    ct_int T = shape->T, B = shape->B, H = shape->H, BH = B * H;
    ct_int GH = ct_rnn_gate_count(shape->mode) * H;
    FN(rnn_saved) v = FN(saved_views)(saved, shape);
    if (h0) memcpy(v.hs, h0, (size_t)BH * sizeof(real));
    else memset(v.hs, 0, (size_t)BH * sizeof(real));
    if (v.cs && c0) memcpy(v.cs, c0, (size_t)BH * sizeof(real));
    else if (v.cs) memset(v.cs, 0, (size_t)BH * sizeof(real));

    real *hproj = malloc((size_t)CT_MAX(B * GH, 1) * sizeof(real));
    if (hproj == NULL) return -1;
    ct_int ld = v.gates ? ct_rnn_saved_gate_count(shape->mode) * H : H;
    int threads = ct_rnn_threads_enter(2.0 * T * B * shape->In * GH);
    FN(project)(v.gates ? v.gates : out, ld, x, w_ih, b_ih, T * B, shape->In, GH);
    ct_rnn_threads_leave(threads);
    FN(step_weight) sw;
    if (FN(step_weight_init)(&sw, w_hh, GH, H, T, 0) != 0) {
        free(hproj);
        return -1;
    }
    FN(sweep) sweep = {.shape = shape, .v = v, .sw = &sw, .hproj = hproj, .out = out, .b_hh = b_hh};
    int sweepers = FN(sweep_threads)(&sw, B);
    threads = ct_rnn_threads_enter(2.0 * B * H * GH);
    FN(run_sweeps)(&sweep, sweepers, FN(forward_sweep));
    ct_rnn_threads_leave(threads);
    FN(step_weight_free)(&sw);
    if (h_n) memcpy(h_n, v.hs + T * BH, (size_t)BH * sizeof(real));
    if (c_n && v.cs) memcpy(c_n, v.cs + T * BH, (size_t)BH * sizeof(real));
    free(hproj);
    return 0;
}

/* One backward step s over rows [b0, b1).
 *   dh, dc (B, H)   in: dL/d(state after step s) excluding out[t]; out: the part
 *                   of dL/d(state before step s) that bypasses W_hh
 *   dgi (T, B, G*H) time-indexed dL/d(x W_ih^T + b_ih)
 *   dgh (T, B, G*H) step-indexed dL/d(h W_hh^T + b_hh); may be dgi itself when
 *                   the two are equal and time = step (forward rnn / lstm)
 * Padding rows pass dh, dc through and get zero gate gradients. */
static void FN(step_backward)(const ct_rnn_shape *s, ct_int step, const real *dout,
                              FN(rnn_saved) v, real *dh, real *dc, real *dgi, real *dgh,
                              ct_int b0, ct_int b1)
{
    ct_int B = s->B, H = s->H, GH = ct_rnn_gate_count(s->mode) * H;
    for (ct_int b = b0; b < b1; b++) {
        ct_int len = ct_rnn_length(s, b), row = step * B + b, next = row + B;
        real *dgh_row = dgh + row * GH;
        if (step >= len) {
            memset(dgh_row, 0, (size_t)GH * sizeof(real));
            if (dgi != dgh) memset(dgi + row * GH, 0, (size_t)GH * sizeof(real));
            continue;
        }
        ct_int t = ct_rnn_time(s, len, step);
        real *dh_row = dh + b * H, *dc_row = v.cs ? dc + b * H : NULL;
        real *dgi_row = dgi + (t * B + b) * GH;
        if (dout)
            for (ct_int k = 0; k < H; k++) dh_row[k] += dout[(t * B + b) * H + k];
        const real *gates = v.gates ? v.gates + (t * B + b) * ct_rnn_saved_gate_count(s->mode) * H
                                    : NULL; /* rnn: unused */
        FN(row_backward)(s->mode, H, gates, v.hs + row * H,
                         v.hs + next * H, v.cs ? v.cs + row * H : NULL,
                         v.cs ? v.cs + next * H : NULL, dh_row, dc_row, dgi_row,
                         s->mode == CT_GRU ? dgh_row : NULL);
        if (s->mode != CT_GRU && dgh_row != dgi_row)
            memcpy(dgh_row, dgi_row, (size_t)GH * sizeof(real));
    }
}

/* The backward time loop of batch rows [b0, b1). */
static void FN(backward_sweep)(void *ctx, ptrdiff_t b0, ptrdiff_t b1)
{
    const FN(sweep) *w = ctx;
    ct_int B = w->shape->B, H = w->shape->H, GH = w->sw->GH;
    for (ct_int step = w->shape->T - 1; step >= 0; step--) {
        FN(step_backward)(w->shape, step, w->dout, w->v, w->dh, w->dc, w->dgi, w->dgh, b0, b1);
        FN(step_product)(w->sw, w->dh + b0 * H, w->dgh + (step * B + b0) * GH, NULL, b1 - b0);
    }
}

/* rnn_backward (accumulates; returns 0, or -1 when out of memory)
 *   dout (T, B, H) or NULL, dh_n, dc_n (B, H) or NULL: gradients of the outputs
 *   x, w_ih, w_hh, saved: as given to / filled by rnn_forward
 *   dx (T, B, I), dh0, dc0 (B, H), dw_ih (G*H, I), dw_hh (G*H, H), db_ih, db_hh (G*H):
 *   each += its gradient, or skipped when NULL.
 * Backward through time: per step one fused gate loop and one GEMM
 * dh += dgh[s] W_hh; the weight gradients are one GEMM each over all steps. */
int FN(rnn_backward)(real *dx, real *dh0, real *dc0, real *dw_ih, real *dw_hh, real *db_ih,
                     real *db_hh, const real *dout, const real *dh_n, const real *dc_n,
                     const real *x, const real *w_ih, const real *w_hh, const real *saved,
                     const ct_rnn_shape *shape)
{
    ct_int T = shape->T, B = shape->B, H = shape->H, BH = B * H;
    ct_int GH = ct_rnn_gate_count(shape->mode) * H, n_g = CT_MAX(T * B * GH, 1);
    FN(rnn_saved) v = FN(saved_views)((real *)saved, shape);
    /* dL/d(input projection) is time-indexed, dL/d(recurrent projection)
     * step-indexed: one buffer serves both unless reverse or gru. */
    int shared = !shape->reverse && shape->mode != CT_GRU;
    real *dgh = malloc((size_t)n_g * sizeof(real));
    real *dgi = shared ? dgh : malloc((size_t)n_g * sizeof(real));
    real *dh = calloc((size_t)CT_MAX(BH, 1), sizeof(real));
    real *dc = calloc((size_t)CT_MAX(BH, 1), sizeof(real));
    int status = -1;
    if (dgh == NULL || dgi == NULL || dh == NULL || dc == NULL) goto done;
    if (dh_n) memcpy(dh, dh_n, (size_t)BH * sizeof(real));
    if (dc_n && v.cs) memcpy(dc, dc_n, (size_t)BH * sizeof(real));
    FN(step_weight) sw;
    if (FN(step_weight_init)(&sw, w_hh, GH, H, T, 1) != 0) goto done;
    FN(sweep) sweep = {.shape = shape, .v = v, .sw = &sw, .dout = dout, .dh = dh, .dc = dc,
                       .dgi = dgi, .dgh = dgh};
    int sweepers = FN(sweep_threads)(&sw, B);
    int threads = ct_rnn_threads_enter(2.0 * B * H * GH);
    FN(run_sweeps)(&sweep, sweepers, FN(backward_sweep));
    ct_rnn_threads_leave(threads);
    FN(step_weight_free)(&sw);
    if (dh0)
        for (ct_int k = 0; k < BH; k++) dh0[k] += dh[k];
    if (dc0 && v.cs)
        for (ct_int k = 0; k < BH; k++) dc0[k] += dc[k];
    threads = ct_rnn_threads_enter(2.0 * T * B * (shape->In + H) * GH);
    FN(linear_backward)(dx, dw_ih, db_ih, dgi, x, w_ih, T * B, shape->In, GH, 1);
    FN(linear_backward)(NULL, dw_hh, db_hh, dgh, v.hs, w_hh, T * B, H, GH, 1);
    ct_rnn_threads_leave(threads);
    status = 0;
done:
    if (dgi != dgh) free(dgi);
    free(dgh);
    free(dh);
    free(dc);
    return status;
}

#endif

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
#include "recurrent.h"

static inline real FN(sigmoid)(real a) { return (real)1 / ((real)1 + EXP(-a)); }

/* ---------------------------------------------------------------------------
 * Gate maths of one row (one sequence, one step).  Shared by the sequence
 * kernel and, through it, by the cell.
 *   xp (G*H)  x W_ih^T + b_ih          hp (G*H)  h W_hh^T + b_hh
 *   h, c (H)  state before the step    h_new, c_new (H)  state after
 *   gates     saved for backward: lstm i,f,g,o; gru r,z,n,p_n (4H each row)
 * c, c_new and gates are unused (may be NULL) for plain rnn. */
static void FN(row_forward)(int mode, ct_int H, const real *xp, const real *hp, const real *h,
                            const real *c, real *h_new, real *c_new, real *gates)
{
    switch (mode) {
    case CT_RNN_TANH:
        for (ct_int k = 0; k < H; k++) h_new[k] = TANH(xp[k] + hp[k]);
        break;
    case CT_RNN_RELU:
        for (ct_int k = 0; k < H; k++) {
            real a = xp[k] + hp[k];
            h_new[k] = a < 0 ? 0 : a; /* NaN stays NaN */
        }
        break;
    case CT_LSTM:
        for (ct_int k = 0; k < H; k++) {
            real i = FN(sigmoid)(xp[k] + hp[k]);
            real f = FN(sigmoid)(xp[H + k] + hp[H + k]);
            real g = TANH(xp[2 * H + k] + hp[2 * H + k]);
            real o = FN(sigmoid)(xp[3 * H + k] + hp[3 * H + k]);
            c_new[k] = f * c[k] + i * g;
            h_new[k] = o * TANH(c_new[k]);
            gates[k] = i, gates[H + k] = f, gates[2 * H + k] = g, gates[3 * H + k] = o;
        }
        break;
    default: /* CT_GRU */
        for (ct_int k = 0; k < H; k++) {
            real r = FN(sigmoid)(xp[k] + hp[k]);
            real z = FN(sigmoid)(xp[H + k] + hp[H + k]);
            real pn = hp[2 * H + k];
            real n = TANH(xp[2 * H + k] + r * pn);
            h_new[k] = (1 - z) * n + z * h[k];
            gates[k] = r, gates[H + k] = z, gates[2 * H + k] = n, gates[3 * H + k] = pn;
        }
        break;
    }
}

/* Backward of row_forward.
 *   dh (H)   in: dL/dh_new;  out: the part of dL/dh that bypasses W_hh (gru: dh' * z)
 *   dc (H)   lstm: in dL/dc_new, out dL/dc
 *   dgi, dgh (G*H)  written: dL/da and dL/dp (equal except for gru's n block);
 *                   they may be the same buffer when equal. */
static void FN(row_backward)(int mode, ct_int H, const real *gates, const real *h,
                             const real *h_new, const real *c, const real *c_new, real *dh,
                             real *dc, real *dgi, real *dgh)
{
    switch (mode) {
    case CT_RNN_TANH: /* tanh' = 1 - h'^2 */
        for (ct_int k = 0; k < H; k++) {
            real d = dh[k] * (1 - h_new[k] * h_new[k]);
            dgi[k] = d, dgh[k] = d, dh[k] = 0;
        }
        break;
    case CT_RNN_RELU: /* relu' = [h' > 0] */
        for (ct_int k = 0; k < H; k++) {
            real d = h_new[k] <= 0 ? 0 : dh[k];
            dgi[k] = d, dgh[k] = d, dh[k] = 0;
        }
        break;
    case CT_LSTM:
        for (ct_int k = 0; k < H; k++) {
            real i = gates[k], f = gates[H + k], g = gates[2 * H + k], o = gates[3 * H + k];
            real tc = TANH(c_new[k]);
            /* total dL/dc' = through h' = o tanh(c') plus from the next step */
            real dct = dc[k] + dh[k] * o * (1 - tc * tc);
            real d_i = dct * g * i * (1 - i);
            real d_f = dct * c[k] * f * (1 - f);
            real d_g = dct * i * (1 - g * g);
            real d_o = dh[k] * tc * o * (1 - o);
            dgi[k] = d_i, dgi[H + k] = d_f, dgi[2 * H + k] = d_g, dgi[3 * H + k] = d_o;
            dgh[k] = d_i, dgh[H + k] = d_f, dgh[2 * H + k] = d_g, dgh[3 * H + k] = d_o;
            dc[k] = dct * f, dh[k] = 0;
        }
        break;
    default: /* CT_GRU */
        for (ct_int k = 0; k < H; k++) {
            real r = gates[k], z = gates[H + k], n = gates[2 * H + k], pn = gates[3 * H + k];
            real dhk = dh[k];
            real d_n = dhk * (1 - z) * (1 - n * n);        /* d(a_n + r p_n) */
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
 * The saved buffer (see ct_rnn_saved_size): step-indexed states and gates. */
typedef struct {
    real *hs;    /* (T+1, B, H) */
    real *cs;    /* (T+1, B, H) lstm, else NULL */
    real *gates; /* (T, B, SG*H) */
} FN(rnn_saved);

static FN(rnn_saved) FN(saved_views)(real *saved, const ct_rnn_shape *s)
{
    FN(rnn_saved) v;
    ct_int states = (s->T + 1) * s->B * s->H;
    v.hs = saved;
    v.cs = s->mode == CT_LSTM ? saved + states : NULL;
    v.gates = (v.cs ? v.cs : v.hs) + states;
    return v;
}

/* One forward step s over the batch.
 *   xproj (T, B, G*H) time-indexed;  hproj (B, G*H) = hs[s] W_hh^T + b_hh
 *   out (T, B, H) time-indexed; reads v.hs[s], v.cs[s], writes [s+1] and gates[s].
 * A row past its length keeps its state; its time slot s is padding: out = 0. */
static void FN(step_forward)(const ct_rnn_shape *s, ct_int step, const real *xproj,
                             const real *hproj, FN(rnn_saved) v, real *out)
{
    ct_int B = s->B, H = s->H, GH = ct_rnn_gate_count(s->mode) * H;
    ct_int SGH = ct_rnn_saved_gate_count(s->mode) * H;
    for (ct_int b = 0; b < B; b++) {
        ct_int len = ct_rnn_length(s, b), row = step * B + b, next = row + B;
        const real *h = v.hs + row * H, *c = v.cs ? v.cs + row * H : NULL;
        real *h_new = v.hs + next * H, *c_new = v.cs ? v.cs + next * H : NULL;
        real *gates = v.gates + row * SGH;
        if (step >= len) {
            memcpy(h_new, h, (size_t)H * sizeof(real));
            if (c) memcpy(c_new, c, (size_t)H * sizeof(real));
            memset(gates, 0, (size_t)SGH * sizeof(real));
            memset(out + row * H, 0, (size_t)H * sizeof(real));
            continue;
        }
        ct_int t = ct_rnn_time(s, len, step);
        FN(row_forward)(s->mode, H, xproj + (t * B + b) * GH, hproj + b * GH, h, c, h_new, c_new,
                        gates);
        memcpy(out + (t * B + b) * H, h_new, (size_t)H * sizeof(real));
    }
}

/* rnn_forward (returns 0, or -1 when out of memory)
 *   x      (T, B, I)     time-major input
 *   h0, c0 (B, H)        initial state, NULL = zeros (c0: lstm only)
 *   w_ih   (G*H, I), w_hh (G*H, H), b_ih, b_hh (G*H) or NULL; G = 1, 4, 3
 *   out    (T, B, H)     h at every real step, 0 on padding
 *   h_n, c_n (B, H)      each sequence's state after its last real step (NULL: skipped)
 *   saved  (ct_rnn_saved_size)  for rnn_backward
 */
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

    real *xproj = malloc((size_t)CT_MAX(T * B * GH, 1) * sizeof(real));
    real *hproj = malloc((size_t)CT_MAX(B * GH, 1) * sizeof(real));
    if (xproj == NULL || hproj == NULL) {
        free(xproj);
        free(hproj);
        return -1;
    }
    FN(linear_forward)(xproj, x, w_ih, b_ih, T * B, shape->In, GH);
    for (ct_int step = 0; step < T; step++) {
        FN(linear_forward)(hproj, v.hs + step * BH, w_hh, b_hh, B, H, GH);
        FN(step_forward)(shape, step, xproj, hproj, v, out);
    }
    if (h_n) memcpy(h_n, v.hs + T * BH, (size_t)BH * sizeof(real));
    if (c_n && v.cs) memcpy(c_n, v.cs + T * BH, (size_t)BH * sizeof(real));
    free(xproj);
    free(hproj);
    return 0;
}

/* One backward step s over the batch.
 *   dh, dc (B, H)   in: dL/d(state after step s) excluding out[t]; out: the part
 *                   of dL/d(state before step s) that bypasses W_hh
 *   dgi (T, B, G*H) time-indexed dL/d(x W_ih^T + b_ih)
 *   dgh (T, B, G*H) step-indexed dL/d(h W_hh^T + b_hh)
 * Padding rows pass dh, dc through and get zero gate gradients. */
static void FN(step_backward)(const ct_rnn_shape *s, ct_int step, const real *dout,
                              FN(rnn_saved) v, real *dh, real *dc, real *dgi, real *dgh)
{
    ct_int B = s->B, H = s->H, GH = ct_rnn_gate_count(s->mode) * H;
    ct_int SGH = ct_rnn_saved_gate_count(s->mode) * H;
    for (ct_int b = 0; b < B; b++) {
        ct_int len = ct_rnn_length(s, b), row = step * B + b, next = row + B;
        real *dgh_row = dgh + row * GH;
        if (step >= len) {
            memset(dgh_row, 0, (size_t)GH * sizeof(real));
            if (dgi != dgh) memset(dgi + row * GH, 0, (size_t)GH * sizeof(real));
            continue;
        }
        ct_int t = ct_rnn_time(s, len, step);
        real *dh_row = dh + b * H, *dc_row = v.cs ? dc + b * H : NULL;
        if (dout)
            for (ct_int k = 0; k < H; k++) dh_row[k] += dout[(t * B + b) * H + k];
        FN(row_backward)(s->mode, H, v.gates + row * SGH, v.hs + row * H, v.hs + next * H,
                         v.cs ? v.cs + row * H : NULL, v.cs ? v.cs + next * H : NULL, dh_row,
                         dc_row, dgi + (t * B + b) * GH, dgh_row);
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
    for (ct_int step = T - 1; step >= 0; step--) {
        FN(step_backward)(shape, step, dout, v, dh, dc, dgi, dgh);
        FN(linear_backward)(dh, NULL, NULL, dgh + step * B * GH, NULL, w_hh, B, H, GH, 1);
    }
    if (dh0)
        for (ct_int k = 0; k < BH; k++) dh0[k] += dh[k];
    if (dc0 && v.cs)
        for (ct_int k = 0; k < BH; k++) dc0[k] += dc[k];
    FN(linear_backward)(dx, dw_ih, db_ih, dgi, x, w_ih, T * B, shape->In, GH, 1);
    FN(linear_backward)(NULL, dw_hh, db_hh, dgh, v.hs, w_hh, T * B, H, GH, 1);
    status = 0;
done:
    if (dgi != dgh) free(dgi);
    free(dgh);
    free(dh);
    free(dc);
    return status;
}

#endif

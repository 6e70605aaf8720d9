/* recurrent.h - prototypes of recurrent.c (a template: see ct_template.h),
 * plus the dtype-independent description of a recurrent layer. */
#ifndef CT_RECURRENT_COMMON_H
#define CT_RECURRENT_COMMON_H
#include "ct.h"

/* Cell kinds, named as torch's `mode` strings. */
enum { CT_RNN_TANH = 0, CT_RNN_RELU = 1, CT_LSTM = 2, CT_GRU = 3 };

/* One single-layer, single-direction recurrent layer over a batch.
 *   T steps, B sequences, In inputs, H hidden units;
 *   lengths (B) each in [1, T], or NULL for "all T" (checked by the caller);
 *   reverse: each sequence runs from its own last real step back to step 0. */
typedef struct {
    int mode;
    int reverse;
    ct_int T, B, In, H; /* In, not I: complex.h defines I */
    const int64_t *lengths;
} ct_rnn_shape;

/* Gate blocks per hidden unit: W_ih is (G*H, I), W_hh (G*H, H). */
static inline ct_int ct_rnn_gate_count(int mode)
{
    return mode == CT_LSTM ? 4 : mode == CT_GRU ? 3 : 1;
}

/* Saved per (step, row), in units of H: lstm i,f,g,o; gru r,z,n,(h W_hn + b_hn). */
static inline ct_int ct_rnn_saved_gate_count(int mode)
{
    return (mode == CT_LSTM || mode == CT_GRU) ? 4 : 0;
}

/* Length of the `saved` buffer the forward fills for the backward:
 *   hs    (T+1, B, H)   state before step s at [s]; hs[0] = h0
 *   cs    (T+1, B, H)   lstm only: cell state, same indexing
 *   gates (T, B, SG*H)  activations of step s (SG = ct_rnn_saved_gate_count)
 * Everything is indexed by step (processing order), not by time. */
static inline ct_int ct_rnn_saved_size(int mode, ct_int T, ct_int B, ct_int H)
{
    ct_int states = (mode == CT_LSTM ? 2 : 1) * (T + 1) * B * H;
    return states + T * B * H * ct_rnn_saved_gate_count(mode);
}

/* Real length of sequence b. */
static inline ct_int ct_rnn_length(const ct_rnn_shape *s, ct_int b)
{
    return s->lengths ? (ct_int)s->lengths[b] : s->T;
}

/* Time index that sequence b (of length len) visits at step `step` < len. */
static inline ct_int ct_rnn_time(const ct_rnn_shape *s, ct_int len, ct_int step)
{
    return s->reverse ? len - 1 - step : step;
}
#endif /* CT_RECURRENT_COMMON_H */

#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "recurrent.h"
#include "ct_template.h"
#else
int FN(rnn_forward)(real *out, real *h_n, real *c_n, real *saved, const real *x, const real *h0,
                    const real *c0, const real *w_ih, const real *w_hh, const real *b_ih,
                    const real *b_hh, const ct_rnn_shape *shape);
int FN(rnn_backward)(real *dx, real *dh0, real *dc0, real *dw_ih, real *dw_hh, real *db_ih,
                     real *db_hh, const real *dout, const real *dh_n, const real *dc_n,
                     const real *x, const real *w_ih, const real *w_hh, const real *saved,
                     const ct_rnn_shape *shape);
#endif

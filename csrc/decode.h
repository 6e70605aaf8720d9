/* decode.h - prototypes of decode.c (a template: see ct_template.h).
 *
 * Incremental (one token at a time) attention over a key/value cache:
 *   B rows (batch x beams), H heads, Tmax cache slots, Dh key head dim, Dv value head dim. */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "decode.h"
#include "ct_template.h"
#else
void FN(kv_cache_append)(real *cache_k, real *cache_v, const real *k_t, const real *v_t,
                         const int64_t *pos, ct_int B, ct_int H, ct_int Tmax, ct_int Dh,
                         ct_int Dv);
int FN(attend_step)(real *out, const real *q_t, const real *cache_k, const real *cache_v,
                    const int64_t *lengths, const unsigned char *key_padding, double scale,
                    ct_int B, ct_int H, ct_int Tmax, ct_int Dh, ct_int Dv);
void FN(cache_reorder)(real *out, const real *cache, const int64_t *rows, ct_int B_out,
                       ct_int H, ct_int Tmax, ct_int D, ct_int length);
#endif

/* ct_template_end.h - undo the per-dtype macros of one ct_template.h pass
 * (included by ct_template.h after each #include CT_TEMPLATE_FILE, so the
 * float64 pass starts clean; the list is written once, here). */
#undef real
#undef acc_t
#undef CT_DTYPE_IS_F32
#undef FN
#undef SQRT
#undef FABS
#undef POW
#undef GEMM
#undef GEMM_BIAS
#undef GEMM_BATCH_STRIDED
#undef AXPY
#undef DOT
#undef REAL_MAX
#undef REAL_MIN_NORMAL

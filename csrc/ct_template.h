/* ct_template.h - instantiate a maths file for float32 and float64.
 *
 * A maths file starts with
 *
 *     #ifndef CT_TEMPLATE_PASS
 *     #define CT_TEMPLATE_FILE "linear.c"
 *     #include "ct_template.h"
 *     #else
 *     ... kernels written with real / FN() / GEMM; exp, tanh, erf and the
 *         lane-split sums come from ct_math.h (VEXP, VTANH, VERF, VSUM ...) ...
 *     #endif
 *
 * This header then includes CT_TEMPLATE_FILE twice, once per dtype, so the
 * float32 and float64 kernels come from one source.  Helpers that do not
 * depend on the dtype go in a `#ifndef CT_<FAMILY>_COMMON` block inside the
 * template, or in ct.h.
 *
 * The same mechanism declares prototypes: a family header (linear.h) is a
 * template of prototypes, included by the bindings through this file.
 * Every macro is undefined again at the end, so the file can be used
 * several times in one translation unit. */
#include "ct.h"
#include "ct_blas.h"

#define CT_TEMPLATE_PASS 1

/* ---------------- float32 ---------------- */
#define real float
#define acc_t double
#define CT_DTYPE_IS_F32 1
#define FN(name) CT_CAT(name, _f32)
#define SQRT sqrtf
#define FABS fabsf
#define POW powf
#define GEMM ct_sgemm /* cblas_sgemm + thread policy (ct_blas.h) */
#define GEMM_BIAS ct_sgemm_bias /* the same, C = op(A) op(B) + bias rows */
#define GEMM_BATCH_STRIDED CT_BLAS(cblas_sgemm_batch_strided)
#define AXPY CT_BLAS(cblas_saxpy)
#define DOT CT_BLAS(cblas_sdot)
#define REAL_MAX 3.402823466e+38f
#define REAL_MIN_NORMAL 1.17549435e-38f /* FLT_MIN */
#include CT_TEMPLATE_FILE
#include "ct_template_end.h"

/* ---------------- float64 ---------------- */
#define real double
#define acc_t double
#define CT_DTYPE_IS_F32 0
#define FN(name) CT_CAT(name, _f64)
#define SQRT sqrt
#define FABS fabs
#define POW pow
#define GEMM ct_dgemm
#define GEMM_BIAS ct_dgemm_bias
#define GEMM_BATCH_STRIDED CT_BLAS(cblas_dgemm_batch_strided)
#define AXPY CT_BLAS(cblas_daxpy)
#define DOT CT_BLAS(cblas_ddot)
#define REAL_MAX 1.7976931348623157e+308
#define REAL_MIN_NORMAL 2.2250738585072014e-308 /* DBL_MIN */
#include CT_TEMPLATE_FILE
#include "ct_template_end.h"
#undef CT_TEMPLATE_PASS
#undef CT_TEMPLATE_FILE

"""The comparison tolerances of the test suite, in one place.

Test modules import them from here (``from tolerances import F32, F64``;
a test module cannot rely on importing ``conftest``, which pytest loads under
its own rules).  Use them as ``np.testing.assert_allclose(a, b, **F64)``.
Never loosen one to get a test green: find why the results differ.
"""

# float32 against a float64 reference or torch's float32 (the project
# standard): a few float32 ulp (1.2e-7) grown by sums of ~100 terms and by
# cancellation; atol covers results near 0.
F32 = dict(rtol=2e-4, atol=2e-5)

# float64, the same maths in another order of operations (BLAS against
# np.matmul, a Transformer against torch's float64, a gradient through
# several kernels).  Rounding is ~1e-16 per operation, but a subtraction of
# nearly equal numbers multiplies it: LayerNorm of rows 1e4 + N(0, 1) loses
# four digits to x - mean and differs from its reference by 2e-11 relative
# (test_kernels_layernorm.py::test_stable_for_offset_and_constant_rows).
F64 = dict(rtol=1e-10, atol=1e-12)

# float64, a kernel against a NumPy reference of the same few operations in
# nearly the same order, on well-conditioned data (attention, fused ops, KV
# cache, the generic kernel table): the results agree to a few hundred ulp,
# so a 1e-10 tolerance would hide a hundredfold loss of accuracy.
F64_TIGHT = dict(rtol=1e-12, atol=1e-12)

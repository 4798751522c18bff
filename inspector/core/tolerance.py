"""When two values count as equal: NumPy's `isclose` rule, `|a - b| <= atol + rtol * |b|`.

Its defaults live here, below both `diff` (which imports no JAX for structure) and
`diff.values` (the compiled comparison), so both state the same ones.
"""

RTOL, ATOL = 1e-5, 1e-8  # np.isclose's defaults

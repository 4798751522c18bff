"""`inspector.merge`: each method against NumPy float64 implementations written from the papers
(tests/core/merge_reference.py), DARE's properties, recompiles, and the errors."""

import jax
import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector import InspectorError, StructureMismatchError, UnsupportedLeafError
from inspector.core.lazy import LazyArray
from tests.core import merge_reference as ref

SHAPES = {"w": (6, 7), "b": (13,), "conv": (2, 3, 4)}


def models(n, dtype=np.float32, seed=0, scale=0.1):
    """A base and n fine-tuned trees around it."""
    rng = np.random.default_rng(seed)
    base = {k: rng.standard_normal(s) for k, s in SHAPES.items()}
    tuned = [{k: v + scale * rng.standard_normal(v.shape) for k, v in base.items()}
             for _ in range(n)]
    cast = lambda t: {k: v.astype(dtype) for k, v in t.items()}  # noqa: E731
    return cast(base), [cast(t) for t in tuned]


def f64(tree):
    return {k: np.asarray(v).astype(np.float64) for k, v in tree.items()}


def reference(method, base, trees, **p):
    base = f64(base) if base is not None else None
    trees = [f64(t) for t in trees]
    p = {k: [v] * len(trees) if k in ("weights", "density") and np.isscalar(v) else v
         for k, v in p.items()}
    out = {}
    for k in SHAPES:
        xs = [t[k] for t in trees]
        if method == "linear":
            out[k] = ref.linear(xs, p["weights"], p.get("normalize", True))
        elif method == "task_arithmetic":
            out[k] = ref.task_arithmetic(base[k], xs, p["weights"], p.get("lam", 1.0),
                                         p.get("normalize", False))
        elif method == "ties":
            out[k] = ref.ties(base[k], xs, p["weights"], p["density"], p.get("lam", 1.0),
                              p.get("normalize", True), p.get("rescale", False))
        elif method == "slerp":
            out[k] = ref.slerp(xs[0], xs[1], p["t"])
        elif method == "model_stock":
            out[k] = ref.model_stock(base[k], xs)
    return out


CASES = [
    ("linear", 3, {"weights": [0.2, 0.5, 0.3]}),
    ("linear", 2, {"weights": [2.0, -0.5], "normalize": False}),
    ("task_arithmetic", 3, {"weights": [0.5, 1.0, -0.4], "lam": 0.7}),
    ("task_arithmetic", 2, {"weights": [0.5, 1.0], "normalize": True}),
    ("ties", 3, {"weights": [1.0, 0.5, 0.8], "density": [0.3, 0.6, 1.0]}),
    ("ties", 2, {"weights": [0.7, 0.7], "density": [0.25, 0.5], "lam": 1.5, "rescale": True,
                 "normalize": False}),
    ("slerp", 2, {"t": 0.35}),
    ("slerp", 2, {"t": 1.2}),
    ("model_stock", 2, {}),
    ("model_stock", 4, {}),
]


@pytest.mark.slow
@pytest.mark.parametrize("packed", [False, True], ids=["tree", "packed"])
@pytest.mark.parametrize(("method", "n", "params"), CASES,
                         ids=[f"{m}-{n}-{i}" for i, (m, n, _) in enumerate(CASES)])
def test_float32_against_numpy_float64(method, n, params, packed):
    base, trees = models(n, seed=n)
    base_arg = base if method not in ("linear", "slerp") else None
    expected = reference(method, base_arg, trees, **params)
    if packed:
        trees = [inspector.pack(t) for t in trees]
        base_arg = inspector.pack(base_arg) if base_arg is not None else None
    out = inspector.merge(method, trees, base=base_arg, **params)
    out = out.unpack() if packed else out
    for k in SHAPES:
        assert np.asarray(out[k]).dtype == np.float32
        np.testing.assert_allclose(np.asarray(out[k]), expected[k], rtol=1e-5, atol=1e-5,
                                   err_msg=k)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize("method", ["linear", "ties", "slerp", "model_stock"])
def test_half_precision_is_within_an_ulp_of_float32_cast_once(method, dtype):
    # a tolerance: a merge computed wholly in the half type passes it too; test_half_precision.py
    # holds the exact test (linear and task_arithmetic) that such a merge fails
    base, trees = models(2, dtype=dtype, seed=7)
    params = {"linear": {"weights": [0.3, 0.7]}, "ties": {"weights": [1, 1], "density": 0.5},
              "slerp": {"t": 0.4}, "model_stock": {}}[method]
    base_arg = base if method in ("ties", "model_stock") else None
    out = inspector.merge(method, trees, base=base_arg, **params)
    expected = reference(method, base_arg, trees, **params)
    for k in SHAPES:
        assert np.asarray(out[k]).dtype == np.dtype(dtype)
        once = expected[k].astype(np.float32).astype(dtype).astype(np.float64)
        got = np.asarray(out[k]).astype(np.float64)
        # one final rounding of the float32 result: at most one unit in the last place
        np.testing.assert_allclose(got, once, rtol=2 * float(ml_dtypes.finfo(dtype).eps), atol=1e-6)


def dare_masks(method, base, trees, density, seed):
    """The drop masks DARE drew: with weight 1 on tree i only, result - base is that tree's
    kept (rescaled) task vector, zero where it was dropped."""
    masks = []
    for i in range(len(trees)):
        w = [float(i == j) for j in range(len(trees))]
        out = inspector.merge("dare_linear", trees, base=base, weights=w, density=density,
                              seed=seed, rescale=False)
        masks.append({k: np.asarray(out[k]) != np.asarray(base[k]) for k in SHAPES})
    return masks


@pytest.mark.parametrize("rescale", [True, False])
@pytest.mark.parametrize("method", ["dare_linear", "dare_ties"])
def test_dare_against_numpy_with_its_masks(method, rescale):
    base, trees = models(3, seed=3)
    density, weights, seed = [0.3, 0.5, 0.9], [1.0, 0.6, -0.4], 1234
    masks = dare_masks(method, base, trees, density, seed)
    out = inspector.merge(method, trees, base=base, weights=weights, density=density,
                          seed=seed, rescale=rescale, lam=0.9)
    b, ts = f64(base), [f64(t) for t in trees]
    for k in SHAPES:
        kept = [m[k].mean() for m in masks]
        assert 0 < kept[0] < kept[2] <= 1
        expected = ref.dare(b[k], [t[k] for t in ts], weights, [m[k] for m in masks], lam=0.9,
                            rescale=rescale, consensus=method == "dare_ties")
        np.testing.assert_allclose(np.asarray(out[k]), expected, rtol=1e-5, atol=1e-5)


def test_dare_same_seed_same_result_other_seed_other_mask():
    base, trees = models(2)
    run = lambda s: inspector.merge("dare_ties", trees, base=base, density=0.5, seed=s)  # noqa
    a, b, c = run(7), run(7), run(8)
    for k in SHAPES:
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
    assert any(not np.array_equal(np.asarray(a[k]), np.asarray(c[k])) for k in SHAPES)


def test_dare_packed_and_plain_trees_draw_the_same_masks():
    base, trees = models(2)
    kw = dict(weights=[0.5, 0.8], density=0.4, seed=99)
    plain = inspector.merge("dare_ties", trees, base=base, **kw)
    packed = inspector.merge("dare_ties", [inspector.pack(t) for t in trees],
                             base=inspector.pack(base), **kw).unpack()
    for k in SHAPES:
        np.testing.assert_array_equal(np.asarray(plain[k]), np.asarray(packed[k]))


@pytest.mark.parametrize(("dare", "plain"), [("dare_linear", "task_arithmetic"),
                                             ("dare_ties", "ties")])
def test_dare_at_density_one_is_the_method_without_dropping(dare, plain):
    base, trees = models(3)
    kw = dict(weights=[0.4, 1.0, 0.7], lam=1.1, normalize=True)
    a = inspector.merge(dare, trees, base=base, density=1.0, seed=5, **kw)
    b = inspector.merge(plain, trees, base=base, **kw)
    for k in SHAPES:
        # the same arithmetic, fused differently: equal up to a float32 rounding
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=3e-7, atol=1e-7)


def test_dare_rescale_preserves_the_mean_of_the_task_vector():
    rng = np.random.default_rng(0)
    base = {"w": np.zeros(20_000, np.float32)}
    delta = rng.standard_normal(20_000).astype(np.float32) + 0.5
    tuned = {"w": delta}
    p = 0.3
    runs = [np.asarray(inspector.merge("dare_linear", [tuned], base=base, density=p,
                                       seed=s)["w"]) for s in range(40)]
    kept = np.mean([r != 0 for r in runs])
    assert abs(kept - p) < 0.01
    # one run: the L1 norm is restored exactly, the mean statistically
    np.testing.assert_allclose(np.abs(runs[0]).sum(), np.abs(delta).sum(), rtol=1e-4)
    assert abs(runs[0].mean() - delta.mean()) < 0.05 * abs(delta.mean())
    # averaged over seeds, each element approaches its delta (error ~ sqrt((1-p)/(p*40)))
    avg = np.mean(runs, axis=0)
    single = np.linalg.norm(runs[0] - delta) / np.linalg.norm(delta)
    err = np.linalg.norm(avg - delta) / np.linalg.norm(delta)
    assert single > 1.0 and 0.15 < err < 0.35
    unscaled = np.asarray(inspector.merge("dare_linear", [tuned], base=base, density=p,
                                          rescale=False)["w"])
    assert abs(unscaled.mean() - p * delta.mean()) < 0.05 * abs(delta.mean())


def test_ties_keeps_the_top_k_magnitudes_and_elects_by_weighted_sum():
    base = {"w": np.zeros(6, np.float32)}
    a = {"w": np.array([5, -4, 0.5, -3, 1, 2], np.float32)}
    b = {"w": np.array([-1, 4.5, 0.2, -6, -2, 0.1], np.float32)}
    out = inspector.merge("ties", [a, b], base=base, weights=[1.0, 1.0], density=0.5)
    # a keeps 5, -4, -3; b keeps 4.5, -6, -2: sums 5, 0.5, 0, -9, -2, 0 elect + + + - - +
    np.testing.assert_allclose(np.asarray(out["w"]), [5, 4.5, 0, -4.5, -2, 0])


@pytest.mark.slow
@pytest.mark.parametrize("packed", [False, True], ids=["tree", "packed"])
def test_numeric_parameters_never_recompile(packed):
    base, trees = models(3)
    if packed:
        trees, base = [inspector.pack(t) for t in trees], inspector.pack(base)
    calls = [
        ("linear", None, lambda i: {"weights": [i, 1.0, 2.0]}),
        ("task_arithmetic", base, lambda i: {"weights": [1, i, 2], "lam": 0.1 * i}),
        ("ties", base, lambda i: {"density": 0.04 * (i + 1), "lam": 1 + i, "weights": 0.3 * i + 1}),
        ("dare_ties", base, lambda i: {"density": [0.1, 0.05 * i, 0.9], "seed": i}),
        ("dare_linear", base, lambda i: {"density": 0.04 * (i + 1), "seed": 3 * i}),
        ("model_stock", base, lambda i: {}),
    ]
    for method, b, params in calls:
        inspector.merge(method, trees, base=b, **params(0))
        before = inspector.compile_count()
        for i in range(1, 21):
            inspector.merge(method, trees, base=b, **params(i))
        assert inspector.compile_count() == before, method
    two = trees[:2]
    inspector.merge("slerp", two, t=0.0)
    before = inspector.compile_count()
    for i in range(20):
        inspector.merge("slerp", two, t=i / 20)
    assert inspector.compile_count() == before


def test_slerp_endpoints_and_parallel_fallback():
    _, (a, b) = models(2)
    for k, v in inspector.merge("slerp", [a, b], t=0.0).items():
        np.testing.assert_allclose(np.asarray(v), a[k], rtol=1e-5, atol=1e-6)
    for k, v in inspector.merge("slerp", [a, b], t=1.0).items():
        np.testing.assert_allclose(np.asarray(v), b[k], rtol=1e-5, atol=1e-6)
    opposite = {k: -3 * v for k, v in a.items()}  # antiparallel: linear interpolation
    out = inspector.merge("slerp", [a, opposite], t=0.25)
    for k in SHAPES:
        np.testing.assert_allclose(np.asarray(out[k]), 0.75 * a[k] + 0.25 * opposite[k],
                                   rtol=1e-5, atol=1e-6)


def test_lazy_checkpoint_leaves_are_read_when_merged():
    base, trees = models(2)
    reads = []

    def lazy(tree, name):
        def leaf(k, v):
            return LazyArray(v.shape, v.dtype, lambda: reads.append((name, k)) or v)
        return {k: leaf(k, v) for k, v in tree.items()}

    out = inspector.merge("ties", [lazy(t, f"t{i}") for i, t in enumerate(trees)],
                          base=lazy(base, "base"), density=0.5)
    assert sorted(reads) == sorted((n, k) for n in ("base", "t0", "t1") for k in SHAPES)
    expected = reference("ties", base, trees, weights=[1, 1], density=[0.5, 0.5])
    for k in SHAPES:
        np.testing.assert_allclose(np.asarray(out[k]), expected[k], rtol=1e-5, atol=1e-5)


def test_base_missing_names_the_methods_that_need_one():
    _, trees = models(2)
    with pytest.raises(InspectorError) as e:
        inspector.merge("ties", trees)
    assert str(e.value) == (
        "'ties' needs base=: the tree the others were fine-tuned from (its deltas x_i - base "
        "are merged). Methods that need a base: dare_linear, dare_ties, model_stock, "
        "task_arithmetic, ties.")


@pytest.mark.parametrize(("method", "n", "kw", "message"), [
    ("slerp", 3, {"t": 0.5}, "'slerp' merges exactly 2 trees; got 3 trees."),
    ("model_stock", 1, {"base": True},
     "'model_stock' merges at least 2 fine-tuned trees and a base; got 1 trees."),
    ("slerp", 2, {}, "'slerp' needs t=."),
    ("linear", 2, {"base": True}, "'linear' takes no base (it merges the trees themselves); "
     "drop base=, or use one of dare_linear, dare_ties, model_stock, task_arithmetic, ties."),
    ("ties", 2, {"base": True, "t": 0.5}, "'ties' has no parameter 't'. It accepts: base, "
     "weights, density, normalize, rescale, lam."),
    ("ties", 2, {"base": True, "weights": [1, 2, 3]}, "Got 2 trees and 3 weights: give one "
     "value per tree (the base not counted), or a single number for all."),
    ("dare_ties", 2, {"base": True, "density": [0.5, 1.5]},
     "density must lie in [0, 1]; not: density[1] = 1.5."),
    ("model_stock", 2, {"base": True, "weights": [1, 1]},
     "'model_stock' takes no weights (mergekit's model_stock has none)."),
    ("linear", 2, {"weights": [1, -1]}, "linear with normalize=True divides by the sum of the "
     "weights, which is 0. Change a weight or pass normalize=False."),
    ("avg", 2, {}, "Unknown merge method 'avg'. Methods: linear, task_arithmetic, ties, "
     "dare_linear, dare_ties, slerp, model_stock."),
])
def test_bad_calls(method, n, kw, message):
    base, trees = models(n)
    if kw.get("base"):
        kw = {**kw, "base": base}
    with pytest.raises(InspectorError) as e:
        inspector.merge(method, trees, **kw)
    assert str(e.value) == message


def test_every_mismatch_between_all_trees_and_the_base_at_once():
    base, (a, b) = models(2)
    a = {**a, "b": a["b"][:5]}
    b = {k: v for k, v in b.items() if k != "conv"} | {"extra": np.zeros(2, np.float32)}
    base = {**base, "w": base["w"].astype(np.float16)}
    with pytest.raises(StructureMismatchError) as e:
        inspector.merge("ties", [a, b], base=base)
    assert str(e.value) == (
        "Cannot merge 2 trees with 'ties': 5 differences (1 differ in shape, 2 differ in dtype, "
        "1 are missing, 1 are extra).\n"
        "  - ['b']: (13,) in base, (5,) in tree 0\n"
        "  - ['w']: float16 in base, float32 in tree 0\n"
        "  - ['w']: float16 in base, float32 in tree 1\n"
        "  - ['conv']: in base (float32[2,3,4]), missing from tree 1\n"
        "  - ['extra']: in tree 1 (float32[2]), not in base\n"
        "Every tree needs the same structure, leaf shapes and dtypes as base.")


def test_non_float_leaves_are_listed():
    base, trees = models(2)
    add = lambda t: {**t, "step": np.int32(3), "ids": np.arange(4)}  # noqa: E731
    with pytest.raises(UnsupportedLeafError) as e:
        inspector.merge("task_arithmetic", [add(t) for t in trees], base=add(base))
    assert str(e.value).startswith(
        "Cannot merge 2 trees with 'task_arithmetic': 2 leaves are not real floating-point "
        "arrays.\n  - ['ids']: int64\n  - ['step']: int32\n")


def test_run_times_a_merge_and_reports_its_bytes():
    base, trees = models(2)
    r = inspector.run(inspector.merge, "ties", trees, base=base, density=0.5, repeats=2)
    assert r.op == "merge" and r.n_kernels == 1  # one leaf per shape: one batch of all
    n_bytes = sum(np.asarray(v).nbytes for v in base.values())
    assert r.bytes_read == 3 * n_bytes and r.bytes_written == n_bytes
    assert jax.tree.structure(r.result) == jax.tree.structure(base)


def test_ties_keeps_exactly_k_when_magnitudes_tie():
    base = {"w": np.zeros(8, np.float32)}
    a = {"w": np.array([1, -3, 2, 3, -2, 3, 2, 1], np.float32)}
    # k = int(0.5 * 8) = 4: the three 3s, then the first of the tied 2s (index 2)
    out = inspector.merge("ties", [a], base=base, density=0.5)
    np.testing.assert_array_equal(np.asarray(out["w"]), [0, -3, 2, 3, 0, 3, 0, 0])
    np.testing.assert_array_equal(ref.trim(a["w"].astype(np.float64), 0.5), out["w"])


def test_kth_largest_search_is_exact_on_skewed_and_coarse_data():
    import jax.numpy as jnp

    from inspector.core.merge import kernels

    rng = np.random.default_rng(7)
    n = 50_000
    x = np.stack([np.exp(8 * rng.standard_normal(n)),  # magnitudes over ~14 decades
                  np.where(rng.random(n) < 0.5, 1e-30, 1e30) * rng.random(n)]).astype(np.float32)
    coarse = jnp.asarray(x).astype(jnp.bfloat16).astype(jnp.float32)  # bf16: many ties
    for values in (jnp.asarray(x), coarse):
        bits = jax.lax.bitcast_convert_type(jnp.abs(values), jnp.int32)
        for ks in ([1, 2], [n // 10, n // 2], [n // 2 + 1, n - 1], [n, n // 7]):
            got = np.asarray(kernels.kth_largest_bits(bits, jnp.array(ks, jnp.int32)))
            want = np.sort(np.asarray(bits), axis=1)[:, ::-1][[0, 1], np.array(ks) - 1]
            np.testing.assert_array_equal(got, want, err_msg=str(ks))


@pytest.mark.parametrize("n", [1, 7, 100, 70_000])
def test_kth_largest_by_bisection_matches_a_sort(n):
    import jax.numpy as jnp

    from inspector.core.merge import kernels

    rng = np.random.default_rng(n)
    x = rng.standard_normal((2, n)).astype(np.float32)
    x[1, : n // 3] = 0.0  # many ties at zero
    x[0, n // 2:] = np.round(x[0, n // 2:], 1)  # and ties elsewhere
    bits = jax.lax.bitcast_convert_type(jnp.abs(jnp.asarray(x)), jnp.int32)
    for ks in ([1, 1], [max(1, n // 2), n // 3 + 1], [n, n], [max(1, n // 5), max(1, n // 4)]):
        got = np.asarray(kernels.kth_largest_bits(bits, jnp.array(ks, jnp.int32)))
        for r in range(2):
            expected = np.sort(np.abs(x[r]))[::-1][min(ks[r], n) - 1]
            assert got[r] == np.float32(expected).view(np.int32), (ks, r)


def test_dare_draws_are_uniform_and_independent_across_leaves_and_models():
    from inspector.core.merge import kernels

    u = np.asarray(kernels.uniform(np.array([0, 1, 2, 3], np.uint32), (2, 200_000)))
    assert u.min() >= 0 and u.max() < 1
    counts = np.histogram(u[0], bins=20, range=(0, 1))[0]
    assert np.all(np.abs(counts / 10_000 - 1) < 0.05)
    other_leaf = np.asarray(kernels.uniform(np.array([0, 1, 3, 3], np.uint32), (2, 200_000)))
    for a, b in [(u[0], u[1]), (u[0], other_leaf[0])]:
        assert abs(np.corrcoef(a, b)[0, 1]) < 0.01
        assert abs(np.mean((a < 0.3) & (b < 0.3)) - 0.09) < 0.005


@pytest.mark.parametrize("size", [5, 4096, 10_001])
def test_ties_at_the_kth_magnitude_keep_the_first_in_flat_order(size):
    import jax.numpy as jnp

    from inspector.core.merge import kernels

    # three magnitudes only: the k-th largest is tied with thousands of others, spread over
    # several blocks of the two-step cut; exactly k kept, as a stable descending sort picks
    rng = np.random.default_rng(size)
    deltas = rng.choice([-2.0, -1.0, 0.5, 1.0, 2.0], (2, size)).astype(np.float32)
    for ks in ([1, size], [size // 3 + 1, size // 2 + 1], [size, 1]):
        got = np.asarray(kernels.magnitude(jnp.asarray(deltas), jnp.array(ks, jnp.int32), False))
        for r, k in enumerate(ks):
            order = np.argsort(-np.abs(deltas[r]), kind="stable")[:k]
            want = np.zeros(size, np.float32)
            want[order] = deltas[r, order]
            np.testing.assert_array_equal(got[r], want, err_msg=f"row {r}, k {k}")

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inspector
from inspector import InspectorError, Op, run, weighted_sum
from inspector.core.op import op_of
from inspector.core.plan import Call, Plan
from inspector.core.weighted_sum import WEIGHTED_SUM


def tree(seed, n=6, shape=(64, 32)):
    rng = np.random.default_rng(seed)
    return {f"layer{i}": {"w": rng.normal(size=shape).astype(np.float32),
                          "b": rng.normal(size=shape[:1]).astype(np.float32)} for i in range(n)}


@pytest.mark.parametrize("packed", [False, True])
def test_new_weights_never_recompile(compiles, packed):
    trees = [tree(s) for s in range(3)]
    if packed:
        trees = [inspector.pack(t) for t in trees]
    first = run(weighted_sum, trees, [1.0, 2.0, 3.0], repeats=2)
    assert first.n_kernels == 1  # plain: the 6 leaves of each shape share one batch
    with compiles() as c:
        results = [run(weighted_sum, trees, [float(w), np.float32(0.5), 1], repeats=2)
                   for w in np.linspace(-1, 1, 20)]
    assert c.count == 0
    assert all(r.n_compiled == 0 and r.compile_seconds == 0.0 for r in results)
    # ...and each run used its own weights.
    last = results[-1].result.unpack() if packed else results[-1].result
    src = [t.unpack() if packed else t for t in trees]
    ref = 1.0 * src[0]["layer3"]["w"] + 0.5 * src[1]["layer3"]["w"] + 1 * src[2]["layer3"]["w"]
    np.testing.assert_allclose(np.asarray(last["layer3"]["w"]), ref, rtol=1e-6)


def test_compiles_once_per_distinct_leaf_shape_not_per_leaf(compiles):
    inspector.clear_cache()
    # 200 leaves, 2 distinct shapes (100 each): per shape, three batches of 32 leaves; the 4
    # left of each shape share one more batch: three kernels to compile and 7 kernel calls per
    # run, however many leaves. The 400 NumPy leaves go to the device 32 or 4 per compiled
    # copy: two more compilations per shape (7 in all).
    trees = [tree(s, n=100, shape=(7, 5)) for s in range(2)]
    with compiles() as c:
        r = run(weighted_sum, trees, [0.5, 0.5], repeats=1)
    assert r.n_kernels == 7 and r.n_compiled == 7 and c.count == 7
    with compiles() as c:
        again = run(weighted_sum, trees, [0.25, 0.5], repeats=1)
    assert again.n_compiled == 0 and c.count == 0
    ref = 0.5 * np.asarray(trees[0]["layer99"]["w"]) + 0.5 * np.asarray(trees[1]["layer99"]["w"])
    np.testing.assert_allclose(np.asarray(r.result["layer99"]["w"]), ref, rtol=1e-6)


def test_run_result_reports_timing_bytes_and_cost():
    trees = [inspector.pack(tree(s)) for s in range(2)]
    r = run(weighted_sum, trees, [0.5, 0.5], repeats=7)
    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(trees[0].unpack()))
    assert r.op == "weighted_sum" and r.device == str(jax.devices()[0])
    assert len(r.times) == 7 and r.min_seconds <= r.median_seconds <= r.max_seconds
    assert r.bytes_read == 2 * 4 * n and r.bytes_written == 4 * n
    assert r.gbps == pytest.approx((r.bytes_read + r.bytes_written) / r.median_seconds / 1e9)
    assert r.cost["flops"] >= 2 * n  # XLA counts the multiply-adds
    assert r.cost["bytes accessed"] >= r.bytes_read + r.bytes_written


def test_packed_output_buffer_is_donated_and_reused():
    # A fresh >32 MiB output page-faults on every call (DESIGN.md); reusing a donated one
    # does not. If JAX pruned the unused buffer argument, nothing would be aliased.
    trees = [inspector.pack({"x": np.ones(1000, np.float32)}) for _ in range(2)]
    plan = WEIGHTED_SUM.plan(trees, [1.0, 2.0])
    plan.compile()
    plan.place()
    first = plan.execute()
    carried = first.buffers["float32"]
    second = plan.execute()
    assert carried.is_deleted()  # its memory now holds the second result
    assert second.unpack()["x"].tolist() == [3.0] * 1000


def test_repeated_runs_reuse_the_donated_output_and_keep_the_last_result():
    trees = [inspector.pack({"x": np.full(10, float(i), np.float32)}) for i in range(2)]
    r = run(weighted_sum, trees, [1.0, 10.0], repeats=5)
    assert r.result.unpack()["x"].tolist() == [10.0] * 10


def test_s4_state_in_state_out_compiles_once(compiles):
    def gd_step(state):
        x, lr = state
        return (x - lr * 2 * x, lr)

    state = (jnp.float32(5.0), jnp.float32(0.1))
    seen = []
    with compiles() as c:
        for _ in range(5):
            state = run(gd_step, state, repeats=1, warmup=0).result
            seen.append(round(float(state[0]), 4))
    assert seen == [4.0, 3.2, 2.56, 2.048, 1.6384]
    assert c.count == 1

    def running_mean(state, x):
        total, count = state
        return (total + x, count + 1)

    state = (jnp.float32(0), jnp.int32(0))
    for x in [1.0, 2.0, 6.0]:
        state = run(running_mean, state, jnp.float32(x), repeats=1, warmup=0).result
    assert float(state[0]) / int(state[1]) == 3.0


def test_bad_device_and_repeats():
    here = ", ".join(str(d) for d in jax.devices())
    with pytest.raises(InspectorError, match=f"No device named 'tpu:7'. Devices here: {here}"):
        run(weighted_sum, [{"a": 1.0}], [1.0], device="tpu:7")
    with pytest.raises(InspectorError, match="repeats must be at least 1"):
        run(weighted_sum, [{"a": 1.0}], [1.0], repeats=0)


def test_devices_lists_jax_devices():
    assert inspector.devices() == jax.devices()


_MULTI_DEVICE = textwrap.dedent("""
    import json, numpy as np, jax, inspector
    t = [{"w": np.arange(6.0, dtype=np.float32).reshape(2, 3)} for _ in range(2)]
    out = {"devices": [f"{d.platform}:{d.id}" for d in inspector.devices()]}
    for name in ("cpu:2", "cpu:3"):
        r = inspector.run(inspector.weighted_sum, t, [1.0, 2.0], device=name, repeats=2)
        leaf = r.result["w"]
        out[name] = [r.device, sorted(str(d) for d in leaf.devices()), leaf.tolist()]
    p = inspector.run(inspector.weighted_sum, [inspector.pack(x) for x in t], [1, 1],
                      device=jax.devices()[1])
    out["packed"] = sorted(f"{d.platform}:{d.id}" for d in p.result.devices)
    s = inspector.stack(t, device="cpu:3")
    out["stack"] = sorted(str(d) for d in s["w"].devices())
    print(json.dumps(out))
""")


def test_ops_run_on_the_chosen_device_of_four():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _MULTI_DEVICE], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    expected = (3 * np.arange(6.0).reshape(2, 3)).tolist()
    assert out["cpu:2"] == ["cpu:2", ["cpu:2"], expected]
    assert out["cpu:3"] == ["cpu:3", ["cpu:3"], expected]
    assert out["packed"] == ["cpu:1"]
    assert out["stack"] == ["cpu:3"]


def test_public_op_functions_are_registered_ops():
    assert op_of(inspector.weighted_sum) is WEIGHTED_SUM
    names = {op_of(f).name for f in (inspector.weighted_sum, inspector.index, inspector.stack,
                                      inspector.unstack)}
    assert names == {"weighted_sum", "index", "stack", "unstack"}
    assert not hasattr(inspector.weighted_sum, "plan")  # no attribute contract
    r = run(inspector.stack, [{"w": np.zeros(2)}, {"w": np.ones(2)}], repeats=1)
    assert r.op == "stack" and r.n_kernels == 1
    np.testing.assert_array_equal(np.asarray(r.result["w"]), [[0, 0], [1, 1]])


def test_a_new_op_is_an_op_with_a_planner():
    # An op from outside the inspector: the runner needs its name and its planner, nothing else.
    def plan_double(tree, device=None):
        device = inspector.resolve_device(device)
        leaves, treedef = jax.tree.flatten(tree)
        calls = [Call(("double", x.shape, str(x.dtype)), lambda: (lambda a: 2 * a), [x])
                 for x in leaves]
        nbytes = sum(x.nbytes for x in leaves)
        return Plan("double", device, calls, treedef.unflatten, nbytes, nbytes)

    double = Op("double", plan_double)
    x = {"a": np.arange(3, dtype=np.float32), "b": np.ones((2, 2), np.float32)}
    r = run(double, x, repeats=2)
    # two calls (one per leaf shape), independent: dispatched as one kernel
    assert r.op == "double" and r.n_kernels == 1 and len(r.times) == 2
    np.testing.assert_array_equal(np.asarray(r.result["a"]), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(np.asarray(double(x)["b"]), np.full((2, 2), 2.0))


def test_run_refuses_what_is_not_an_op():
    with pytest.raises(InspectorError, match="Cannot run 3: give an inspector op"):
        run(3, {"w": np.zeros(2)})


def test_block_waits_for_every_packed_tree_of_a_list():
    """`unstack` of a packed stack returns a list of packed trees; `run` times each execution up
    to `block`, which must wait for all of their buffers (a packed tree is no pytree node: taken
    for a leaf, it was not waited for, and the timing stopped at dispatch)."""
    from inspector.core.op import block

    n = 1500 if jax.default_backend() == "cpu" else 8192  # ~0.1 s here, ~0.05 s on an H100
    layout = inspector.pack({"w": np.zeros((n, n), np.float32)}).layout
    x = jnp.ones((n, n), jnp.float32)
    jax.block_until_ready(x)
    slow = [inspector.PackedTree(layout, {"float32": (x @ x @ x).reshape(-1)}) for _ in range(2)]
    assert not all(p.buffers["float32"].is_ready() for p in slow)  # still computing
    assert block(slow) is slow
    assert all(p.buffers["float32"].is_ready() for p in slow)
    nested = {"a": [inspector.PackedTree(layout, {"float32": (x @ x).reshape(-1)})], "b": x + 1}
    block(nested)
    assert nested["a"][0].buffers["float32"].is_ready() and nested["b"].is_ready()

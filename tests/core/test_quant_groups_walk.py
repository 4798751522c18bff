"""`quant_groups`' one-pass walk (signatures cached per leaf layout, records sharing a `Kind`)
against a plain reference: every dict visited in JAX's order, its leaves handed to the
finders, every group built field by field."""

from __future__ import annotations

from collections import OrderedDict

import jax
import ml_dtypes
import numpy as np

import inspector
from inspector.core.lazy import LazyArray
from inspector.core.quant import finders
from inspector.core.quant import schemes as S
from tests.core import quant_producers as P

F8 = ml_dtypes.float8_e4m3fn


def _reference(tree) -> list[tuple]:
    """(scheme, path, members, shape, dtype, problems, layout, block) of each group, found
    by the plainest walk: JAX's own key paths, leaves grouped by their parent's path."""
    by_parent: dict = {}
    first: dict = {}  # a node's key path -> (first leaf index below it, its depth)
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    for i, (keys, leaf) in enumerate(flat):
        for depth in range(len(keys)):
            first.setdefault(jax.tree_util.keystr(keys[:depth]), (i, depth))
        if not isinstance(keys[-1], jax.tree_util.DictKey) or type(keys[-1].key) is not str:
            continue
        parent = jax.tree_util.keystr(keys[:-1])
        by_parent.setdefault(parent, {})[keys[-1].key] = leaf
    out = []
    # a dict's own groups, then those of the dicts inside it: dicts in pre-order
    for parent, leaves in sorted(by_parent.items(), key=lambda kv: first[kv[0]]):
        node = {k: leaves[k] for k in sorted(leaves)}
        taken: set = set()
        found = [finders.fp8_group(node, k, taken) for k, v in node.items()
                 if v.dtype.type in S.FP8_TYPES]
        found += finders.scale_orphans(node, taken) + finders.mxfp4_groups(node, taken)
        found += finders.int4_group(node, taken)
        for scheme, logical, members, shape, dtype, problems, layout, block in sorted(
                found, key=lambda g: g[1]):
            files = {r: node[n].source.rsplit(":", 1)[0] for r, n in members.items()
                     if isinstance(node[n], LazyArray)}
            problems = list(problems)
            if len(set(files.values())) > 1:
                problems.append("split across shards: " + ", ".join(
                    f"{members[r]} in {f.rsplit('/', 1)[-1]}" for r, f in files.items()))
            out.append((scheme, f"{parent}[{logical!r}]",
                        {r: f"{parent}[{n!r}]" for r, n in members.items()},
                        shape, dtype, problems, layout, block))
    return out


def _fields(g) -> tuple:
    return (g.scheme, g.path, g.members, g.shape, g.dtype, g.problems, g.layout, g.block)


def _lazy(array, source):
    return LazyArray(array.shape, array.dtype, lambda: array, source)


def _mixed_tree(rng):
    codes = P.fp8_codes(rng, (256, 384))
    block = np.ones((2, 3), np.float32)
    layer = lambda: {"weight": codes, "weight_scale_inv": block}  # noqa: E731
    q, zeros, scales16, g_idx = P.int4_layer(rng, 64, 128, 32)
    qweight, qzeros = P.gptq_pack(q, zeros)
    awq_q, awq_z = P.awq_pack(q, zeros)
    blocks = rng.integers(0, 256, (4, 2, 16), dtype=np.uint8)
    scales = rng.integers(120, 130, (4, 2), dtype=np.uint8)
    return {
        "layers": {str(i): {"q": layer(), "k": layer(), "norm": np.ones(4, np.float32)}
                   for i in range(12)},
        "list": [layer(), (layer(), 3)], "od": OrderedDict(x=layer()),
        "gptq": {"qweight": qweight, "qzeros": qzeros, "scales": scales16,
                 "g_idx": g_idx.astype(np.int32), "bias": np.zeros(64, np.float16)},
        "awq": {"qweight": awq_q, "qzeros": awq_z, "scales": scales16},
        "experts": {"gate_up_proj_blocks": blocks, "gate_up_proj_scales": scales,
                    "down_proj_scales": scales},  # an orphan scale among whole groups
        "orphan": {"weight": codes, "bias": np.zeros(3, np.float32)},
        "flat": {"a.up.weight": codes, "a.up.weight_scale_inv": block,
                 "a.down.weight_scale": np.float32(0.5) * np.ones((), np.float32),
                 "a.down.weight": codes.astype(ml_dtypes.float8_e5m2)},
        "twice": {"weight": codes.astype(np.float32), "weight_scale": block,
                  "sub": {"weight": codes, "scale_weight": np.ones((256,), np.float32)}},
        "misfit": {"weight": codes, "weight_scale_inv": np.ones((300, 5), np.float32)},
        "lazy": {str(i): {"weight": _lazy(codes, f"/m/a-{i % 2}.safetensors:w{i}"),
                          "weight_scale_inv": _lazy(block, "/m/a-0.safetensors:s")}
                 for i in range(6)},
        "empty": {}, "nothing": {"x": np.zeros(2), "y": [np.zeros(1)]},
    }


def test_walk_equals_the_plain_reference_on_every_scheme_and_container():
    rng = np.random.default_rng(0)
    tree = _mixed_tree(rng)
    got = [_fields(g) for g in inspector.quant_groups(tree)]
    want = _reference(tree)
    assert got == want
    schemes = {g[0] for g in got}
    assert schemes == {"fp8", "mxfp4", "gptq", "awq"}
    problems = [p for g in got for p in g[5]]
    assert sum(p.startswith("split across shards") for p in problems) == 3  # i = 1, 3, 5
    assert any(p.startswith("no scale") for p in problems)  # ['orphan']
    assert any("does not tile" in p for p in problems)  # ['misfit']
    assert any(p.startswith("no codes") for p in problems)  # down_proj_scales alone
    # a second search (every signature cached now) gives the same
    assert [_fields(g) for g in inspector.quant_groups(tree)] == want


def test_groups_are_read_only_and_compare_by_their_fields():
    tree = _mixed_tree(np.random.default_rng(1))
    first = {g.path: g for g in inspector.quant_groups(tree)}
    a = first["['layers']['0']['k']['weight']"]
    b = {g.path: g for g in inspector.quant_groups(tree)}[a.path]
    assert a == b and a is not b and a != first["['layers']['0']['q']['weight']"]
    assert repr(a).startswith("QuantGroup(scheme='fp8', path=\"['layers']['0']['k']['weight']\"")
    for name in ("scheme", "path", "members", "shape", "problems"):
        try:
            setattr(a, name, None)
        except AttributeError:
            continue
        raise AssertionError(f"{name} could be set")
    assert a.main == a.members["weight"] and a.steps == ("layers", "0", "k")


def test_describe_and_tree_index_share_one_search(monkeypatch):
    from inspector.core import tree_index
    from inspector.core.quant import groups, rows

    tree = _mixed_tree(np.random.default_rng(2))
    calls = []
    search = groups.quant_groups
    monkeypatch.setattr(rows, "quant_groups", lambda t: calls.append(1) or search(t))
    described = inspector.describe(tree)
    index = tree_index.TreeIndex(described, tree)
    assert len(calls) == 1
    shown = {index.rows[i].path: g for i, g in index.quant.groups.items()}
    assert shown["['layers']['0']['q']['weight']"].shape == (256, 384)
    assert "['layers']['0']['q']['weight_scale_inv']" in {
        index.rows[i].path for i in index.quant.hidden}
    tree_index.TreeIndex(described, tree)  # other rows or a second index: searched anew
    assert len(calls) == 2


def test_a_flat_checkpoint_at_the_root_and_a_dict_of_arrays_and_dicts():
    rng = np.random.default_rng(3)
    codes, block = P.fp8_codes(rng, (256, 384)), np.ones((2, 3), np.float32)
    flat = {f"model.layers.{i}.mlp.up_proj.{name}": _lazy(v, f"/m/s-{(i + j) % 2}:{name}")
            for i in range(5) for j, (name, v) in enumerate(
                [("weight", codes), ("weight_scale_inv", block)])}
    flat["lm_head.weight"] = codes  # in memory, no scale: an orphan
    mixed = {"weight": codes, "weight_scale": block, "inner": {"weight": codes},
             "list": [np.zeros(2)]}
    for tree in (flat, mixed, {"x": flat}):
        assert [_fields(g) for g in inspector.quant_groups(tree)] == _reference(tree)
    problems = [p for g in inspector.quant_groups(flat) for p in g.problems]
    assert sum(p.startswith("split across shards") for p in problems) == 5


def test_keys_that_are_equal_but_print_differently_and_leaves_beside_dicts():
    # 1 and True are one dict key but two key paths (`[1]`, `[True]`); a dict's own groups
    # come before those of the dicts inside it, wherever its leaves sort among its keys
    rng = np.random.default_rng(5)
    codes, block = P.fp8_codes(rng, (256, 384)), np.ones((2, 3), np.float32)
    layer = lambda: {"weight": codes, "weight_scale_inv": block}  # noqa: E731
    tree = {"a": {1: layer(), 2: layer()}, "b": {True: layer()}, "c": {"w": layer()},
            "d": {"a_first": layer(), "weight": codes, "weight_scale": block,
                  "z_last": [layer()], "bias": np.zeros(3, np.float32)}}
    got = [_fields(g) for g in inspector.quant_groups(tree)]
    assert got == _reference(tree)
    assert [g[1] for g in got] == [
        "['a'][1]['weight']", "['a'][2]['weight']", "['b'][True]['weight']",
        "['c']['w']['weight']", "['d']['weight']", "['d']['a_first']['weight']",
        "['d']['z_last'][0]['weight']"]

"""The tree index behind the lazy tree widget: ranges, children on expand, labels, caching."""

from __future__ import annotations

import numpy as np

import inspector
from inspector import examples
from inspector.ui.session.tree_index import ROOT_ID, TreeIndex, index_for


def _index(tree) -> TreeIndex:
    return TreeIndex(inspector.describe(tree))


def _ids(items):
    out = []
    for item in items:
        out.append(item["id"])
        out += _ids(item.get("items") or [])
    return out


def test_250_siblings_fold_into_3_ranges():
    index = _index({"xs": [np.zeros(2, np.float32)] * 250})
    assert index.children_of("['xs']") == ["['xs'][0:100]", "['xs'][100:200]", "['xs'][200:250]"]
    labels = [index.label(index._entry(i))[0] for i in index.children_of("['xs']")]
    assert [label.split("\u2003")[0] for label in labels] == ["[0–99]", "[100–199]", "[200–249]"]
    assert index.children_of("['xs'][200:250]")[:2] == ["['xs'][200]", "['xs'][201]"]
    assert len(index.children_of("['xs'][200:250]")) == 50


def test_100_siblings_are_not_grouped():
    index = _index([np.zeros(1)] * 100)
    assert index.children_of(ROOT_ID) == [f"[{i}]" for i in range(100)]


def test_very_many_siblings_nest_ranges_so_no_level_has_more_than_100():
    index = _index({"xs": [np.zeros(1, np.float32)] * 25_000})
    top = index.children_of("['xs']")
    assert top == ["['xs'][0:10000]", "['xs'][10000:20000]", "['xs'][20000:25000]"]
    assert len(index.children_of(top[0])) == 100
    assert index.children_of(top[0])[1] == "['xs'][100:200]"
    assert index.children_of("['xs'][100:200]")[0] == "['xs'][100]"


def test_collapsed_nodes_send_one_placeholder_and_expanding_sends_the_children():
    index = _index(examples.transformer_checkpoint(n_layers=300))
    items, paths = index.items([ROOT_ID], root_label="ckpt")
    shown = _ids(items)
    assert shown[:2] == [ROOT_ID, "['embed']"]
    assert "['layers'][0:100]" not in shown
    layers = items[0]["items"][2]
    assert layers["id"] == "['layers']"
    assert [c["label"] for c in layers["items"]] == ["loading …"]
    assert paths == [(0,)]

    items, paths = index.items([ROOT_ID, "['layers']"], root_label="ckpt")
    shown = _ids(items)
    assert "['layers'][0\u2026299]" in shown and "['layers'][0:100]" not in shown
    assert paths == [(0,), (0, 2)]

    opened = [ROOT_ID, "['layers']", "['layers'][0\u2026299]"]
    items, paths = index.items(opened, root_label="ckpt")
    shown = _ids(items)
    assert "['layers'][0:100]" in shown and "['layers']['layer_0000']" not in shown
    assert paths == [(0,), (0, 2), (0, 2, 0)]

    items, paths = index.items([*opened, "['layers'][100:200]"])
    shown = _ids(items)
    assert "['layers']['layer_0100']" in shown and "['layers']['layer_0000']" not in shown
    assert "['layers']['layer_0100']['attn']" not in shown


def test_the_first_view_of_a_big_tree_is_small_and_a_small_tree_opens_whole():
    big = _index(examples.transformer_checkpoint(n_layers=6250))  # 100,004 leaves
    items, _ = big.items(big.default_expanded())
    assert len(_ids(items)) < 120
    small = _index(examples.s1_trees()[0])
    items, _ = small.items(small.default_expanded())
    assert _ids(items) == [ROOT_ID, "[0]", "[0][0]", "[0][1]", "[1]", "[1][0]", "[1][1]"]


def test_labels_show_key_kind_shape_dtype_size_and_totals():
    index = _index(examples.mlp_params())
    leaf, secondary = index.label(("node", index.row_of("['layer1']['weights']")))
    assert leaf.split("\u2003") == ["['weights']", "float32[8,4]", "128 B"]
    assert secondary == ""
    inner, totals = index.label(("node", index.row_of("['layer1']")))
    assert inner.split("\u2003") == ["['layer1']", "dict of 2"]
    assert totals == "2 leaves · 40 params · 160 B"


def test_values_are_added_to_leaf_labels_when_given():
    index = _index([np.arange(3)])
    items, _ = index.items([ROOT_ID], values=lambda row: "[0, 1, 2]")
    assert items[0]["items"][0]["label"].endswith("= [0, 1, 2]")


def test_reveal_lists_the_ranges_down_to_a_node():
    index = _index({"xs": [{"a": np.zeros(2)}] * 25_000})
    assert index.reveal("['xs'][12345]['a']") == [
        ROOT_ID, "['xs']", "['xs'][0\u202624999]", "['xs'][10000:20000]", "['xs'][12300:12400]",
        "['xs'][12345]"]


def test_leaf_frame_lists_every_leaf():
    frame = _index(examples.s2_tree()).leaf_frame()
    assert frame["path"].tolist() == ["[0][0]", "[0][1]", "[0][2]", "[1]", "[3][0]"]
    assert frame["shape"].tolist()[3] == "[5]"


def test_packed_trees_share_an_index_per_layout():
    a = inspector.pack(examples.s1_trees()[0])
    b = inspector.pack(examples.s1_trees()[1])
    assert index_for(a) is index_for(b)
    plain = examples.s1_trees()[0]
    assert index_for(plain) is index_for(plain)


def test_siblings_of_one_structure_fold_into_one_row_that_opens_as_before():
    layer = {"attn": {"q": np.zeros((4, 4), np.float32)}, "mlp": np.zeros(8, np.float32)}
    odd = {"attn": {"q": np.zeros((4, 5), np.float32)}, "mlp": np.zeros(8, np.float32)}
    index = _index({"h": [layer] * 80 + [odd] + [layer] * 2})
    assert index.children_of("['h']") == ["['h'][0\u202679]", "['h'][80]", "['h'][81]",
                                          "['h'][82]"]  # a different shape breaks the run
    label, secondary = index.label(index._entry("['h'][0\u202679]"))
    assert label.split("\u2003") == ["[0\u202679] \u00d780", "[0] \u2026 [79]", "dict of 2"]
    assert secondary == "24 params each \u00b7 7.5 KiB in all"
    assert index.children_of("['h'][0\u202679]")[:2] == ["['h'][0]", "['h'][1]"]
    assert index._entry("['h'][0\u202681]") is None  # not a fold of this tree
    # Leaves never fold (ranges group them), nor do two subtrees alone.
    assert index.children_of("['h'][0]") == ["['h'][0]['attn']", "['h'][0]['mlp']"]
    assert _index({"a": [layer] * 2}).children_of("['a']") == ["['a'][0]", "['a'][1]"]


def test_numbered_keys_show_in_natural_order_with_jax_order_stated():
    h = {f"h.{i}": np.full(1, i, np.float32) for i in (0, 1, 2, 10, 11)}
    tree = {"h": h, "l": [np.zeros(1, np.float32)] * 12}
    index = TreeIndex(inspector.describe(tree))
    items, _ = index.items([ROOT_ID, "['h']", "['l']"], root_label="t")
    shown_h = [c["id"] for c in items[0]["items"][0]["items"]]
    assert shown_h == [f"['h']['h.{i}']" for i in (0, 1, 2, 10, 11)]
    # JAX's order is the text order: the flattening keeps it (the rows, leaf numbers)
    jax_order = [jax_path for jax_path, _ in _flat_paths(tree["h"])]
    assert jax_order == ["['h.0']", "['h.1']", "['h.10']", "['h.11']", "['h.2']"]
    assert [index.rows[i].key for i in index.row_children(index.row_of("['h']"))] == jax_order
    assert items[0]["items"][0]["secondary"].endswith(
        "natural key order; JAX's order (keys sorted as text) puts ['h.10'] before ['h.2']")
    shown_l = [c["id"] for c in items[0]["items"][1]["items"]]
    assert shown_l == [f"['l'][{i}]" for i in range(12)]  # [2] before [10], as JAX has it
    assert "natural" not in items[0]["items"][1]["secondary"]
    # the leaf of 'h.10' still reads its own value (position in JAX's leaves: 2)
    assert index.leaf_number[index.row_of("['h']['h.10']")] == 2
    assert index.reveal("['h']['h.10']") == [ROOT_ID, "['h']"]


def test_the_root_item_carries_its_keystr_path():
    index = TreeIndex(inspector.describe({"a": np.zeros(2)}))
    items, _ = index.items([ROOT_ID])
    assert items[0]["path"] == "" and items[0]["id"] == ROOT_ID
    assert "path" not in items[0]["items"][0]  # its id is its key path already


def _flat_paths(tree):
    import jax

    return [(jax.tree_util.keystr(p), x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]]


def test_short_values_of_small_arrays_and_of_strings():
    from inspector.ui.session.leaf_numbers import TEXT_CHARS, short_values

    tree = {"act": "leaky_relu", "w": np.arange(3), "big": np.zeros(9), "long": "x" * 99,
            "n": None, "obj": object()}
    index = _index(tree)
    shown = {p: short_values(tree, index, index.row_of(p))
             for p in ("['act']", "['w']", "['big']", "['long']", "['obj']")}
    assert shown == {"['act']": "'leaky_relu'", "['w']": "[0, 1, 2]", "['big']": None,
                     "['long']": repr("x" * (TEXT_CHARS - 1) + "…"), "['obj']": None}

"""How a node reads in one line (`inspector.core.node_text`): the one formatter the trees, the
comparison and the structure diff share."""

from __future__ import annotations

import numpy as np

import inspector
from inspector.core.describe import describe
from inspector.core.node_text import container_text, node_text, shape_text, totals_text
from tests.core.test_describe import Linear, Point


def tree():
    return {
        "w": np.zeros((3, 4), np.float32),  # 12 params, 48 B
        "none": None,
        "name": "text",
        "p": Point(np.ones(2, np.int8), np.ones((), np.float64)),
        "lin": Linear(np.zeros((2, 2), np.float16), np.zeros(2, np.float16)),
        "many": [np.zeros(1, np.int32)] * 1001,
    }


def test_node_text_of_every_kind_of_node():
    rows = {r.path: r for r in describe(tree())}
    assert {p: node_text(r) for p, r in rows.items() if r.depth == 1} == {
        "['lin']": "dataclass of 2", "['many']": "list of 1,001", "['name']": "str",
        "['none']": "None", "['p']": "namedtuple of 2", "['w']": "float32[3,4]"}
    assert node_text(rows[""]) == "dict of 6"
    assert node_text(rows["['p'].y"]) == "float64[]"


def test_totals_text_reads_the_subtree_totals():
    rows = {r.path: r for r in describe(tree())}
    w, many = rows["['w']"], rows["['many']"]
    assert totals_text(w.n_leaves, w.n_params, w.nbytes) == "1 leaf · 12 params · 48 B"
    assert totals_text(many.n_leaves, many.n_params, many.nbytes) == \
        "1,001 leaves · 1K params · 3.91 KiB"  # 1001 int32: 4004 B = 3.91 KiB
    assert totals_text(2, 1_234_567, 3 * 1024**3) == "2 leaves · 1.23M params · 3 GiB"


def test_the_structure_diff_names_nodes_with_the_same_words():
    a = {"w": np.zeros((3, 4), np.float32), "sub": {"x": np.zeros(1), "y": np.zeros(1)},
         "many": list(range(1200))}
    b = {"w": [np.zeros(1), np.zeros(1)], "extra": None}
    found = {d.path: (d.kind, d.a, d.b) for d in inspector.diff(a, b)}
    assert found == {
        "['w']": ("type", "float32[3,4]", "list of 2"),
        "['sub']": ("missing", "dict of 2", None),
        "['many']": ("missing", "list of 1,200", None),
        "['extra']": ("extra", None, "None"),
    }
    assert (shape_text("int8", (2, 3)), container_text("tuple", 3)) == ("int8[2,3]", "tuple of 3")

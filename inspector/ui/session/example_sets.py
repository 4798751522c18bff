"""The built-in examples as a session loads them: prepared once per process, with settings.

Building, packing and indexing an example happens once per server process; every session
then shares the same read-only `LoadedTree`s, so loading the defaults costs milliseconds.
"""

from __future__ import annotations

import threading

from inspector import examples
from inspector.core import caches
from inspector.ui.session.loaded import LoadedTree, prepare
from inspector.ui.session.origins import Example

# What loading an example sets up, so that its scenario is one click from running: the op to
# show, each op's settings (`OpSettings.apply`) and the two trees to compare.
EXAMPLE_SETTINGS = {
    "S1: weighted sum": {"op": "weighted_sum", "weighted_sum": {
        "trees": ["t1", "t2", "t3"], "weights": examples.S1_WEIGHTS}},
    "S2: per-subtree index": {"op": "index", "index": {
        "texts": {"s2": examples.S2_INDEX_TEXT}}},
    "S3: ensemble of 4 MLPs": {"op": "stack", "stack": {
        "trees": [f"mlp_{i}" for i in range(4)]}},
    "MLP: params and grads": {"op": "weighted_sum", "weighted_sum": {
        "trees": ["params", "grads"], "weights": [1, -0.1]}},
    "S5: model vs old checkpoint": {"diff": ["model", "checkpoint"]},
    "Soup: two transformer checkpoints": {"op": "weighted_sum", "weighted_sum": {
        "trees": ["ckpt_a", "ckpt_b"], "weights": [0.5, 0.5]}},
}

_EXAMPLE_CACHE: dict[str, list[LoadedTree]] = {}
_EXAMPLE_LOCK = threading.Lock()
caches.register_mapping("example trees", _EXAMPLE_CACHE, _EXAMPLE_LOCK)


def example_trees(name: str) -> list[LoadedTree]:
    """The example's trees, built, packed and indexed once per process and shared read-only."""
    with _EXAMPLE_LOCK:
        cached = _EXAMPLE_CACHE.get(name)
        if cached is None:
            cached = [prepare(tree_name, tree, Example(name, tree_name))
                      for tree_name, tree in examples.load(name).items()]
            for loaded in cached:  # shared by every session: nobody may write into them
                if loaded.packed:
                    for buf in loaded.tree.buffers.values():
                        buf.flags.writeable = False
            _EXAMPLE_CACHE[name] = cached
        return cached

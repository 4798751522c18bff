# %% [markdown]
# # S2. Per-subtree indexing: a different index for each subtree
#
# The index tree is a prefix of the tree: one index per top-level subtree. `None` keeps its
# subtree (and `None` leaves stay `None`); text like `"1:3"` is parsed, never evaluated.

# %%
import jax
import numpy as np

import inspector

a1 = np.arange(12.0).reshape(4, 3)
tree = [(a1, 10 * a1, 100 * a1), np.arange(5.0), None, (np.arange(12.0).reshape(6, 2), (None,))]
index_tree = [1, "1:3", None, -1]

# %%
out = inspector.index(tree, index_tree)
print("result:", jax.tree.map(lambda x: np.asarray(x).tolist(), out))

# %% [markdown]
# Out-of-range indices are refused with every key path (JAX would clamp them silently).

# %%
try:
    inspector.index(tree, [4, "1:3", None, -1])
except inspector.IndexOutOfRangeError as error:
    print(error)

# %% [markdown]
# In the widget the index is typed per subtree, as text; the preview shows the result shapes
# before running.

# %%
insp = inspector.show(tree)
insp.state.op = "index"
for subtree, text in {"[0]": "1", "[1]": "1:3", "[3]": "-1"}.items():
    insp.state.ops["index"].set_text(subtree, text)
insp.run()
insp  # noqa: B018 (a cell's last expression is what a notebook displays)

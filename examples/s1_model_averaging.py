# %% [markdown]
# # S1. Weighted sum of several trees: model averaging, soups, task arithmetic
#
# Three same-structured trees `[[int32[2,2], int32[2]], [int32[2,2], int32[2]]]` and weights
# `[1, 2, 3]`. Integer trees with integer weights stay integer.

# %%
import jax
import numpy as np

import inspector


def tree(blocks):
    return [[np.array(w, np.int32), np.array(b, np.int32)] for w, b in blocks]


t1 = tree([([[1, 2], [3, 4]], [2, 3]), ([[1, 2], [3, 4]], [2, 3])])
t2 = tree([([[2, 3], [3, 4]], [5, 3]), ([[2, 3], [3, 4]], [5, 3])])
t3 = tree([([[7, 1], [4, 4]], [6, 2]), ([[6, 4], [3, 7]], [7, 3])])

# %%
print("result dtype:", inspector.weighted_sum_dtype("int32", [1, 2, 3]))
result = inspector.weighted_sum([t1, t2, t3], [1, 2, 3])
print("structure:", jax.tree.structure(result))
print("result:", jax.tree.map(lambda x: np.asarray(x).tolist(), result))

# %% [markdown]
# Compiled once and timed; new weights reuse the compiled kernels (weights are traced).

# %%
first = inspector.run(inspector.weighted_sum, [t1, t2, t3], [1, 2, 3], repeats=5)
again = inspector.run(inspector.weighted_sum, [t1, t2, t3], [3, 2, 1], repeats=5)
print("kernels compiled on the second run:", again.n_compiled)

# %% [markdown]
# An SGD step is the weighted sum `[1, -lr]`; an exponential moving average is `[1 - a, a]`.

# %%
params = {"w": np.array([1.0, -2.0], np.float32)}
grads = {"w": np.array([0.5, 0.5], np.float32)}
step = inspector.weighted_sum([params, grads], [1, -0.1])
print("sgd step:", [round(float(v), 4) for v in step["w"]])

# %% [markdown]
# The live inspector on these trees: move a weight and the sum re-runs from the compiled
# kernel; the timing card and the run history follow. "Copy as code" gives the call back.

# %%
insp = inspector.show(t1=t1, t2=t2, t3=t3)
insp.state.ops["weighted_sum"].weights = [1, 2, 3]
insp.run()
insp  # noqa: B018 (a cell's last expression is what a notebook displays)

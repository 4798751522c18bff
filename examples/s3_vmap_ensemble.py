# %% [markdown]
# # S3. Stack a list of trees for a vmap ensemble, and unstack
#
# `jax.vmap` cannot map over a Python list of 4 MLPs with layer sizes [2, 3, 4]; stacking
# leaf-wise gives one tree whose leaves carry a leading model axis.

# %%
import jax
import jax.numpy as jnp
import numpy as np

import inspector


def mlp(key, sizes=(2, 3, 4)):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (n_out, n_in)), jnp.zeros(n_out))
            for k, n_in, n_out in zip(keys, sizes[:-1], sizes[1:], strict=True)]


def mse_loss(params, x, y):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w.T + b)
    w, b = params[-1]
    return jnp.mean((x @ w.T + b - y) ** 2)


models = [mlp(k) for k in jax.random.split(jax.random.PRNGKey(0), 4)]
x = jax.random.normal(jax.random.PRNGKey(1), (8, 2))
y = jax.random.normal(jax.random.PRNGKey(2), (8, 4))

# %%
try:
    jax.vmap(mse_loss, in_axes=(0, None, None))(models, x, y)
except ValueError as error:
    print("vmap over the list fails:", str(error).splitlines()[0])

stacked = inspector.stack(models)
print("stacked shapes:", jax.tree.map(lambda a: a.shape, stacked))
losses = jax.vmap(mse_loss, in_axes=(0, None, None))(stacked, x, y)
loop = jnp.stack([mse_loss(m, x, y) for m in models])
print("vmap equals the loop:", bool(jnp.allclose(losses, loop, rtol=1e-6)))

# %%
back = inspector.unstack(stacked)
same = all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(models),
                                                strict=True))
print("unstack(stack(models)) == models:", same)

# %% [markdown]
# The widget holds the live jax arrays (on their device). Stacking the four models is preset;
# pick `stacked` and the Unstack tab to go back.

# %%
insp = inspector.show(**{f"model{i}": m for i, m in enumerate(models)}, stacked=stacked)
insp.state.op = "stack"
insp.run()
insp  # noqa: B018 (a cell's last expression is what a notebook displays)

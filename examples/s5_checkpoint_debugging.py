# %% [markdown]
# # S5. Debugging a checkpoint that fails to restore
#
# A checkpoint on disk and the model's own tree: open the file without reading its data, and
# list every missing key, extra key, shape and dtype difference with its key path.

# %%
import tempfile
from pathlib import Path

import numpy as np

import inspector

model = {
    "dense": {"kernel": np.zeros((4, 3), np.float32), "bias": np.zeros(3, np.float32)},
    "norm": {"scale": np.ones(3, np.float32)},
}
# The checkpoint was written by an older version of the model.
old = {
    "dense": {"kernel": np.ones((3, 4), np.float32)},
    "norm": {"scale": np.ones(3, np.float16), "offset": np.zeros(3, np.float32)},
}
path = Path(tempfile.mkdtemp()) / "old.safetensors"
inspector.save(old, path)

# %%
ckpt = inspector.load(path)  # reads the header only: leaves are lazy
for row in inspector.describe(ckpt):
    if row.kind == "leaf":
        print(f"{row.path:24} {row.dtype:8} {row.shape}")

# %%
for difference in inspector.diff(model, ckpt):
    print(difference)

# %% [markdown]
# The widget opens on the comparison of the two trees: every difference with its key path,
# in the tree. Selecting a shared leaf compares its values; the checkpoint's leaves stay lazy
# until then.

# %%
inspector.show(model=model, checkpoint=ckpt)

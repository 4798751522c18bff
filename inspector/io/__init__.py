"""Checkpoint files in and out: `load`, `save`, `sniff`.

`load` reads safetensors (single and sharded), `.npy`/`.npz`, orbax checkpoint folders, flax
msgpack, HDF5 / Keras `.h5`, PyTorch state dicts (without torch, without running pickle
code) and llama.cpp's GGUF, telling the format by content; leaves are `LazyArray`s read on
first use. `save` writes safetensors and npz. Each format lives in its own `*_format` module,
which imports its library only when used, so importing this package stays cheap.
"""

from inspector.io.formats import load, save
from inspector.io.sniff import FORMATS, sniff

__all__ = ["FORMATS", "load", "save", "sniff"]

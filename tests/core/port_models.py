"""Model pairs for the porting tests: the same values in torch's and Flax's names and layouts.

`bert_pair` and `cnn_pair` return `(torch_state_dict, flax_params)`: the torch side a flat
dict keyed as `model.state_dict()` keys it (`encoder.layer.3.attention.self.query.weight`,
Linear (out, in), Conv2d OIHW, Conv1d OIW, BatchNorm `running_mean` and
`num_batches_tracked`), the Flax side nested dicts as linen names them (`layer_3`, `Conv_0`,
`kernel` (in, out) / HWIO / WIO, `LayerNorm_0/scale`, `Embed_0/embedding`, BatchNorm's `mean`
and `var` in `batch_stats`). Every value is drawn once and laid out both ways with NumPy.
"""

from __future__ import annotations

import numpy as np


def _draw(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def bert_pair(layers: int = 2, hidden: int = 8, inter: int = 32, vocab: int = 50,
              seed: int = 0) -> tuple[dict, dict]:
    """A BERT-like encoder: square query/key/value/output kernels, non-square FFN kernels."""
    rng = np.random.default_rng(seed)
    torch, flax = {}, {}

    def linear(t_name, f_path, n_in, n_out):
        w = _draw(rng, (n_out, n_in))
        b = _draw(rng, (n_out,))
        torch[f"{t_name}.weight"], torch[f"{t_name}.bias"] = w, b
        _put(flax, f_path, {"kernel": np.ascontiguousarray(w.T), "bias": b})

    def layer_norm(t_name, f_path):
        g, b = _draw(rng, (hidden,)), _draw(rng, (hidden,))
        torch[f"{t_name}.weight"], torch[f"{t_name}.bias"] = g, b
        _put(flax, f_path, {"scale": g, "bias": b})

    for name, rows in (("word_embeddings", vocab), ("position_embeddings", 16),
                       ("token_type_embeddings", 2)):
        e = _draw(rng, (rows, hidden))
        torch[f"embeddings.{name}.weight"] = e
        _put(flax, ("embeddings", name), {"embedding": e})
    layer_norm("embeddings.LayerNorm", ("embeddings", "LayerNorm_0"))
    for i in range(layers):
        t, f = f"encoder.layer.{i}", ("encoder", f"layer_{i}")
        for part in ("query", "key", "value"):
            linear(f"{t}.attention.self.{part}", (*f, "attention", "self", part), hidden, hidden)
        linear(f"{t}.attention.output.dense", (*f, "attention", "output", "dense"), hidden,
               hidden)
        layer_norm(f"{t}.attention.output.LayerNorm", (*f, "attention", "output", "LayerNorm_0"))
        linear(f"{t}.intermediate.dense", (*f, "intermediate", "dense"), hidden, inter)
        linear(f"{t}.output.dense", (*f, "output", "dense"), inter, hidden)
        layer_norm(f"{t}.output.LayerNorm", (*f, "output", "LayerNorm_0"))
    linear("pooler.dense", ("pooler", "dense"), hidden, hidden)
    return torch, {"params": flax}


def cnn_pair(seed: int = 1) -> tuple[dict, dict]:
    """A CNN: a Conv1d front, Sequential features (Conv2d, BatchNorm2d, ReLU, MaxPool, ...)
    and a classifier (Dropout, Linear, ReLU, Linear); Flax numbers its modules per kind."""
    rng = np.random.default_rng(seed)
    torch, params, stats = {}, {}, {}
    counters: dict[str, int] = {}

    def flax_name(kind):
        n = counters.get(kind, 0)
        counters[kind] = n + 1
        return f"{kind}_{n}"

    def conv(t_name, o, i, *k):
        w = _draw(rng, (o, i, *k))
        b = _draw(rng, (o,))
        torch[f"{t_name}.weight"], torch[f"{t_name}.bias"] = w, b
        perm = (2, 1, 0) if len(k) == 1 else (2, 3, 1, 0)
        params[flax_name("Conv")] = {"kernel": np.ascontiguousarray(w.transpose(perm)),
                                     "bias": b}

    def batch_norm(t_name, c):
        g, b, m = _draw(rng, (c,)), _draw(rng, (c,)), _draw(rng, (c,))
        v = np.abs(_draw(rng, (c,))) + 0.5
        torch.update({f"{t_name}.weight": g, f"{t_name}.bias": b,
                      f"{t_name}.running_mean": m, f"{t_name}.running_var": v,
                      f"{t_name}.num_batches_tracked": np.array(7, np.int64)})
        name = flax_name("BatchNorm")
        params[name] = {"scale": g, "bias": b}
        stats[name] = {"mean": m, "var": v}

    def dense(t_name, n_in, n_out):
        w, b = _draw(rng, (n_out, n_in)), _draw(rng, (n_out,))
        torch[f"{t_name}.weight"], torch[f"{t_name}.bias"] = w, b
        params[flax_name("Dense")] = {"kernel": np.ascontiguousarray(w.T), "bias": b}

    conv("frontend.0", 4, 2, 5)          # Conv1d OIW
    conv("features.0", 8, 3, 3, 3)       # Conv2d OIHW, non-square
    batch_norm("features.1", 8)          # features.2 ReLU, features.3 MaxPool: no params
    conv("features.4", 8, 8, 3, 3)       # square in/out channels
    batch_norm("features.5", 8)
    conv("features.7", 16, 8, 3, 3)
    dense("classifier.1", 16, 16)        # square; classifier.0 is Dropout
    dense("classifier.3", 16, 10)
    return torch, {"params": params, "batch_stats": stats}


def _put(tree: dict, path: tuple, value) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree.setdefault(path[-1], {}).update(value)


_STORAGE = {np.dtype(np.float32): "FloatStorage", np.dtype(np.int64): "LongStorage",
            np.dtype(np.float16): "HalfStorage"}


def write_torch(path, state_dict: dict) -> None:
    """Writes `state_dict` as `torch.save` does (zip archive, pickle protocol 2, one storage
    per tensor), without torch: the pickle is spelled opcode by opcode."""
    import zipfile

    from tests.io.test_torch_format import torch_style_pickle

    tensors, storages = {}, {}
    for n, (name, value) in enumerate(state_dict.items()):
        a = np.array(value, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        strides = tuple(s // a.itemsize for s in a.strides)
        tensors[name] = {"storage": str(n), "storage_type": _STORAGE[a.dtype],
                         "numel": a.size, "offset": 0, "shape": a.shape, "stride": strides}
        storages[str(n)] = a.astype(a.dtype.newbyteorder("<")).tobytes()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", torch_style_pickle(tensors))
        archive.writestr("archive/byteorder", "little")
        for key, raw in storages.items():
            archive.writestr(f"archive/data/{key}", raw)
        archive.writestr("archive/version", "3\n")


def write_ambiguous_cnn(folder) -> None:
    """`folder/cnn.pt` (the CNN in torch's layout, written without torch) and
    `folder/cnn_flax.safetensors` (in Flax's), whose Flax head kernel could come from either of
    two torch heads: one ambiguous target when aligning the first onto the second."""
    import inspector

    torch, flax = cnn_pair()
    rng = np.random.default_rng(9)
    for name in ("encoder.head.weight", "decoder.head.weight"):
        torch[name] = rng.standard_normal((16, 16)).astype(np.float32)
    flax["params"]["head"] = {"kernel": torch["encoder.head.weight"].T.copy()}
    write_torch(folder / "cnn.pt", torch)
    inspector.save(flax, folder / "cnn_flax.safetensors")

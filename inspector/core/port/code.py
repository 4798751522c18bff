"""`Alignment.to_code()`: the mapping as a standalone Python function (NumPy only).

The generated module holds one table row per target leaf (target keys, source keys,
transform, dtype) and a short loop, so a port can live in the user's repository without the
inspector: `convert(state_dict)` returns the target tree as nested dicts (lists where the
target had lists). Source keys are looked up as the tree had them (nested, or one flat key
such as torch's `encoder.layer.0.attention.self.query.weight`); a flat state dict also works
for an alignment made from the nested tree a loader gave, and the other way round.
"""

from __future__ import annotations

from inspector.core.port.paths import parse_keystr

_TEMPLATE = '''"""{summary}

Written by pytree-inspector (`Alignment.to_code()`); needs only NumPy (and ml_dtypes for
bfloat16 or float8 targets). Each row: target keys, source keys, transform, argument, dtype.
"""

import numpy as np

PAIRS = [
{rows}]
LIST_NODES = {lists!r}


def _dtype(name):
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # bfloat16, float8_*: NumPy's own dtypes lack them

        return np.dtype(getattr(ml_dtypes, name))


def _array(x):
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            import ml_dtypes

            return x.view(dtype=__import__("torch").int16).numpy().view(ml_dtypes.bfloat16)
        return x.numpy()
    return np.asarray(x)


def _lookup(tree, keys):
    """The leaf at `keys`: walked as nested keys, else as one flat key joined by dots (a
    torch state dict), else a flat key split on dots into nested keys."""
    node = tree
    try:
        for k in keys:
            node = node[k]
        return node
    except (KeyError, IndexError, TypeError):
        pass
    joined = ".".join(str(k) for k in keys)
    if isinstance(tree, dict) and joined in tree:
        return tree[joined]
    node = tree
    for k in joined.split("."):
        if isinstance(node, (list, tuple)):
            node = node[int(k)]
        else:
            node = node[k] if k in node else node[int(k)]
    return node


def _lists(node, at=()):
    if not isinstance(node, dict):
        return node
    out = {{k: _lists(v, at + (k,)) for k, v in node.items()}}
    if at in LIST_NODES:
        return [out[i] for i in range(len(out))]
    return out


def {name}(source):
    """Returns the target tree (nested dicts) made from `source` (a state dict or tree)."""
    root = {{}}
    for target, keys, kind, arg, dtype in PAIRS:
        x = _array(_lookup(source, keys))
        if kind == "transpose":
            x = np.transpose(x, arg)
        elif kind == "reshape":
            x = np.reshape(x, arg)
        node = root
        for k in target[:-1]:
            node = node.setdefault(k, {{}})
        node[target[-1]] = np.ascontiguousarray(x, dtype=_dtype(dtype))
    return _lists(root)
'''


def to_code(alignment, name: str = "convert") -> str:
    """The source text of a module defining `name(source)`; see the module docstring.

    Raises:
        InspectorError: `name` is not a Python identifier.
    """
    from inspector.core.errors import InspectorError

    if not name.isidentifier():
        raise InspectorError(f"{name!r} is not a Python function name.")
    targets = {p: (s, d) for p, s, d in alignment.targets}
    rows, target_keys = [], []
    for pair in alignment.pairs:
        keys = parse_keystr(pair.target)
        target_keys.append(keys)
        t = pair.transform
        arg = list(t.perm) if t.kind == "transpose" else list(t.shape) if t.kind == "reshape" \
            else None
        rows.append(f"    ({keys!r}, {parse_keystr(pair.source)!r}, {t.kind!r}, {arg!r}, "
                    f"{targets[pair.target][1]!r}),\n")
    lists = sorted(_list_nodes(target_keys), key=repr)
    missing = len(alignment.targets) - len(alignment.pairs)
    summary = (f"`{name}(source)`: {len(rows)} target leaves from a source tree"
               + (f" ({missing} target leaves left out: unmatched or ambiguous)."
                  if missing else "."))
    return _TEMPLATE.format(summary=summary, rows="".join(rows), lists=set(lists) or set(),
                            name=name)


def _list_nodes(all_keys: list[tuple]) -> set[tuple]:
    """Prefixes whose children are the ints 0..n-1 (lists in the target)."""
    children: dict[tuple, set] = {}
    for keys in all_keys:
        for i in range(len(keys)):
            children.setdefault(keys[:i], set()).add(keys[i])
    return {at for at, kids in children.items()
            if all(isinstance(k, int) for k in kids) and kids == set(range(len(kids)))}

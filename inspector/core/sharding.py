"""Meshes and sharded trees, on JAX's own `Mesh`, `NamedSharding` and `PartitionSpec`.

`mesh({"data": 4, "model": 2})` lays `jax.devices()` (every process's devices under
`jax.distributed`) out as a named grid; `shard(tree, mesh, specs)` places each leaf as
`NamedSharding(mesh, spec)`, after checking every leaf against its spec, so one error names
every leaf that does not fit (JAX's own error names one array and no key path).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from inspector.core import nodes
from inspector.core.devices import device_name
from inspector.core.errors import ShardingError, bullet_list
from inspector.core.lazy import LazyArray
from inspector.core.leaves import leaf_info
from inspector.core.spec_parse import parse_spec


def mesh(axes: Mapping[str, int]) -> Mesh:
    """Returns a `jax.sharding.Mesh` over all of `jax.devices()` with these named axis sizes.

    Args:
        axes: axis name -> size, in mesh order, e.g. `{"data": 4, "model": 2}`; the sizes
            must multiply to the number of devices (all processes' devices together).

    Raises:
        ShardingError: a bad name or size, or sizes whose product is not the device count.

    >>> m = mesh({"data": len(jax.devices())})
    >>> m.axis_names, m.devices.size == len(jax.devices())
    (('data',), True)
    """
    devices = jax.devices()
    if not isinstance(axes, Mapping) or not axes:
        raise ShardingError(
            f"A mesh needs named axes, e.g. {{'data': {len(devices)}}}; got {axes!r}.")
    bad = [f"{name!r}: {size!r}" for name, size in axes.items()
           if not (isinstance(name, str) and name.isidentifier())
           or isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1]
    if bad:
        raise ShardingError(
            "Mesh axes need identifier names and positive integer sizes; not:\n"
            + bullet_list(bad))
    sizes = tuple(int(s) for s in axes.values())
    if math.prod(sizes) != len(devices):
        raise ShardingError(
            f"A mesh {axes_text(axes)} needs {math.prod(sizes)} devices, but there are "
            f"{len(devices)} ({devices[0].platform}). Choose sizes whose product is "
            f"{len(devices)}, e.g. {presets(len(devices))[min(1, len(devices) - 1)]}.")
    return jax.make_mesh(sizes, tuple(axes), axis_types=(AxisType.Auto,) * len(sizes),
                         devices=devices)


def axes_text(axes) -> str:
    """`data=4, model=2` for a mesh or a name -> size mapping."""
    if isinstance(axes, Mesh):
        axes = dict(axes.shape)
    return ", ".join(f"{name}={size}" for name, size in axes.items())


def presets(n_devices: int) -> list[dict[str, int]]:
    """Common meshes for `n_devices`: all data-parallel, then data x model splits.

    >>> presets(8)
    [{'data': 8}, {'data': 4, 'model': 2}, {'data': 2, 'model': 4}, {'model': 8}]
    """
    out = [{"data": n_devices}]
    out += [{"data": n_devices // m, "model": m} for m in range(2, n_devices)
            if n_devices % m == 0]
    if n_devices > 1:
        out.append({"model": n_devices})
    return out


def spec_text(spec: PartitionSpec) -> str:
    """`PartitionSpec('data', None)`: a spec as its constructor reads (JAX prints `P(...)`)."""
    return "PartitionSpec(" + ", ".join(repr(e) for e in spec) + (
        "," if len(spec) == 1 and isinstance(spec[0], tuple) else "") + ")"


def _replicated(spec: PartitionSpec) -> bool:
    return all(e is None or e == () for e in spec)


@dataclass(frozen=True)
class SavedSharding:
    """The sharding a checkpoint's array was saved with, read from its metadata.

    Attributes:
        spec: the `PartitionSpec`.
        axes: the saved mesh's axis name -> size.
    """

    spec: PartitionSpec
    axes: dict

    def __str__(self) -> str:
        n = math.prod(self.axes.values())
        if _replicated(self.spec):
            return f"replicated over {n} devices (saved)"
        return f"{spec_text(self.spec)} over {axes_text(self.axes)} (saved)"


def sharding_text(leaf) -> str | None:
    """How a leaf is laid out over devices, in words; `None` for one device or host data.

    `"PartitionSpec('data', None) over data=4, model=2"` for a sharded leaf,
    `"replicated over 8 devices"` when every device holds all of it; a lazy leaf read from a
    checkpoint saved sharded says how it was saved.
    """
    if isinstance(leaf, LazyArray):
        saved = leaf.sharding
        return None if saved is None else str(saved)
    if not isinstance(leaf, jax.Array):
        return None
    sharding = leaf.sharding
    n = sharding.num_devices
    if n == 1:
        return None
    if sharding.is_fully_replicated:
        return f"replicated over {n} devices"
    if isinstance(sharding, NamedSharding):
        return f"{spec_text(sharding.spec)} over {axes_text(sharding.mesh)}"
    return f"{type(sharding).__name__} over {n} devices"


def device_bytes(tree) -> dict[str, int]:
    """Returns `{device name: bytes held}` for the tree's array data on this process's devices.

    Counted from each JAX array's addressable shards (a replicated leaf counts on every
    device); host arrays and lazy leaves hold nothing on a device. Packed trees count their
    buffers. Every local device is listed, holding 0 when the tree has nothing there.

    >>> import jax.numpy as jnp
    >>> device_bytes({"w": jnp.zeros(4, jnp.float32, device=jax.devices()[0])})["cpu:0"]
    16
    """
    from inspector.core.packed import PackedTree

    held = {device_name(d): 0 for d in jax.local_devices()}
    leaves = (list(tree.buffers.values()) if isinstance(tree, PackedTree)
              else jax.tree_util.tree_leaves(tree))  # None: no leaves, every device at 0
    for leaf in leaves:
        if not isinstance(leaf, jax.Array):
            continue
        itemsize = np.dtype(leaf.dtype).itemsize
        for shard in leaf.addressable_shards:
            size = math.prod(len(range(*s.indices(n))) for s, n in zip(shard.index, leaf.shape,
                                                                        strict=True))
            name = device_name(shard.device)
            held[name] = held.get(name, 0) + size * itemsize
    return held


def shard(tree, mesh: Mesh, specs=None):
    """Returns `tree` with every array leaf placed as `NamedSharding(mesh, spec)`.

    Args:
        tree: a pytree (JAX, NumPy or lazy leaves; a packed tree is unpacked first).
        mesh: a `jax.sharding.Mesh` (see `inspector.mesh`).
        specs: a prefix of `tree` whose nodes are each a `PartitionSpec`, spec text like
            `"data, None"` (see `parse_spec`) or `None` (replicated); a node's spec applies
            to every leaf below it. One spec (or None) for the whole tree is the shortest
            prefix. Non-array leaves (strings) are kept as they are.

    Returns:
        The tree with `jax.Array` leaves laid out over the mesh. Works under multi-controller
        JAX too: every process passes the same tree and gets its part of the global arrays.

    Raises:
        ShardingError: every leaf whose dimension does not divide over its mesh axes, whose
            spec names an unknown axis (or one twice), or whose spec is longer than its rank;
            every place where `specs` is not a prefix of `tree`; every spec text that does not
            parse. All in one error, one line per key path.

    >>> m = mesh({"data": len(jax.devices())})
    >>> out = shard({"w": np.zeros((len(jax.devices()) * 2, 3), np.float32)}, m, "data")
    >>> out["w"].sharding.spec
    P('data',)
    """
    from inspector.core.packed import PackedTree

    if not isinstance(mesh, Mesh):
        raise ShardingError(f"shard needs a jax.sharding.Mesh (see inspector.mesh), got "
                            f"{type(mesh).__name__}.")
    if isinstance(tree, PackedTree):
        tree = tree.unpack()
    sizes = dict(mesh.shape)
    leaf_specs, problems = check_specs(tree, sizes, specs)
    leaves_with_paths, treedef = nodes.flatten(tree, with_path=True)
    out = [leaf for _, leaf in leaves_with_paths]
    placements = []  # (position, host value or array, sharding)
    for i, (key_path, leaf) in enumerate(leaves_with_paths):
        spec = leaf_specs.get(jax.tree_util.keystr(key_path))
        if spec is not None:
            shape, dtype, _, _ = leaf_info(leaf)
            value = leaf if hasattr(leaf, "shape") else np.asarray(leaf, dtype=dtype)
            placements.append((i, value, NamedSharding(mesh, spec)))
    if problems:
        n = len(problems)
        raise ShardingError(
            f"Cannot shard the tree over the mesh {axes_text(mesh)}: {n} "
            f"{'place does' if n == 1 else 'places do'} not fit.\n" + bullet_list(problems)
            + "\nEach split dimension must divide by the product of its mesh axes' sizes; "
            "write None for dimensions to keep whole (or no spec to replicate)."
        )
    for i, array in _place(placements):
        out[i] = array
    return treedef.unflatten(out)


def check_specs(tree, axes: Mapping[str, int], specs) -> tuple[dict, list[str]]:
    """Matches `specs` against `tree` for a mesh of these axis sizes, placing nothing.

    Returns `(leaf path -> PartitionSpec for every array leaf that fits, problems)`: one line
    per key path that does not fit, as `shard`'s error lists them. Reads shapes only, so the
    app checks every keystroke with it, before any mesh exists.
    """
    assigned: list = []  # (path, spec, subtree)
    problems: list[str] = []
    _assign(specs, tree, "", assigned, problems)
    fits: dict[str, PartitionSpec] = {}
    sizes = dict(axes)
    for path, spec, subtree in assigned:
        for key_path, leaf in nodes.flatten(subtree, with_path=True)[0]:
            full = path + jax.tree_util.keystr(key_path)
            shape = leaf_info(leaf)[0]
            if shape is None:
                continue  # strings and other non-array leaves stay as they are
            problem = spec_problem(spec, shape, sizes)
            if problem:
                problems.append(f"{full or '(root)'}: shape {shape}, spec {spec_text(spec)}: "
                                f"{problem}")
            else:
                fits[full] = spec
    return fits, problems


def spec_problem(spec: PartitionSpec, shape: tuple[int, ...], sizes: dict) -> str | None:
    """What stops `spec` from laying out a leaf of `shape` over a mesh of `sizes`, or None."""
    where = f"the mesh has {axes_text(sizes)}"
    if len(spec) > len(shape):
        entries = "1 entry" if len(spec) == 1 else f"{len(spec)} entries"
        return f"the spec has {entries} for a leaf of rank {len(shape)} ({where})"
    used: list[str] = []
    for axis, entry in enumerate(spec):
        names = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        unknown = [n for n in names if n not in sizes]
        if unknown:
            return f"unknown mesh axis {', '.join(map(repr, unknown))} ({where})"
        twice = [n for n in names if n in used]
        if twice:
            return f"mesh axis {twice[0]!r} is used twice ({where})"
        used += names
        parts = math.prod(sizes[n] for n in names)
        if shape[axis] % parts:
            over = ", ".join(f"{n}={sizes[n]}" for n in names)
            return (f"dimension {axis} ({shape[axis]}) does not divide over {over} "
                    f"({where})")
    return None


def _as_spec(node) -> PartitionSpec | None:
    if node is None:
        return PartitionSpec()
    if isinstance(node, PartitionSpec):
        return node
    if isinstance(node, str):
        return parse_spec(node)
    return None


def _assign(specs, tree, path: str, out: dict, problems: list) -> None:
    """Walks `specs` as a prefix of `tree`, recording `(path, spec, subtree)` where one sits."""
    if specs is None or isinstance(specs, PartitionSpec | str):
        try:
            out.append((path, _as_spec(specs), tree))
        except ShardingError as e:
            problems.append(f"{path or '(root)'}: {str(e).splitlines()[0]}")
        return
    kind_s, kids_s = nodes.children(specs)
    kind_t, kids_t = nodes.children(tree)
    if kind_s == nodes.LEAF:
        problems.append(f"{path or '(root)'}: {specs!r} is not a spec (give a PartitionSpec, "
                        "text like 'data, None', or None)")
        return
    if kind_t in (nodes.LEAF, nodes.NONE) or not (
        type(specs) is type(tree) or (isinstance(specs, list | tuple)
                                      and isinstance(tree, list | tuple))):
        problems.append(f"{path or '(root)'}: the specs have a {nodes.type_name(specs)} here, "
                        f"the tree has a {nodes.type_name(tree)}")
        return
    by_key = dict(kids_t)
    keys_s = [k for k, _ in kids_s]
    missing = [path + k for k in by_key if k not in keys_s]
    extra = [path + k for k in keys_s if k not in by_key]
    if missing or extra:
        detail = "; ".join(filter(None, [missing and f"no spec for {', '.join(missing)}",
                                         extra and f"{', '.join(extra)} not in the tree"]))
        problems.append(f"{path or '(root)'}: {detail}")
        return
    for key, child in kids_s:
        _assign(child, by_key[key], path + key, out, problems)


def _place(placements: list):
    """Yields `(position, jax.Array)` for each `(position, value, sharding)`."""
    if not placements:
        return
    if jax.process_count() > 1:
        # Every process holds the same host value; each builds its own shards from it
        # without a collective (device_put would compare the value across processes).
        for i, value, sharding in placements:
            if isinstance(value, jax.Array) and not value.is_fully_addressable:
                yield i, jax.device_put(value, sharding)
                continue
            host = np.asarray(value)
            yield i, jax.make_array_from_callback(host.shape, sharding,
                                                  lambda index, host=host: host[index])
        return
    lazy = [p for p in placements if isinstance(p[1], LazyArray)]
    ready = [p for p in placements if not isinstance(p[1], LazyArray)]
    if ready:
        # One batched transfer: a device_put per leaf costs ~50 us.
        arrays = jax.device_put([v for _, v, _ in ready], [s for _, _, s in ready])
        for (i, _, _), array in zip(ready, arrays, strict=True):
            yield i, array
    for i, value, sharding in lazy:  # one leaf read at a time, so a checkpoint streams
        yield i, jax.device_put(np.asarray(value), sharding)

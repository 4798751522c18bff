"""Where an op's kernel arguments and results live when its inputs are sharded over a mesh.

An op whose input leaf is a `jax.Array` laid out as a `NamedSharding` runs that leaf's kernel
as one SPMD program over the mesh: the other inputs at that position (other trees' leaves,
host arrays) are placed like it, weights and index starts are replicated, and the output is
given the layout the op implies (an elementwise result keeps the input's spec, a stacked one
gains an unsharded leading axis), so results keep their inputs' shardings.
"""

from __future__ import annotations

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from inspector.core.errors import ShardingError, bullet_list


def named(x) -> NamedSharding | None:
    """The leaf's `NamedSharding` when it is a JAX array laid out over a mesh, else None."""
    if isinstance(x, jax.Array):
        sharding = x.sharding
        if isinstance(sharding, NamedSharding):
            return sharding
    return None


def first(leaves) -> NamedSharding | None:
    """The sharding of the first leaf laid out over a mesh, or None (all on one device)."""
    for x in leaves:
        sharding = named(x)
        if sharding is not None:
            return sharding
    return None


def replicated(mesh: Mesh) -> NamedSharding:
    """Every device of `mesh` holds all of the array (weights, index starts)."""
    return NamedSharding(mesh, PartitionSpec())


def like(sharding: NamedSharding, leaves) -> tuple[NamedSharding, ...]:
    """Each leaf keeps its own layout where it has one on the mesh; the others follow
    `sharding` (they have the same shape, so the same spec fits them)."""
    out = []
    for x in leaves:
        own = named(x)
        out.append(own if own is not None and own.mesh == sharding.mesh else sharding)
    return tuple(out)


def with_spec(sharding: NamedSharding, spec) -> NamedSharding:
    """`sharding`'s mesh with another spec."""
    return NamedSharding(sharding.mesh, PartitionSpec(*spec))


def check_one_mesh(trees: list, action: str) -> None:
    """Raises unless every sharded leaf of the op's inputs lies on one mesh.

    Raises:
        ShardingError: lists each leaf lying on a mesh other than the first one seen.
    """
    from inspector.core import validate
    from inspector.core.packed import PackedTree

    mesh, lines = None, []
    for k, tree in enumerate(trees):
        if isinstance(tree, PackedTree):
            leaves, paths = list(tree.buffers.values()), [f"buffer {g!r}" for g in tree.buffers]
        else:
            leaves, paths = jax.tree_util.tree_leaves(tree), None
        for i, x in enumerate(leaves):
            sharding = named(x)
            if sharding is None:
                continue
            if mesh is None:
                mesh = sharding.mesh
            elif sharding.mesh != mesh:
                paths = paths or validate.key_paths(tree)
                lines.append(f"{paths[i]} (tree {k}): on a mesh {_mesh_text(sharding.mesh)}")
    if lines:
        raise ShardingError(
            f"{action}: {len(lines)} leaves lie on another mesh than {_mesh_text(mesh)}.\n"
            + bullet_list(lines)
            + "\nShard every input over the same mesh (inspector.shard) before the op."
        )


def _mesh_text(mesh: Mesh) -> str:
    ids = [d.id for d in mesh.devices.flat]
    return ", ".join(f"{n}={s}" for n, s in mesh.shape.items()) + f" (devices {ids})"

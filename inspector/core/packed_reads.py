"""A tree read into packed buffers on a device: `read_packed` (each leaf read once, into its
slot), `read_mapped` (on the CPU, large float32 groups left where they lie in their files:
`mapped_groups.py`), and `settled` (a mapped tree's packed copy). The working set holds what
these make."""

from __future__ import annotations

import jax
import numpy as np

from inspector.core import weighted_sum_host
from inspector.core.device_upload import upload
from inspector.core.devices import resolve_device
from inspector.core.file_maps import FileMaps
from inspector.core.host_read import fill, host_array
from inspector.core.mapped_groups import MappedGroup, map_group
from inspector.core.packed import PackedTree, pack_planned, plan_layout


def read_packed(tree, device) -> PackedTree:
    """`pack` onto `device`, each leaf read once through a small host staging buffer into the
    device buffer (donated, updated in place): its device copy plus a few MiB, not two copies."""
    device = resolve_device(device)
    if isinstance(tree, PackedTree):
        return PackedTree(tree.layout, {g: jax.device_put(b, device)
                                        for g, b in tree.buffers.items()})
    layout, leaves = plan_layout(tree)
    if device.platform == "cpu" and all(
            np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(g))) == np.dtype(g)
            for g in layout.sizes):
        # one copy: read into aligned host buffers that the CPU client then uses as they are
        # (dtypes JAX would convert, float64 without x64, go through the staging path below)
        host = pack_planned(layout, leaves)
        buffers = {g: jax.device_put(b, device, may_alias=True) for g, b in host.buffers.items()}
        return PackedTree(host.layout, buffers).with_dtypes(buffers)
    by_group: dict[str, list] = {g: [] for g in layout.sizes}
    for leaf, slot in zip(leaves, layout.slots, strict=True):
        by_group[slot.group].append((leaf, slot))
    buffers = {g: upload(by_group[g], n, np.dtype(g), device) for g, n in layout.sizes.items()}
    return PackedTree(layout, buffers).with_dtypes(buffers)


def read_mapped(tree, device):
    """`read_packed(tree, device)` on a CPU device with each group that can be mapped
    (`mapped_groups.py`) held as a `MappedGroup` (mapped, not read), the others read as
    `read_packed` reads them; None when no group can be mapped.

    Raises:
        LoadError: a file cannot be opened, or is shorter than its header said.
    """
    if device.platform != "cpu" or isinstance(tree, PackedTree):
        return None
    layout, leaves = plan_layout(tree)
    if layout.lead or any(np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(g))) != np.dtype(g)
                          for g in layout.sizes):
        return None
    members: dict[str, list] = {g: [] for g in layout.sizes}
    for leaf, slot in zip(leaves, layout.slots, strict=True):
        members[slot.group].append((leaf, slot))
    maps = FileMaps()
    mapped = {}
    for group, size in layout.sizes.items():
        if weighted_sum_host.usable(group, group, group, (size,), device):  # the loop's
            found = map_group(members[group], size, maps)
            if found is not None:
                mapped[group] = found
    if not mapped:
        return None
    rest = {g: host_array((n,), g) for g, n in layout.sizes.items() if g not in mapped}
    fill([(leaf, rest[s.group][s.offset:s.offset + s.size])
          for leaf, s in zip(leaves, layout.slots, strict=True) if s.group in rest])
    buffers = {g: jax.device_put(b, device, may_alias=True) for g, b in rest.items()}
    return PackedTree(layout, {g: buffers.get(g, mapped.get(g)) for g in layout.sizes})


def settled(tree: PackedTree, device, pause=None) -> PackedTree:
    """`tree` with each `MappedGroup` replaced by its packed copy on `device` (`pause()`
    called before each leaf is copied: `MappedGroup.host`)."""
    for b in tree.buffers.values():
        if isinstance(b, MappedGroup):
            b.host(pause)
    return PackedTree(tree.layout, {
        g: b.placed(device) if isinstance(b, MappedGroup) else b for g, b in tree.buffers.items()})

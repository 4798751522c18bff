"""`MeshState`: the mesh a session shards its trees over, and each tree's spec per subtree.

Part of the session state (`InspectorState.mesh`): the mesh panel shows and sets these params,
the state checks every spec against the selected tree's shapes as it is typed (every leaf that
does not fit is listed under its field) and, on `shard`, lays the tree out over the mesh with
`inspector.shard` and adds the sharded tree to the session.
"""

from __future__ import annotations

import re

import param

import inspector
from inspector.core.packed import structure_of
from inspector.core.sharding import axes_text, check_specs, presets
from inspector.ui.session.formatting import plural
from inspector.ui.session.host_commands import led_shard, shared_now
from inspector.ui.session.loaded import prepare
from inspector.ui.session.ops.index import index_fields
from inspector.ui.session.origins import Sharded
from inspector.ui.session.tree_index import ROOT_ID
from inspector.ui.session.worker import Task

_AXIS = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\d+)\s*")


def parse_axes(text: str) -> dict[str, int]:
    """`"data=4, model=2"` -> `{"data": 4, "model": 2}`.

    Raises:
        ShardingError: an entry is not `name=size`, or a name repeats.
    """
    axes: dict[str, int] = {}
    for part in (text or "").split(","):
        m = _AXIS.fullmatch(part)
        if m is None:
            raise inspector.ShardingError(
                f"Cannot read the mesh {text!r}: {part.strip()!r} is not name=size. Write the "
                "axes like data=4, model=2.")
        if m.group(1) in axes:
            raise inspector.ShardingError(f"Cannot read the mesh {text!r}: the axis "
                                          f"{m.group(1)!r} appears twice.")
        axes[m.group(1)] = int(m.group(2))
    return axes


class MeshState(param.Parameterized):
    """The session's mesh (axis names and sizes) and the spec texts of each tree."""

    axes = param.String(default="", doc="The mesh as text: name=size per axis, in mesh order "
                        "(data=4, model=2); the sizes multiply to the device count.")
    presets = param.List(default=[], doc="Meshes that fit this machine's devices, as text.")
    mesh_error = param.String(default="", doc="Why `axes` is not a mesh here ('' when it is).")
    specs = param.Dict(default={}, doc="Per tree name: spec text per top-level subtree id "
                       "('' or None: replicated).")
    spec_errors = param.Dict(default={}, doc="Per subtree id of the selected tree: every leaf "
                             "below it that does not fit its spec, one per line.")
    checking = param.Boolean(default=False, doc="Check the specs against the selected tree "
                             "(set when the mesh panel is first shown: checking walks every "
                             "leaf, which a session that never shards need not pay).")
    shard = param.Event(doc="Lay the selected tree out over the mesh with its specs; the "
                        "sharded tree is added to the session and selected.")

    def __init__(self, session, **params):
        super().__init__(**params)
        self._session = session
        self._checked = None  # (tree, axes, its specs): what spec_errors were computed for
        n = len(inspector.devices())
        self.presets = [axes_text(p) for p in presets(n)]
        if not self.axes:
            self.axes = self.presets[min(1, len(self.presets) - 1)]
        session.param.watch(self._update_errors, ["selected", "trees"])
        self._update_errors()

    def fields(self) -> list[tuple[str, str]]:
        """`(subtree id, label)` of each spec field of the selected tree."""
        loaded = self._session.trees.get(self._session.selected)
        return [] if loaded is None else index_fields(loaded.index)

    def set_spec(self, field: str, text: str) -> None:
        """Sets the spec text of one field of the selected tree."""
        name = self._session.selected
        self.specs = {**self.specs, name: {**self.specs.get(name, {}), field: text}}

    def spec_tree(self, loaded):
        """The specs as `inspector.shard` takes them: a prefix of the tree, one spec text (or
        None: replicated) per top-level subtree."""
        texts = self.specs.get(loaded.name, {})
        entries = {i: (texts.get(i) or "").strip() or None for i, _ in index_fields(loaded.index)}
        if loaded.index.rows[0].kind == "leaf":
            return entries.get(ROOT_ID)
        import jax

        tree = structure_of(loaded.tree)
        _, treedef = jax.tree_util.tree_flatten(tree, is_leaf=lambda n: n is not tree)
        ids = [loaded.index.rows[i].path for i in loaded.index.row_children(0)]
        return treedef.unflatten([entries.get(i) for i in ids])

    @param.depends("axes", "specs", "checking", watch=True)
    def _update_errors(self, *_):
        try:
            axes = parse_axes(self.axes)
            inspector.mesh(axes)  # the sizes must fit the devices
            mesh_error = ""
        except inspector.ShardingError as e:
            axes, mesh_error = None, str(e)
        loaded = self._session.trees.get(self._session.selected) if self.checking else None
        # Checking costs a walk over every leaf (0.15 s at 100k leaves), and the session's
        # `trees` change on every load: check again only when the tree, mesh or specs did.
        checked = (None if loaded is None else loaded.tree, self.axes,
                   None if loaded is None else tuple(self.specs.get(loaded.name, {}).items()))
        if self._checked is not None and checked[0] is self._checked[0] \
                and checked[1:] == self._checked[1:]:
            return
        self._checked = checked
        errors: dict[str, str] = {}
        if loaded is not None and axes is not None:
            _, problems = check_specs(structure_of(loaded.tree), axes, self.spec_tree(loaded))
            ids = [i for i, _ in index_fields(loaded.index)]
            for line in problems:
                path = line.split(": ", 1)[0]
                field = next((i for i in ids if i == ROOT_ID or path.startswith(i)), ROOT_ID)
                errors[field] = errors.get(field, "") + ("\n" if field in errors else "") + line
        self.param.update(mesh_error=mesh_error, spec_errors=errors)

    @param.depends("shard", watch=True)
    def _on_shard(self):
        session = self._session
        loaded = session.trees.get(session.selected)
        if loaded is None:
            session.error = "Nothing to shard: load or select a tree first."
            return
        if self.mesh_error:
            session.error = self.mesh_error
            return
        axes = parse_axes(self.axes)
        specs = self.spec_tree(loaded)
        name = f"{loaded.name} @ {axes_text(axes)}"

        def work():
            mesh = inspector.mesh(axes)
            return prepare(name, inspector.shard(loaded.tree, mesh, specs),
                           Sharded(loaded.name, axes, specs))

        def done(out):  # on an error, the trees loaded stay; the error says what did not fit
            new = session.add(out, select=True)
            shared_now(session, [new])
            self.specs = {**self.specs, new: dict(self.specs.get(loaded.name, {}))}
            session.error = ""

        try:  # served from several hosts: every follower shards its copy too
            work = led_shard(session, loaded.name, self.axes, self.specs.get(loaded.name, {}),
                             work)
        except inspector.InspectorError as e:
            session.error = str(e)
            return
        session.worker.submit("sharding", Task(
            f"Sharding {loaded.name} over {axes_text(axes)} "
            f"({plural(len(inspector.devices()), 'device')}) …", work, done))

"""Convert settings: a tree converted onto another's structure, layouts and dtypes
(`inspector.convert` with `inspector.align(source, target)`)."""

from __future__ import annotations

import param

import inspector
from inspector.core.errors import bullet_list
from inspector.ui.session.formatting import plural
from inspector.ui.session.loaded import pick
from inspector.ui.session.op_settings import OpSettings, Preview, clip, register
from inspector.ui.session.records import CallRecord


@register
class ConvertSettings(OpSettings):
    """The selected tree's leaves paired with the `target` tree's by name (`inspector.align`),
    each transposed, reshaped and cast to its target leaf: the target's structure, the
    source's values. Pairs fixed by hand are the Align view's; this op takes `align`'s own."""

    op = "convert"
    title = "Convert"
    position = 60
    streams = True  # inspector.convert(..., out=)
    structure_only = (1,)  # the target gives the structure: its data is never read
    follows_selection = True

    tree = param.String(default="", doc="Name of the tree whose values are converted (the "
                        "selected tree).")
    target = param.String(default="", doc="Name of the tree whose structure, layouts and "
                          "dtypes the result takes.")
    allow_missing = param.Boolean(default=False, doc="Leave out target leaves with no single "
                                  "source (else they stop the run).")

    def uses(self) -> list[str]:
        return [self.tree, self.target]

    def forget(self, name: str) -> None:
        if self.target == name:
            self.target = ""

    def _alignment(self, loaded):
        alignment = inspector.align(loaded[0].tree, loaded[1].tree)
        if not alignment.complete and not self.allow_missing:
            lines = alignment.problems()
            raise inspector.InspectorError(
                f"Cannot convert {self.tree} onto {self.target}: "
                f"{plural(len(lines), 'target leaf has', 'target leaves have')} no single "
                "source.\n" + bullet_list(lines, limit=20)
                + "\nPair them in the Align view, or allow missing leaves.")
        return alignment

    def describe(self, loaded):
        alignment = self._alignment(loaded)
        call = CallRecord("convert", f"convert({self.tree} onto {self.target})",
                          self.uses(), {"alignment": alignment,
                                        "allow_missing": bool(self.allow_missing)})
        return call, f"{self.tree} → {self.target} · {plural(len(alignment.pairs), 'pair')}"

    def arguments(self, trees, options):
        return inspector.convert, (trees[0], options["alignment"]), {
            "allow_missing": options["allow_missing"]}

    def output_bytes(self, trees):
        return inspector.describe(trees[1])[0].nbytes  # the target's size

    def preview(self, trees: dict) -> Preview:
        if not self.tree or not self.target:
            return Preview("", "Pick the tree to convert and the tree whose structure it takes.")
        try:
            loaded = pick(trees, self.uses())
            alignment = self._alignment(loaded)
        except inspector.InspectorError as e:
            return Preview("", str(e))
        moved = [p for p in alignment.pairs if str(p.transform) != "none"]
        lines = [f"{p.target} ← {p.source}  ({p.transform})" for p in moved]
        head = (f"{plural(len(alignment.pairs), 'target leaf', 'target leaves')} from "
                f"{self.tree}; {plural(len(moved), 'layout change')}:")
        return Preview(clip(head, lines), "")

    @classmethod
    def code(cls, call: CallRecord, names: list[str], writer) -> str:
        missing = ", allow_missing=True" if call.options["allow_missing"] else ""
        return (f"inspector.convert({names[0]}, inspector.align({names[0]}, {names[1]})"
                f"{missing})")

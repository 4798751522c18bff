"""`AlignState`: porting one loaded tree onto another's names and layouts, for one session.

The Compare view's *Align a onto b* sets `source` (a) and `target` (b) and fires `align`;
the alignment (`inspector.align`, off the event loop) is shown as `frame()` rows, unmatched and
ambiguous targets first; `override` fixes one row; `convert` adds the ported tree to the
session's loaded trees and compares it with the target (values included), so the page says
at once whether the port is exact. Panel-free, like the rest of the session model.
"""

from __future__ import annotations

import param

import inspector
from inspector.core.errors import bullet_list
from inspector.ui.session.loaded import prepare
from inspector.ui.session.origins import Converted
from inspector.ui.session.worker import Task

UNMATCHED, AMBIGUOUS, PAIRED = "unmatched", "ambiguous", "paired"
COLUMNS = ("status", "target", "source", "transform", "score", "reason")


def align_state(state) -> AlignState:
    """The session's `AlignState` (made on first use: most sessions never port)."""
    found = getattr(state, "_align_state", None)
    if found is None:
        found = state._align_state = AlignState(state)
    return found


class AlignState(param.Parameterized):
    """Which tree is ported onto which, the alignment, and what the user changed in it."""

    source = param.String(default="", doc="Name of the tree the weights come from (a).")
    target = param.String(default="", doc="Name of the tree whose names and layouts they "
                          "take (b).")
    alignment = param.Parameter(default=None, doc="The current `inspector.Alignment` (with "
                                "the overrides made), or None before `align`.")
    selected = param.String(default="", doc="The target key path of the row being edited.")
    converted = param.String(default="", doc="Name of the last converted tree ('' before).")
    error = param.String(default="", doc="Why the last align, override or convert failed.")
    align = param.Event(doc="Align `source` onto `target`.")
    convert = param.Event(doc="Convert `source` by the alignment, add it, compare it with "
                          "`target`.")

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self._frame = (None, None, {})  # (alignment, its rows, {target path: row})

    # Aligning ---------------------------------------------------------------------------------

    @param.depends("align", watch=True)
    def _on_align(self):
        state = self._state
        src, dst = state.trees.get(self.source), state.trees.get(self.target)
        if src is None or dst is None:
            self.error = "Pick the two trees first: a, the tree to port, and b, its target."
            return

        def work():
            alignment = inspector.align(src.tree, dst.tree)
            self._frame_of(alignment)  # the table's rows, built here off the event loop
            return alignment

        def done(alignment):
            self.param.update(alignment=alignment, selected="", error="")

        state.worker.submit("aligning", Task(f"Aligning {src.name} onto {dst.name} …", work,
                                             done, self._failed), coalesce=True)

    def override(self, target_path: str, source_path: str) -> bool:
        """Pairs `target_path` with `source_path` (transform chosen as `align` would);
        returns whether it worked (else `error` says why)."""
        if self.alignment is None:
            self.error = "Align the trees first."
            return False
        old = self.alignment
        try:
            alignment = old.override(target_path, source_path)
        except inspector.InspectorError as exc:
            self.error = str(exc)
            return False
        self._patch_frame(old, alignment, target_path)
        self.param.update(alignment=alignment, error="")
        return True

    def _patch_frame(self, old, new, target_path: str) -> None:
        """The table's rows after one override: the row of `target_path` rewritten where it
        stands (a fixed problem stays on top, now paired), not 100,000 rows rebuilt."""
        if self._frame[0] is not old:
            return
        frame, rows = self._frame[1], self._frame[2]
        pair = new.pair(target_path)
        frame = frame.copy()
        frame.loc[rows[target_path], ["status", "source", "transform", "score", "reason"]] = [
            PAIRED, pair.source, str(pair.transform), pair.score, pair.reason]
        self._frame = (new, frame, rows)

    def candidates(self, target_path: str) -> list[str]:
        """Source paths offered for a row: its tied candidates first, then every source leaf
        no pair uses (the searchable list the row's editor shows)."""
        a = self.alignment
        if a is None:
            return []
        tied = next((x.candidates for x in a.ambiguous if x.target == target_path), ())
        pair = a.pair(target_path)
        first = [*tied, *([pair.source] if pair is not None else [])]
        return list(dict.fromkeys([*first, *a.unmatched_source]))

    # The table --------------------------------------------------------------------------------

    def frame(self):
        """The alignment as rows (`COLUMNS`): unmatched targets, then ambiguous ones, then
        the pairs in the target's order; None before `align`."""
        return None if self.alignment is None else self._frame_of(self.alignment)

    def _frame_of(self, alignment):
        import pandas as pd

        if self._frame[0] is alignment:
            return self._frame[1]
        status, target, source, transform, score, reason = [], [], [], [], [], []
        for t in alignment.unmatched_target:
            status.append(UNMATCHED)
            target.append(t)
            source.append("")
            transform.append("")
            score.append(0.0)
            reason.append("no source leaf of a fitting shape and name")
        for a in alignment.ambiguous:
            status.append(AMBIGUOUS)
            target.append(a.target)
            source.append(" | ".join(a.candidates))
            transform.append("")
            score.append(a.score)
            reason.append(a.reason)
        names: dict = {}
        for p in alignment.pairs:
            status.append(PAIRED)
            target.append(p.target)
            source.append(p.source)
            text = names.get(p.transform)
            if text is None:
                text = names[p.transform] = str(p.transform)
            transform.append(text)
            score.append(p.score)
            reason.append(p.reason)
        frame = pd.DataFrame({"status": status, "target": target, "source": source,
                              "transform": transform, "score": score, "reason": reason},
                             columns=list(COLUMNS))
        self._frame = (alignment, frame, {t: i for i, t in enumerate(target)})
        return frame

    def summary(self) -> str:
        """One line: pairs, unmatched and ambiguous targets, unused source leaves."""
        a = self.alignment
        if a is None:
            return ""
        return (f"{len(a.pairs):,} of {len(a.targets):,} target leaves paired · "
                f"{len(a.unmatched_target):,} unmatched · {len(a.ambiguous):,} ambiguous · "
                f"{len(a.unmatched_source):,} source leaves unused")

    # Exports ----------------------------------------------------------------------------------

    def json_bytes(self) -> bytes:
        return self.alignment.to_json().encode() if self.alignment is not None else b""

    def code_bytes(self) -> bytes:
        return self.alignment.to_code().encode() if self.alignment is not None else b""

    # Converting -------------------------------------------------------------------------------

    @param.depends("convert", watch=True)
    def _on_convert(self):
        state, alignment = self._state, self.alignment
        src, dst = state.trees.get(self.source), state.trees.get(self.target)
        if alignment is None or src is None or dst is None:
            self.error = "Align two loaded trees first."
            return
        if not alignment.complete:
            lines = alignment.problems()
            self.error = (f"Cannot convert yet: {len(lines)} target "
                          f"{'leaf has' if len(lines) == 1 else 'leaves have'} no single "
                          "source.\n" + bullet_list(lines, limit=len(lines))
                          + "\nSelect each such row and pick its source below the table.")
            return
        name = f"{src.name} ported"
        device = state.device

        def work():
            tree = inspector.convert(src.tree, alignment, device=device, target=dst.tree)
            return prepare(name, tree, Converted(src.name, dst.name, alignment.to_json()))

        def done(loaded):
            added = state.add(loaded)
            self.param.update(converted=added, error="")
            # The normal comparison, values included: 0 differences when the port is exact
            state.compare.param.update(diff_a=dst.name, diff_b=added)
            state.compare.param.trigger("diff_compare_values")

        state.worker.submit("converting", Task(f"Converting {src.name} onto {dst.name} …", work,
                                               done, self._failed))

    def _failed(self, text: str) -> None:  # the align view shows its own errors
        self.error = text

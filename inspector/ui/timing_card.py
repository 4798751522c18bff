"""The timing card: how long the last run took to compile and to run, and how fast it moved data."""

from __future__ import annotations

import html

import panel as pn
import panel_material_ui as pmui

from inspector.ui.session.formatting import MONO, human_bytes, ms, plural
from inspector.ui.session.job_runner import StreamedRun


def timing_lines(rr, eager_seconds=None, eager_max_diff=None) -> list[tuple[str, str]]:
    """The card's rows for a `RunResult`: `(label, value)` pairs, in order."""
    if rr is None:
        return []
    if isinstance(rr, StreamedRun):
        return streamed_lines(rr)
    if rr.n_compiled == 0:
        compiled = "cached, no compile"
    else:
        compiled = f"{ms(rr.compile_seconds)} ({plural(rr.n_compiled, 'XLA compilation')})"
    read = getattr(rr, "read_seconds", 0.0)
    read_bytes = getattr(rr, "read_bytes", 0)
    mapped = getattr(rr, "mapped_bytes", 0)
    rate = f" · {rr.read_gbps:.3g} GB/s read from files ({human_bytes(read_bytes)})" \
        if read_bytes and read else ""
    what = "lazy leaves read and inputs placed, once per run"
    if mapped:  # left in the files' maps, where the kernel reads them
        rate = f" · {human_bytes(mapped)} used in place in the files' maps, not copied" + (
            f"; {human_bytes(read_bytes - mapped)} read" if read_bytes > mapped else "")
        what = "once per run"
    lines = [
        ("read", f"{ms(read)}{rate} ({what})" if read else "inputs already in place"),
        ("compile", compiled),
        (f"run (median of {len(rr.times)})",
         f"{ms(rr.median_seconds)}  ({ms(rr.min_seconds)[:-3]}–{ms(rr.max_seconds)})"),
        ("throughput", f"{rr.gbps:.3g} GB/s kernel · "
                       f"{human_bytes(rr.bytes_read + rr.bytes_written)} moved"),
        ("device", rr.device),
        *([("mesh", f"{rr.mesh} (SPMD over the mesh)")] if getattr(rr, "mesh", None) else []),
        ("kernels per run", f"{rr.n_kernels:,}"),
    ]
    if eager_seconds is not None:
        ratio = eager_seconds / rr.median_seconds if rr.median_seconds else float("inf")
        same = "" if eager_max_diff is None else f" · max |Δ| {eager_max_diff:.3g}"
        lines.append(("eager jax.tree.map", f"{ms(eager_seconds)} ({ratio:.3g}× the compiled "
                                            f"run){same}"))
    return lines


def streamed_lines(rr: StreamedRun) -> list[tuple[str, str]]:
    """The card's rows for a run streamed into a file: one pass, its read, compute and write
    time apart (reads ahead overlap computing: `read` is the time spent waiting for them)."""
    compiled = "cached, no compile" if rr.n_compiled == 0 else \
        f"{ms(rr.compile_seconds)} ({plural(rr.n_compiled, 'XLA compilation')})"
    return [
        ("streamed", "into a file, leaf by leaf (larger than the memory budget); one pass, "
                     "not repeated"),
        ("total", ms(rr.median_seconds)),
        ("read", f"{ms(rr.read_seconds)} waiting for input leaves "
                 f"({human_bytes(rr.read_bytes)} read)"),
        ("compute", f"{ms(rr.compute_seconds)} in the kernels (with copies to and from the "
                    "device)"),
        ("write", f"{ms(rr.write_seconds)} writing the file "
                  f"({human_bytes(rr.bytes_written)})"),
        ("compile", compiled),
        ("end to end", f"{rr.gbps:.3g} GB/s "
                       f"({human_bytes(rr.bytes_read + rr.bytes_written)} read and written)"),
        ("device", rr.device),
    ]


class TimingCard(pn.viewable.Viewer):
    """Read ms, compile ms, median run ms (min–max), GB/s, device and kernels of the last run:
    reading and compiling are apart from the timed runs (and from GB/s)."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self._body = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 5))
        self.card = pmui.Card(self._body, title="Timing", collapsible=False,
                              sizing_mode="stretch_width", margin=(10, 5))
        state.param.watch(self._update, ["result", "eager_seconds", "eager_max_diff"])
        self._update()

    def __panel__(self):
        return self.card

    @property
    def text(self) -> str:
        """The card as plain text, one `label: value` per line."""
        rr = self._state.result
        lines = timing_lines(rr, self._state.eager_seconds, self._state.eager_max_diff)
        head = [f"{rr.op} on {rr.device}"] if rr is not None else ["No run yet."]
        return "\n".join(head + [f"{k}: {v}" for k, v in lines])

    def _update(self, *_):
        rr = self._state.result
        self.card.visible = rr is not None
        if rr is None:
            self._body.object = ""
            return
        lines = timing_lines(rr, self._state.eager_seconds, self._state.eager_max_diff)
        cells = "".join(
            f"<div style='color:var(--mui-palette-text-secondary,#666)'>{html.escape(k)}</div>"
            f"<div class='timing-{html.escape(k.split()[0])}' style=\"font-family:{MONO}\">"
            f"{html.escape(v)}</div>" for k, v in lines)
        self._body.object = ("<div class='timing-card' style='display:grid;grid-template-columns:"
                             "max-content 1fr;gap:4px 14px;font-size:13px'>" + cells + "</div>")

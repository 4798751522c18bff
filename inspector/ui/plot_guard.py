"""`PlotGuard`: keeps a Bokeh plot in a panel-material-ui tab from breaking the page.

panel-material-ui 0.16 re-mounts a dynamic tab's contents when the tab is shown again, and lays
its Bokeh plots out at once (`compute_layout`), before Bokeh has built their panels: Bokeh 3.9's
`PlotView._measure_layout` and `_after_layout` then read `this.layout.top_panel` (and
`left_panel`) of an undefined layout and throw ("Cannot read properties of undefined (reading
'top_panel')", https://github.com/panel-extensions/panel-material-ui/issues/548). Thrown from
React's `componentDidMount`, the error unmounts the whole page: after a timeline heatmap pick
had switched to *Compare trees*, going back to *Timeline* left the page blank.

The guard, rendered once per page (hidden), makes those two steps wait for the layout: a plot
without one is measured and placed when Bokeh lays it out after rendering it, as any new plot.
It acts only where the layout is missing; drop it once upstream does the same.
"""

from __future__ import annotations

from panel.custom import JSComponent


class PlotGuard(JSComponent):
    """Hidden; patches two steps of Bokeh's `PlotView` layout once per page (see the module)."""

    _esm = """
    export function render({ el }) {
      el.style.display = "none"
      const Plot = window.Bokeh?.Models?.get?.("Plot")
      const proto = Plot?.prototype?.default_view?.prototype
      if (proto == null || proto.__inspector_guarded) { return }
      for (const name of ["_measure_layout", "_after_layout"]) {
        const original = proto[name]
        proto[name] = function (...args) {
          if (this.layout == null) { return }  // not built yet: laid out after its render
          return original.apply(this, args)
        }
      }
      proto.__inspector_guarded = true
    }
    """


def plot_guard() -> PlotGuard:
    """The guard, to put once on a page that shows Bokeh plots in tabs."""
    return PlotGuard(width=0, height=0, margin=0)

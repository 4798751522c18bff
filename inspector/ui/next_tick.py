"""`next_tick(fn)`: a watcher that updates a view with column data on the session's next tick.

A finished job's view updates are sent to the browser as one held message
(`InspectorState.updates_together`; each message costs Bokeh a reference to every model of
the page). Column data (a Tabulator's or a figure's `ColumnDataSource` of NumPy arrays) goes
out as binary buffers, and a held message with buffers failed to decode in the launcher's page
("Offset is outside the bounds of the DataView"; one buffer was enough): the rest of that
update, the run status included, was lost. The views whose updates carry such data therefore
update just after the held batch, in their own message. Not served (tests, a notebook), they
update at once.
"""

from __future__ import annotations

from collections.abc import Callable

import panel as pn


def next_tick(fn: Callable) -> Callable:
    """Returns a `param.watch` callback that calls `fn(*events)` on the next tick."""
    return lambda *events: pn.state.execute(lambda: fn(*events), schedule=True)

"""A finished run's status reaches the page in a message of its own, before its result views.

The browser paints what one message changes only after it has laid all of it out: with the
status in the same message as the result tree, the timing card and the history (shown for
the first time in a session), the status waited for their layout (0.2-0.3 s of a later
session's first run, `docs/app-first-run.md`). A served session (`panel serve inspector`,
driven by `tests/ui/bokeh_client.py`: the messages a page sends, no browser) runs S1's
weighted sum; the number of the server message that first shows each view is recorded as it
arrives. The status must come in an earlier message than every result view, and the views
must then show the result (by value: NumPy).
"""

from __future__ import annotations

import asyncio
import html

import numpy as np

from inspector import examples
from tests.serving import error_lines, served_app
from tests.ui.bokeh_client import BokehClient

_S1 = [np.asarray(t[0][0], np.int64) for t in examples.load("S1: weighted sum").values()]
LEAF = "= " + str((1 * _S1[0] + 2 * _S1[1] + 3 * _S1[2]).tolist())  # weights [1, 2, 3]

SEEN = {
    "status": lambda t: "weighted_sum finished in" in t and "(run 1)" in t,
    "result tree": lambda t: LEAF in t,
    "timing card": lambda t: "timing-card" in t,
    "history": lambda t: '<td class="text">weighted_sum</td>' in t,
}


class Numbered(BokehClient):
    """Records the number of the server message in which each of `SEEN` first held."""

    def __init__(self, url: str):
        super().__init__(url)
        self.messages = 0
        self.seen: dict[str, int] = {}

    def _apply(self, events: list) -> None:
        super()._apply(events)
        self.messages += 1
        texts = html.unescape(self.texts())  # the HTML panes' markup, as drawn
        for name, holds in SEEN.items():
            if name not in self.seen and holds(texts):
                self.seen[name] = self.messages


async def _run(url: str) -> Numbered:
    client = Numbered(url)
    await client.connect(120)
    await client.ready()
    run = await client.wait(lambda c: c.find("Button1", label="Run"), 120)
    await client.set(run[0], "value", True)
    await client.wait(lambda c: len(c.seen) == len(SEEN), 60)
    await client.close()
    return client


def test_the_status_arrives_before_the_result_views_which_then_show_the_result(tmp_path):
    log_path = tmp_path / "server.log"
    with served_app(log_path) as url:
        client = asyncio.run(_run(url))
    seen = client.seen
    assert all(seen["status"] < seen[view] for view in SEEN if view != "status"), seen
    shown = html.unescape(client.texts())  # the result, then shown: its value (NumPy)
    assert "(run 1)" in shown and LEAF in shown
    assert error_lines(log_path) == []

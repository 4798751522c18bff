"""A run timed in the app's page and on its server, for `bench_app.py` and
`profile_run_page.py`.

In the page: the status region painted with a new finished run, and the run history's new row
painted (the last of a run's views to arrive), each by a MutationObserver resolved two
animation frames after the change (`watch_run`, `ran_painted`); `--poll`'s old way
(`wait_status_change`). On the server: the run marks the launcher writes
(`INSPECTOR_RUN_MARKS`, `inspector/ui/session/run_marks.py`) between a click and a paint
(`breakdown`, `mark_time`).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

STATUS = '[role="status"].run-status'


def status_text(page) -> str:
    return page.locator(STATUS).inner_text()


def _watcher(params: str, found: str, value: str) -> str:
    """A function for `locator.evaluate`: a MutationObserver on the element's root (its
    shadow root) that resolves with `value` (JS, `found` in scope) two animation frames after
    `found` (a JS expression over `el`, `root` and `params`) is first truthy (the frame that
    drew it has been painted); rejects after `ms`. Nothing polls the page meanwhile."""
    return f"""({params}) => new Promise((resolve, reject) => {{
  const root = el.getRootNode();
  let finished = false;
  const check = () => {{
    if (finished) return;
    const found = {found};
    if (!found) return;
    finished = true;
    observer.disconnect();
    requestAnimationFrame(() => requestAnimationFrame(() => resolve({value})));
  }};
  const observer = new MutationObserver(check);
  observer.observe(root, {{subtree: true, childList: true, characterData: true}});
  setTimeout(() => {{ if (!finished) {{ observer.disconnect(); reject(new Error("timeout")); }} }},
             ms);
  check();
}})"""


# the status region's text once it announces a new finished run: [Date.now(), text]
WATCH = _watcher("el, [before, ms]", """(() => {
      const now = el.isConnected ? el : root.querySelector('[role="status"].run-status');
      const text = now ? now.innerText : null;
      return text !== null && text !== before && /weighted_sum .* ms/.test(text) ? text : null;
    })()""", "[Date.now(), found]")

# the run history table (the last of the result views to update) once it has more than `rows`
# rows: Date.now()
VIEWS = _watcher("el, [rows, ms]", """(() => {
      const table = root.querySelector('.run-history tbody');
      return table !== null && table.rows.length > rows;
    })()""", "Date.now()")

HISTORY = ".run-history"


def watch_run(page, before: str, timeout: float = 600) -> None:
    """Starts watching, before a click, for the status announcing a new finished run and for
    the history table's new row (`ran_painted` waits for them)."""
    rows = page.locator(f"{HISTORY} tbody tr").count()
    page.locator(STATUS).evaluate(
        f"(el, args) => {{ window.__statusPainted = ({WATCH})(el, args); }}",
        [before, int(timeout * 1000)])
    page.locator(HISTORY).evaluate(
        f"(el, args) => {{ window.__viewsPainted = ({VIEWS})(el, args); }}",
        [rows, int(timeout * 1000)])


def ran_painted(page) -> tuple[float, float]:
    """(Unix seconds) when the status watched by `watch_run` was painted, and when the
    history's new row was."""
    status, views = page.evaluate(
        "Promise.all([window.__statusPainted, window.__viewsPainted])")
    return status[0] / 1e3, views / 1e3


POLL = {"on": False}
"""`--poll`: wait by reading the status every 10 ms from Python, as this benchmark did until
2026-11-26 (each read is a Playwright round trip that searches the page's shadow roots: the
browser's and driver's work competes with the server for this machine's two cores)."""


def wait_status_change(page, before: str, timeout: float = 600) -> float:
    """Waits until the run-status live region announces a new finished run; returns when
    (Unix seconds: painted, or read by `--poll`)."""
    if not POLL["on"]:
        seen_ms, _ = page.locator(STATUS).evaluate(WATCH, [before, int(timeout * 1000)])
        return seen_ms / 1e3
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = status_text(page)
        if text != before and re.search(r"weighted_sum .* ms", text):
            return time.time()
        time.sleep(0.01)
    raise TimeoutError(f"the status stayed {before!r}")


def mark_time(marks: Path, offset: int, step: str) -> float:
    """The Unix time of the first run mark `step` written after `offset` (0: none)."""
    with open(marks) as f:
        f.seek(offset)
        for line in f:
            t, _, label = line.rstrip("\n").split("\t")
            if label == step:
                return float(t)
    return 0.0


def breakdown(marks: Path, offset: int, clicked: float, seen: float,
              extra: list[tuple[float, str]] = ()) -> list[tuple[str, float]]:
    """The server's run marks (`INSPECTOR_RUN_MARKS`) written after `offset`, and `extra`
    (unix time, step) marks, between the browser's click and the status seen, as (step,
    seconds since the step before)."""
    with open(marks) as f:
        f.seek(offset)
        lines = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    timed = sorted([(float(t), label) for t, _, label in lines] + [
        (t, label) for t, label in extra if t > 0])
    steps, last = [], clicked
    for t, label in timed:
        if t > seen:
            break
        steps.append((label, t - last))
        last = t
    steps.append(("status painted in the page" if not POLL["on"] else
                  "status seen by the browser (polled every 10 ms)", seen - last))
    return steps


def print_breakdown(title: str, steps: list[tuple[str, float]]) -> None:
    print(f"\n{title}: step (seconds since the step before; first after the browser's click)")
    for label, seconds in steps:
        print(f"  {seconds * 1e3:8.1f} ms  {label}")

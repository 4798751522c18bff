"""`Worker`: the one way a session runs work off its event loop, and what happens after.

Every task has a name (`running`: "comparing", "scanning", ...), a status line, the work (run in
a thread when the session is served, at once otherwise) and what to do with its result. One
error policy for all of them: a failed task shows `error_text(exc)` in the session's `error`
(or where the task's `failed` puts it: the file picker, the align view); a `Cancelled` task
says nothing. While a task runs the session's `busy`, `status`, `progress` and `running` params
say so; views read `running` to learn what runs, never the status text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import traceback
from collections.abc import Callable

import param

import inspector
from inspector.ui.session.job_runner import Cancelled
from inspector.ui.session.run_marks import mark


def error_text(exc: BaseException, root: str = "") -> str:
    """An error as the app shows it: the inspector's own messages whole (they name the key
    paths and the fix), anything else with its type and the last line of its traceback; files
    relative to `root`, never a server path outside it (`relative_to_root`)."""
    from inspector.ui.session.checkpoint_files import relative_to_root

    if isinstance(exc, inspector.InspectorError):
        return relative_to_root(str(exc), root)
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f"\n  at {where[0].filename}:{where[0].lineno}" if where else ""
    return relative_to_root(f"Unexpected {type(exc).__name__}: {exc}{at}", root)


@dataclasses.dataclass
class Task:
    """One piece of background work: `work()` in the worker, then `done(out)` on the event
    loop; on an exception `failed(text)` (default: the session's `error`) instead."""

    status: str
    work: Callable
    done: Callable = lambda out: None
    failed: Callable[[str], None] | None = None
    announce: Callable | None = None
    """`announce(out)`, when given: what the page shows first (a run's status line), sent
    alone; `done(out)` follows `ANNOUNCE_GAP` later, the busy state off with it. Not served,
    one after the other at once."""


ANNOUNCE_GAP = 0.05
"""Seconds between a task's announcement and its `done` (served): the browser handles the
announcement and paints it (a frame is 17 ms) before the message of `done`'s views reaches it.
Sent together, or on the next tick, the status often waited for the layout of the views (a
later session's first result: 0.19-0.36 s from the result to the status painted, 25-62 ms
with the gap; `docs/app-first-run.md`)."""


class Worker:
    """Runs a session's tasks one at a time, in submission order (a thread when the session's
    `background` is on), and applies the one error policy after each."""

    def __init__(self, session):
        self._session = session
        self._queue: list[tuple[str, Task | Callable]] = []
        self._progress_shown = 0.0

    def submit(self, running: str, task: Task | Callable[[], Task], coalesce: bool = False) -> None:
        """Queues `task` (or `task()`, built when it starts: a queued run then uses the latest
        settings) under the name `running`; runs it now if nothing else is running. With
        `coalesce`, it replaces any queued task of the same name (dragging a weight slider runs
        the latest weights, not every step of the drag)."""
        if coalesce:
            self._queue = [q for q in self._queue if q[0] != running]
        self._queue.append((running, task))
        if not self._session.busy:
            self._next()

    def clear(self) -> None:
        """Drops the queued tasks (the session closed)."""
        self._queue.clear()

    def progress(self, done: int, total: int, status: str, percent: float | None = None) -> None:
        """Shows how far the running task has got (`percent`, default done / total, and a
        status line); called by the working thread, shown at most every 0.2 s (and the last)."""
        now = time.monotonic()
        if done < total and now - self._progress_shown < 0.2:
            return
        self._progress_shown = now
        self._session.param.update(
            progress=100.0 * done / max(total, 1) if percent is None else percent, status=status)

    def later(self, seconds: float, fn) -> None:
        """Calls `fn()` on the session's event loop (with the document lock) after `seconds`;
        at once when 0 or not in the background."""
        if not seconds or not self._session.background:
            fn()
            return

        async def wait():
            await asyncio.sleep(seconds)

            async def call():
                fn()

            call.lock = True  # as `finish` in `_in_thread`: views update Bokeh models
            param.parameterized.async_executor(call)

        param.parameterized.async_executor(wait)

    def _fail(self, task: Task | None, exc: BaseException) -> None:
        if isinstance(exc, Cancelled):
            return
        text = error_text(exc, self._session.file_root)
        if task is not None and task.failed is not None:
            task.failed(text)
        else:
            self._session.error = text

    def _next(self) -> None:
        session = self._session
        while self._queue:
            running, make = self._queue.pop(0)
            try:
                task = make() if not isinstance(make, Task) else make
            except Exception as exc:  # bad settings: say why, keep everything else
                self._fail(None, exc)
                continue
            self._progress_shown = 0.0  # a new task's first progress always shows
            mark(f"task built: {running}", session)
            # one message to the page (a Run click is a Bokeh event, not held as a change
            # is: each of these went alone, 30-70 ms of a later session's first run)
            with session.updates_together():
                session.param.update(busy=True, status=task.status, progress=None,
                                     running=running)
            mark("busy shown", session)
            if session.background:
                param.parameterized.async_executor(lambda t=task: self._in_thread(t))
                return
            out, exc = _call(task.work)
            self._announce(task, out, exc)
            self._complete(task, out, exc)
        session.param.update(busy=False, status="", progress=None, running="")

    async def _in_thread(self, task: Task):
        # Runs on the session's event loop without the document lock (Panel's default for
        # async callbacks), so the session stays responsive while the work runs in a thread.
        out, exc = await asyncio.to_thread(_call, task.work)
        mark("work returned (event loop)", self._session)

        async def finish():
            mark("finish started (document lock)", self._session)
            with self._session.updates_together():
                self._complete(task, out, exc)
                self._next()
            mark("finish: document changes sent", self._session)

        async def announce():
            # Alone (the session stays busy: a queued task waits): the message is written
            # once this callback returns, then `finish` follows after the gap.
            mark("announce started (document lock)", self._session)
            with self._session.updates_together():
                self._announce(task, out, exc)
                mark("status set", self._session)
            mark("announced: status sent", self._session)
            param.parameterized.async_executor(gap)

        async def gap():  # without the document lock: other callbacks of the page go on
            await asyncio.sleep(ANNOUNCE_GAP)
            param.parameterized.async_executor(finish)

        # Views update Bokeh models directly (chart sources), which needs the document lock:
        # `lock = True` is what `panel.io.with_lock` sets, and Panel's executor honours it.
        finish.lock = announce.lock = True
        announced = task.announce is not None and exc is None
        param.parameterized.async_executor(announce if announced else finish)

    def _announce(self, task: Task, out, exc) -> None:
        if task.announce is None or exc is not None:
            return
        try:
            task.announce(out)
        except Exception as e:  # the views still follow (`done`)
            self._fail(None, e)

    def _complete(self, task: Task, out, exc) -> None:
        try:
            if exc is not None:
                self._fail(task, exc)
            else:
                task.done(out)
        except Exception as e:  # a view failing to show a result must not wedge the queue
            self._fail(None, e)


class WorkerAtOnce(Worker):
    """A notebook's worker: work asked for by a cell's code runs at once (the cell's next line
    sees its result); work asked for in the widget (a comm message) goes to the thread."""

    def __init__(self, session, in_widget: Callable[[], bool]):
        super().__init__(session)
        self._in_widget = in_widget

    def submit(self, running, task, coalesce=False) -> None:
        session = self._session
        if not session.background or self._in_widget():
            super().submit(running, task, coalesce)
            return
        session.background = False
        try:
            super().submit(running, task, coalesce)
        finally:
            session.background = True


def _call(work):
    try:
        return work(), None
    except Exception as exc:
        # The traceback keeps the frames' locals (a run's input and output buffers) alive for
        # as long as the error is; only where it happened is shown (`error_text`).
        traceback.clear_frames(exc.__traceback__)
        return None, exc

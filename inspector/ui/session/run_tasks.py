"""The tasks that run a session's current op, time its repeats and keep its result.

Each returns a `worker.Task` for the session's worker (`InspectorState.worker`): the work runs
on the working set (`JobRunner`: trees read once, held packed, reused; the op planned once),
the `done` part shows the result, adds a `RunRecord` to the history and, once shown, queues the
timed repeats. None of them names an op: the job's settings say what is special about it.
"""

from __future__ import annotations

import dataclasses

import inspector
from inspector.ui.session.formatting import human_bytes
from inspector.ui.session.host_commands import led_keep, led_run, shared_now, spans_hosts
from inspector.ui.session.job_runner import StreamedRun
from inspector.ui.session.loaded import prepare
from inspector.ui.session.origins import Result
from inspector.ui.session.records import RunRecord
from inspector.ui.session.run_marks import mark
from inspector.ui.session.tree_index import index_for
from inspector.ui.session.worker import Task

REPEAT_DELAY = 1.0
"""Seconds a served session waits after showing a result before timing its repeats: a user
still changing weights gets each result without waiting for repeats of the last one."""


def run_task(session) -> Task:
    """The task that runs the current op once (on the working set); its timed repeats
    follow as their own task (`repeat_task`), delayed by `REPEAT_DELAY` when served."""
    job = session.job()  # built when the run starts, so a queued run uses the latest settings
    device, repeats, eager = session.device, session.repeats, session.compare_eager
    generation = session.runs.new_generation()  # older timed repeats stop
    loaded = dict(session.trees)

    def work():
        mark("work started", session)
        # Once, on the working set (read once, then reused): the page shows this result
        # now; the timed repeats follow as their own work (`repeat_task`).
        rr = session.runs.run_once(job, loaded, device,
                                   progress=lambda p: _stream_progress(session, p),
                                   reading=lambda *a: _read_progress(session, job, *a))
        mark("run_once returned", session)
        index_for(rr.result)  # describe the result here, off the event loop
        mark("result indexed", session)
        eager_s = diff = None
        make = job.settings.eager([loaded[n].tree for n in job.trees], job.call.options) \
            if eager and not isinstance(rr, StreamedRun) else None
        if make is not None:  # some ops (merges) have no eager reference
            from inspector.ui.session.eager import max_abs_diff, time_eager

            eager_s, reference = time_eager(make(device), repeats=min(repeats, 3))
            diff = max_abs_diff(rr.result, reference)
        return rr, eager_s, diff

    work = led_run(session, job, work)  # followers run it too when its inputs span hosts

    def announce(out):  # the status alone, first: the page paints it before the views
        session.run_status = _finished(out[0], len(session.history) + 1)

    def done(out):
        mark("done started (event loop)", session)
        rr, eager_s, diff = out
        record = RunRecord.of(len(session.history) + 1, job, rr, eager_s, device, repeats)
        view, same = session.tree_views["result"], session.result_name == job.label
        view.param.update(expanded=view.expanded if same else
                          index_for(rr.result).default_expanded(),
                          path=view.path if same else "")
        session.param.update(result=rr, result_name=job.label, error="", eager_seconds=eager_s,
                             eager_max_diff=diff, history=[*session.history, record],
                             run_status=_finished(rr, record.run), held=session.runs.held())
        # A result spread over several hosts is timed once: its repeats would be
        # collectives every process must run in step, which the page's cancellable,
        # delayed repeats cannot promise (a follower would wait in one for ever).
        if repeats > 1 and not isinstance(rr, StreamedRun) and not spans_hosts(rr.result):
            def time_it():
                if session.runs.current(generation):  # no newer run meanwhile
                    session.worker.submit("timing", lambda: repeat_task(
                        session, job, repeats, generation, rr), coalesce=True)

            # Served: not while the user is still changing settings (the session stays
            # free meanwhile, so the next change starts at once).
            session.worker.later(REPEAT_DELAY if session.background else 0, time_it)
        mark("done: views updated", session)

    return Task(f"Running {job.op} on {device} …", work, done, announce=announce)


def repeat_task(session, job, repeats, generation, first) -> Task:
    """The timed repeats of the run that gave `first`: after the page showed its result,
    cancelled by the next run; they execute the plan that run made. The timing card and
    history then show their median."""

    def work():
        return session.runs.repeat(first, repeats, generation)

    def done(rr):
        if session.runs.current(generation) and session.result is first:
            if session.history:
                last = dataclasses.replace(
                    session.history[-1], median_ms=rr.median_seconds * 1e3,
                    min_ms=rr.min_seconds * 1e3, max_ms=rr.max_seconds * 1e3, gbps=rr.gbps)
                session.history = [*session.history[:-1], last]
            session.param.update(result=rr, held=session.runs.held())

    def failed(text):  # a newer run stopped these repeats: nothing to say
        if session.runs.current(generation):
            session.error = text

    return Task(f"Timing {job.op}: {repeats} runs …", work, done, failed)


def keep_task(session, base: str) -> Task:
    """The task that adds the shown result as loaded trees named from `base` (one per result
    tree the op's settings name: an unstacked result gives one tree per slice), selected, so
    operations chain."""
    rr, label = session.result, session.result_name
    record = session.history[-1] if session.history else None
    call = record.call if record is not None and record.call.label == label else None
    settings = session.ops[call.op] if call is not None else None
    session.runs.pin(rr.result)  # a loaded tree now: later runs must not write into it

    def work():
        buffers = rr.result.buffers.values() if isinstance(rr.result, inspector.PackedTree) \
            else ()
        if any(getattr(b, "is_deleted", lambda: False)() for b in buffers):
            raise inspector.InspectorError(
                "The result was replaced by a newer run before it could be kept: keep the "
                "result shown now.")
        if settings is None:  # not the last run's (nothing to rebuild it from)
            return [prepare(base, rr.result, f"result of {label}")]
        parts = settings.results(rr.result)
        return [prepare(f"{base}{suffix}", tree,
                        Result(call, i if suffix else None))
                for i, (suffix, tree) in enumerate(parts)]

    work = led_keep(session, rr.result, work)

    def done(loaded):
        names = [session.add(t) for t in loaded]
        if spans_hosts(rr.result):
            shared_now(session, names)
        session.selected = names[0]

    return Task(f"Keeping {label} …", work, done)


def _finished(rr, run: int) -> str:
    """The finished run as the status announces it."""
    text = f"{rr.op} finished in {rr.median_seconds * 1e3:.1f} ms on {rr.device} (run {run})"
    if isinstance(rr, StreamedRun):
        return text + (f" · streamed into a file: read {rr.read_seconds * 1e3:.1f} ms, compute "
                       f"{rr.compute_seconds * 1e3:.1f} ms, write {rr.write_seconds * 1e3:.1f} ms")
    if rr.read_bytes and rr.mapped_bytes == rr.read_bytes:  # nothing copied: no read rate
        text += f" · inputs mapped from their files, kernel {rr.gbps:.3g} GB/s"
    elif rr.read_bytes:
        text += f" · read {rr.read_gbps:.3g} GB/s, kernel {rr.gbps:.3g} GB/s"
    return text


def _read_progress(session, job, name: str, nbytes: int, done: int, total: int) -> None:
    """Shows which input tree a run is reading from its files, and how far the reads have
    got (bytes of the trees read before it / all to read) as the status and the progress
    bar; called by the running thread before each tree, and with no name once all are read
    (the bar then goes back to "running")."""
    if name is None:
        session.param.update(progress=None, status=f"Running {job.op} on {session.device} …")
        return
    # one update per tree (a few): not throttled as a stream's per-leaf progress is
    session.param.update(progress=100.0 * done / max(total, 1),
                         status=f"Reading {name} ({human_bytes(nbytes)}) for {job.op} …")


def _stream_progress(session, progress) -> None:
    """Shows how far a run streamed into a file has got (leaves written / total, rate) as
    the status and the progress bar; called by the running thread."""
    session.worker.progress(progress.done, progress.total,
                            f"Writing the result to a file (larger than the memory budget): "
                            f"{progress.done} / {progress.total} leaves, "
                            f"{human_bytes(progress.rate)}/s")

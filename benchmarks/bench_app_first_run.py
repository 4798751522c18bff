"""Sessions' first runs as the launcher serves them, in one process, no browser.

    python benchmarks/bench_app_first_run.py a.safetensors b.safetensors [--sessions 3]

Opens the files as the launcher does (`prepare`, `launcher_warm.keep_warm`), waits 2 s (a
page opening; the launcher's warm-up runs meanwhile), then, `--sessions` times, makes a
session state with the weighted-sum form's defaults (all files, equal weights), runs it once
(what pressing Run does, minus the browser) and closes it. Prints, per session, the seconds
from Run to the result shown and the run's own figures: read (files -> working set), XLA
compilations, the execution. `bench_app.py` measures the same through the browser.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import inspector  # noqa: E402
from inspector.ui.session import launcher_warm  # noqa: E402
from inspector.ui.session.loaded import prepare  # noqa: E402
from inspector.ui.session.state import InspectorState  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--sessions", type=int, default=3)
    args = parser.parse_args()
    loaded = [prepare(p.name, inspector.load(p), p.name) for p in args.paths]
    launcher_warm.keep_warm(loaded)
    time.sleep(2.0)
    weights = [1 / len(loaded)] * len(loaded)
    for i in range(args.sessions):
        state = InspectorState(repeats=1)
        for t in loaded:
            state.add(t)
        state.ops["weighted_sum"].param.update(trees=[t.name for t in loaded], weights=weights)
        state.op = "weighted_sum"
        start = time.perf_counter()
        state.run = True
        seconds = time.perf_counter() - start
        if state.error:
            raise SystemExit(state.error)
        rr = state.result
        print(f"session {i + 1}: Run -> result {seconds:.2f} s (read {rr.read_bytes / 1e9:.2f} "
              f"GB in {rr.read_seconds:.2f} s, {rr.n_compiled} compiled, execution "
              f"{rr.median_seconds:.2f} s)", flush=True)
        state.close()
    launcher_warm.release()


if __name__ == "__main__":
    main()

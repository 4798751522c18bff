"""Where a later browser session's first run spends its time in the page: a CPU profile of
chromium (DevTools protocol) from the Run click to the status painted.

    PYTHONPATH=. python benchmarks/profile_run_page.py [--dir /tmp/bapp] [--sessions 2]

The launcher opens the two checkpoints of `bench_app.py` (written into `--dir` if missing);
a first session runs the weighted sum (the launcher's trees then stay resident), then each of
`--sessions` later sessions is profiled around its first run, from the click to its result
views painted. Prints, per session, the click -> status and click -> views times (as
`bench_app.py` measures them), the functions with the most self time, and the
callers of the browser's forced layouts (`offsetParent`, `getPropertyValue`). `(program)` is
the browser's native work (style, layout, paint) that the profiler does not attribute.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import bench_app  # noqa: E402
import page_timing  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from tests.serving import CHROMIUM, CHROMIUM_ARGS, launched_app  # noqa: E402

FORCED = ("get offsetParent", "getPropertyValue", "getBoundingClientRect")


def frame(node: dict) -> str:
    cf = node["callFrame"]
    return f"{cf['functionName'] or '(anonymous)'}@{cf['url'].rsplit('/', 1)[-1][:24]}:" \
           f"{cf['lineNumber']}"


def summary(profile: dict, top: int = 10) -> None:
    nodes = {n["id"]: n for n in profile["nodes"]}
    parent = {c: n["id"] for n in profile["nodes"] for c in n.get("children", [])}
    own: collections.Counter = collections.Counter()
    for sample, delta in zip(profile["samples"], profile["timeDeltas"], strict=True):
        own[sample] += delta / 1e3
    by_function: collections.Counter = collections.Counter()
    callers: collections.Counter = collections.Counter()
    for node_id, ms in own.items():
        name = nodes[node_id]["callFrame"]["functionName"]
        by_function[frame(nodes[node_id])] += ms
        if name in FORCED:
            chain, at = [], node_id
            while at in parent and len(chain) < 5:
                at = parent[at]
                chain.append(frame(nodes[at]))
            callers[f"{name} <- " + " <- ".join(chain)] += ms
    print(f"  profiled {sum(own.values()):.0f} ms; most self time:")
    for name, ms in by_function.most_common(top):
        print(f"    {ms:7.1f} ms  {name}")
    print("  forced layouts, by caller:")
    for name, ms in callers.most_common(5):
        print(f"    {ms:7.1f} ms  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bapp"))
    parser.add_argument("--sessions", type=int, default=2)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    paths = [args.dir / "a.safetensors", args.dir / "b.safetensors"]
    for seed, path in enumerate(paths):
        if not path.exists():
            bench_app.write_checkpoint(path, seed)
    names = [p.name for p in paths]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with launched_app(args.dir, *map(str, paths), env=env, seconds=300) as url, \
            sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        first = bench_app.run_session(browser, url, names)["first"]
        print(f"first session's first run: {first:.2f} s (reads the files)")
        for i in range(args.sessions):
            time.sleep(2)  # the closed session's result handed over
            context = browser.new_context(viewport={"width": 1680, "height": 1050})
            page = context.new_page()
            page.set_default_timeout(600_000)
            page.goto(url, timeout=600_000)
            for name in names:
                page.get_by_role("textbox", name=re.compile(re.escape(name))).wait_for()
            time.sleep(1)  # the page settled: only the run is profiled
            before = page_timing.status_text(page)
            cdp = context.new_cdp_session(page)
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 200})
            cdp.send("Profiler.start")
            button = page.get_by_role("button", name="Run the current operation.")
            button.evaluate("b => b.addEventListener('click', () => { "
                            "window.__clicked = Date.now(); }, {capture: true, once: true})")
            page_timing.watch_run(page, before)
            button.click()
            seen, views = page_timing.ran_painted(page)
            profile = cdp.send("Profiler.stop")["profile"]
            clicked = page.evaluate("window.__clicked") / 1e3
            print(f"session {i + 2}: click -> status painted {seen - clicked:.3f} s, -> result "
                  f"views painted (the history's new row) {views - clicked:.3f} s")
            summary(profile)
            context.close()
        browser.close()


if __name__ == "__main__":
    main()

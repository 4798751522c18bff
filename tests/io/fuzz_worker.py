"""Loads checkpoints named on stdin and reads every leaf, under a memory cap; for `test_fuzz.py`.

    python -m tests.io.fuzz_worker MEMORY_BYTES

One path per line in; one JSON line out per path: `{"verdict": "loaded" | "refused" | "bug",
"seconds": ..., "detail": ...}`. "bug" is any exception other than `LoadError` (a
`ReaderBugError`, a `MissingDependencyError`, a `MemoryError` from the cap included), with its
traceback. The cap (RLIMIT_AS) is set before the format libraries are imported, so it bounds
everything a load allocates.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import traceback


def _read_every_leaf(tree, depth: int = 0) -> int:
    import numpy as np

    from inspector.core.lazy import LazyArray

    if depth > 1000:
        raise RecursionError("the loaded tree nests deeper than 1000 levels")
    if isinstance(tree, dict):
        return sum(_read_every_leaf(v, depth + 1) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(_read_every_leaf(v, depth + 1) for v in tree)
    if isinstance(tree, LazyArray):
        array = np.asarray(tree)
        assert array.shape == tree.shape and array.dtype == tree.dtype
        return 1
    return 0


def verdict(path: str) -> tuple[str, str]:
    """Loads `path` and reads every leaf: ("loaded" | "refused" | "bug", detail).

    Only a `LoadError` (the file's fault) is a clean refusal. A `ReaderBugError`, a
    `MissingDependencyError`, a `MemoryError` or any other exception is a "bug".
    """
    from inspector.core.errors import LoadError
    from inspector.io import load

    try:
        return "loaded", f"{_read_every_leaf(load(path))} leaves read"
    except LoadError as exc:
        return "refused", str(exc).splitlines()[0][:300]
    except BaseException:  # noqa: BLE001 - every other exception is what the fuzz looks for
        return "bug", traceback.format_exc()[-6000:]


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import inspector.io  # noqa: F401  (the format libraries, under the cap)

    for line in sys.stdin:
        start = time.perf_counter()
        result, detail = verdict(line.rstrip("\n"))
        seconds = time.perf_counter() - start
        print(json.dumps({"verdict": result, "seconds": seconds, "detail": detail}), flush=True)


if __name__ == "__main__":
    main()

"""Loads checkpoints named on stdin and reads every leaf, under a memory cap; for `test_fuzz.py`.

    python -m tests.io.fuzz_worker MEMORY_BYTES

One path per line in; one JSON line out per path: `{"verdict": "loaded" | "refused" | "bug",
"seconds": ..., "detail": ...}`. "bug" is any exception other than `LoadError` (a
`MemoryError` from the cap included), with its traceback. The cap (RLIMIT_AS) is set before
the format libraries are imported, so it bounds everything a load allocates.
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


def main() -> None:
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from inspector.core.errors import LoadError
    from inspector.io import load

    for line in sys.stdin:
        path = line.rstrip("\n")
        start = time.perf_counter()
        try:
            leaves = _read_every_leaf(load(path))
            verdict, detail = "loaded", f"{leaves} leaves read"
        except LoadError as exc:
            verdict, detail = "refused", str(exc).splitlines()[0][:300]
        except BaseException:  # noqa: BLE001 - every other exception is what the fuzz looks for
            verdict, detail = "bug", traceback.format_exc()[-3000:]
        seconds = time.perf_counter() - start
        print(json.dumps({"verdict": verdict, "seconds": seconds, "detail": detail}), flush=True)


if __name__ == "__main__":
    main()

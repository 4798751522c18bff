"""Building the structure of a large checkpoint without the cyclic garbage collector.

Loading a header of 100,000 tensors makes about a million Python objects (parsed JSON, entries,
lazy leaves, nested dicts), none of them garbage; describing it makes 177k rows more. Each few
hundred allocations the collector walks the young objects and, ever more often, all of them:
measured here, a third or more of `load`'s and `describe`'s time on a 106,453-tensor file. The
collector is paused for those builds only.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector in the block (as it was before, after it)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

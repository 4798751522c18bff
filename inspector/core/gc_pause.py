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
        if gc.get_count()[0] > PROMOTE_AFTER and gc.get_freeze_count() == 0:
            # the block made (and kept) this many objects: put them with the old ones at
            # once, rather than have the next young collection walk them all (0.05-0.08 s
            # for a 106k-tensor tree here). `freeze` + `unfreeze` moves every tracked object
            # into the oldest generation without visiting any; cyclic garbage among them is
            # collected by the next full collection, as any old object's is. (Not when the
            # program froze objects itself: `unfreeze` would thaw those too.)
            gc.freeze()
            gc.unfreeze()
        if was:
            gc.enable()


PROMOTE_AFTER = 100_000
"""Young objects above which `gc_paused` promotes them all when the block ends."""

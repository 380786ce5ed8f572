"""``paused_gc``: pause the cyclic garbage collector while building or simulating big DAGs; ``frozen_gc``: also
keep what is alive out of its reach, around host-timed loops.

Building a million-op DAG allocates millions of small acyclic objects; each allocation burst
triggers generational GC passes that rescan everything alive, which can dominate run time.
Reference counting still frees memory; the collector is restored on exit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["frozen_gc", "paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector inside the block, re-enable it after if it was on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def frozen_gc() -> Iterator[None]:
    """Collect, freeze what is alive (``gc.freeze``: no later collection scans it) and disable the collector
    inside the block; unfreeze and restore it after. ``schedsim execute`` times its iterations this way (it holds
    the spec, the DAG and the prediction, which a hand-written script does not), and so measures its own host
    costs (``--measure-host``) under the same collector as the iterations it predicts."""
    gc.collect()
    gc.freeze()
    try:
        with paused_gc():
            yield
    finally:
        gc.unfreeze()

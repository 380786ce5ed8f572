"""``paused_gc``: pause the cyclic garbage collector while building or simulating big DAGs.

Building a million-op DAG allocates millions of small acyclic objects; each allocation burst
triggers generational GC passes that rescan everything alive, which can dominate run time.
Reference counting still frees memory; the collector is restored on exit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


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

"""Python's cyclic garbage collector, relaxed while rollouts are stored.

Ingest allocates millions of short-lived containers (decoded messages, rows, findings) that
reference counting frees on its own; with the default thresholds (a young collection every 700
net allocations) the collector ran hundreds of times per batch and walked the batch being
prepared each time. Measured on this machine with `bench/ingest.py`'s workloads, SQLite, the
CLI's path: text-only rollouts 369 → 492 rollouts/s, token rollouts 163 → 196 rollouts/s with
a young threshold of 50,000. Cycles are still collected, only less often; the thresholds the
process had come back when the block ends.

Full collections too: the nodes of a rollout being prepared live until it is written, so the
10,000 nodes of a 5,000-turn rollout reach the oldest generation, and a full collection (every
object of the process walked: 70-100 ms of such a rollout's 0.45-0.55 s of CPU time on this
machine) came every third such rollout (each makes 4 middle-generation collections; a full one
may follow every 10). While relaxed, it waits for `OLD` of them instead (one full collection per
1,000 young ones at most, about 25 such rollouts); Python's own rule still skips it while the
objects promoted since the last one are under a quarter of the oldest generation.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG = 50_000  # net container allocations between young collections while storing (default 700)
OLD = 100  # middle-generation collections between full collections while storing (default 10)


def relax() -> tuple[int, ...] | None:
    """Collect young objects every `YOUNG` allocations from now on (never more often than the
    process's own setting); returns the thresholds to give `restore`, None when nothing changed
    (collection off, or already as relaxed: a nested or concurrent store)."""
    before = gc.get_threshold()
    if not gc.isenabled() or before[0] == 0 or before[0] >= YOUNG:
        return None
    gc.set_threshold(YOUNG, before[1], max(before[2], OLD))
    return before


def restore(before: tuple[int, ...] | None) -> None:
    """Put back the thresholds `relax` changed (unless someone has set others since)."""
    if before is not None and gc.get_threshold()[0] == YOUNG:
        gc.set_threshold(*before)


@contextmanager
def relaxed_gc() -> Iterator[None]:
    """`relax()` for the block, `restore()` after it."""
    before = relax()
    try:
        yield
    finally:
        restore(before)

"""Time per ingest stage (read, decode, normalise, hash, checks, rows, write), for
`bench/ingest.py`: a context manager that is a no-op unless the measure is on.

Off (the default), `stage(name)` returns one shared `nullcontext`: a function call and an empty
`with`, about 0.1 µs, a few per rollout. On (`measure()`), it adds the wall-clock seconds spent
inside each named block to a table. Stages may nest (the raw hash inside the read): each block
counts its own time, nested blocks included, so the table's stages are not meant to add up
exactly. On Postgres the write runs in a thread beside the next batch's preparation, so its time
overlaps the others.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

STAGES = ("read", "decode", "normalise", "hash", "checks", "rows", "write")

_OFF = nullcontext()
# seconds and blocks per stage while a `measure()` is open; None when the measure is off
_table: dict[str, list[float]] | None = None


def stage(name: str):
    """`with stage("decode"): ...` adds the block's wall-clock seconds to stage `name` while a
    `measure()` is open; otherwise does nothing."""
    return _OFF if _table is None else _timed(name)


@contextmanager
def _timed(name: str) -> Iterator[None]:
    t = time.perf_counter()
    try:
        yield
    finally:
        if _table is not None:
            cell = _table[name]
            cell[0] += time.perf_counter() - t
            cell[1] += 1


@contextmanager
def measure() -> Iterator[dict[str, list[float]]]:
    """Turn the timer on for the block; yields the table it fills: stage name → [seconds, blocks]
    (a stage no block entered is absent). Not re-entrant: one measure at a time per process."""
    global _table
    _table = defaultdict(lambda: [0.0, 0])
    table = _table
    try:
        yield table
    finally:
        _table = None


def table_lines(table: dict[str, list[float]], rollouts: int) -> list[str]:
    """The table as text lines: per stage (in `STAGES` order, then any other), seconds and ms per
    rollout."""
    names = [s for s in STAGES if s in table] + sorted(set(table) - set(STAGES))
    n = max(rollouts, 1)
    return [f"  {s:<10} {table[s][0]:8.3f} s  {table[s][0] / n * 1e3:8.3f} ms/rollout" for s in names]

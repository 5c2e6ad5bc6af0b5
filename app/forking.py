"""Forking a process that runs threads of its own, safely: for the parser processes
(app/worker/parse.py), which are forked from the worker so they start in milliseconds with the
parsing code already imported (a spawned process imports it for about a second of CPU).

A forked child has only the thread that forked; a lock another thread held at that moment
(a SQLite mutex in the middle of a checkpoint, a stream's buffer lock) stays held in the child
forever. So a fork is made only when every other thread of the process is *quiet across forks*:
it registered the one lock it holds while doing anything a child could trip on (`quiet_while_
forking`), and the fork waits for each such lock and holds it until the fork is made
(os.register_at_fork). Any other thread alive (a heartbeat, a webhook sender) and `can_fork`
says no: the caller spawns a fresh interpreter instead.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref

_quiet: weakref.WeakKeyDictionary[threading.Thread, threading.Lock] = weakref.WeakKeyDictionary()
_held: list[threading.Lock] = []  # the locks taken for the fork in progress
_not_inherited: weakref.WeakSet = weakref.WeakSet()  # files a forked child closes at once


def quiet_while_forking(lock: threading.Lock) -> None:
    """Register the calling thread as quiet across forks: it holds `lock` whenever it works
    (and only then), so a fork made while `lock` is held by the forking thread finds it idle."""
    _quiet[threading.current_thread()] = lock


def not_inherited(f) -> None:
    """Close the open file `f` in every child forked from now on (the worker's SQLite lock: an
    flock lives as long as any process holds the file open, and must go with the worker)."""
    _not_inherited.add(f)


def can_fork() -> bool:
    """Whether this process may fork now: on Linux (macOS's system libraries are not safe to use
    in a forked child, which is why Python spawns there), with every thread but the calling one
    registered as quiet (`quiet_while_forking`)."""
    if not sys.platform.startswith("linux"):
        return False
    me = threading.current_thread()
    return all(t is me or t in _quiet for t in threading.enumerate())


def _before() -> None:
    _held[:] = list(_quiet.values())
    for lock in _held:
        lock.acquire()


def _after() -> None:
    for lock in _held:
        lock.release()
    _held.clear()


def _after_in_child() -> None:
    _after()
    for f in list(_not_inherited):
        f.close()  # this process's copy only: the parent keeps its lock


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before, after_in_parent=_after, after_in_child=_after_in_child)

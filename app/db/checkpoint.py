"""WAL checkpoints of an ingest writer's SQLite database, in a thread of their own.

In WAL mode every commit appends its pages to the `-wal` file, and SQLite's autocheckpoint
copies them into the database file (and syncs both) inside the commit that finds the WAL past
1,000 pages (4 MB). A batch of the bench workload writes ~15 MB, so every batch's commit paid
for that copy and its fsyncs: on this machine ~1.2 ms of wall clock per rollout, a third of the
write stage, with the CPU mostly idle. A writer engine (`make_engine(..., writer=True)`) instead
hands the checkpoint to a thread with its own connection as soon as a transaction that committed
gives its connection back to the pool (`Checkpointer.soon`): the copy overlaps the preparation of
the next batch (the sqlite3 module lets go of Python's lock while SQLite works), and the WAL
restarts from its beginning at the next write once the copy is complete, as before.

The checkpoint is PASSIVE (it waits for no reader and no writer; a reader that holds an old
snapshot keeps the frames it needs, as with autocheckpoint). As a safety net the writer's own
connections keep an autocheckpoint, at `FALLBACK_PAGES`: should the thread fall behind or fail,
the WAL still stops growing there. The thread ends after `IDLE_SECONDS` without work (closing its
connection), and is started again by the next commit, so an engine left unused holds no thread.
"""
from __future__ import annotations

import sqlite3
import threading

from app.forking import quiet_while_forking

FALLBACK_PAGES = 25_000  # ~100 MB of WAL: the writer's connections checkpoint themselves past it
IDLE_SECONDS = 5.0


class Checkpointer:
    """Checkpoints the WAL of the SQLite file `database` in a thread, when asked (`soon`)."""

    def __init__(self, database: str):
        self.database = database
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._busy = threading.Lock()  # held around every SQLite call of the thread (app/forking.py)
        self._stopped = False
        self.done = 0  # checkpoints run (for tests)

    def soon(self) -> None:
        """Checkpoint as soon as the thread can (starting it if it is not running)."""
        with self._lock:
            if self._stopped:
                return
            self._wake.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rollscope-checkpoint", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """End the thread (the engine is disposed); later `soon` calls do nothing."""
        with self._lock:
            self._stopped = True
            self._wake.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(30)

    def _run(self) -> None:
        quiet_while_forking(self._busy)  # a parser process may be forked while this thread runs
        conn = None
        try:
            while True:
                if not self._wake.wait(IDLE_SECONDS):
                    with self._lock:
                        if not self._wake.is_set():  # idle: end, and let `soon` start a new thread
                            self._thread = None
                            return
                self._wake.clear()
                if self._stopped:
                    return
                with self._busy:
                    try:
                        if conn is None:
                            conn = sqlite3.connect(self.database, isolation_level=None, check_same_thread=False)
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                        self.done += 1
                    except sqlite3.Error:
                        # busy (another checkpoint), the file gone or unusable: the next commit asks
                        # again, and the writer's own autocheckpoint (FALLBACK_PAGES) bounds the WAL
                        if conn is not None:
                            conn.close()
                            conn = None
        finally:
            if conn is not None:
                with self._busy:
                    conn.close()

"""A parser process's piece and result, handed over through files, so that every message through
the process pool's pipes is a few hundred bytes.

Why: concurrent.futures' ProcessPoolExecutor sends a call's arguments and its result through
pipes. A piece is 2-4 MB of lines and its rows about as much; a parser process killed (the OOM
killer, a signal) while it wrote its result left half a message in the result pipe, and the
pool's thread waited for the rest forever: the worker hung mid-file, and with `--once` never
exited (its queue thread blocked writing the next piece to a pipe nobody read). A message under
PIPE_BUF (4 KB on Linux) is written whole or not at all (POSIX `write`), so a process that dies
now leaves no half message, and the pool sees it die (BrokenProcessPool) as it should: the
worker parses the piece itself (app/worker/parse.py `Parsers.parsed`).

The files live in a folder of their own under /dev/shm (memory) where it has room (512 MB
free: a container's is often 64 MB), else in the temp folder; the folder is removed when the
pool closes, and one left by a worker that was killed is removed by the next worker to start a
pool (its pid is gone).
"""
from __future__ import annotations

import itertools
import os
import pickle
import re
import shutil
import tempfile
import traceback
from pathlib import Path

PREFIX = "rollscope-parse-"
SHM = "/dev/shm"
SHM_MIN_FREE = 512 << 20  # a container's /dev/shm is often 64 MB: then the temp folder is used


class Handoff:
    """The folder of one pool's pieces and results."""

    def __init__(self, base: str | None = None):
        if base is None:
            base = SHM if _roomy(SHM) else None
        remove_stale(Path(base or tempfile.gettempdir()))
        self.dir = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)
        self._numbers = itertools.count()

    def put(self, fn, args: tuple) -> str:
        """Write the call `fn(*args)` to a file; returns its path, what `run` takes in the parser
        process (`fn` must be importable by name, as for the pool itself)."""
        path = os.path.join(self.dir, f"{next(self._numbers)}.in")
        try:
            with open(path, "wb") as f:
                pickle.dump((fn, args), f, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:
            drop(path)  # (a full disk: no half-written piece left behind)
            raise
        return path

    def take(self, out: str):
        """The result `run` wrote to `out` (the file is removed); re-raises what the call raised."""
        try:
            with open(out, "rb") as f:
                ok, value = pickle.load(f)
        finally:
            drop(out)
        if not ok:
            raise value
        return value

    @staticmethod
    def take_back(path: str) -> bool:
        """Claim the piece at `path` back from the pool: True when no parser process has begun it
        (it will find it gone, `run`), False when one has. One rename decides, atomically, who
        parses it: never both, never neither. (Not `Future.cancel()`: Python 3.11's pool thread
        dies on a cancelled job when a process dies, python/cpython#107219, and every job
        queued after it then waits forever.)"""
        try:
            os.rename(path, path[:-len(".in")] + ".back")
        except FileNotFoundError:
            return False
        drop(path[:-len(".in")] + ".back")
        return True

    def close(self) -> None:
        """Remove the folder and whatever is left in it (pieces taken back, a dead process's)."""
        shutil.rmtree(self.dir, ignore_errors=True)


def run(path: str) -> str | None:
    """In a parser process: the call written at `path`, claimed (renamed) and read, made, and its
    result (or the exception it raised, with its traceback as a note) written beside it; returns
    the result's path, or None when the worker took the piece back first (`take_back`). Only the
    paths go through the pool's pipes."""
    mine = path[:-len(".in")] + ".run"
    try:
        os.rename(path, mine)
    except FileNotFoundError:
        return None  # taken back: the worker parses it
    with open(mine, "rb") as f:
        fn, args = pickle.load(f)
    drop(mine)
    try:
        outcome = (True, fn(*args))
    except Exception as exc:  # noqa: BLE001 - handed back whole, raised in the worker
        exc.add_note(f"in a parser process:\n{traceback.format_exc()}")
        outcome = (False, exc)
    out = path[:-len(".in")] + ".out"
    with open(out + ".part", "wb") as f:
        try:
            pickle.dump(outcome, f, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - an exception that cannot be pickled: its text
            f.seek(0)
            f.truncate()
            pickle.dump((False, RuntimeError(f"in a parser process: {exc!r} (pickling {outcome[1]!r})")), f)
    os.replace(out + ".part", out)
    return out


def _roomy(folder: str) -> bool:
    """Whether `folder` exists, is writable and has SHM_MIN_FREE bytes free."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return os.access(folder, os.W_OK) and st.f_bavail * st.f_frsize >= SHM_MIN_FREE


def drop(path: str) -> None:
    """Remove a piece's or a result's file (gone already: nothing to do)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_stale(base: Path) -> None:
    """Remove the folders in `base` of pools whose worker is gone (killed before it could)."""
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for entry in entries:
        m = re.fullmatch(rf"{PREFIX}(\d+)-.*", entry.name)
        if m is None or not entry.is_dir():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except (PermissionError, OverflowError):
            continue  # another user's worker, alive

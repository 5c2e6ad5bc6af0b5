"""What every `rollscope` command shares: the two consoles (results on stdout, progress and
problems on stderr, both showing invisible characters of trace text), the database choice
(`--db`, the environment, ./rollscope.db, the user's data folder) and its engine, migrated."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

MAX_ADDED_ID = 4_000_000  # larger than any real vocabulary; the table is a list indexed by id


class _Revealing:
    """The stream of one of the CLI's consoles (sys.stdout or sys.stderr, looked up at each write,
    so test runners that swap them still capture): text is written with its bidirectional,
    zero-width and tag characters shown as `⟨U+XXXX⟩` (app/text.py), so a run id, file name or
    error message from a trace never reorders or hides what the terminal shows."""

    def __init__(self, name: str) -> None:
        self._name = name

    def write(self, text: str) -> int:
        from app.text import reveal_invisible

        return getattr(sys, self._name).write(reveal_invisible(text))

    def __getattr__(self, attr: str):
        return getattr(getattr(sys, self._name), attr)


# Results go to stdout, progress and problems to stderr. Off a terminal (make, CI logs) rich
# would wrap tables at 80 columns; give them room instead. No automatic highlighting of printed
# strings: what is coloured is said with Text styles, and rich's highlighter compiles its regular
# expressions at the first string printed (13 ms of CPU here, measured in-process).
out = Console(file=_Revealing("stdout"), soft_wrap=True, width=None if sys.stdout.isatty() else 200, highlight=False)
console = Console(file=_Revealing("stderr"), highlight=False)


def choose_database(
    db: Annotated[str | None, typer.Option("--db", help="Database URL (sqlite:///path.db or postgresql://...); "
                                           "overrides ROLLSCOPE_DATABASE_URL.", show_default=False)] = None,
) -> None:
    """Choose the database once for every command (see `database_url`)."""
    global _db_source
    _db_source = "--db" if db is not None else None
    if db is not None:
        os.environ["ROLLSCOPE_DATABASE_URL"] = db
        os.environ.pop("ROLLSCOPE_DB__URL", None)


_db_source: str | None = None  # "--db" when this invocation named the database on the command line


def database_url() -> str:
    """The database every command uses, found the same way from any folder: `--db`, else
    ROLLSCOPE_DATABASE_URL / ROLLSCOPE_DB__URL, else ./rollscope.db when it exists, else
    rollscope.db in the user's data folder (platformdirs). Exported to the environment so the
    server a command starts uses it too. A URL the app cannot use is one line naming where it
    came from (`--db`, or the variable) and SystemExit(2)."""
    from app.config import Settings, get_settings, normalize_db_url

    given = os.environ.get("ROLLSCOPE_DATABASE_URL") or os.environ.get("ROLLSCOPE_DB__URL")
    if given:
        source = _db_source or ("ROLLSCOPE_DATABASE_URL" if os.environ.get("ROLLSCOPE_DATABASE_URL")
                                else "ROLLSCOPE_DB__URL")
        try:
            normalize_db_url(given, source=source)
        except ValueError as exc:
            console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
            raise SystemExit(2) from None
    if not (os.environ.get("ROLLSCOPE_DATABASE_URL") or os.environ.get("ROLLSCOPE_DB__URL")):
        here = Path("rollscope.db")
        if here.exists():
            url = f"sqlite:///{here.resolve()}"
        else:
            import platformdirs

            folder = Path(platformdirs.user_data_dir("rollscope", appauthor=False))
            folder.mkdir(parents=True, exist_ok=True)
            url = f"sqlite:///{folder / 'rollscope.db'}"
        os.environ["ROLLSCOPE_DATABASE_URL"] = url
    get_settings.cache_clear()
    return Settings().db.url


def open_engine():
    """The database's engine, migrated, for a command: its URL printed once (first line, stderr);
    a database that is unreachable (starting, restarting, down) is tried again with the same
    budget as mid-ingest (`ROLLSCOPE_DB__RETRY_SECONDS`, 0.5 s doubling), one line per wait;
    when it stays away the error propagates (`main` prints one line, exit 3). A database that
    cannot be used at all (no such database or role, a refused password, a SQLite folder that
    does not exist: app/db/unusable.py) is not waited for: DatabaseUnusable (exit 2)."""
    import time

    from app.config import get_settings
    from app.db.engine import make_engine
    from app.db.migrate import upgrade
    from app.db.unusable import DatabaseUnusable, why_unusable
    from app.store.outage import database_gone, retry_waits

    url = database_url()
    console.print(f"database: {sa_url_shown(url)}", markup=False, soft_wrap=True)
    waits = retry_waits(get_settings().db.retry_seconds)
    for k in range(len(waits) + 1):
        engine = None
        try:
            engine = make_engine(url, writer=True)
            upgrade(engine)
            return engine
        except Exception as exc:
            if engine is not None:
                engine.dispose()
            why = why_unusable(exc, url)
            if why:
                raise DatabaseUnusable(sa_url_shown(url), why) from exc
            if not database_gone(exc) or k == len(waits):
                if database_gone(exc):
                    exc.retried_seconds = sum(waits)  # type: ignore[attr-defined]
                raise
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            console.print(f"database unavailable ({first[0][:200] if first else type(exc).__name__}); "
                          f"retrying in {waits[k]:g} s", markup=False, soft_wrap=True)
            time.sleep(waits[k])
    raise AssertionError("unreachable")


def sa_url_shown(url: str) -> str:
    """The URL without its password."""
    from app.db.unusable import masked

    return masked(url)


def parse_added(values: list[str]) -> dict[int, str]:
    added = {}
    for v in values:
        tid, _, piece = v.partition("=")
        if not tid.strip().isdigit() or not piece:
            raise typer.BadParameter(f"--added-token expects ID=PIECE, got {v!r}")
        if int(tid) > MAX_ADDED_ID:
            raise typer.BadParameter(f"--added-token id {tid} is beyond any vocabulary (max {MAX_ADDED_ID})")
        added[int(tid)] = piece
    return added

"""`rollscope worker`: the live-ingest worker over spool folders (app/worker/run.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from app.cli.common import console, open_engine


def worker(
    spool: Annotated[list[str], typer.Option("--spool", help="A folder collectors write trace files into "
                                              "(repeatable; default ROLLSCOPE_WORKER__SPOOL_DIR). "
                                              "It must exist, unless --create is given.")] = [],  # noqa: B006
    create: Annotated[bool, typer.Option("--create", help="Create a --spool folder that does not exist (without "
                                         "it, a missing folder is an error, exit 2: a mistyped path would "
                                         "otherwise be waited on forever).")] = False,
    poll: Annotated[float, typer.Option(help="Seconds between looks at the folders when nothing is left to read.",
                                        min=0.05, max=60)] = 0.5,
    torn_after: Annotated[float, typer.Option(help="Seconds a file must stop growing before a last line without "
                                              "its newline is reported as torn and skipped.", min=0.1)] = 30.0,
    once: Annotated[bool, typer.Option("--once", help="Read what is there, then exit (no tailing): a document still "
                                       "being written is waited for up to the settle time (2 s); a file left unread "
                                       "is named with why, and the exit code is then 1.")] = False,
    parsers: Annotated[int | None, typer.Option(help="Processes that parse and check the next stretches of a file "
                                                "while the worker writes one (default ROLLSCOPE_WORKER__PARSERS, "
                                                "else one on a machine with two cores or more; 0: the worker parses "
                                                "alone).",
                                                min=0, max=64)] = None,
    heartbeat: Annotated[Path | None, typer.Option(help="A file touched on every pass, for health checks "
                                                   "(docker-compose.yml).")] = None,
) -> None:
    """Ingest trace files from spool folders as collectors append to them, exactly once.

    Appended JSONL lines are read as they arrive (a partial last line waits for its newline),
    .gz files are read as streams, other files once they stop changing. Each file's offset is
    committed with the rows it produced, so a restart resumes exactly there; renamed, rotated,
    truncated and deleted files are followed. SIGTERM stops cleanly. On Postgres several workers
    may share the folders; on SQLite one worker writes. With --once it exits 1 when it left a file
    unread (each named on stderr with why). A spool folder that does not exist is one line naming
    it and exit 2, before the database is opened, unless --create is given; so is an empty
    --spool value (an unset variable: it would mean the working folder). The worker never reads
    its own database, its -wal/-shm/-journal files or its lock, even inside a spool folder, and
    refuses any SQLite database once by name.
    """
    import os

    from app.config import get_settings
    from app.worker.run import WorkerLocked, run, sqlite_lock, stop_on_signals

    for given in spool:  # as typed: Path("") would be "." and read the working folder (an unset $SPOOL)
        if not given.strip():
            _fail(f"an empty --spool value ({given!r}): give a folder (an unset variable in a script?)")
    if not spool and not os.environ.get("ROLLSCOPE_WORKER__SPOOL_DIR", ".").strip():
        _fail("ROLLSCOPE_WORKER__SPOOL_DIR is set but empty: give a folder (an unset variable in a script?)")
    dirs = [Path(d) for d in spool] or [get_settings().worker.spool_dir]
    for d in dirs:
        _spool_folder(d, create=create)
    engine = open_engine()
    try:
        lock = sqlite_lock(engine)
    except WorkerLocked as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        raise typer.Exit(2) from None
    stop = stop_on_signals()
    console.print(f"worker: reading {', '.join(str(d) for d in dirs)}", markup=False, soft_wrap=True)
    ran = run(engine, dirs, stop=stop, poll=poll, once=once, torn_after=torn_after, heartbeat=heartbeat,
              batch_lines=get_settings().worker.batch_size, beat_every=get_settings().worker.heartbeat_seconds,
              parsers=_parsers(parsers),
              log=lambda msg: console.print(msg, markup=False, soft_wrap=True))
    from app.alerts.webhook import idle

    idle(10)  # alerts handed to the webhook's thread are recorded and sent before the process exits
    left = f"; left {len(ran.left)} file{'s' if len(ran.left) != 1 else ''} unread" if ran.left else ""
    console.print(f"worker: stopped after {ran.commits} commits{left}", markup=False, soft_wrap=True)
    if lock is not None:
        lock.close()
    if ran.left:
        raise typer.Exit(1)


def _spool_folder(path: Path, *, create: bool) -> None:
    """A --spool folder checked before the worker starts: a missing one is created with `create`,
    else one line naming it (as given, and absolute) and exit 2; a path that is not a folder, or
    one that cannot be created, is exit 2 too."""
    if path.is_dir():
        return
    shown = f"{path} ({path.absolute()})" if not path.is_absolute() else str(path)
    if path.exists():
        _fail(f"the spool folder {shown} is not a folder")
    if not create:
        _fail(f"the spool folder {shown} does not exist (a mistyped path? give --create to create it)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"cannot create the spool folder {shown}: {exc.strerror or exc}")
    console.print(f"worker: created the spool folder {shown}", markup=False, soft_wrap=True)


def _parsers(given: int | None) -> int:
    """Parser processes: `--parsers`, else ROLLSCOPE_WORKER__PARSERS, else one on a machine with
    two cores or more (app/worker/parse.py `auto_parsers`)."""
    from app.config import get_settings
    from app.worker.parse import auto_parsers

    if given is None:
        given = get_settings().worker.parsers
    return auto_parsers() if given is None else given


def _fail(msg: str) -> None:
    console.print(Text.assemble(("error: ", "red"), msg), soft_wrap=True)
    raise typer.Exit(2)

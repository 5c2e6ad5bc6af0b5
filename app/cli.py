"""The `rollscope` command: ingest, export, serve, demo, schema.

Configuration comes from the environment through `get_settings()` (`ROLLSCOPE_DATABASE_URL`,
`ROLLSCOPE_WORKER__BATCH_SIZE`, ...: app/config.py and the README's table).
"""
from __future__ import annotations

import contextlib

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ingest.schema import INT32_MAX

MAX_ERRORS_SHOWN = 20
MAX_FILES_SHOWN = 50
MAX_ADDED_ID = 4_000_000  # larger than any real vocabulary; the table is a list indexed by id
# Results go to stdout, progress and problems to stderr. Off a terminal (make, CI logs) rich
# would wrap tables at 80 columns; give them room instead.
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


out = Console(file=_Revealing("stdout"), soft_wrap=True, width=None if sys.stdout.isatty() else 200)

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Rollscope: a trace inspector for agentic RL.")
console = Console(file=_Revealing("stderr"))


@app.callback()
def _options(
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


def _engine():
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
    from app.store.write import database_gone, retry_waits

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


def _parse_added(values: list[str]) -> dict[int, str]:
    added = {}
    for v in values:
        tid, _, piece = v.partition("=")
        if not tid.strip().isdigit() or not piece:
            raise typer.BadParameter(f"--added-token expects ID=PIECE, got {v!r}")
        if int(tid) > MAX_ADDED_ID:
            raise typer.BadParameter(f"--added-token id {tid} is beyond any vocabulary (max {MAX_ADDED_ID})")
        added[int(tid)] = piece
    return added


@app.command()
def ingest(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders (walked recursively).", exists=True,
                                                       show_default=False)] = None,
    run: Annotated[str | None, typer.Option(help="Run id applied to every record, overriding the record's own "
                                            "run (default: the record's run, else the file's folder name).")] = None,
    step: Annotated[int | None, typer.Option(help="Training step for records that carry none.", min=0, max=INT32_MAX)] = None,
    tokenizer: Annotated[Path | None, typer.Option(help="tokenizer.json or SentencePiece .model of the run, or its folder / tokenizer_config.json (keeps the chat template for the template checks).", exists=True)] = None,
    added_token: Annotated[list[str], typer.Option("--added-token", help="Extra vocabulary entry ID=PIECE (repeatable).")] = [],  # noqa: B006
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List every file, skipped file and rejection.")] = False,
    retry_quarantined: Annotated[bool, typer.Option("--retry-quarantined", help="Also read again every file that "
                                                    "has quarantined records (after fixing them); records that now "
                                                    "land leave the quarantine.")] = False,
    format: Annotated[str | None, typer.Option("--format", help="Read every file with this reader instead of detecting (see docs/formats.md).")] = None,  # noqa: A002
) -> None:
    """Read trace files in any supported format into the store.

    The format is detected by content. Re-ingesting the same data adds nothing. A bad record is
    reported with file, line and field, quarantined, and skipped; the good records around it are
    kept. Exits 1 when anything was rejected, 0 otherwise.
    """
    from app.config import get_settings
    from app.worker.sync import IngestReport, ingest_paths, register_tokenizer
    from ingest.formats import ReadContext
    from ingest.schema import RunRef

    if format is not None:
        from ingest.formats.registry import names

        if format not in names():
            raise typer.BadParameter(f"{format!r}: formats are {', '.join(names())}", param_hint="--format")
    if added_token and tokenizer is None:
        raise typer.BadParameter("--added-token extends a tokenizer: give --tokenizer too", param_hint="--added-token")
    if run is not None:
        try:
            RunRef(id=run)
        except ValueError:
            raise typer.BadParameter(f"{run!r}: a run id is 1-300 characters of valid Unicode without control characters",
                                     param_hint="--run") from None

    engine = _engine()
    paths = list(paths or [])
    # (cwd, run, step, format) → (file where it is now, root, the name its records are known by)
    retries: dict[tuple, list[tuple[Path, Path | None, str]]] = {}
    if retry_quarantined:
        from app.store.quarantine import files_to_retry

        gone = []
        for f in files_to_retry(engine):
            first = f.context
            cwd = Path(first.cwd) if first else Path.cwd()
            if f.gone is not None:
                gone.append(f.gone)
            elif Path(f.name) not in paths:  # a file given again by name is read with this command's options
                key = (str(cwd), first.run, first.step, first.format) if first else (str(cwd), run, step, format)
                retries.setdefault(key, []).append((Path(f.path), Path(first.root) if first and first.root else None,
                                                    f.name))
        n = sum(len(v) for v in retries.values())
        console.print(f"retrying {n} file{'s' if n != 1 else ''} with quarantined records, each as it was first "
                      "ingested" + (f" ({len(gone)} no longer readable)" if gone else ""),
                      markup=False, soft_wrap=True)
        for why in gone:  # its records stay quarantined
            console.print(Text.assemble(("not retried ", "yellow"), why), soft_wrap=True)
        if not paths and not retries:
            out.print(Text("nothing to retry"))
            raise typer.Exit(0)
    if not paths and not retries:
        raise typer.BadParameter("give files or folders to ingest, or --retry-quarantined", param_hint="PATHS")
    key = check_context = None
    if tokenizer is not None:
        from ingest.checks.context import load_context

        try:
            key = register_tokenizer(engine, tokenizer, _parse_added(added_token))
            check_context = load_context(tokenizer, _parse_added(added_token))
        except ValueError as exc:
            console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
            raise typer.Exit(2) from None

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        current: dict = {}

        def on_file(path, source):
            if "task" in current:
                progress.remove_task(current["task"])
            current["source"] = source
            current["task"] = progress.add_task(path.name, total=source.size or None)

        def on_item(_item):
            progress.update(current["task"], completed=current["source"].position)

        options = dict(tokenizer_key=key, check_context=check_context, on_file=on_file, on_item=on_item,
                       batch_size=get_settings().worker.batch_size, retry_seconds=get_settings().db.retry_seconds)
        report = IngestReport()
        if paths:
            report.add(ingest_paths(engine, paths, ReadContext(run_id=run, step=step, format=format), **options))
        for (cwd, first_run, first_step, first_format), files in retries.items():
            with contextlib.chdir(cwd):  # the files' names are relative to it, as first ingested
                report.add(ingest_paths(engine, [f for f, _, _ in files], ReadContext(
                    run_id=first_run, step=first_step, format=first_format),
                    roots={f: root for f, root, _ in files if root is not None},
                    names={f: name for f, _, name in files if str(f) != name}, **options))
    total, errors, skipped = report.total, report.errors, report.skipped
    rows = [(f.path, f.format, f.result, f.note) for f in report.files]

    table = Table(title="ingest summary", show_lines=False)
    for col in ("file", "format", "new", "replaced", "unchanged", "rejected", "findings"):
        table.add_column(col, justify="right" if col not in ("file", "format") else "left",
                         overflow="fold" if col == "file" else "ellipsis")
    # Files with something to say first; a long tail of clean files is summed up in one row.
    rows.sort(key=lambda x: x[2].inserted + x[2].replaced + x[2].rejected == 0 and not x[3])
    shown_rows = rows if verbose else rows[:MAX_FILES_SHOWN]
    for name, fmt, r, note in shown_rows:  # a note (e.g. an ATIF part merged into another file's rollout) under the name
        table.add_row(Text(name + (f" ({note})" if note else "")), fmt, str(r.inserted), str(r.replaced),
                      str(r.unchanged), str(r.rejected), str(r.findings))
    if len(rows) > len(shown_rows):
        table.add_row(Text(f"... {len(rows) - len(shown_rows)} more files (--verbose lists them)"), "", "", "", "", "", "")
    if rows:
        out.print(table)
    # File names and messages are data, not markup; soft_wrap keeps "file:line" greppable.
    if verbose or len(skipped) <= 5:
        for path, why in skipped:
            console.print(Text.assemble(("skipped ", "yellow"), f"{path}: {why}"), soft_wrap=True)
    else:
        names = ", ".join(Path(p).name for p, _ in skipped[:3])
        console.print(Text.assemble(("skipped ", "yellow"), f"{len(skipped)} files in the folders given that no "
                                    f"reader recognises (e.g. {names}); --verbose lists them"), soft_wrap=True)
    shown = errors if verbose else errors[:MAX_ERRORS_SHOWN]
    for err in shown:
        console.print(Text.assemble(("rejected ", "red"), str(err)), soft_wrap=True)
    if len(errors) > len(shown):
        console.print(Text(f"... and {len(errors) - len(shown)} more rejected records (--verbose lists them; "
                           "the dashboard's /quarantine page has them all)"), soft_wrap=True)
    if total.repeated:
        console.print(Text.assemble(("warning ", "yellow"), f"{total.repeated} records repeated a rollout id already "
                                    "read in this ingest (the later one wins)"), soft_wrap=True)
    if total.replaced_ids:
        names = ", ".join(f"{r}/{i}" + (f" (attempt {a})" if a else "") for r, i, a in total.replaced_ids[:10])
        more = f" and {len(total.replaced_ids) - 10} more" if len(total.replaced_ids) > 10 else ""
        out.print(Text(f"replaced (same id, changed content): {names}{more}"))
    if total.cleared:
        out.print(Text(f"{total.cleared} quarantined record{'s' if total.cleared != 1 else ''} now stored: "
                       "cleared from the quarantine"))
    out.print(Text(
        f"{total.inserted} new, {total.replaced} replaced, {total.unchanged} unchanged, "
        f"{len(errors)} rejected, {len(skipped)} skipped; runs: {', '.join(sorted(total.runs)) or '-'}"))
    raise typer.Exit(1 if errors else 0)


@app.command()
def export(
    run: Annotated[str, typer.Option(help="Run to export.")],
    out: Annotated[Path, typer.Option(help="File to write.")],
    format: Annotated[str, typer.Option("--format", help="native | verifiers | atif | samples | parquet | otlp | nemo_gym")] = "native",  # noqa: A002
    step: Annotated[int | None, typer.Option(help="Only this training step.", min=0, max=INT32_MAX)] = None,
    ending: Annotated[str | None, typer.Option(help="Only this ending (submitted, error, ...).")] = None,
    group: Annotated[str | None, typer.Option(help="Only this group.")] = None,
    task: Annotated[str | None, typer.Option(help="Only this task key.")] = None,
    reward_min: Annotated[float | None, typer.Option(help="Reward at least this.")] = None,
    reward_max: Annotated[float | None, typer.Option(help="Reward at most this.")] = None,
    flag: Annotated[str | None, typer.Option(help="Only rollouts with a finding of this kind.")] = None,
) -> None:
    """Write a run's rollouts (the rollouts list's filters) as native JSONL, verifiers Episode
    JSONL, ATIF v1.7 JSONL, flat training-sample JSONL, Parquet, OTLP/JSON lines of OTel GenAI
    spans (`invoke_agent` → `chat` and `execute_tool`, RL fields as `rollscope.*` attributes)
    ready for an OTLP/HTTP endpoint, or NeMo Gym rollout JSONL (docs/formats.md, "Export").
    Samples and Parquet need token arrays: a run with none exits 1 and writes nothing."""
    from app.queries.rollout_list import RolloutFilters
    from app.store.load import iter_rollouts
    from ingest.export import FORMATS, SAMPLE_FORMATS, Counted, NoSamples, write

    if format not in FORMATS:
        raise typer.BadParameter(f"{format!r}: formats are {', '.join(FORMATS)}", param_hint="--format")
    filters = RolloutFilters(step=step, ending=ending, group=group, task=task, reward_min=reward_min,
                             reward_max=reward_max, flag=flag)
    try:
        rollouts = Counted(iter_rollouts(_engine(), run, filters))
        n = write(rollouts, format, out)
    except OSError as exc:
        console.print(Text.assemble(("error: ", "red"), f"cannot write {out}: {exc.strerror or exc}"), soft_wrap=True)
        raise typer.Exit(2) from None
    except NoSamples as exc:
        console.print(Text.assemble(("error: ", "red"), f"run {run!r}: {exc}"), soft_wrap=True)
        raise typer.Exit(1) from None
    out_console = Console(file=_Revealing("stdout"), soft_wrap=True)
    if format in SAMPLE_FORMATS:  # one sample per branch with token ids: say how many rollouts gave them
        out_console.print(Text(f"wrote {n} samples from {rollouts.n} rollouts to {out}"
                               + (" (a rollout whose branches carry no token ids gives no sample)"
                                  if n < rollouts.n else "")))
    else:
        out_console.print(Text(f"wrote {n} rollouts to {out}"))


@app.command()
def recheck(
    run: Annotated[str, typer.Option(help="Run whose stored rollouts are checked again.")],
    tokenizer: Annotated[Path | None, typer.Option(help="The run's tokenizer, as for `ingest` (the checks that need one are skipped without it).", exists=True)] = None,
    added_token: Annotated[list[str], typer.Option("--added-token", help="Extra vocabulary entry ID=PIECE (repeatable).")] = [],  # noqa: B006
) -> None:
    """Run today's checks over a run's stored rollouts and replace their findings (rollouts
    stored before a check existed get it without re-ingesting the files). Labels and notes are
    kept. Exits 2 when the run has no rollouts."""
    from app.config import get_settings
    from app.store.recheck import recheck_run

    if added_token and tokenizer is None:
        raise typer.BadParameter("--added-token extends a tokenizer: give --tokenizer too", param_hint="--added-token")
    check_context = None
    if tokenizer is not None:
        from ingest.checks.context import load_context

        try:
            check_context = load_context(tokenizer, _parse_added(added_token))
        except ValueError as exc:
            console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
            raise typer.Exit(2) from None
    try:
        total = recheck_run(_engine(), run, context=check_context, batch_size=get_settings().worker.batch_size)
    except KeyError:
        console.print(Text.assemble(("error: ", "red"), f"run {run!r} has no stored rollouts"), soft_wrap=True)
        raise typer.Exit(2) from None
    out.print(Text(f"re-checked {total.inserted + total.replaced} rollouts of {run}: {total.findings} findings"
                   + (f", {total.rejected} could not be stored again" if total.rejected else "")))


@app.command()
def quarantine(
    file: Annotated[str | None, typer.Option(help="Only records from this file (the path as ingested).")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Delete the records instead of listing them.")] = False,
) -> None:
    """List the quarantined records per file, or clear them (after fixing and re-ingesting)."""
    from app.store.quarantine import clear_quarantine, quarantine_counts

    engine = _engine()
    if clear:
        n = clear_quarantine(engine, file=file)
        out.print(Text(f"cleared {n} quarantined record{'s' if n != 1 else ''}"))
        return
    counts = quarantine_counts(engine, file=file)
    table = Table(title="quarantine")
    table.add_column("file", overflow="fold")
    table.add_column("records", justify="right")
    for name, n in counts:
        table.add_row(Text(name), str(n))
    out.print(table if counts else Text("nothing quarantined"))


@app.command()
def worker(
    spool: Annotated[list[Path], typer.Option("--spool", help="A folder collectors write trace files into "
                                              "(repeatable; default ROLLSCOPE_WORKER__SPOOL_DIR). Created if missing.")] = [],  # noqa: B006
    poll: Annotated[float, typer.Option(help="Seconds between looks at the folders when nothing is left to read.",
                                        min=0.05, max=60)] = 0.5,
    torn_after: Annotated[float, typer.Option(help="Seconds a file must stop growing before a last line without "
                                              "its newline is reported as torn and skipped.", min=0.1)] = 30.0,
    once: Annotated[bool, typer.Option("--once", help="Read what is there, then exit (no tailing): a document still "
                                       "being written is waited for up to the settle time (2 s); a file left unread "
                                       "is named with why, and the exit code is then 1.")] = False,
    parsers: Annotated[int | None, typer.Option(help="Processes that parse and check the next stretches of a file "
                                                "while the worker writes one: for machines with spare cores (default "
                                                "ROLLSCOPE_WORKER__PARSERS, 0: the worker parses).", min=0, max=64)] = None,
    heartbeat: Annotated[Path | None, typer.Option(help="A file touched on every pass, for health checks "
                                                   "(docker-compose.yml).")] = None,
) -> None:
    """Ingest trace files from spool folders as collectors append to them, exactly once.

    Appended JSONL lines are read as they arrive (a partial last line waits for its newline),
    .gz files are read as streams, other files once they stop changing. Each file's offset is
    committed with the rows it produced, so a restart resumes exactly there; renamed, rotated,
    truncated and deleted files are followed. SIGTERM stops cleanly. On Postgres several workers
    may share the folders; on SQLite one worker writes. With --once it exits 1 when it left a file
    unread (each named on stderr with why).
    """
    from app.config import get_settings
    from app.worker.run import WorkerLocked, run, sqlite_lock, stop_on_signals

    dirs = spool or [get_settings().worker.spool_dir]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    engine = _engine()
    try:
        lock = sqlite_lock(engine)
    except WorkerLocked as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        raise typer.Exit(2) from None
    stop = stop_on_signals()
    console.print(f"worker: reading {', '.join(str(d) for d in dirs)}", markup=False, soft_wrap=True)
    ran = run(engine, dirs, stop=stop, poll=poll, once=once, torn_after=torn_after, heartbeat=heartbeat,
              batch_lines=get_settings().worker.batch_size,
              parsers=get_settings().worker.parsers if parsers is None else parsers,
              log=lambda msg: console.print(msg, markup=False, soft_wrap=True))
    left = f"; left {len(ran.left)} file{'s' if len(ran.left) != 1 else ''} unread" if ran.left else ""
    console.print(f"worker: stopped after {ran.commits} commits{left}", markup=False, soft_wrap=True)
    if lock is not None:
        lock.close()
    if ran.left:
        raise typer.Exit(1)


@app.command()
def link(
    run: Annotated[str, typer.Argument(help="The run id.")],
    rollout: Annotated[str, typer.Argument(help="The rollout id.")],
    node: Annotated[int | None, typer.Option(help="Jump to this message (node index).", min=0)] = None,
    branch: Annotated[int | None, typer.Option(help="Show this branch of the rollout.", min=0)] = None,
    token: Annotated[str | None, typer.Option(help="A read token to put in the link (when reading is locked).")] = None,
    base: Annotated[str | None, typer.Option(help="Where Rollscope is served (default ROLLSCOPE_URL, else "
                                             "http://127.0.0.1:8000).")] = None,
) -> None:
    """Print the stable URL of a rollout's page (for training logs); touches no database."""
    from rollscope.client import DEFAULT_BASE, rollout_url

    typer.echo(rollout_url(base or os.environ.get("ROLLSCOPE_URL") or DEFAULT_BASE, run, rollout,
                           branch=branch, node=node, token=token))


token_app = typer.Typer(no_args_is_help=True, help="API tokens: create, list, revoke (app/auth.py).")
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    scope: Annotated[str, typer.Option(help="read (pages and API when reading is locked), write (ingest over "
                                            "HTTP; includes read) or admin (includes write).")] = "write",
    name: Annotated[str | None, typer.Option(help="A label to recognise the token by in `token list`.")] = None,
) -> None:
    """Create an API token. It is printed once, on the last line of stdout; only its hash is
    stored. Send it as `Authorization: Bearer <token>`."""
    from app.auth import SCOPES, issue

    if scope not in SCOPES:
        raise typer.BadParameter(f"one of {', '.join(SCOPES)}", param_hint="--scope")
    token, info = issue(_engine(), scope, name)  # type: ignore[arg-type]
    console.print(f"created token {info.pk} ({info.scope}{', ' + info.name if info.name else ''}); "
                  "it is shown only now:", markup=False, soft_wrap=True)
    typer.echo(token)


@token_app.command("list")
def token_list() -> None:
    """List tokens (id, name, scope, prefix, created, last used, revoked); never the tokens."""
    from app.auth import list_tokens

    tokens = list_tokens(_engine())
    table = Table(title="tokens")
    for col in ("id", "name", "scope", "prefix", "created", "last used", "revoked"):
        table.add_column(col)
    when = lambda t: t.strftime("%Y-%m-%d %H:%M") if t else "-"  # noqa: E731
    for t in tokens:
        table.add_row(str(t.pk), Text(t.name or "-"), t.scope, t.prefix + "…", when(t.created_at),
                      when(t.last_used_at), when(t.revoked_at))
    out.print(table if tokens else Text("no tokens (create one with `rollscope token create`)"))


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id from `token list`, or its prefix.")],
) -> None:
    """Revoke a token: it stops working at once and stays listed as revoked."""
    from app.auth import revoke

    try:
        revoked = revoke(_engine(), token_id)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="TOKEN_ID") from None
    if not revoked:
        console.print(Text.assemble(("error: ", "red"), f"no token {token_id!r}"), soft_wrap=True)
        raise typer.Exit(1)
    for t in revoked:
        out.print(Text(f"revoked token {t.pk} ({t.scope}{', ' + t.name if t.name else ''})"))


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes (each with its own connection pool, "
                                              "ROLLSCOPE_DB__POOL_SIZE connections).", min=1, max=64)] = 1,
) -> None:
    """Serve the dashboard, its JSON twins and /api/v1 with uvicorn, in `--workers` processes."""
    import uvicorn

    _engine()  # migrate once, before the workers start
    uvicorn.run("app.main:create_app", factory=True, host=host, port=port, workers=workers, log_level="info",
                proxy_headers=True)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Where to write the demo run (native JSONL).")] = Path("demo-run.jsonl"),
    steps: Annotated[int, typer.Option(min=1, max=10_000, help="Training steps.")] = 30,
    groups: Annotated[int, typer.Option(min=1, max=10_000, help="Groups per step.")] = 8,
    group_size: Annotated[int, typer.Option(min=1, max=1_000, help="Rollouts per group.")] = 8,
    seed: int = 0,
) -> None:
    """Write the deterministic synthetic demo run (docs/demo.md) as native JSONL, and its
    tokenizer as OUT.tokenizer.json beside it (for `rollscope ingest OUT --tokenizer ...`)."""
    from ingest.demo import tokenizer_path, write

    tok = tokenizer_path(out)
    try:
        n = write(out, tokenizer=tok, steps=steps, groups=groups, group_size=group_size, seed=seed)
    except OSError as exc:
        console.print(Text.assemble(("error: ", "red"), f"cannot write {exc.filename}: {exc.strerror}"), soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"wrote {n} rollouts to {out}", markup=False, soft_wrap=True)
    console.print(f"wrote its tokenizer to {tok} (ingest with: rollscope ingest {out} --tokenizer {tok})",
                  markup=False, soft_wrap=True)


@app.command("rebuild-analytics")
def rebuild_analytics(
    run: Annotated[str | None, typer.Option(help="Only this run (default: every run).")] = None,
) -> None:
    """Recompute the per-step rollups and the search index from what is stored (ingest keeps both
    current; this is for databases that hold rollouts from before they existed)."""
    from app.store import rollups, search

    with _engine().begin() as conn:
        steps = rollups.rebuild(conn, run)
        docs = search.rebuild(conn, run)
    out.print(f"rollups of {steps} steps, {docs} messages indexed for search")


@app.command()
def schema(out: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None) -> None:
    """Print the JSON Schema of one native JSONL line (generated from ingest/schema.py)."""
    import json

    from ingest.schema import json_schema

    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if out:
        out.write_text(text)
    else:
        typer.echo(text, nl=False)


def main() -> None:
    """The console entry point: no traceback reaches a user unless `--debug` is given."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    debug = "--debug" in sys.argv[1:]
    if debug:
        sys.argv.remove("--debug")
    sys.argv[1:] = hoist_db(sys.argv[1:])
    try:
        code = app(standalone_mode=False)  # click returns a command's exit code instead of exiting
        raise SystemExit(code if isinstance(code, int) else 0)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except click_exceptions() as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except (KeyboardInterrupt, EOFError):
        console.print("interrupted", markup=False)
        raise SystemExit(130) from None
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        if debug:
            raise
        from app.db.unusable import DatabaseUnusable, why_unusable
        from app.store.write import database_gone, out_of_space

        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        detail = first[0][:300] if first else type(exc).__name__
        url = os.environ.get("ROLLSCOPE_DATABASE_URL") or os.environ.get("ROLLSCOPE_DB__URL")
        why = why_unusable(exc, url)
        if why:  # waiting would not help: say which database, and what is wrong with it
            shown = exc.url if isinstance(exc, DatabaseUnusable) else sa_url_shown(url or "")
            console.print(Text.assemble(("error: ", "red"), f"the database {shown} cannot be used: {why} "
                                        "(not retried: waiting will not fix this)"), soft_wrap=True)
            raise SystemExit(2) from None
        if database_gone(exc):
            n = getattr(exc, "rollouts_committed", None)
            done = f"{n} rollouts were committed; " if n is not None else ""
            what = "has no space left" if out_of_space(exc) else "is unreachable"
            waited = getattr(exc, "retried_seconds", None)
            tried = f" after retrying for {waited:g} s" if waited else ""
            console.print(Text.assemble(("error: ", "red"), f"the database {what}{tried} ({detail}); {done}"
                                        "re-run the same command to resume (what is stored is not written again)"),
                          soft_wrap=True)
            raise SystemExit(3) from None
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):  # a setting (or --db) the app cannot use: say which, and why
            for e in exc.errors():
                where = ".".join(str(x) for x in e.get("loc", ()))
                msg = str(e.get("msg", "")).removeprefix("Value error, ")
                console.print(Text.assemble(("error: ", "red"), f"setting {where}: {msg}" if where else msg),
                              soft_wrap=True)
            raise SystemExit(2) from None
        import sqlalchemy as sa

        where = f"database {sa_url_shown(url)}; " if url and isinstance(exc, sa.exc.DBAPIError) else ""
        console.print(Text.assemble(("error: ", "red"), f"{type(exc).__name__}: {detail} ({where}--debug shows the "
                                                        "traceback)"), soft_wrap=True)
        raise SystemExit(1) from None


def hoist_db(args: list[str]) -> list[str]:
    """`--db URL` (or `--db=URL`) is accepted anywhere on the command line, before or after the
    command (`rollscope ingest x.jsonl --db sqlite:///x.db`): moved to the front, where the
    group's option is parsed. A `--db` after `--` is left alone."""
    end = args.index("--") if "--" in args else len(args)
    head, rest, moved, i = args[:end], args[end:], [], 0
    kept: list[str] = []
    while i < len(head):
        if head[i] == "--db" and i + 1 < len(head):
            moved += head[i:i + 2]
            i += 2
            continue
        if head[i].startswith("--db="):
            moved.append(head[i])
        else:
            kept.append(head[i])
        i += 1
    return moved + kept + rest


def click_exceptions() -> tuple[type[Exception], ...]:
    """Usage errors (shown as typer shows them, exit code 2): typer's vendored click, or click."""
    out: list[type[Exception]] = []
    try:
        from typer._click.exceptions import ClickException

        out.append(ClickException)
    except ImportError:
        pass
    try:
        import click

        out.append(click.exceptions.ClickException)
    except ImportError:
        pass
    return tuple(out)


if __name__ == "__main__":
    main()

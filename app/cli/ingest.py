"""`rollscope ingest`: trace files into the store, with a summary table and one line per
rejected record; `--retry-quarantined` reads again the files the quarantine names
(app/store/quarantine_retry.py plans which, and how)."""
from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from app.cli.common import console, open_engine, out, parse_added
from ingest.fields import INT32_MAX

MAX_ERRORS_SHOWN = 20
MAX_FILES_SHOWN = 50
REFRESH_SECONDS = 0.1  # the progress bar, redrawn at most this often


def ingest(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders (walked recursively).", exists=True,
                                                       show_default=False)] = None,
    run: Annotated[str | None, typer.Option(help="Run id applied to every record, overriding the record's own "
                                            "run (default: the record's run, else the file's folder name).")] = None,
    step: Annotated[int | None, typer.Option(help="Training step for records that carry none.", min=0,
                                             max=INT32_MAX)] = None,
    tokenizer: Annotated[Path | None, typer.Option(
        help="tokenizer.json or SentencePiece .model of the run, or its folder / tokenizer_config.json (keeps the "
             "chat template for the template checks).", exists=True)] = None,
    added_token: Annotated[list[str], typer.Option(
        "--added-token", help="Extra vocabulary entry ID=PIECE (repeatable).")] = [],  # noqa: B006
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="List every file, skipped file and rejection.")] = False,
    retry_quarantined: Annotated[bool, typer.Option("--retry-quarantined", help="Also read again every file that "
                                                    "has quarantined records (after fixing them); records that now "
                                                    "land leave the quarantine.")] = False,
    format: Annotated[str | None, typer.Option(  # noqa: A002
        "--format", help="Read every file with this reader instead of detecting (see docs/formats.md).")] = None,
) -> None:
    """Read trace files in any supported format into the store.

    The format is detected by content. Re-ingesting the same data adds nothing. A bad record is
    reported with file, line and field, quarantined, and skipped; the good records around it are
    kept. Exits 1 when anything was rejected, 0 otherwise.
    """
    from app.config import get_settings
    from app.worker.sync import IngestReport, ingest_paths, register_tokenizer
    from ingest.formats.base import ReadContext
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
            raise typer.BadParameter(f"{run!r}: a run id is 1-300 characters of valid Unicode without control "
                                     "characters",
                                     param_hint="--run") from None

    paths = list(paths or [])
    if not paths and not retry_quarantined:  # before any database is opened, made or migrated
        raise typer.BadParameter("give files or folders to ingest, or --retry-quarantined", param_hint="PATHS")
    engine = open_engine()
    retries = {}
    if retry_quarantined:
        from app.store.quarantine_retry import plan_retry

        plan = plan_retry(engine, paths, run=run, step=step, format=format)
        retries, gone, n = plan.groups, plan.gone, plan.files
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
        from app.store.tokenizers import tokenizer_context

        try:  # the checks see the tokenizer as stored, as `recheck` will
            key = register_tokenizer(engine, tokenizer, parse_added(added_token))
            check_context = tokenizer_context(engine, key)
        except ValueError as exc:
            console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
            raise typer.Exit(2) from None

    # refreshed from here, not by rich's thread: a process with a thread of its own cannot fork
    # its parser processes (app/forking.py), and would spawn them, a second of imports each
    # SIGTERM (`timeout`, `docker stop`) stops it at the next record read: the batch in hand is
    # rolled back and the parser processes and their files go (app/worker/handoff.py)
    signal.signal(signal.SIGTERM, _stop)
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                  console=console, transient=True, auto_refresh=False) as progress:
        current: dict = {"shown": 0.0}

        def on_file(path, source):
            _stop_if_asked()
            if "task" in current:
                progress.remove_task(current["task"])
            current["source"] = source
            current["task"] = progress.add_task(path.name, total=source.size or None)
            progress.refresh()

        def on_item(_item):
            _stop_if_asked()
            progress.update(current["task"], completed=current["source"].position)
            if time.monotonic() - current["shown"] >= REFRESH_SECONDS:
                progress.refresh()
                current["shown"] = time.monotonic()

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
    rows = [(f.path, f.format, f.result, f.notes()) for f in report.files]

    table = Table(title="ingest summary", show_lines=False)
    for col in ("file", "format", "new", "replaced", "unchanged", "rejected", "findings"):
        table.add_column(col, justify="right" if col not in ("file", "format") else "left",
                         overflow="fold" if col == "file" else "ellipsis")
    # Files with something to say first; a long tail of clean files is summed up in one row.
    rows.sort(key=lambda x: x[2].inserted + x[2].replaced + x[2].rejected == 0 and not x[3])
    shown_rows = rows if verbose else rows[:MAX_FILES_SHOWN]
    # a note (e.g. an ATIF part merged into another file's rollout) goes under the name
    for name, fmt, r, note in shown_rows:
        table.add_row(Text(name + (f" ({note})" if note else "")), fmt, str(r.inserted), str(r.replaced),
                      str(r.unchanged), str(r.rejected), str(r.findings))
    if len(rows) > len(shown_rows):
        table.add_row(Text(f"... {len(rows) - len(shown_rows)} more files (--verbose lists them)"),
                      "", "", "", "", "", "")
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
    found = report.renderings if verbose else report.renderings[:5]
    for dup in found:  # the same episodes stored once per rendering: named, with the count
        console.print(Text.assemble(("warning ", "yellow"), dup.message()), soft_wrap=True)
    if len(report.renderings) > len(found):
        extra = sum(d.rollouts - d.episodes for d in report.renderings)
        console.print(Text.assemble(("warning ", "yellow"), f"... {len(report.renderings) - len(found)} more sets of "
                                    f"files hold the same episodes in several renderings ({extra} extra rollouts "
                                    "in all; --verbose lists them)"), soft_wrap=True)
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
    if total.unseen:  # app/store/quarantine.py clear_unseen
        n = total.unseen
        where = "their files" if n != 1 else "its file"
        out.print(Text(f"{n} quarantined record{'s' if n != 1 else ''} no longer in {where}: "
                       "cleared from the quarantine"))
    out.print(Text(
        f"{total.inserted} new, {total.replaced} replaced, {total.unchanged} unchanged, "
        f"{len(errors)} rejected, {len(skipped)} skipped; runs: {', '.join(sorted(total.runs)) or '-'}"))
    raise typer.Exit(1 if errors else 0)


_TERMINATED: list[int] = []  # the signal that asked the ingest to stop


def _stop(signum, _frame) -> None:
    """SIGTERM: noted; the ingest stops at its next record (`_stop_if_asked`), not wherever the
    signal lands (in the middle of forking a parser process, or of the pool's own locks, an
    exception raised there was lost or left a lock held)."""
    _TERMINATED.append(signum)


def _stop_if_asked() -> None:
    """Unwind as an exit with the shell's code for the signal (128 + 15), cleaning up on the way:
    the batch in hand rolled back, the parser processes and their files gone."""
    if _TERMINATED:
        raise SystemExit(128 + _TERMINATED[0])

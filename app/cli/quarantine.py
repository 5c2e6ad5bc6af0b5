"""`rollscope quarantine`: the quarantined records per file (with their runs, where they came
from, first and last seen), or clearing them."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from app.cli.common import open_engine, out

SHOWN = 3  # runs or sources named per file; more are counted


def _some(values: tuple[str, ...], what: str) -> str:
    if not values:
        return "–"
    if len(values) <= SHOWN:
        return ", ".join(values)
    return ", ".join(values[:SHOWN]) + f" and {len(values) - SHOWN} more {what}"


def _source(source: str, file: str) -> str:
    """A quarantine `source` for a person: `HTTP, token NAME`, `file` (read at its name) or the
    path the file was read at (a spool file renamed since)."""
    from app.views.quarantine import source_parts

    kind, token = source_parts(source)
    if kind == "http":
        return f"HTTP, token {token}" if token else "HTTP"
    return "file" if source == file else source


def quarantine(
    file: Annotated[str | None, typer.Option(help="Only records from this file (the path as ingested).")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Delete the records instead of listing them.")] = False,
) -> None:
    """List the quarantined records per file, with their runs, where they came from (the file's
    path, or HTTP and the token's name) and when they were first and last rejected (UTC); or
    clear them (after fixing and re-ingesting)."""
    from app.store.quarantine import clear_quarantine, quarantine_files
    from app.views.common import readable

    engine = open_engine()
    if clear:
        n = clear_quarantine(engine, file=file)
        out.print(Text(f"cleared {n} quarantined record{'s' if n != 1 else ''}"))
        return
    files = quarantine_files(engine, file=file)
    table = Table(title="quarantine (times UTC)")
    # the file's path whole on one line where it fits: it is what `--file` and the page filter take
    table.add_column("file", overflow="fold", min_width=min(max((len(f.file) for f in files), default=4), 60))
    table.add_column("records", justify="right")
    table.add_column("run", overflow="fold")
    table.add_column("source", overflow="fold")
    table.add_column("first seen")
    table.add_column("last seen")
    for f in files:
        # Text(...): a file name or token name is shown as it is, never read as rich markup
        table.add_row(Text(f.file), str(f.records), Text(_some(f.runs, "runs")),
                      Text(_some(tuple(dict.fromkeys(_source(s, f.file) for s in f.sources)), "sources")),
                      readable(f.first_seen, zone=False) or "", readable(f.last_seen, zone=False) or "")
    out.print(table if files else Text("nothing quarantined"))

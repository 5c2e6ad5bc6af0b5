"""`rollscope quarantine`: the quarantined records per file, or clearing them."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from app.cli.common import open_engine, out


def quarantine(
    file: Annotated[str | None, typer.Option(help="Only records from this file (the path as ingested).")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Delete the records instead of listing them.")] = False,
) -> None:
    """List the quarantined records per file, or clear them (after fixing and re-ingesting)."""
    from app.store.quarantine import clear_quarantine, quarantine_counts

    engine = open_engine()
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

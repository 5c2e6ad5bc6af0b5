"""`rollscope db partition`: hash-partition the large tables of a Postgres database, on demand
(app/db/partition.py; not part of the migrations)."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from app.cli.common import console, database_url, open_engine, out
from app.cli.exits import exit_codes

db_app = typer.Typer(no_args_is_help=True, help="Database maintenance: partition (Postgres).")


@db_app.command("partition", epilog=exit_codes("db partition"))
def db_partition(
    partitions: Annotated[int, typer.Option(help="Hash partitions per table (2 to 1024); tables already "
                                                 "partitioned keep theirs.")] = 16,
) -> None:
    """Partition `rollout` and the rollups by run, `node` and `finding` by rollout, with their
    data (Postgres only; each table in one transaction, which holds it locked while its rows are
    copied). Idempotent: a table already partitioned is left as it is. Exits 2 on SQLite."""
    from app.db.partition import NotPartitionable, partition

    if database_url().startswith("sqlite"):  # refused before the file is made or migrated
        console.print(Text.assemble(("error: ", "red"), "partitions need Postgres; this database is SQLite "
                                    "(nothing was changed)"), soft_wrap=True)
        raise typer.Exit(2)
    try:
        done = partition(open_engine(), partitions)
    except NotPartitionable as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        raise typer.Exit(2) from None
    for c in done:
        if c.already:
            out.print(f"{c.table}: already partitioned ({c.partitions} partitions by {c.key}); not changed")
        else:
            cascade = f"; foreign keys to it replaced by a cascade trigger: {', '.join(c.dropped_fks)}" \
                if c.dropped_fks else ""
            out.print(f"{c.table}: {c.rows:,} rows in {c.partitions} partitions by {c.key}{cascade}", soft_wrap=True)

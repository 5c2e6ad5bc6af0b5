"""Which raw records the store already holds: the database side of "unchanged data skips the
work" (ingest/known.py hashes the records; this looks the hashes up).

One query per chunk of records (a reader asks for 200 lines at once), served by the index on
`rollout.raw_hash` (migration 0023_raw_hash), never a query per record.
"""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.store.outage import not_the_data
from ingest.known import Identity, KnownLookup

RO = models.Rollout.__table__


def stored_identities(conn: sa.Connection, hashes: list[str]) -> dict[str, tuple[Identity, str | None]]:
    """raw hash → ((run id, rollout id, attempt), source file) of the stored rollouts read from
    records with one of `hashes` (32 hex digits each, ingest/known.py `raw_hash`); hashes nobody
    stored are absent. One SELECT."""
    if not hashes:
        return {}
    rows = conn.execute(sa.select(RO.c.raw_hash, RO.c.run_id, RO.c.rollout_id, RO.c.attempt, RO.c.source_file)
                        .where(RO.c.raw_hash.in_(sorted(set(hashes)))))
    return {r.raw_hash: ((r.run_id, r.rollout_id, r.attempt), r.source_file) for r in rows}


def known_lookup(engine: Engine) -> KnownLookup:
    """`ReadContext.known` for `engine`: each call is one short read transaction
    (`stored_identities`). A database that is away or locked at that moment (app/store/outage.py
    `not_the_data`) makes every record of the chunk unknown: they are read in full, and their
    batch waits out the outage with the writer's retries, as before the look-up existed."""
    def lookup(hashes: list[str]) -> dict[str, tuple[Identity, str | None]]:
        try:
            with engine.connect() as conn:
                return stored_identities(conn, hashes)
        except sa.exc.DBAPIError as exc:
            if not_the_data(exc):
                return {}
            raise

    return lookup

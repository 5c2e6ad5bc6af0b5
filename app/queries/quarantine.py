"""The quarantine: records rejected at ingest, newest first, keyset-paged."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Quarantine


def list_quarantine(*, session: Session, file: str | None = None, before: int | None = None,
                    limit: int) -> tuple[list[Quarantine], int | None]:
    """One page of quarantined records, newest first, and the `before` cursor of the next page.

    Keyset pagination on the primary key; `file` keeps one source file's records."""
    q = sa.select(Quarantine).order_by(Quarantine.pk.desc()).limit(limit + 1)
    if file is not None:
        q = q.where(Quarantine.source_file == file)
    if before is not None:
        q = q.where(Quarantine.pk < before)
    rows = list(session.exec(q).scalars())
    return rows[:limit], (rows[limit - 1].pk if len(rows) > limit else None)


def count_quarantine(*, session: Session, file: str | None = None) -> int:
    q = sa.select(sa.func.count()).select_from(Quarantine)
    if file is not None:
        q = q.where(Quarantine.source_file == file)
    return session.execute(q).scalar_one()

"""The quarantine page: records rejected at ingest, newest first."""
from __future__ import annotations

from sqlmodel import Session

from app import urls
from app.queries import quarantine as q_quarantine
from app.views.common import PageModel, iso


class QuarantineRecord(PageModel):
    """A rejected record: where it was (file, line, field), why, and its first 4 KB."""

    id: int
    file: str
    line: int | None
    field: str | None
    error: str
    raw: str | None
    at: str | None
    file_url: str


class QuarantinePage(PageModel):
    total: int
    matching: int | None
    file: str | None
    records: list[QuarantineRecord]
    next: int | None
    next_url: str | None
    clear_url: str


def quarantine_page(session: Session, *, file: str | None, before: int | None, limit: int,
                    keep_limit: int | None = None, twin: bool = False) -> QuarantinePage:
    """One page of quarantined records (of one file when `file` is given)."""
    rows, nxt = q_quarantine.list_quarantine(session=session, file=file, before=before, limit=limit)
    return QuarantinePage(
        total=q_quarantine.count_quarantine(session=session),
        matching=q_quarantine.count_quarantine(session=session, file=file) if file is not None else None,
        file=file,
        records=[QuarantineRecord(id=r.pk, file=r.source_file, line=r.line, field=r.field, error=r.error, raw=r.raw,
                                  at=iso(r.created_at), file_url=urls.quarantine(json=twin, file=r.source_file))
                 for r in rows],
        next=nxt,
        next_url=urls.quarantine(json=twin, file=file, limit=keep_limit, before=nxt) if nxt is not None else None,
        clear_url=urls.quarantine(json=twin),
    )

"""The quarantine page: records rejected at ingest, newest first."""
from __future__ import annotations

from sqlmodel import Session

from app import urls
from app.queries import quarantine as q_quarantine
from app.queries import runs as q_runs
from app.store.quarantine import HTTP
from app.views.common import PageModel, iso, readable


class QuarantineRecord(PageModel):
    """A rejected record: where it was (file, line, field), why, and its first 4 KB; its run
    (`run`, when it was known or given: `--run`, `?run=`); where it came from (`source`: the
    path a file was read at, or `http:<token name>` for `POST /api/v1/ingest` and `/v1/traces`;
    `source_kind` file | http, `token` the token's name); when it was first and last rejected
    (`first_seen`, `last_seen`: RFC 3339 UTC with `Z`; `*_text`: the same for a person, to the
    second). `at` is `first_seen` (its name before run and source were kept)."""

    id: int
    file: str
    line: int | None
    field: str | None
    error: str
    raw: str | None
    run: str | None
    run_url: str | None
    source: str | None
    source_kind: str  # file | http
    token: str | None
    first_seen: str | None
    last_seen: str | None
    first_seen_text: str | None
    last_seen_text: str | None
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


def source_parts(source: str | None) -> tuple[str, str | None]:
    """(`file` | `http`, the token's name for HTTP) of a quarantine entry's `source`."""
    if source is not None and (source == HTTP or source.startswith(HTTP + ":")):
        return "http", source.partition(":")[2] or None
    return "file", None


def record(r, *, twin: bool, runs: set[str]) -> QuarantineRecord:
    """The page's row of one `quarantine` entry; its run linked when it is among `runs` (the runs
    with a page, `runs_with_pages`: a record rejected before any rollout of its run was stored
    names a run with none)."""
    kind, token = source_parts(r.source)
    return QuarantineRecord(
        id=r.pk, file=r.source_file, line=r.line, field=r.field, error=r.error, raw=r.raw,
        run=r.run_id, run_url=urls.run(r.run_id, json=twin) if r.run_id in runs else None,
        source=r.source, source_kind=kind, token=token,
        first_seen=iso(r.first_seen), last_seen=iso(r.last_seen),
        first_seen_text=readable(r.first_seen), last_seen_text=readable(r.last_seen), at=iso(r.first_seen),
        file_url=urls.quarantine(json=twin, file=r.source_file))


def runs_with_pages(session: Session, rows) -> set[str]:
    """The runs named by quarantine `rows` that have a page (a stored run): `record`'s `runs`."""
    named = {r.run_id for r in rows if r.run_id is not None}
    return {rid for rid in named if q_runs.get_run(session=session, run_id=rid) is not None}


def quarantine_page(session: Session, *, file: str | None, before: int | None, limit: int,
                    keep_limit: int | None = None, twin: bool = False) -> QuarantinePage:
    """One page of quarantined records (of one file when `file` is given)."""
    rows, nxt = q_quarantine.list_quarantine(session=session, file=file, before=before, limit=limit)
    runs = runs_with_pages(session, rows)
    return QuarantinePage(
        total=q_quarantine.count_quarantine(session=session),
        matching=q_quarantine.count_quarantine(session=session, file=file) if file is not None else None,
        file=file,
        records=[record(r, twin=twin, runs=runs) for r in rows],
        next=nxt,
        next_url=urls.quarantine(json=twin, file=file, limit=keep_limit, before=nxt) if nxt is not None else None,
        clear_url=urls.quarantine(json=twin),
    )

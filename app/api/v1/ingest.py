"""`POST /api/v1/ingest`: NDJSON over HTTP, through the same readers and store as files.

Check, parse, hand off, push back when full (the receiver of Arize-ai/phoenix
`src/phoenix/server/api/routers/v1/traces.py`, minus its silent drops): a write token is required
(401 / 403); at most `api.ingest_max_inflight` requests are processed at once and the next one
is answered 429 with `Retry-After` (before its body is read when the slots are already taken; a
slot is taken once the body has arrived, so a sender that stalls holds none, and a body with no
bytes for `api.body_timeout_seconds` is answered 408 with `Connection: close`); a database that is down gives 503
with `Retry-After`. Nothing is dropped silently: every line gets a result, accepted (with its
URL), unchanged, or rejected (with the field and the reason), and rejected lines are quarantined
as file rejections are.

The body may be gzip (`Content-Encoding: gzip`, or gzip bytes) and is read by app.receivers.body, in
bounded memory: at most `api.max_body_bytes` after inflating (413 past it, found while it arrives and
inflates, before it is held whole), and `api.body_memory_bytes` of bodies held by the whole process
(503 with `Retry-After` past it). Query: `run` (applied to every record, as `rollscope ingest --run`),
`format` (a reader name; detected by content otherwise), `step` (for records that carry none). The
records' source file is `http/<sha256 of the body>`: re-sending the same body (a retry after a
timeout) gives the same ids and is `unchanged`.
"""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool

from app import urls
from app.api.v1.schemas import ErrorBody
from app.db.engine import writes
from app.deps import WriteToken
from app.errors import ApiError
from app.receivers.body import BodyError, read_body
from app.receivers.body import budget as body_budget
from app.store.outage import lost_a_race
from app.store.prepare import prepare_or_error
from app.store.quarantine import http_source, with_source
from app.store.write import BATCH, StoreResult, write_in
from ingest.errors import RecordError
from ingest.fields import INT32_MAX
from ingest.files import read_records
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect, explain, get, names

# The error bodies it can answer, described in the OpenAPI document like the rest of /api/v1.
from ingest.source import Source

_PUSHBACK = {status: {"model": ErrorBody, "description": d} for status, d in {
    400: "a NUL character in the URL, or a gzip body that does not inflate",
    408: "no bytes of the body arrived for `api.body_timeout_seconds` (30 s): the connection is closed",
    413: "the body is larger than `api.max_body_bytes` (after inflating)",
    415: "the body is not NDJSON (one JSON object per line)",
    429: "too many ingest requests in flight: retry after `Retry-After` seconds",
    503: "the database is unavailable, or the server holds too many request bodies: retry after `Retry-After` "
         "seconds"}.items()}
router = APIRouter(tags=["ingest"], responses=_PUSHBACK)

RETRY_AFTER_BUSY = 1
RETRY_AFTER_DOWN = 5
BATCH_BYTES = 4 << 20  # a batch is written once its records span this many bytes of the body
RACE_TRIES = 4  # a batch that lost a Postgres deadlock is written again, this many times in all


class Gate:
    """At most `limit` ingest requests in process at once (their bodies read, being parsed and
    written); the rest are told to come back."""

    def __init__(self, limit: int):
        self.limit, self.inside = limit, 0
        self._lock = threading.Lock()

    def full(self) -> bool:
        return self.inside >= self.limit

    def enter(self) -> bool:
        with self._lock:
            if self.inside >= self.limit:
                return False
            self.inside += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.inside -= 1


def _busy(retry_after: int, detail: str, status: int) -> HTTPException:
    return HTTPException(status, detail, headers={"Retry-After": str(retry_after)})


@router.post("/ingest")
async def ingest(
    request: Request,
    token: WriteToken,
    run: Annotated[str | None, Query(max_length=300, description="run id applied to every record")] = None,
    format: Annotated[str | None, Query(max_length=50, description="reader name; detected if absent",
                                        json_schema_extra={"enum": names()})] = None,
    step: Annotated[int | None, Query(ge=0, le=INT32_MAX, description="step for records that carry none")] = None,
) -> dict:
    """Ingest NDJSON records (any supported format, gzip allowed); one result per line.

    Returns `{"accepted": n, "unchanged": n, "rejected": n, "results": [{"line", "status",
    "id", "url"} | {"line", "status": "rejected", "field", "error"}]}`. 401 without a token,
    403 with a read token, 400 for gzip that does not inflate, 413 over `api.max_body_bytes` (64 MiB
    after inflating; refused as soon as the length, the bytes received or the bytes inflated pass
    it), 408 (`Connection: close`) when no bytes of the body arrive for `api.body_timeout_seconds`,
    415 for a body that is not NDJSON or an encoding other than gzip, 429 when busy, 503 when
    the database is down or the process holds `api.body_memory_bytes` of bodies already (both with
    `Retry-After`).
    """
    gate: Gate = request.app.state.ingest_gate
    full = _busy(RETRY_AFTER_BUSY, "the ingest queue is full; retry after the delay given", 429)
    if gate.full():  # told before the body is sent, when it can be
        raise full
    limit = request.app.state.settings.api.max_body_bytes
    try:
        # the body is read before a slot is taken: a sender that stalls holds none (and is given up
        # after `api.body_timeout_seconds`: 408)
        async with read_body(request, limit=limit, budget=body_budget(request.app)) as data:
            if not gate.enter():
                raise full
            try:
                base = str(request.base_url).rstrip("/")
                return await run_in_threadpool(_ingest, request.app.state.engine, data, run, format, step, base,
                                               getattr(request.state, "token_name", None))
            except sa.exc.OperationalError as exc:
                raise _busy(RETRY_AFTER_DOWN, "the database is unavailable: "
                            f"{str(exc.orig or exc).splitlines()[0]}", 503) from None
            finally:
                gate.leave()
    except BodyError as exc:
        raise HTTPException(exc.status, exc.message, headers=exc.headers() or None) from None


def _ingest(engine, data: bytes, run: str | None, fmt: str | None, step: int | None, base: str,
            token_name: str | None = None) -> dict:
    engine = writes(engine)  # each batch takes the write lock at BEGIN, waiting at most the write timeout
    name = f"http/{hashlib.sha256(data).hexdigest()[:16]}.jsonl"
    source = Source(Path(name), "jsonl", None, size=len(data), data=data)
    source.first = next((v for _, v in source.lines() if isinstance(v, dict)), None)
    source.position, source.last_line, source.last_raw = 0, None, None
    try:
        reader = get(fmt) if fmt else detect(source)
    except KeyError as exc:
        raise ApiError(422, str(exc.args[0]), field="format") from None
    if reader is None:
        if source.first is None and data.strip():
            raise HTTPException(415, "the body is not NDJSON: one JSON object per line")
        raise ApiError(422, explain(source) if data.strip() else "empty body", field="body")
    ctx = ReadContext(run_id=run, step=step, format=fmt)
    # its rejections are quarantined as sent over HTTP by this token, with the run given
    quarantined_as = with_source(None, http_source(token_name), run=run)
    results: list[dict] = []  # one small dict per record; the records themselves are dropped batch by batch
    total = StoreResult()
    # Read lazily, prepared and written a batch at a time: at most BATCH records, or the records of
    # about BATCH_BYTES of the body, are held as Python objects at once (~10x their bytes).
    batch: list[object] = []
    batch_from = 0
    for item in read_records(reader, source, ctx, _Dropped()):  # each rejection is in `results` already
        batch.append(_prepared(item, results))
        if len(batch) >= BATCH or source.position - batch_from >= BATCH_BYTES:
            _write_batch(engine, batch, total, quarantined_as)
            batch, batch_from = [], source.position
    if batch:
        _write_batch(engine, batch, total, quarantined_as)
    del batch
    counts = {"accepted": 0, "unchanged": 0, "rejected": 0}
    for r in results:
        if r["status"] is None:
            outcome = total.outcomes.get((r["run"], r["id"], r["attempt"]), "rejected")
            r["status"] = {"inserted": "accepted", "replaced": "accepted"}.get(outcome, outcome)
            if r["status"] == "rejected":
                r["error"] = next((e.message for e in total.errors if e.line == r["line"]), "not stored")
            else:
                r["url"] = base + urls.rollout(r["run"], r["id"], **({"attempt": r["attempt"]} if r["attempt"] else {}))
            if r["attempt"] == 0:
                del r["attempt"]
        counts[r["status"]] += 1
    return {**counts, "results": results}


class _Dropped(list):
    """A list that keeps nothing: read_records appends every rejection to the list it is given,
    which would keep them all (with their raw text) for the whole body."""

    def append(self, item) -> None:
        pass


def _prepared(item, results: list[dict]):
    """The record prepared for writing (or its RecordError), its result appended to `results`
    (status None until the batch is written)."""
    if isinstance(item, RecordError):
        results.append({"line": item.line, "status": "rejected", "field": item.field, "error": item.message})
        return item
    p = prepare_or_error(item)
    if isinstance(p, RecordError):
        results.append({"line": item.source.get("line"), "id": item.id, "status": "rejected",
                        "field": p.field, "error": p.message})
    else:
        results.append({"line": item.source.get("line"), "id": item.id, "run": item.run.id,
                        "attempt": item.attempt, "status": None})
    return p


def _write_batch(engine, part: list, total: StoreResult, quarantined_as) -> None:
    """One batch in one transaction: the write lock taken at BEGIN, waited for at most the write
    timeout (then 503); a batch that lost a deadlock to a concurrent write (Postgres) is written
    again, RACE_TRIES times in all."""
    prepared = [p for p in part if not isinstance(p, RecordError)]
    errors = [p for p in part if isinstance(p, RecordError)]
    for attempt in range(RACE_TRIES):
        try:
            with engine.begin() as conn:
                total.add(write_in(conn, prepared, errors, quarantine_context=quarantined_as))
            return
        except sa.exc.DBAPIError as exc:
            if not lost_a_race(exc) or attempt == RACE_TRIES - 1:
                raise

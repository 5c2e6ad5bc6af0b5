"""Webhook delivery: an alert is recorded once per (kind, key) and POSTed as JSON to
`ROLLSCOPE_ALERTS__WEBHOOK_URL`, from a background thread, never in the caller's.

`deliver(engine, settings, kind, key, payload)` is what callers use (ingest's step alerts, the
serve process's stale-worker watcher). It never blocks on the database's write lock and never
raises: it reads whether (kind, key) is recorded (a read, in a deferred transaction of its own:
on SQLite under WAL it waits for no writer, so a caller inside an ingest transaction is not
stalled), and hands the alert to one
daemon thread per process, which records it (`alert_delivery`: INSERT ... ON CONFLICT DO NOTHING
on the unique (kind, key), so across processes exactly one of them records it and POSTs it) and
then POSTs `{"kind", "key", ...payload}` with `webhook_timeout_seconds` per try, up to
`TRIES` tries (`BACKOFF` seconds apart), writing `attempts`, `last_error` and, on a 2xx answer,
`delivered_at`. Without a webhook URL the alert is only recorded. A full queue (`QUEUE_SIZE`
alerts waiting: a receiver that hangs for long) drops the newest alert and says so on the log;
it is not recorded, so a later call with the same key may deliver it.
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from dataclasses import dataclass

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import insert_for, writes

D = models.AlertDelivery.__table__
TRIES = 3
BACKOFF = (0.5, 2.0)  # seconds before the 2nd and 3rd tries
QUEUE_SIZE = 1000
log = logging.getLogger("rollscope.alerts")


@dataclass
class _Job:
    engine: Engine
    url: str | None
    timeout: float
    kind: str
    key: str
    body: dict


_queue: queue.Queue[_Job] = queue.Queue(QUEUE_SIZE)
_pending: set[tuple[int, str, str]] = set()  # (engine id, kind, key) handed to the thread, not yet recorded
_lock = threading.Lock()
_thread: threading.Thread | None = None


def deliver(engine: Engine, settings, kind: str, key: str, payload: dict) -> bool:
    """Record alert (`kind`, `key`) once and POST `{"kind", "key", ...payload}` to
    `settings.alerts.webhook_url` in the background. False when (kind, key) is already recorded
    (or handed over by this process and not yet recorded), or the alert could not be handed over
    (the database unreadable, the queue full); True when it was handed to the delivery thread.
    Returns at once: no POST and no write happens in the caller's thread; never raises."""
    try:
        with _reader(engine).connect() as conn:
            if conn.execute(sa.select(D.c.pk).where(D.c.kind == kind, D.c.key == key)).first() is not None:
                return False
        token = (id(engine), kind, key)
        with _lock:
            if token in _pending:
                return False
            alerts = settings.alerts
            job = _Job(engine, alerts.webhook_url, alerts.webhook_timeout_seconds, kind, key,
                       {"kind": kind, "key": key, **payload})
            try:
                _queue.put_nowait(job)
            except queue.Full:
                log.warning("alert %s %s dropped: %d alerts wait for the webhook already", kind, key, QUEUE_SIZE)
                return False
            _pending.add(token)
            _start()
        return True
    except Exception as exc:  # noqa: BLE001 - an alert must never break its caller
        log.warning("alert %s %s not handed over: %s", kind, key, exc)
        return False


def _reader(engine: Engine) -> Engine:
    """An engine whose transactions only read: on SQLite a second engine on the same file whose
    transactions begin deferred (an ingest's engine begins every transaction IMMEDIATE, which
    waits for the write lock), so under WAL the look waits for no writer; Postgres' own."""
    if engine.dialect.name != "sqlite":
        return engine
    base = getattr(engine, "_proxied", None) or engine
    reader = base.__dict__.get("rollscope_alert_reader")
    if reader is None:
        from app.db.engine import make_engine

        reader = base.__dict__["rollscope_alert_reader"] = make_engine(base.url.render_as_string(hide_password=False))
    return reader


def _start() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_run, name="rollscope-webhook", daemon=True)
        _thread.start()


def idle(timeout: float = 10.0) -> bool:
    """Wait until every alert handed over has been recorded and POSTed (or given up); True if so
    within `timeout` seconds (tests, and a clean shutdown)."""
    end = time.monotonic() + timeout
    while _queue.unfinished_tasks and time.monotonic() < end:
        time.sleep(0.02)
    return not _queue.unfinished_tasks


def _run() -> None:
    while True:
        job = _queue.get()
        try:
            _handle(job)
        except Exception as exc:  # noqa: BLE001 - the thread carries on with the next alert
            log.warning("alert %s %s: %s", job.kind, job.key, exc)
        finally:
            with _lock:
                _pending.discard((id(job.engine), job.kind, job.key))
            _queue.task_done()


def _handle(job: _Job) -> None:
    """Record the alert (only the process whose INSERT lands goes on), then POST it."""
    with writes(job.engine, timeout=30).begin() as conn:
        pk = conn.execute(insert_for(conn, D).values(kind=job.kind, key=job.key, created_at=models.utcnow(), attempts=0)
                          .on_conflict_do_nothing(index_elements=["kind", "key"]).returning(D.c.pk)).scalar()
    if pk is None or job.url is None:
        return
    body = json.dumps(job.body, default=str).encode()
    for attempt in range(1, TRIES + 1):
        error = _post(job.url, body, job.timeout)
        with writes(job.engine, timeout=30).begin() as conn:
            conn.execute(D.update().where(D.c.pk == pk).values(
                attempts=attempt, last_error=error, delivered_at=None if error else models.utcnow()))
        if error is None:
            return
        log.warning("alert %s %s: webhook try %d of %d failed: %s", job.kind, job.key, attempt, TRIES, error)
        if attempt < TRIES:
            time.sleep(BACKOFF[attempt - 1])


def _post(url: str, body: bytes, timeout: float) -> str | None:
    """POST `body`; None on a 2xx answer, else what went wrong (for `last_error`)."""
    try:
        r = httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=timeout)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"[:500]
    return None if 200 <= r.status_code < 300 else f"HTTP {r.status_code}: {r.text[:200]}"

"""The serve process's watcher of spool workers: every `ROLLSCOPE_ALERTS__WATCH_SECONDS` (5 s) it
reads the ingest status and sends alert `worker_stale` (app/alerts/webhook.py) for each worker
that went stale (no heartbeat for more than 3 of its intervals, app/worker/heartbeat.py), once
per worker life (key `<worker id>@<its start, RFC 3339>`): however many server processes watch
and however many passes see it stale, the webhook hears of it once. A worker stopped cleanly
(gone) is not alerted.

It runs only when a webhook URL is set and `watch_seconds` > 0 (so not in tests, unless they set
both), as a task of the app's lifespan; a pass's database work runs in a thread, never on the
event loop, and a pass that fails is logged and the next one tried.

Payload: `worker`, `host`, `pid`, `last_beat_at`, `spools`, `files` (the spool files it holds:
their current paths), `lag_bytes` (their bytes not yet ingested, against their size on disk now)
and `links` (`ingest`: the /ingest page, `status`: GET /api/v1/ingest/status).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import asynccontextmanager

from app import urls
from app.alerts.webhook import deliver
from app.views.ingest_status import ingest_status

KIND = "worker_stale"
log = logging.getLogger("rollscope.alerts")


def watch_once(engine, settings) -> int:
    """One pass: alert each stale worker not alerted yet. Returns how many alerts were handed
    to the webhook's thread."""
    st = ingest_status(engine)
    base = (settings.alerts.base_url or "").rstrip("/")
    sent = 0
    for w in st.workers:
        if w.state != "stale":
            continue
        held = [s for s in st.sources if s.kind == "file" and s.holder == w.worker_id]
        payload = {"worker": w.worker_id, "host": w.host, "pid": w.pid, "last_beat_at": w.last_beat_at,
                   "spools": w.spools, "files": [s.path for s in held],
                   "lag_bytes": sum(s.bytes_behind for s in held),
                   "links": {"ingest": base + urls.ingest(), "status": base + "/api/v1/ingest/status"}}
        sent += deliver(engine, settings, KIND, f"{w.worker_id}@{w.started_at}", payload)
    return sent


async def _watch(app) -> None:
    settings = app.state.settings
    every = settings.alerts.watch_seconds
    while True:
        try:
            await asyncio.to_thread(watch_once, app.state.engine, settings)
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            log.warning("stale-worker watcher: %s", exc)
        await asyncio.sleep(every)


def install(app) -> None:
    """Run the watcher in `app`'s lifespan (around any lifespan it already has) when the settings
    turn it on."""
    settings = app.state.settings
    if not settings.alerts.webhook_url or settings.alerts.watch_seconds <= 0:
        return
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a):
        task = asyncio.create_task(_watch(a), name="rollscope-stale-worker-watcher")
        try:
            async with inner(a) as state:
                yield state
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.router.lifespan_context = lifespan

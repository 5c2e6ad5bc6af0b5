"""The serve process's watcher: every `ROLLSCOPE_ALERTS__WATCH_SECONDS` (5 s) it posts the flagged
steps that have settled (alert `step_flagged`, below) and reads the ingest status and sends alert
`worker_stale` (app/alerts/webhook.py) for each worker
that went stale (no heartbeat for more than 3 of its intervals, app/worker/heartbeat.py), once
per worker life (key `<worker id>@<its start, RFC 3339>`): however many server processes watch
and however many passes see it stale, the webhook hears of it once. A worker stopped cleanly
(gone) is not alerted.

It runs only when a webhook URL is set and `watch_seconds` > 0 (so not in tests, unless they set
both), as a task of the app's lifespan; a pass's database work runs in a thread, never on the
event loop, and a pass that fails is logged and the next one tried.

A flagged step (`step_alert`, app/store/step_alerts.py) is posted once it has settled: flagged at
least `ROLLSCOPE_ALERTS__SETTLE_SECONDS` (120 s) ago and no rollout of its step stored for as
long, so a verdict taken while another producer was still filling the step (and taken back when
its rollouts came) is never sent. Key `<run>/<step>`; payload app.store.step_alerts.payload.
Only alerts first flagged within the last day are looked at.

Payload of `worker_stale`: `worker`, `host`, `pid`, `last_beat_at`, `spools`, `files` (the spool files it holds:
their current paths), `lag_bytes` (their bytes not yet ingested, against their size on disk now)
and `links` (`ingest`: the /ingest page, `status`: GET /api/v1/ingest/status).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from app import urls
from app.alerts.webhook import deliver
from app.db import models
from app.views.ingest_status import ingest_status

KIND = "worker_stale"
STEP_KIND = "step_flagged"
log = logging.getLogger("rollscope.alerts")


def settled_steps(engine, settle_seconds: float, *, now: datetime | None = None) -> list[dict]:
    """The flagged steps (`{"run", "step", "figures"}`) first flagged at least `settle_seconds`
    ago, within the last day, whose step has stored no rollout for `settle_seconds` (its rollup's
    newest ingest time)."""
    now = now or models.utcnow()
    edge = now - timedelta(seconds=settle_seconds)
    SA, SR = models.StepAlert.__table__, models.StepRollup.__table__
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(SA.c.run_id, SA.c.step, SA.c.figures, SR.c.stats)
            .join(SR, sa.and_(SR.c.run_id == SA.c.run_id, SR.c.step == SA.c.step))
            .where(SA.c.created_at <= edge, SA.c.created_at >= now - timedelta(days=1))
            .order_by(SA.c.run_id, SA.c.step)).all()
    out = []
    for r in rows:
        last = ((r.stats or {}).get("ingested") or {}).get("last")
        if last is None:
            continue
        at = datetime.fromisoformat(last)
        if (at if at.tzinfo else at.replace(tzinfo=UTC)) <= edge:
            out.append({"run": r.run_id, "step": r.step, "figures": r.figures})
    return out


def watch_once(engine, settings) -> int:
    """One pass: post each settled flagged step and alert each stale worker not alerted yet.
    Returns how many alerts were handed to the webhook's thread."""
    from app.store.step_alerts import payload as step_payload

    sent = 0
    for alert in settled_steps(engine, settings.alerts.settle_seconds):
        sent += deliver(engine, settings, STEP_KIND, f"{alert['run']}/{alert['step']}", step_payload(settings, alert))
    st = ingest_status(engine)
    base = (settings.alerts.base_url or "").rstrip("/")
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
            log.warning("alerts watcher: %s", exc)
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
        task = asyncio.create_task(_watch(a), name="rollscope-alerts-watcher")
        try:
            async with inner(a) as state:
                yield state
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.router.lifespan_context = lifespan

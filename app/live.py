"""Change events for live pages: one watcher per run (and one for the ingest status) per server
process, shared by every page that listens, each polling the database at most once per
`ROLLSCOPE_WEB__LIVE_POLL_SECONDS` (1 s) while anyone listens and stopping when the last one
leaves. A watcher compares a cheap fingerprint of what it watches (a run: its step rollups' counts,
means and newest ingest time, one small indexed read; the ingest status: the spool files' rows,
the newest rollout and quarantine entry) and fans out one event per change to every subscriber's
queue. The SSE routes are app.routes.events; what the events carry is documented in docs/views.md
("Live updates").
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import sqlalchemy as sa
from anyio import to_thread
from sqlmodel import Session

from app import charts
from app.db import models
from app.queries import runs as q_runs
from app.queries.steps import StepRange, step_stats

log = logging.getLogger("rollscope.live")
LIVE_SECONDS = 120  # as app.views.runs.LIVE_SECONDS: a run that stored a rollout this recently is "receiving"
QUEUE_MAX = 64  # events kept for a subscriber that reads slower than they come (older ones dropped)


@dataclass
class RunState:
    """A run's fingerprint: per step (None: rollouts without a step) its counts, means and newest
    ingest time; `version` is the run page's `d.version` (app.views.runs._version)."""

    steps: dict[int | None, tuple]
    version: str
    receiving: bool


def run_state(engine, run_id: str) -> RunState | None:
    """The fingerprint of `run_id` (None when there is no such run): one read of its step rollups
    with only the `ingested` section of their stats (app.queries.steps.step_stats)."""
    from app.views.runs import run_banner, run_version

    with Session(engine) as session:
        if q_runs.get_run(session=session, run_id=run_id) is None:
            return None
        stats = step_stats(session=session, run_id=run_id, include_unstepped=True, sections=("ingested",))
        # the ingest banner is part of the version: a worker that dies is an event (the banner shows)
        version = run_version(stats, run_banner(session, run_id, stats))
    steps = {s.step: (s.rollouts, s.mean_reward, s.mean_reward_no_errors, s.scored, s.excluded,
                      s.get("ingested", "last")) for s in stats}
    last = max((v[-1] or "" for v in steps.values()), default="")
    return RunState(steps=steps, version=version, receiving=bool(last) and _age(last) < LIVE_SECONDS)


def _age(iso_time: str) -> float:
    at = datetime.fromisoformat(iso_time)
    return (datetime.now(UTC) - (at if at.tzinfo else at.replace(tzinfo=UTC))).total_seconds()


def section_digests(engine, run_id: str, steps: list[int]) -> dict[int, dict[str, str]]:
    """Per step of `steps`, a digest of each section of its stats (what a chart reads): read only
    when the run changed, for the steps that changed."""
    if not steps:
        return {}
    with Session(engine) as session:
        stats = step_stats(session=session, run_id=run_id, steps=StepRange(min(steps), max(steps)))
    wanted = set(steps)
    return {s.step: {k: hashlib.blake2b(orjson.dumps(v, option=orjson.OPT_SORT_KEYS), digest_size=8).hexdigest()
                     for k, v in (s.stats or {}).items()}
            for s in stats if s.step in wanted}


def changed_charts(old: dict[int, dict[str, str]], new: dict[int, dict[str, str]]) -> list[str]:
    """The registered charts (app.charts.REGISTRY) whose sections differ between the `old` and
    `new` digests of the changed steps (a step not digested before counts as changed); the task
    heatmap, which reads the task rollups, whenever a step changed."""
    differ: set[str] = set()
    for step, digests in new.items():
        before = old.get(step)
        for k, v in digests.items():
            if before is None or before.get(k) != v:
                differ.add(k)
    out = []
    for c in charts.REGISTRY.values():
        if (c.needs_tasks and new) or any(s in differ for s in c.sections):
            out.append(c.id)
    return out


def ingest_state(engine) -> str:
    """A digest of what the ingest status shows that changes when something is ingested or
    rejected, or when ingestion stops: every spool file's row and its size on disk now (bytes
    appended while no worker reads them), the newest rollout (its primary key: the index's last
    entry), the quarantine's newest entry and last sighting, and each worker's state (live, stale,
    gone: not its beat time, which moves every beat). Not the counts of "the last minute", which
    change with the clock alone."""
    from app.queries.ingest_status import file_size, heartbeats, holder, worker_state

    S, R, Q = models.SpoolFile.__table__, models.Rollout.__table__, models.Quarantine.__table__
    with engine.connect() as conn:
        files = conn.execute(sa.select(S).order_by(S.c.pk)).all()
        newest = conn.execute(sa.select(sa.func.max(R.c.pk))).scalar()
        quarantine = conn.execute(sa.select(sa.func.count(), sa.func.max(Q.c.pk), sa.func.max(Q.c.last_seen))).one()
        workers = heartbeats(conn)
    now = models.utcnow()
    states = [(w.worker_id, worker_state(w, now)) for w in workers]
    sizes = [file_size(f, holder(f, workers, now)) for f in files if f.status == "active"]
    return hashlib.blake2b(repr((files, sizes, states, newest, tuple(quarantine))).encode(),
                           digest_size=12).hexdigest()


@dataclass
class Watcher:
    """Polls one thing for the subscribers of this process and puts each change into their queues."""

    probe: Callable[[], Any]  # blocking (runs in a thread); returns the new event or None
    interval: float
    subscribers: set[asyncio.Queue] = field(default_factory=set)
    task: asyncio.Task | None = None
    polls: int = 0

    async def run(self) -> None:
        while self.subscribers:
            try:
                event = await to_thread.run_sync(self.probe)
            except Exception as exc:  # noqa: BLE001 - a database hiccup must not end every listener's stream
                # one line while the database is away (a restart would otherwise log a traceback a second)
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                log.warning("live watcher: probe failed (%s: %s); trying again", type(exc).__name__, first)
                log.debug("live watcher: probe failed", exc_info=True)
                event = None
            self.polls += 1
            if event is not None:
                for q in list(self.subscribers):
                    if q.full():
                        q.get_nowait()
                    q.put_nowait(event)
            await asyncio.sleep(self.interval)


class RunProbe:
    """What a run's watcher asks each poll: the fingerprint, and on a change the event naming the
    new and changed steps and the charts whose data changed. The first poll only records."""

    def __init__(self, engine, run_id: str):
        self.engine, self.run_id = engine, run_id
        self.state: RunState | None = None
        self.digests: dict[int, dict[str, str]] = {}
        self.started = False

    def __call__(self) -> dict | None:
        new = run_state(self.engine, self.run_id)
        if not self.started:
            self.started, self.state = True, new
            return None
        old, self.state = self.state, new
        if new is None:
            return None if old is None else {"event": "gone", "run": self.run_id}
        if old is not None and old.version == new.version and old.receiving == new.receiving and old.steps == new.steps:
            return None
        before = old.steps if old else {}
        changed = [s for s, v in new.steps.items() if before.get(s) != v]
        added = [s for s in new.steps if s not in before]
        stepped = sorted(s for s in changed if s is not None)
        digests = section_digests(self.engine, self.run_id, stepped)
        charts_changed = changed_charts(self.digests, digests)
        self.digests.update(digests)
        return {"event": "run", "run": self.run_id, "version": new.version,
                "rollouts": sum(v[0] for v in new.steps.values()),
                "steps": sum(1 for s in new.steps if s is not None),
                "new_steps": sorted(added, key=lambda s: (s is None, s or 0)),
                "changed_steps": sorted(changed, key=lambda s: (s is None, s or 0)),
                "charts": charts_changed, "receiving": new.receiving}

    def seed(self, state: RunState | None) -> None:
        """Start from `state` (read when a listener connected) rather than from the first poll,
        so a change between that read and the first poll is an event."""
        if not self.started and state is not None:
            self.started, self.state = True, state


def catch_up(run_id: str, state: RunState) -> dict:
    """The event that brings a page at another version up to `state`: every step and chart named."""
    return {"event": "run", "run": run_id, "version": state.version,
            "rollouts": sum(v[0] for v in state.steps.values()),
            "steps": sum(1 for s in state.steps if s is not None), "new_steps": [],
            "changed_steps": sorted(s for s in state.steps if s is not None), "charts": list(charts.REGISTRY),
            "receiving": state.receiving, "catch_up": True}


class IngestProbe:
    """The ingest status's watcher: an event whenever `ingest_state` changes."""

    def __init__(self, engine):
        self.engine = engine
        self.digest: str | None = None
        self.started = False

    def __call__(self) -> dict | None:
        new = ingest_state(self.engine)
        old, self.digest = self.digest, new
        if not self.started:
            self.started = True
            return None
        return None if new == old else {"event": "ingest", "version": new}


class Hub:
    """Every watcher of one server process, keyed by what it watches (`("run", id)`, `("ingest",)`).
    A watcher starts with its first subscriber and ends after its last leaves."""

    def __init__(self, engine, interval: float):
        self.engine, self.interval = engine, interval
        self.watchers: dict[tuple, Watcher] = {}

    def _probe(self, key: tuple):
        return RunProbe(self.engine, key[1]) if key[0] == "run" else IngestProbe(self.engine)

    @asynccontextmanager
    async def subscribe(self, key: tuple, seen: RunState | None = None):
        """A queue of this key's change events while the context is open (the watcher polls
        until its last queue leaves). `seen`: the run's state the listener was told of (read as it
        connected); a watcher already past it puts a catch-up event first, a new one starts from it."""
        q: asyncio.Queue = asyncio.Queue(QUEUE_MAX)
        w = self.watchers.get(key)
        if w is None or w.task is None or w.task.done():
            w = self.watchers[key] = Watcher(probe=self._probe(key), interval=self.interval)
            if isinstance(w.probe, RunProbe):
                w.probe.seed(seen)
        elif seen is not None and isinstance(w.probe, RunProbe):
            now = w.probe.state
            if now is not None and now.version != seen.version:
                q.put_nowait(catch_up(key[1], now))
        w.subscribers.add(q)
        if w.task is None:
            w.task = asyncio.get_running_loop().create_task(w.run())
        try:
            yield q
        finally:
            w.subscribers.discard(q)
            if not w.subscribers and self.watchers.get(key) is w:
                del self.watchers[key]

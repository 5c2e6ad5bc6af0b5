"""Failure signatures per run, kept up to date as batches are ingested (docs/failures.md).

The texts are taken from each rollout outside the transaction (`mined_texts`, by
app.store.prepare); the batch hook `on_batch` (app.store.write.BATCH_HOOKS) mines them inside the
batch's transaction: per run of the batch, the run's stored templates (`failure_signature`) are
loaded into a Drain3 miner (ingest.signatures.Miner), each text is mined, new templates are
inserted, generalised ones updated, and one `rollout_signature` row is written per (rollout,
signature). On Postgres a transaction-scoped advisory lock per run serialises two writers mining
the same run (so template numbers never collide); SQLite serialises writers anyway.

Idempotent: only rollouts the batch inserted are mined (an unchanged rollout is not written
again), and a replaced rollout's rows went with its old version (ON DELETE CASCADE).
Never rejects a rollout: taking the texts and mining them are guarded; anything that fails
inside (a bug, a text no column takes) is logged and rolled back to a savepoint, and the batch's
rollouts are kept without signatures. A lost database is raised as for any write.
"""
from __future__ import annotations

import logging
from collections import defaultdict

import sqlalchemy as sa

from app.db import models
from app.db.engine import bulk_insert
from app.store.outage import lost_a_race, not_the_data
from ingest.schema import Rollout
from ingest.signatures import OTHER, OTHER_TEMPLATE, Miner, signature_texts

log = logging.getLogger(__name__)

FS, RS = models.FailureSignature.__table__, models.RolloutSignature.__table__
LOCK_CLASS = 0x73696773  # pg_advisory_xact_lock(class, hashtext(run)): "sigs"


def mined_texts(r: Rollout) -> list[tuple[str, str]]:
    """(kind, text) of rollout `r` to mine (ingest.signatures.signature_texts); [] when taking
    them fails (logged): a rollout is never rejected for its signatures."""
    try:
        return signature_texts(r)
    except Exception:  # noqa: BLE001 - signatures must never cost a rollout
        log.exception("failure signatures: texts of rollout %r not taken", getattr(r, "id", None))
        return []


def on_batch(conn: sa.Connection, written) -> None:
    """The batch hook: mine the texts of the rollouts the batch inserted (`written.signatures`,
    rollout_pk → [(kind, text)]), run by run, in a savepoint; a failure other than the
    database's own is logged and leaves the batch without signatures."""
    texts = getattr(written, "signatures", None) or {}
    if not texts:
        return
    by_run: dict[str, list[dict]] = defaultdict(list)
    for row in written.inserted:
        if row["pk"] in texts:
            by_run[row["run_id"]].append(row)
    try:
        with conn.begin_nested():
            for run_id in sorted(by_run):
                mine_run(conn, run_id, [(r["pk"], r["step"], texts[r["pk"]]) for r in by_run[run_id]])
    except Exception as exc:  # noqa: BLE001 - signatures must never cost a rollout
        if not_the_data(exc) or lost_a_race(exc):
            raise
        log.exception("failure signatures: batch of run(s) %s not mined", ", ".join(sorted(by_run)))


def _lock(conn: sa.Connection, run_id: str) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:c, hashtext(:r))"), {"c": LOCK_CLASS, "r": run_id})


def mine_run(conn: sa.Connection, run_id: str, rollouts: list[tuple[int, int | None, list[tuple[str, str]]]]) -> int:
    """Mine the texts of `rollouts` ((rollout_pk, step, [(kind, text)])) of run `run_id` against
    its stored templates, in the caller's transaction; returns the rollout_signature rows written.
    Statements: the lock (Postgres), one read of the run's templates, one INSERT of new ones, one
    executemany UPDATE of generalised ones, one bulk insert of rollout_signature rows."""
    _lock(conn, run_id)
    stored = {n: (pk, t) for pk, n, t in conn.execute(
        sa.select(FS.c.pk, FS.c.number, FS.c.template).where(FS.c.run_id == run_id))}
    miner = Miner((n, t) for n, (_, t) in stored.items())
    templates: dict[int, str] = {}  # number → template as mined now (new or changed)
    found: list[tuple[int, int | None, str, int]] = []  # (rollout_pk, step, kind, number)
    for pk, step, items in rollouts:
        seen: set[int] = set()
        for kind, text in items:
            try:
                m = miner.mine(text)
            except Exception:  # noqa: BLE001 - one odd text must not cost the others
                log.exception("failure signatures: a text of rollout pk %s not mined", pk)
                continue
            if m is None:
                continue
            if m.new or m.changed or (m.number not in stored and m.number not in templates):
                templates[m.number] = OTHER_TEMPLATE if m.number == OTHER else m.template
            if m.number not in seen:
                seen.add(m.number)
                found.append((pk, step, kind, m.number))
    new = [{"run_id": run_id, "number": n, "template": t, "created_at": models.utcnow()}
           for n, t in sorted(templates.items()) if n not in stored]
    if new:
        for r in conn.execute(FS.insert().returning(FS.c.pk, FS.c.number, FS.c.template), new):
            stored[r.number] = (r.pk, r.template)
    changed = [{"sig_pk": stored[n][0], "sig_template": t} for n, t in templates.items() if stored[n][1] != t]
    if changed:
        conn.execute(FS.update().where(FS.c.pk == sa.bindparam("sig_pk"))
                     .values(template=sa.bindparam("sig_template")), changed)
    rows = [(pk, stored[n][0], run_id, step, kind) for pk, step, kind, n in found]
    bulk_insert(conn, RS, ("rollout_pk", "signature_pk", "run_id", "step", "kind"), rows)
    return len(rows)


def rebuild(conn: sa.Connection, run_id: str | None = None, *, chunk: int = 200) -> int:
    """Mine the failure signatures of every stored rollout again (of one run, or all), in the
    caller's transaction: the run's templates and rollout rows are dropped, then its rollouts are
    read back (app/store/load.py) and mined in row order, `chunk` at a time, as ingest mined them
    batch by batch; returns the rollout_signature rows written. For databases holding rollouts
    stored before signatures existed (`rollscope rebuild-analytics`); on rollouts ingest already
    mined it gives the same templates and rows (same texts, same order)."""
    from sqlmodel import Session

    from app.store.load import load

    R = models.Rollout.__table__
    q = sa.select(R.c.run_id).distinct().order_by(R.c.run_id)
    runs = [run_id] if run_id is not None else list(conn.execute(q).scalars())
    total = 0
    for run in runs:
        conn.execute(RS.delete().where(RS.c.run_id == run))
        conn.execute(FS.delete().where(FS.c.run_id == run))
        stored = conn.execute(sa.select(R.c.pk, R.c.step).where(R.c.run_id == run).order_by(R.c.pk)).all()
        session = Session(bind=conn)
        for i in range(0, len(stored), chunk):
            part = [(pk, step, mined_texts(load(session, pk))) for pk, step in stored[i:i + chunk]]
            total += mine_run(conn, run, [p for p in part if p[2]])
    return total

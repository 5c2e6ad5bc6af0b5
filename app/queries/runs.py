"""Runs: one run, every run, a run's tokenizer, the step row shape, deleting a run. (The runs list
and the per-step numbers come from the rollups: app.queries.steps.)"""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Run
from app.queries.common import R


def get_run(*, session: Session, run_id: str) -> Run | None:
    return session.get(Run, run_id)


def hold_run(*, session: Session, run_id: str, exclusive: bool = False) -> bool:
    """Lock the run's row until the transaction ends; False if there is no such run. Writes of
    the run (labels, notes) take `FOR KEY SHARE` and do not wait for one another (nor for an
    ingest updating the row); deleting the run takes `exclusive` (`FOR UPDATE`), so the two wait
    for each other on Postgres. On SQLite, whose write transactions hold the database's write
    lock (`BEGIN IMMEDIATE`), the lock clause is left out and this is a plain lookup."""
    lock = {"read": False} if exclusive else {"read": True, "key_share": True}
    return session.execute(sa.select(Run.id).where(Run.id == run_id).with_for_update(**lock)).first() is not None


def list_runs(*, session: Session) -> list[Run]:
    """Every run, oldest first (then by id)."""
    return list(session.execute(sa.select(Run).order_by(Run.created_at, Run.id)).scalars())


def run_ids(*, session: Session) -> list[str]:
    """Every run id, in id order."""
    return list(session.execute(sa.select(Run.id).order_by(Run.id)).scalars())


def get_tokenizer(*, session: Session, sha256: str | None):
    """The stored tokenizer with this hash, or None."""
    from app.db.models import Tokenizer

    return session.get(Tokenizer, sha256) if sha256 else None


@dataclass
class StepRow:
    step: int | None
    rollouts: int
    endings: dict[str, int]
    mean_reward: float | None  # errors scored 0
    mean_reward_no_errors: float | None  # errored rollouts dropped
    scored: int  # rollouts with a finite reward (or an error, scored 0)
    excluded: int  # missing / non-finite rewards

    def rates(self) -> dict[str, float]:
        return {e: (n / self.rollouts if self.rollouts else 0.0) for e, n in self.endings.items()}


# Where a rollout came from a live source, by its stored source file: the worker's spool (a
# spool_file row's `name`), `POST /api/v1/ingest` (`http/<sha256>.jsonl`, app.api.v1.ingest)
# or the OTLP receiver (`/v1/traces`, app.receivers.otlp). A one-off `rollscope ingest` names
# the files it was given, none of these.
HTTP_SOURCE_PREFIX, OTLP_SOURCE = "http/", "/v1/traces"


def received_live_within(*, session, run_id: str, seconds: float) -> bool:
    """Whether the run is receiving: it stored a rollout in the last `seconds` from a live source
    (the worker's spool, HTTP ingest or OTLP; see above). A CLI batch that has finished is not
    receiving, however recent."""
    from datetime import timedelta

    from app.db import models

    R = models.Rollout.__table__
    S = models.SpoolFile.__table__
    since = models.utcnow() - timedelta(seconds=seconds)
    live_source = sa.or_(R.c.source_file.startswith(HTTP_SOURCE_PREFIX, autoescape=True),
                         R.c.source_file == OTLP_SOURCE,
                         R.c.source_file.in_(sa.select(S.c.name)))
    return session.execute(sa.select(R.c.pk).where(R.c.run_id == run_id, R.c.ingested_at >= since, live_source)
                           .limit(1)).first() is not None


def delete_run(*, session: Session, run_id: str) -> int:
    """Delete a run and everything of it: rollouts, their details, nodes and reward components, and the rows of
    every table with a `run_id` column (group findings, search documents, rollups of every kind,
    labels, notes: found from the schema, so a table added later is not forgotten). Foreign keys
    cascade where they exist; rows are deleted explicitly so every table agrees. Quarantined
    records stay (they belong to their files). Returns the number of rollouts removed; the
    caller commits."""
    from sqlmodel import SQLModel

    from app.db.models import Finding, Node, RewardComponent, RolloutDetail

    run_table = Run.__table__
    # Postgres: wait for a batch writing into the run to commit, and hold off the next until this
    # commits (it makes the run again, app/store/write.py `_ensure_runs`); without the lock a batch
    # committed between the rollouts' delete and the run's fails this with a foreign-key violation
    session.execute(sa.select(run_table.c.id).where(run_table.c.id == run_id).with_for_update())
    for table in reversed(SQLModel.metadata.sorted_tables):
        if table is not R and "run_id" in table.c:
            session.execute(table.delete().where(table.c.run_id == run_id))
    pks = sa.select(R.c.pk).where(R.c.run_id == run_id).scalar_subquery()
    for table in (Finding.__table__, Node.__table__, RewardComponent.__table__):
        session.execute(table.delete().where(table.c.rollout_pk.in_(pks)))
    D = RolloutDetail.__table__
    session.execute(D.delete().where(D.c.rollout_pk.in_(pks)))
    n = session.execute(R.delete().where(R.c.run_id == run_id)).rowcount
    session.execute(run_table.delete().where(run_table.c.id == run_id))
    return n

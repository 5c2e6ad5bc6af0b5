"""Runs: the runs list with rollout counts, step range, mean rewards and ending counts; one run;
per-step rollups."""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Run
from app.queries.common import ENDINGS, R, reward_rollups


def reward_means(*, session: Session, run_ids: list[str] | None = None) -> dict[str, dict]:
    """Per run: `rollouts`, mean reward with errors scored 0 and with errors dropped, `scored`
    and `excluded` (the run page's and the runs list's figures, one computation)."""
    where = [R.c.run_id.in_(run_ids)] if run_ids is not None else []
    return {key[0]: {"rollouts": d["n"], "mean_reward": d["mean_reward"],
                     "mean_reward_no_errors": d["mean_reward_no_errors"], "scored": d["scored"],
                     "excluded": d["excluded"]}
            for key, d in reward_rollups(session, [R.c.run_id], *where).items()}


def list_runs(*, session: Session) -> list[dict]:
    """Every run with rollout counts, step range, mean rewards and ending counts."""
    runs = {r.id: r for r in session.exec(sa.select(Run).order_by(Run.created_at, Run.id)).scalars()}
    stats = session.execute(
        sa.select(R.c.run_id, sa.func.count(), sa.func.min(R.c.step), sa.func.max(R.c.step),
                  sa.func.count(sa.distinct(R.c.step)))
        .group_by(R.c.run_id)).all()
    by_run = {s[0]: s for s in stats}
    means = reward_means(session=session)
    endings = session.execute(sa.select(R.c.run_id, R.c.ending, sa.func.count()).group_by(R.c.run_id, R.c.ending)).all()
    out = []
    for run_id, run in runs.items():
        s = by_run.get(run_id)
        m = means.get(run_id, {})
        counts = {e: 0 for e in ENDINGS}
        for rid, ending, n in endings:
            if rid == run_id:
                counts[ending] = n
        out.append({
            "id": run.id, "name": run.name, "type": run.type,
            "rollouts": s[1] if s else 0,
            "first_step": s[2] if s else None, "last_step": s[3] if s else None,
            "steps": s[4] if s else 0,
            "mean_reward": m.get("mean_reward"),  # errors scored 0
            "mean_reward_no_errors": m.get("mean_reward_no_errors"),  # errored rollouts dropped
            "endings": counts,
            "tokenizer": run.tokenizer_sha256,
            "created_at": run.created_at,
        })
    return out


def get_run(*, session: Session, run_id: str) -> Run | None:
    return session.get(Run, run_id)


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


def run_steps(*, session: Session, run_id: str) -> tuple[list[StepRow], StepRow]:
    """Per training step, and over the whole run (`step` None): counts per ending and mean reward
    with and without errored rollouts, in one pass over the run's rollouts.

    Every attempt counts: a rollout that errored and was retried is one error and one more
    rollout at that step (the error rate shows what the infrastructure did). Group baselines,
    in contrast, use only the latest attempt of each rollout (what the trainer used).

    "With errors" scores an errored rollout 0 (its stored reward is ignored); "without" drops
    errored rollouts. Rollouts with a missing or non-finite reward are excluded from both means
    and counted in `excluded`.
    """
    rollups = reward_rollups(session, [R.c.step], R.c.run_id == run_id, total=True)
    total = rollups.pop(())

    def row(step, d) -> StepRow:
        return StepRow(step=step, rollouts=d["n"], endings=d["endings"], mean_reward=d["mean_reward"],
                       mean_reward_no_errors=d["mean_reward_no_errors"], scored=d["scored"], excluded=d["excluded"])

    steps = [row(step, d) for (step,), d in sorted(rollups.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0))]
    return steps, row(None, total)


def count_retries(*, session: Session, run_id: str) -> int:
    """Rollouts of the run that are a retry (attempt > 0)."""
    return session.execute(sa.select(sa.func.count()).where(R.c.run_id == run_id, R.c.attempt > 0)).scalar_one()


def run_version(*, session, run_id: str) -> str:
    """A token that changes whenever a rollout of the run is stored or replaced: its count and
    its highest pk (a replacement gets a new pk)."""
    n, top = session.execute(sa.select(sa.func.count(), sa.func.max(R.c.pk)).where(R.c.run_id == run_id)).one()
    return f"{n}-{top or 0}"


# Where a rollout came from a live source, by its stored source file: the worker's spool (a
# spool_file row's `name`), `POST /api/v1/ingest` (`http/<sha256>.jsonl`, app.routes.ingest_http)
# or the OTLP receiver (`/v1/traces`, app.routes.receive). A one-off `rollscope ingest` names
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
    """Delete a run and everything of it: rollouts, their details, nodes and findings (the
    foreign keys cascade, and are deleted explicitly too so SQLite without cascades agrees).
    Returns the number of rollouts removed; the caller commits."""
    from app.db.models import Finding, Node, RolloutDetail
    from app.queries.annotations import delete_run_annotations

    pks = sa.select(R.c.pk).where(R.c.run_id == run_id).scalar_subquery()
    for table in (Finding.__table__, Node.__table__):
        session.execute(table.delete().where(table.c.rollout_pk.in_(pks)))
    D = RolloutDetail.__table__
    session.execute(D.delete().where(D.c.rollout_pk.in_(pks)))
    n = session.execute(R.delete().where(R.c.run_id == run_id)).rowcount
    session.execute(Run.__table__.delete().where(Run.__table__.c.id == run_id))
    delete_run_annotations(session=session, run_id=run_id)
    return n

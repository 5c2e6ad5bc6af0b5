"""Reads of a run's failure signatures (app/store/signatures.py writes them; docs/failures.md).

A rollout counts as failed by ingest.signatures.failed, restated here in SQL (`FAILED`) on the
summary row: ending error, truncated or length_cut, or a stored (finite) reward ≤ 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from ingest.signatures import FAILED_ENDINGS

R = models.Rollout.__table__
FS, RS = models.FailureSignature.__table__, models.RolloutSignature.__table__
SR = models.StepRollup.__table__
EXAMPLES = 5  # example rollouts per signature
FAILED = sa.or_(R.c.ending.in_(FAILED_ENDINGS), sa.and_(R.c.reward.is_not(None), R.c.reward <= 0))


@dataclass
class SignatureCounts:
    """One signature of a run: `number` (its id), `template`, `failed_by_step` (step → failed
    rollouts carrying it; a rollout without a step under None), `rollouts` (every rollout
    carrying it, failed or not)."""

    pk: int
    number: int
    template: str
    failed_by_step: dict[int | None, int] = field(default_factory=dict)
    rollouts: int = 0

    @property
    def count(self) -> int:
        return sum(self.failed_by_step.values())


def has_signature(run_id: str, number: int):
    """The rollouts list's `signature=<id>` filter: rollouts carrying signature `number` of the run
    (a correlated EXISTS on rollout_signature's primary key)."""
    sig = sa.select(FS.c.pk).where(FS.c.run_id == run_id, FS.c.number == number).scalar_subquery()
    return sa.exists(sa.select(RS.c.rollout_pk).where(RS.c.rollout_pk == R.c.pk, RS.c.signature_pk == sig))


def template_of(*, session: Session, run_id: str, number: int) -> str | None:
    """Signature `number`'s template in the run (None when the run has no such signature)."""
    return session.execute(sa.select(FS.c.template).where(FS.c.run_id == run_id, FS.c.number == number)).scalar()


def signature_counts(*, session: Session, run_id: str) -> list[SignatureCounts]:
    """Every signature of the run that some stored rollout carries, with its counts per step: one
    GROUP BY (signature, step) over rollout_signature joined to the rollouts' ending and reward."""
    failed = sa.func.sum(sa.case((FAILED, 1), else_=0))
    q = (sa.select(FS.c.pk, FS.c.number, FS.c.template, RS.c.step, failed.label("failed"),
                   sa.func.count().label("n"))
         .select_from(FS.join(RS, RS.c.signature_pk == FS.c.pk).join(R, R.c.pk == RS.c.rollout_pk))
         .where(FS.c.run_id == run_id, RS.c.run_id == run_id)
         .group_by(FS.c.pk, FS.c.number, FS.c.template, RS.c.step))
    out: dict[int, SignatureCounts] = {}
    for row in session.execute(q):
        s = out.setdefault(row.pk, SignatureCounts(row.pk, row.number, row.template))
        s.rollouts += row.n
        if row.failed:
            s.failed_by_step[row.step] = int(row.failed)
    return list(out.values())


def failed_rollouts(*, session: Session, run_id: str) -> tuple[int, int]:
    """(failed rollouts, rollouts) of the run."""
    row = session.execute(sa.select(sa.func.sum(sa.case((FAILED, 1), else_=0)), sa.func.count())
                          .where(R.c.run_id == run_id)).one()
    return int(row[0] or 0), int(row[1] or 0)


def run_steps(*, session: Session, run_id: str) -> list[int]:
    """The run's training steps, in order (from the step rollups)."""
    return [s for (s,) in session.execute(sa.select(SR.c.step).where(SR.c.run_id == run_id, SR.c.step.is_not(None))
                                          .order_by(SR.c.step))]


def examples(*, session: Session, run_id: str, limit: int = EXAMPLES) -> dict[int, list[dict]]:
    """signature pk → up to `limit` rollouts carrying it: failed ones first, the latest step
    first; each {rollout_id, attempt, step, ending, kind}. One query (ROW_NUMBER per signature)."""
    rank = sa.func.row_number().over(
        partition_by=RS.c.signature_pk,
        order_by=(sa.case((FAILED, 0), else_=1), RS.c.step.desc().nulls_last(), R.c.pk)).label("rank")
    inner = (sa.select(RS.c.signature_pk, R.c.rollout_id, R.c.attempt, R.c.step, R.c.ending, RS.c.kind, rank)
             .select_from(RS.join(R, R.c.pk == RS.c.rollout_pk)).where(RS.c.run_id == run_id).subquery())
    out: dict[int, list[dict]] = {}
    for row in session.execute(sa.select(inner).where(inner.c.rank <= limit)
                               .order_by(inner.c.signature_pk, inner.c.rank)):
        out.setdefault(row.signature_pk, []).append({"rollout_id": row.rollout_id, "attempt": row.attempt,
                                                     "step": row.step, "ending": row.ending, "kind": row.kind})
    return out

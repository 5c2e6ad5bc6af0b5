"""Findings: the stored results of the trace checks, per rollout and per run."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Finding
from app.queries.common import R

# Finding kinds the trace checks produce (ingest/checks.py); the rollouts filter offers these.
FINDING_KINDS = ["logprob_len_mismatch", "suspected_logprob_padding", "invalid_logprob", "token_drift", "duplicate_tool_call_id",
                 "unanswered_tool_call", "empty_response", "non_finite_reward", "bytes_lost_upstream"]


def get_findings(*, session: Session, rollout_pk: int) -> list[Finding]:
    return list(session.exec(sa.select(Finding).where(Finding.rollout_pk == rollout_pk).order_by(Finding.pk)).scalars())


def run_finding_kinds(*, session: Session, run_id: str) -> list[str]:
    """The kinds of finding present in a run."""
    F = Finding.__table__
    return sorted(session.execute(sa.select(F.c.kind).distinct().join(R, R.c.pk == F.c.rollout_pk)
                                  .where(R.c.run_id == run_id)).scalars())


def list_run_findings(*, session: Session, run_id: str, kind: str | None = None, severity: str | None = None,
                      after: int | None = None, limit: int) -> tuple[list, int | None]:
    """One page of a run's findings (with the rollout id and attempt each belongs to), by
    finding id, and the `after` cursor of the next page (keyset on the finding's primary key)."""
    F = Finding.__table__
    q = (sa.select(F.c.pk, F.c.kind, F.c.severity, F.c.node_idx, F.c.position, F.c.message, F.c.detail,
                   R.c.rollout_id, R.c.attempt, R.c.step)
         .join(R, R.c.pk == F.c.rollout_pk).where(R.c.run_id == run_id))
    if kind is not None:
        q = q.where(F.c.kind == kind)
    if severity is not None:
        q = q.where(F.c.severity == severity)
    if after is not None:
        q = q.where(F.c.pk > after)
    rows = session.execute(q.order_by(F.c.pk).limit(limit + 1)).all()
    return rows[:limit], (rows[limit - 1].pk if len(rows) > limit else None)

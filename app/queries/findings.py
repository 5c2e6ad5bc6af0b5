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

"""Findings: the stored results of the trace checks, per rollout and per run."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Finding
from app.queries.common import R
from ingest import checks

# Finding kinds the trace checks produce (the ingest/checks registry); the rollouts filter offers these.
FINDING_KINDS = checks.kinds()
F = Finding.__table__


def has_finding(kind: str):
    """A WHERE clause on `rollout` rows: the rollout has a finding of `kind` (a rollout-scope
    finding of its own, or, for a group-scope kind, a finding of its group). EXISTS on the
    indexed (kind, rollout_pk) and (run_id, group_id) columns of `finding`; skipped outcomes are
    not findings."""
    found = sa.and_(F.c.kind == kind, F.c.severity != checks.SKIPPED)
    check = checks.REGISTRY.get(kind)
    if check is not None and check.scope == "group":
        return sa.exists().where(found, F.c.rollout_pk.is_(None), F.c.run_id == R.c.run_id,
                                 F.c.group_id == R.c.group_id)
    return sa.exists().where(found, F.c.rollout_pk == R.c.pk)


def get_findings(*, session: Session, rollout_pk: int) -> list[Finding]:
    """A rollout's stored findings and skipped outcomes (severity "skipped"), in check order."""
    return list(session.exec(sa.select(Finding).where(Finding.rollout_pk == rollout_pk).order_by(Finding.pk)).scalars())


def run_finding_kinds(*, session: Session, run_id: str) -> list[str]:
    """The kinds of finding present in a run."""
    own = sa.select(F.c.kind).join(R, R.c.pk == F.c.rollout_pk).where(R.c.run_id == run_id,
                                                                          F.c.severity != checks.SKIPPED)
    groups = sa.select(F.c.kind).where(F.c.run_id == run_id, F.c.rollout_pk.is_(None), F.c.severity != checks.SKIPPED)
    return sorted(set(session.execute(sa.union(own, groups)).scalars()))


def group_findings(*, session: Session, run_id: str, group_id: str) -> list[Finding]:
    """A group's stored group-scope findings and skipped outcomes, in check order."""
    return list(session.exec(sa.select(Finding).where(
        Finding.run_id == run_id, Finding.group_id == group_id, Finding.rollout_pk.is_(None)).order_by(Finding.pk)).scalars())

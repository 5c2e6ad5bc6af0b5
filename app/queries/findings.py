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
        Finding.run_id == run_id, Finding.group_id == group_id, Finding.rollout_pk.is_(None)).order_by(Finding.pk)
    ).scalars())


def group_kinds(*, session: Session, run_id: str, group_ids: list[str]) -> dict[str, list[str]]:
    """group id → kinds of the group-scope findings stored for it (skipped outcomes excluded)."""
    out: dict[str, set[str]] = {}
    for chunk in range(0, len(group_ids), 900):
        part = group_ids[chunk:chunk + 900]
        for gid, kind in session.execute(sa.select(F.c.group_id, F.c.kind).distinct().where(
                F.c.run_id == run_id, F.c.rollout_pk.is_(None), F.c.severity != checks.SKIPPED,
                F.c.group_id.in_(part))):
            out.setdefault(gid, set()).add(kind)
    return {g: sorted(k) for g, k in out.items()}


def list_run_findings(*, session: Session, run_id: str, kind: str | None = None, severity: str | None = None,
                      after: int | None = None, limit: int) -> tuple[list, int | None]:
    """One page of a run's findings, rollout-scope (with the rollout id, attempt and step) and
    group-scope (with the group id), by finding id, and the `after` cursor of the next page
    (keyset on the finding's primary key). Skipped outcomes are not findings."""
    q = (sa.select(F.c.pk, F.c.kind, F.c.severity, F.c.node_idx, F.c.position, F.c.message, F.c.detail,
                   R.c.rollout_id, R.c.attempt, R.c.step,
                   sa.func.coalesce(F.c.group_id, R.c.group_id).label("group_id"))
         .select_from(F.outerjoin(R, R.c.pk == F.c.rollout_pk))
         .where(sa.or_(R.c.run_id == run_id, sa.and_(F.c.rollout_pk.is_(None), F.c.run_id == run_id)),
                F.c.severity != checks.SKIPPED))
    if kind is not None:
        q = q.where(F.c.kind == kind)
    if severity is not None:
        q = q.where(F.c.severity == severity)
    if after is not None:
        q = q.where(F.c.pk > after)
    rows = session.execute(q.order_by(F.c.pk).limit(limit + 1)).all()
    return rows[:limit], (rows[limit - 1].pk if len(rows) > limit else None)

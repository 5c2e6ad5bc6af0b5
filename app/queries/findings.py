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


def finding_counts(*, session: Session, run_id: str) -> list:
    """Per (step, kind, skipped): the number of distinct rollouts of the run with a finding of
    that kind (or, skipped=True, on which the check could not decide). A group-scope finding
    counts every rollout of its group. Two statements, grouped in the database."""
    skipped = (F.c.severity == checks.SKIPPED).label("skipped")
    own = (sa.select(R.c.step, F.c.kind, skipped, sa.func.count(sa.distinct(R.c.pk)))
           .join(R, R.c.pk == F.c.rollout_pk).where(R.c.run_id == run_id)
           .group_by(R.c.step, F.c.kind, skipped))
    grouped = (sa.select(R.c.step, F.c.kind, skipped, sa.func.count(sa.distinct(R.c.pk)))
               .join(R, sa.and_(R.c.run_id == F.c.run_id, R.c.group_id == F.c.group_id))
               .where(F.c.run_id == run_id, F.c.rollout_pk.is_(None))
               .group_by(R.c.step, F.c.kind, skipped))
    return session.execute(own).all() + session.execute(grouped).all()


def skip_reasons(*, session: Session, run_id: str, per_kind: int = 3) -> dict[str, list[tuple[str, int]]]:
    """kind → the most frequent reasons its check gave for not deciding in this run, with how
    many rollouts (rollout scope) or groups (group scope) gave each."""
    own = (sa.select(F.c.kind, F.c.message, sa.func.count()).join(R, R.c.pk == F.c.rollout_pk)
           .where(R.c.run_id == run_id, F.c.severity == checks.SKIPPED).group_by(F.c.kind, F.c.message))
    grouped = (sa.select(F.c.kind, F.c.message, sa.func.count())
               .where(F.c.run_id == run_id, F.c.rollout_pk.is_(None), F.c.severity == checks.SKIPPED)
               .group_by(F.c.kind, F.c.message))
    out: dict[str, list[tuple[str, int]]] = {}
    for kind, message, n in sorted(session.execute(sa.union_all(own, grouped)).all(), key=lambda x: (x[0], -x[2], x[1])):
        if len(out.setdefault(kind, [])) < per_kind:
            out[kind].append((message, n))
    return out


def group_kinds(*, session: Session, run_id: str, group_ids: list[str]) -> dict[str, list[str]]:
    """group id → kinds of the group-scope findings stored for it (skipped outcomes excluded)."""
    out: dict[str, set[str]] = {}
    for chunk in range(0, len(group_ids), 900):
        part = group_ids[chunk:chunk + 900]
        for gid, kind in session.execute(sa.select(F.c.group_id, F.c.kind).distinct().where(
                F.c.run_id == run_id, F.c.rollout_pk.is_(None), F.c.severity != checks.SKIPPED, F.c.group_id.in_(part))):
            out.setdefault(gid, set()).add(kind)
    return {g: sorted(k) for g, k in out.items()}

"""Rollouts: the filtered, keyset-paged list of summary rows; one rollout's row, its attempts and
its envelope."""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import RolloutDetail
from app.queries.annotations import labelled
from app.queries.common import INT32_MAX, INT32_MIN, R, SUMMARY_COLUMNS, attempt_columns
from app.queries.findings import has_finding


@dataclass
class RolloutFilters:
    """Query parameters of the rollouts list. `reward_min`/`reward_max` are inclusive;
    `staleness`: policy versions behind (step − the oldest policy version that sampled it), exact."""

    step: int | None = None
    ending: str | None = None
    group: str | None = None
    task: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    flag: str | None = None
    label: str | None = None
    staleness: int | None = None

    def as_query(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


def _sort_key():
    return (sa.func.coalesce(R.c.step, -1), R.c.pk)


def encode_cursor(row) -> str:
    return f"{row.step if row.step is not None else -1}:{row.pk}"


def decode_cursor(cursor: str) -> tuple[int, int]:
    """'step:pk' → (step, pk). Raises ValueError on anything else, or out of the int32 range."""
    a, _, b = cursor.partition(":")
    step, pk = int(a), int(b)
    if not (INT32_MIN <= step <= INT32_MAX and 0 <= pk <= INT32_MAX):
        raise ValueError(cursor)
    return step, pk


def _filtered(q, run_id: str, filters: RolloutFilters):
    """`q` restricted to a run's rollouts that pass the list's filters."""
    q = q.where(R.c.run_id == run_id)
    f = filters
    if f.step is not None:
        q = q.where(R.c.step == f.step)
    if f.ending:
        q = q.where(R.c.ending == f.ending)
    if f.group:
        q = q.where(R.c.group_id == f.group)
    if f.task:
        q = q.where(R.c.task_key == f.task)
    if f.reward_min is not None:
        q = q.where(R.c.reward >= f.reward_min)
    if f.reward_max is not None:
        q = q.where(R.c.reward <= f.reward_max)
    if f.staleness is not None:
        q = q.where(R.c.staleness == f.staleness)
    if f.flag:
        q = q.where(has_finding(f.flag))
    if f.label:
        q = q.where(labelled(R.c.run_id, R.c.rollout_id, f.label))
    return q


def list_rollouts(*, session: Session, run_id: str, filters: RolloutFilters, after: str | None = None,
                  limit: int) -> tuple[list, str | None]:
    """One page of rollout summaries, ordered by (step, ingest order), and the next cursor.

    Keyset pagination: `after` is the cursor of the last row of the previous page.
    """
    q = _filtered(sa.select(*SUMMARY_COLUMNS, *attempt_columns()), run_id, filters)
    if after:
        s, pk = decode_cursor(after)
        q = q.where(sa.tuple_(*_sort_key()) > sa.tuple_(sa.literal(s), sa.literal(pk)))
    rows = session.execute(q.order_by(*_sort_key()).limit(limit + 1)).all()
    nxt = encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], nxt


def get_rollout(*, session: Session, run_id: str, rollout_id: str, attempt: int | None = None):
    """The summary row of a rollout (latest attempt unless `attempt` is given), or None."""
    q = sa.select(R).where(R.c.run_id == run_id, R.c.rollout_id == rollout_id)
    if attempt is not None:
        q = q.where(R.c.attempt == attempt)
    return session.execute(q.order_by(R.c.attempt.desc()).limit(1)).first()


def rollout_attempts(*, session: Session, run_id: str, rollout_id: str) -> list:
    """Every attempt of a rollout id in a run (summary columns of each), by attempt."""
    cols = [R.c.attempt, R.c.ending, R.c.ending_detail, R.c.reward, R.c.reward_status, R.c.step]
    return session.execute(sa.select(*cols).where(R.c.run_id == run_id, R.c.rollout_id == rollout_id)
                           .order_by(R.c.attempt)).all()


def get_envelope(*, session: Session, rollout_pk: int) -> dict:
    """The stored envelope of a rollout (calls, rewards, errors, timing, task, extra); {} if none."""
    d = session.get(RolloutDetail, rollout_pk)
    return (d.envelope or {}) if d else {}

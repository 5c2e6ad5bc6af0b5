"""Reads. Keyword-only, the session passed explicitly. List queries select summary columns only;
message bodies and token arrays are read one rollout (and one page of nodes) at a time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Finding, Node, Quarantine, Rollout, RolloutDetail, Run, Tokenizer
from ingest import checks
from ingest.schema import Ending

ENDINGS = [e.value for e in Ending]
# Finding kinds the trace checks produce (the ingest/checks registry); the rollouts filter offers these.
FINDING_KINDS = checks.kinds()
# INTEGER columns are int32 on Postgres: a query value outside this range is refused (422), not sent.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
R = Rollout.__table__
N = Node.__table__
F = Finding.__table__

# Columns a list row needs: nothing that grows with the trace.
SUMMARY_COLUMNS = [c for c in R.c if c.name not in ("content_hash",)]


def _attempt_columns() -> list:
    """Per row: how many attempts its rollout id has in its run, and the latest attempt number
    (correlated lookups on the (run_id, rollout_id, attempt) unique index)."""
    A = R.alias("other_attempt")
    same = (A.c.run_id == R.c.run_id, A.c.rollout_id == R.c.rollout_id)
    return [sa.select(sa.func.count()).select_from(A).where(*same).scalar_subquery().label("n_attempts"),
            sa.select(sa.func.max(A.c.attempt)).where(*same).scalar_subquery().label("latest_attempt")]


# SQLite sums REAL and would overflow to inf on huge finite rewards (1e308 + 1e308): there the
# sum is taken scaled down by 2**-64 (exact for normal floats). Postgres raises on float8
# overflow and underflow alike, so there the sum is taken in NUMERIC, which is exact.
_SQLITE_SCALE = 2.0 ** -64


def _reward_columns(session: Session) -> tuple[list, float]:
    """Reward sums and counts, errors scored 0 (s0, c0) and errors dropped (s1, c1), and the
    scale the sums carry.

    An errored rollout's stored reward is ignored; missing (NULL) rewards count in neither."""
    is_err = R.c.ending == "error"
    if session.get_bind().dialect.name == "postgresql":
        reward, scale = sa.cast(R.c.reward, sa.Numeric), 1.0
    else:
        reward, scale = R.c.reward * _SQLITE_SCALE, _SQLITE_SCALE
    return [
        sa.func.sum(sa.case((is_err, 0), else_=reward)),
        sa.func.count(sa.case((is_err, 0.0), else_=R.c.reward)),
        sa.func.sum(sa.case((is_err, None), else_=reward)),
        sa.func.count(sa.case((is_err, None), else_=R.c.reward)),
    ], scale


def _mean(total, count: int, scale: float) -> float | None:
    """The mean of a (scaled) sum; beyond the float range it is ±inf (null in JSON)."""
    if not count:
        return None
    return float((total or 0) / count) / scale


def reward_means(*, session: Session, run_ids: list[str] | None = None) -> dict[str, dict]:
    """Per run: mean reward with errors scored 0 and with errors dropped (the run page's and the
    runs list's figures, one computation)."""
    columns, scale = _reward_columns(session)
    q = sa.select(R.c.run_id, sa.func.count(), *columns).group_by(R.c.run_id)
    if run_ids is not None:
        q = q.where(R.c.run_id.in_(run_ids))
    return {rid: {"rollouts": n, "mean_reward": _mean(s0, c0, scale), "mean_reward_no_errors": _mean(s1, c1, scale),
                  "scored": c0, "excluded": n - c0}
            for rid, n, s0, c0, s1, c1 in session.execute(q).all()}


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
            "created_at": run.created_at.isoformat() if run.created_at else None,
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

    def as_dict(self) -> dict:
        return self.__dict__ | {"rates": {e: (n / self.rollouts if self.rollouts else 0.0) for e, n in self.endings.items()}}


def run_steps(*, session: Session, run_id: str) -> list[StepRow]:
    """Per training step: counts per ending and mean reward with and without errored rollouts.

    Every attempt counts: a rollout that errored and was retried is one error and one more
    rollout at that step (the error rate shows what the infrastructure did). Group baselines,
    in contrast, use only the latest attempt of each rollout (what the trainer used).

    "With errors" scores an errored rollout 0 (its stored reward is ignored); "without" drops
    errored rollouts. Rollouts with a missing or non-finite reward are excluded from both means
    and counted in `excluded`.
    """
    columns, scale = _reward_columns(session)
    rows = session.execute(
        sa.select(R.c.step, R.c.ending, sa.func.count(), *columns)
        .where(R.c.run_id == run_id).group_by(R.c.step, R.c.ending)
    ).all()
    steps: dict[int | None, dict] = {}
    for step, ending, n, s0, c0, s1, c1 in rows:
        d = steps.setdefault(step, {"n": 0, "endings": {e: 0 for e in ENDINGS}, "s0": 0, "c0": 0, "s1": 0, "c1": 0})
        d["n"] += n
        d["endings"][ending] = d["endings"].get(ending, 0) + n
        d["s0"] += s0 or 0  # Decimal on Postgres, scaled float on SQLite
        d["c0"] += c0
        d["s1"] += s1 or 0
        d["c1"] += c1
    out = []
    for step in sorted(steps, key=lambda s: (s is None, s if s is not None else 0)):
        d = steps[step]
        out.append(StepRow(
            step=step, rollouts=d["n"], endings=d["endings"],
            mean_reward=_mean(d["s0"], d["c0"], scale),
            mean_reward_no_errors=_mean(d["s1"], d["c1"], scale),
            scored=d["c0"], excluded=d["n"] - d["c0"],
        ))
    return out


@dataclass
class RolloutFilters:
    """Query parameters of the rollouts list. `reward_min`/`reward_max` are inclusive."""

    step: int | None = None
    ending: str | None = None
    group: str | None = None
    task: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    flag: str | None = None

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


def list_rollouts(*, session: Session, run_id: str, filters: RolloutFilters, after: str | None = None,
                  limit: int = 50) -> tuple[list, str | None]:
    """One page of rollout summaries, ordered by (step, ingest order), and the next cursor.

    Keyset pagination: `after` is the cursor of the last row of the previous page.
    """
    q = sa.select(*SUMMARY_COLUMNS, *_attempt_columns()).where(R.c.run_id == run_id)
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
    if f.flag:
        q = q.where(has_finding(f.flag))
    if after:
        s, pk = decode_cursor(after)
        q = q.where(sa.tuple_(*_sort_key()) > sa.tuple_(sa.literal(s), sa.literal(pk)))
    rows = session.execute(q.order_by(*_sort_key()).limit(limit + 1)).all()
    nxt = encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], nxt


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
    d = session.get(RolloutDetail, rollout_pk)
    return (d.envelope or {}) if d else {}


def get_findings(*, session: Session, rollout_pk: int) -> list[Finding]:
    """A rollout's stored findings and skipped outcomes (severity "skipped"), in check order."""
    return list(session.exec(sa.select(Finding).where(Finding.rollout_pk == rollout_pk).order_by(Finding.pk)).scalars())


def group_findings(*, session: Session, run_id: str, group_id: str) -> list[Finding]:
    """A group's stored group-scope findings and skipped outcomes, in check order."""
    return list(session.exec(sa.select(Finding).where(
        Finding.run_id == run_id, Finding.group_id == group_id, Finding.rollout_pk.is_(None)).order_by(Finding.pk)).scalars())


def node_graph(*, session: Session, rollout_pk: int) -> list[tuple[int, int | None]]:
    """(idx, parent) of every node: enough to compute branches without loading bodies."""
    return [(r.idx, r.parent) for r in session.execute(
        sa.select(N.c.idx, N.c.parent).where(N.c.rollout_pk == rollout_pk).order_by(N.c.idx))]


def node_headers(*, session: Session, rollout_pk: int, idxs: list[int]) -> dict[int, dict]:
    """role and tool-call routing fields for `idxs` (for pairing calls with results)."""
    out = {}
    for chunk in range(0, len(idxs), 900):
        part = idxs[chunk:chunk + 900]
        for r in session.execute(sa.select(N.c.idx, N.c.role, N.c.tool_call_id, N.c.tool_calls).where(
                N.c.rollout_pk == rollout_pk, N.c.idx.in_(part))):
            out[r.idx] = {"role": r.role, "tool_call_id": r.tool_call_id, "tool_calls": r.tool_calls or []}
    return out


def get_nodes(*, session: Session, rollout_pk: int, idxs: list[int]) -> list[Node]:
    """Full node rows (message + token arrays) for `idxs`, in the order given."""
    if not idxs:
        return []
    rows = {n.idx: n for n in session.exec(sa.select(Node).where(Node.rollout_pk == rollout_pk, Node.idx.in_(idxs))).scalars()}
    return [rows[i] for i in idxs if i in rows]


def get_node(*, session: Session, run_id: str, rollout_pk: int, idx: int) -> Node | None:
    """One node, only if its rollout belongs to `run_id`."""
    return session.exec(sa.select(Node).join(R, R.c.pk == Node.rollout_pk).where(
        Node.rollout_pk == rollout_pk, Node.idx == idx, R.c.run_id == run_id)).scalars().first()


def run_finding_kinds(*, session: Session, run_id: str) -> list[str]:
    """The kinds of finding present in a run."""
    own = sa.select(F.c.kind).join(R, R.c.pk == F.c.rollout_pk).where(R.c.run_id == run_id,
                                                                          F.c.severity != checks.SKIPPED)
    groups = sa.select(F.c.kind).where(F.c.run_id == run_id, F.c.rollout_pk.is_(None), F.c.severity != checks.SKIPPED)
    return sorted(set(session.execute(sa.union(own, groups)).scalars()))


def count_retries(*, session: Session, run_id: str) -> int:
    """Rollouts of the run that are a retry (attempt > 0)."""
    return session.execute(sa.select(sa.func.count()).where(R.c.run_id == run_id, R.c.attempt > 0)).scalar_one()


def group_exists(*, session: Session, run_id: str, group_id: str) -> bool:
    return session.execute(sa.select(R.c.pk).where(R.c.run_id == run_id, R.c.group_id == group_id).limit(1)).first() is not None


def group_members(*, session: Session, run_id: str, group_id: str) -> list:
    """Summary rows of a group's rollouts (every attempt, each with `n_attempts` and
    `latest_attempt` of its rollout id across the run), by group index then ingest order."""
    return session.execute(
        sa.select(*SUMMARY_COLUMNS, *_attempt_columns()).where(R.c.run_id == run_id, R.c.group_id == group_id)
        .order_by(sa.func.coalesce(R.c.group_index, 1 << 30), R.c.pk)).all()


def get_tokenizer(*, session: Session, sha256: str) -> Tokenizer | None:
    return session.get(Tokenizer, sha256)


def list_quarantine(*, session: Session, file: str | None = None, before: int | None = None,
                    limit: int = 50) -> tuple[list[Quarantine], int | None]:
    """One page of quarantined records, newest first, and the `before` cursor of the next page.

    Keyset pagination on the primary key; `file` keeps one source file's records."""
    q = sa.select(Quarantine).order_by(Quarantine.pk.desc()).limit(limit + 1)
    if file is not None:
        q = q.where(Quarantine.source_file == file)
    if before is not None:
        q = q.where(Quarantine.pk < before)
    rows = list(session.exec(q).scalars())
    return rows[:limit], (rows[limit - 1].pk if len(rows) > limit else None)


def count_quarantine(*, session: Session, file: str | None = None) -> int:
    q = sa.select(sa.func.count()).select_from(Quarantine)
    if file is not None:
        q = q.where(Quarantine.source_file == file)
    return session.execute(q).scalar_one()

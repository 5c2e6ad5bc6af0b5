"""Reads. Keyword-only, the session passed explicitly. List queries select summary columns only;
message bodies and token arrays are read one rollout (and one page of nodes) at a time.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session

from app.models import Finding, Node, Quarantine, Rollout, RolloutDetail, Run, Tokenizer

ENDINGS = ["submitted", "task_detected", "truncated", "length_cut", "error", "unknown"]
R = Rollout.__table__
N = Node.__table__

# Columns a list row needs: nothing that grows with the trace.
SUMMARY_COLUMNS = [c for c in R.c if c.name not in ("content_hash",)]


def list_runs(*, session: Session) -> list[dict]:
    """Every run with rollout counts, step range, mean reward and ending counts."""
    runs = {r.id: r for r in session.exec(sa.select(Run).order_by(Run.created_at, Run.id)).scalars()}
    stats = session.execute(
        sa.select(R.c.run_id, sa.func.count(), sa.func.min(R.c.step), sa.func.max(R.c.step),
                  sa.func.count(sa.distinct(R.c.step)), sa.func.avg(R.c.reward))
        .group_by(R.c.run_id)).all()
    by_run = {s[0]: s for s in stats}
    endings = session.execute(sa.select(R.c.run_id, R.c.ending, sa.func.count()).group_by(R.c.run_id, R.c.ending)).all()
    out = []
    for run_id, run in runs.items():
        s = by_run.get(run_id)
        counts = {e: 0 for e in ENDINGS}
        for rid, ending, n in endings:
            if rid == run_id:
                counts[ending] = n
        out.append({
            "id": run.id, "name": run.name, "type": run.type,
            "rollouts": s[1] if s else 0,
            "first_step": s[2] if s else None, "last_step": s[3] if s else None,
            "steps": s[4] if s else 0,
            "mean_reward": float(s[5]) if s and s[5] is not None else None,
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

    "With errors" scores an errored rollout 0 (its stored reward is ignored); "without" drops
    errored rollouts. Rollouts with a missing or non-finite reward are excluded from both means
    and counted in `excluded`.
    """
    is_err = R.c.ending == "error"
    reward_err0 = sa.case((is_err, 0.0), else_=R.c.reward)
    rows = session.execute(
        sa.select(
            R.c.step, R.c.ending, sa.func.count(),
            sa.func.sum(reward_err0), sa.func.count(reward_err0),
            sa.func.sum(sa.case((is_err, None), else_=R.c.reward)),
            sa.func.count(sa.case((is_err, None), else_=R.c.reward)),
        ).where(R.c.run_id == run_id).group_by(R.c.step, R.c.ending)
    ).all()
    steps: dict[int | None, dict] = {}
    for step, ending, n, s0, c0, s1, c1 in rows:
        d = steps.setdefault(step, {"n": 0, "endings": {e: 0 for e in ENDINGS}, "s0": 0.0, "c0": 0, "s1": 0.0, "c1": 0})
        d["n"] += n
        d["endings"][ending] = d["endings"].get(ending, 0) + n
        d["s0"] += float(s0 or 0)
        d["c0"] += c0
        d["s1"] += float(s1 or 0)
        d["c1"] += c1
    out = []
    for step in sorted(steps, key=lambda s: (s is None, s if s is not None else 0)):
        d = steps[step]
        out.append(StepRow(
            step=step, rollouts=d["n"], endings=d["endings"],
            mean_reward=d["s0"] / d["c0"] if d["c0"] else None,
            mean_reward_no_errors=d["s1"] / d["c1"] if d["c1"] else None,
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
    """'step:pk' → (step, pk). Raises ValueError on anything else."""
    a, _, b = cursor.partition(":")
    return int(a), int(b)


def list_rollouts(*, session: Session, run_id: str, filters: RolloutFilters, after: str | None = None,
                  limit: int = 50) -> tuple[list, str | None]:
    """One page of rollout summaries, ordered by (step, ingest order), and the next cursor.

    Keyset pagination: `after` is the cursor of the last row of the previous page.
    """
    q = sa.select(*SUMMARY_COLUMNS).where(R.c.run_id == run_id)
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
        # flags is a JSON list of kinds; a LIKE on its text form is portable and exact for
        # quoted kind names.
        q = q.where(sa.cast(R.c.flags, sa.Text).like(f'%"{f.flag}"%'))
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


def get_envelope(*, session: Session, rollout_pk: int) -> dict:
    d = session.get(RolloutDetail, rollout_pk)
    return (d.envelope or {}) if d else {}


def get_findings(*, session: Session, rollout_pk: int) -> list[Finding]:
    return list(session.exec(sa.select(Finding).where(Finding.rollout_pk == rollout_pk).order_by(Finding.pk)).scalars())


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


def get_node(*, session: Session, rollout_pk: int, idx: int) -> Node | None:
    return session.exec(sa.select(Node).where(Node.rollout_pk == rollout_pk, Node.idx == idx)).scalars().first()


def group_members(*, session: Session, run_id: str, group_id: str) -> list:
    """Summary rows of a group's rollouts, by group index then ingest order."""
    return session.execute(
        sa.select(*SUMMARY_COLUMNS).where(R.c.run_id == run_id, R.c.group_id == group_id)
        .order_by(sa.func.coalesce(R.c.group_index, 1 << 30), R.c.pk)).all()


def get_tokenizer(*, session: Session, sha256: str) -> Tokenizer | None:
    return session.get(Tokenizer, sha256)


def list_quarantine(*, session: Session, limit: int = 200) -> list[Quarantine]:
    return list(session.exec(sa.select(Quarantine).order_by(Quarantine.pk.desc()).limit(limit)).scalars())

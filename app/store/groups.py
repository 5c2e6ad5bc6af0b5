"""The group pass: group-scope checks (ingest/checks/groups.py), stored in the `finding` table
with the group's identity (`rollout_pk` NULL, `run_id`, `group_id`).

A group's findings depend on all its members, so they are recomputed from the stored members
whenever a batch inserts or replaces one of them, inside the batch's transaction: a reader sees
the members and their group's findings change together.

Two Postgres writers may store members of one group at the same moment. Each takes a
transaction-scoped advisory lock per group (in key order, so two writers cannot deadlock on them)
before it deletes and recomputes, so the second waits for the first to commit and then sees its
members and findings: the group's findings are stored once. SQLite has one writer at a time.

A group's siblings: `split_group` needs the other one-member groups of the group's step that
answer the same prompt (`ingest.checks.prompt_key`: the hash of the messages before its first assistant turn, else the
task key). The
pass gives each group it recomputes its `siblings` (`step_groups`, `link_siblings`), and whenever
it recomputes a group it also recomputes the groups of that step sharing its prompt key: a member
added to one of them changes what the others' finding says (rllm-org/rllm#776).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import sqlalchemy as sa

from app.db import models
from app.store.prepare import finding_detail
from ingest.advantages import one_member_group
from ingest.checks import Group, GroupMember, Sibling, link_siblings, prompt_key, prompt_text, run_group_checks
from ingest.schema import Message

R = models.Rollout.__table__
F = models.Finding.__table__
N = models.Node.__table__
CHUNK = 5000  # ids per IN list (SQLite's bound-parameter limit)


def _latest_attempt():
    A = R.alias("other_attempt")
    return (sa.select(sa.func.max(A.c.attempt))
            .where(A.c.run_id == R.c.run_id, A.c.rollout_id == R.c.rollout_id).scalar_subquery())


_MEMBER_COLUMNS = (R.c.run_id, R.c.group_id, R.c.rollout_id, R.c.attempt, R.c.group_index, R.c.group_size,
                   R.c.reward, R.c.reward_status, R.c.ending, R.c.step, R.c.advantage, R.c.advantage_estimator,
                   R.c.pk, R.c.task_key)


def _member(r) -> GroupMember:
    return GroupMember(r.rollout_id, r.attempt, r.group_index, r.group_size, r.reward, r.reward_status, r.ending,
                       r.step, r.advantage)


def load_group(conn: sa.Connection, run_id: str, group_id: str) -> Group:
    """A group's members as the checks see them: the latest attempt of each rollout id (across
    the run), in group index then ingest order."""
    return load_groups(conn, [(run_id, group_id)])[(run_id, group_id)]


def load_groups(conn: sa.Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Group]:
    """Several groups in one query (see `load_group`), each with its prompt key (one more query)."""
    groups, firsts = _members(conn, keys)
    fill_prompt_keys(conn, groups.values(), firsts)
    return groups


def _members(conn: sa.Connection, keys: list[tuple[str, str]]) -> tuple[dict[tuple[str, str], Group],
                                                                          dict[tuple[str, str], int]]:
    """The groups of `keys` with their members (one query), and each group's first member's
    rollout pk (whose prompt is the group's)."""
    rows = conn.execute(
        sa.select(*_MEMBER_COLUMNS)
        .where(sa.tuple_(R.c.run_id, R.c.group_id).in_(keys), R.c.attempt == _latest_attempt())
        .order_by(R.c.run_id, R.c.group_id, sa.func.coalesce(R.c.group_index, 1 << 30), R.c.pk)).all()
    groups = {key: Group(key[0], key[1], []) for key in keys}
    firsts: dict[tuple[str, str], int] = {}
    for r in rows:
        group = groups[(r.run_id, r.group_id)]
        if not group.members:
            group.step, group.task_key = r.step, r.task_key
            firsts[(r.run_id, r.group_id)] = r.pk
        group.members.append(_member(r))
        group.estimator = group.estimator or r.advantage_estimator  # the first member that declares one
    return groups, firsts


def fill_prompt_keys(conn: sa.Connection, groups: Iterable[Group], firsts: dict[tuple[str, str], int]) -> None:
    """Set each group's `prompt_key` from its first member's prompt (`firsts`: group key → that
    member's rollout pk), one query for all."""
    by_pk = {firsts[(g.run_id, g.group_id)]: g for g in groups if (g.run_id, g.group_id) in firsts}
    texts = _prompt_texts(conn, list(by_pk))
    for pk, group in by_pk.items():
        group.prompt_key = prompt_key(group.task_key, texts.get(pk))


def _prompt_texts(conn: sa.Connection, pks: list[int]) -> dict[int, str]:
    """rollout pk → its prompt (`ingest.checks.prompt_text`: the messages before its first
    assistant turn, read in node order); rollouts whose first message is the assistant's are left
    out."""
    out: dict[int, str] = {}
    for i in range(0, len(pks), CHUNK):
        chunk = pks[i:i + CHUNK]
        first = (sa.select(N.c.rollout_pk, sa.func.min(N.c.idx).label("idx"))
                 .where(N.c.rollout_pk.in_(chunk), N.c.role == "assistant")
                 .group_by(N.c.rollout_pk).subquery())
        rows = conn.execute(
            sa.select(N.c.rollout_pk, N.c.role, N.c.message)
            .outerjoin(first, N.c.rollout_pk == first.c.rollout_pk)
            .where(N.c.rollout_pk.in_(chunk), sa.or_(first.c.idx.is_(None), N.c.idx < first.c.idx))
            .order_by(N.c.rollout_pk, N.c.idx)).all()
        by_pk: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for pk, role, message in rows:
            try:
                text = Message.model_validate(message).text() if isinstance(message, dict) else ""
            except ValueError:
                text = ""
            by_pk[pk].append((role, text))
        for pk, messages in by_pk.items():
            text = prompt_text(messages)
            if text is not None:
                out[pk] = text
    return out


def step_groups(conn: sa.Connection, steps: Iterable[tuple[str, int | None]]) -> dict[tuple[str, int | None],
                                                                                       list[Sibling]]:
    """(run id, step) → the one-member groups (`one_member_group`, latest attempts) with a member at
    that step, each with its prompt key (as `load_groups` derives it): the siblings `split_group`
    reads. Only their prompt texts are read, so a run of full groups costs one summary query.
    Step None is a step too."""
    steps = set(steps)
    if not steps:
        return {}
    known = [(run, st) for run, st in steps if st is not None]
    unstepped = sorted({run for run, st in steps if st is None})
    where = []
    if known:
        where.append(sa.tuple_(R.c.run_id, R.c.step).in_(known))
    if unstepped:
        where.append(sa.and_(R.c.run_id.in_(unstepped), R.c.step.is_(None)))
    rows = conn.execute(
        sa.select(R.c.pk, R.c.run_id, R.c.step, R.c.group_id, R.c.task_key)
        .where(sa.or_(*where), R.c.group_id.is_not(None), R.c.attempt == _latest_attempt())).all()
    members: dict[tuple, list] = defaultdict(list)
    for r in rows:
        members[(r.run_id, r.step, r.group_id)].append(r)
    ones = {key: rs[0] for key, rs in members.items() if one_member_group(len(rs))}
    texts = _prompt_texts(conn, [r.pk for r in ones.values()])
    out: dict[tuple[str, int | None], list[Sibling]] = defaultdict(list)
    for (run, st, gid), r in sorted(ones.items(), key=lambda kv: (kv[0][0], kv[0][2])):
        out[(run, st)].append(Sibling(gid, prompt_key(r.task_key, texts.get(r.pk)), 1))
    return dict(out)


def _with_siblings(groups: dict[tuple[str, str], Group], by_step: dict) -> list[tuple[str, str]]:
    """The keys of `groups` and of the one-member groups of their steps sharing a prompt key with
    one of them (a group that grew past one member still names its former siblings)."""
    wanted = {(g.run_id, g.step, g.prompt_key) for g in groups.values() if g.members and g.prompt_key}
    extra = {(run, s.group_id) for (run, st), sibs in by_step.items() for s in sibs
             if (run, st, s.prompt_key) in wanted}
    return sorted(set(groups) | extra)


def _with_prompts(conn: sa.Connection, keys: list[tuple[str, str]]) -> tuple[dict[tuple[str, str], Group], dict]:
    """The groups of `keys` and the one-member groups of their steps; prompt keys are read only
    for the groups of steps that have one-member groups (only there can `split_group` fire), so
    a batch of full groups costs two queries."""
    groups, firsts = _members(conn, keys)
    by_step = step_groups(conn, _steps(groups))
    fill_prompt_keys(conn, [g for g in groups.values() if (g.run_id, g.step) in by_step], firsts)
    return groups, by_step


def _steps(groups: dict[tuple[str, str], Group]) -> set[tuple[str, int | None]]:
    return {(g.run_id, g.step) for g in groups.values() if g.members}


def lock_groups(conn: sa.Connection, keys: list[tuple[str, str]]) -> None:
    """On Postgres, hold a transaction-scoped advisory lock on each (run_id, group_id) of the
    sorted `keys` until the transaction ends (one statement; the lock key is Postgres's 64-bit
    `hashtextextended` of the run id and group id joined by U+001F). A no-op on SQLite, whose write lock already
    serialises writers."""
    if conn.dialect.name != "postgresql":
        return
    names = [f"{run_id}\x1f{group_id}" for run_id, group_id in keys]
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(k) FROM "
                         "(SELECT DISTINCT hashtextextended(n, 0) AS k "
                         "FROM unnest(CAST(:names AS text[])) AS n) AS keys "
                         "ORDER BY k"), {"names": names})


def recheck_groups(conn: sa.Connection, keys: Iterable[tuple[str, str]]) -> int:
    """Recompute and store the group findings of each (run_id, group_id) in `keys` and of the
    groups of their steps sharing their prompt keys, replacing what was stored: a fixed number of
    statements whatever the number of groups (members, siblings and prompt texts, delete, insert).
    Returns the number of findings stored (skipped outcomes excluded)."""
    keys = sorted(set(keys))
    if not keys:
        return 0
    # which groups to recompute is read before the locks, so every lock is taken in one sorted statement
    groups, by_step = _with_prompts(conn, keys)
    wanted = _with_siblings(groups, by_step)
    lock_groups(conn, wanted)
    conn.execute(F.delete().where(F.c.rollout_pk.is_(None), sa.tuple_(F.c.run_id, F.c.group_id).in_(wanted)))
    total, rows = 0, []
    if conn.dialect.name != "sqlite" or wanted != keys:
        # Postgres: another writer may have committed members while this one waited for the locks
        # (SQLite has one writer: what was read is what is there); or siblings joined the pass
        groups, by_step = _with_prompts(conn, wanted)
    link_siblings(groups.values(), by_step)
    for (run_id, group_id), group in groups.items():
        if not group.members:
            continue
        results = run_group_checks(group)
        rows += [dict(rollout_pk=None, run_id=run_id, group_id=group_id, kind=f.kind, severity=f.severity,
                      node_idx=None, position=None, message=f.message, detail=finding_detail(f.detail))
                 for f in results.all]
        total += len(results.findings)
    if rows:
        conn.execute(F.insert(), rows)
    return total

"""Per-step and per-task rollups, kept exact at ingest in the same transaction as the rollouts.
The statistics themselves are computed with no database by ingest/stats.py (`compute_step`);
this module reads the rows, locks, and writes the results.

Charts, the run page, compare and the runs list read `step_rollup` / `task_rollup` (one row per
step, or per step and task) instead of scanning a million rollouts.

Why recompute touched steps rather than add deltas: quantiles (median, p10, p90), zero-variance
groups and advantage sign flips cannot be updated by adding and subtracting, and float sums
updated by deltas drift from a fresh sum. A batch of rollouts touches one or a few steps, and one
step is a bounded set (a GRPO step is batch × group size rows, read by the (run_id, step) index),
so every write recomputes the steps it touched from the stored summary rows with the same
function a full rebuild uses: the rollups equal a full recomputation by construction, after
inserts, replacements and re-ingests alike (tests/analytics/test_rollups.py checks it against an
independent computation on SQLite and Postgres).

A batch costs a constant number of statements (see `apply`): every touched step is read in one
SELECT, recomputed in Python, and written back with one multi-row upsert per table.

Concurrent writers: SQLite serialises writers (BEGIN IMMEDIATE). On Postgres each touched step is
locked with a transaction-scoped advisory lock before it is recomputed, so the last writer of a
step recomputes after the others committed and sees their rows (READ COMMITTED takes a new
snapshot per statement).

A group's statistics use the latest attempt of each rollout id within the step (what the trainer
used, as on the group page); counts per ending count every attempt (as the run page does).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction

import sqlalchemy as sa

from app.db import models
from app.db.engine import insert_for
from app.store.prepare import _json_safe
from ingest.checks.registry import SKIPPED  # the severity of a stored skipped check outcome
from ingest.stats import compute_step, empty_checks

R = models.Rollout.__table__
SR = models.StepRollup.__table__
TR = models.TaskRollup.__table__
RT = models.RunTaskRollup.__table__
F = models.Finding.__table__
RUN = models.Run.__table__
ROW_COLUMNS = [R.c.pk, R.c.run_id, R.c.step, R.c.rollout_id, R.c.attempt, R.c.group_id, R.c.task_key, R.c.agent,
               R.c.ending, R.c.ending_detail, R.c.reward, R.c.reward_status, R.c.n_turns, R.c.n_tool_calls,
               R.c.n_tokens, R.c.n_trained_tokens, R.c.n_response_tokens, R.c.n_tool_errors, R.c.model_latency,
               R.c.tool_latency, R.c.staleness, R.c.mismatch_tokens, R.c.mismatch_abs_sum, R.c.mismatch_abs_max,
               R.c.mismatch_out_of_range, R.c.trainer_filtered, R.c.flags, R.c.source_file, R.c.source_format,
               R.c.ingested_at]


NO_STEP = -(2**31)  # stands for a NULL step in the rollups' unique indexes (NULLs are distinct there)
STEP_KEY = ("run_id", "step")
TASK_KEY = ("run_id", "step", "task_key")


def _step_where(table, run_id: str, step: int | None):
    return sa.and_(table.c.run_id == run_id, table.c.step.is_(None) if step is None else table.c.step == step)


def _keys_where(table, keys: Iterable[tuple[str, int | None]]):
    """Rows of `table` in any of the (run, step) `keys`: one condition per run."""
    by_run: dict[str, set] = defaultdict(set)
    for run_id, step in keys:
        by_run[run_id].add(step)
    conds = []
    for run_id, steps in sorted(by_run.items()):
        known = sorted(s for s in steps if s is not None)
        parts = ([table.c.step.in_(known)] if known else []) + ([table.c.step.is_(None)] if None in steps else [])
        conds.append(sa.and_(table.c.run_id == run_id, sa.or_(*parts)))
    return sa.or_(*conds)


def step_rows(conn: sa.Connection, run_id: str, step: int | None) -> list[dict]:
    """The summary rows one step's rollup is computed from."""
    result = conn.execute(sa.select(*ROW_COLUMNS).where(_step_where(R, run_id, step)))
    keys = list(result.keys())
    return [dict(zip(keys, row)) for row in result]


def _staleness_limit(extra) -> int | None:
    v = (extra or {}).get("max_staleness") if isinstance(extra, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def max_staleness(conn: sa.Connection, run_id: str) -> int | None:
    """The run's staleness limit as its source recorded it (`run.extra.max_staleness`, e.g.
    prime-rl's `async_level`, AReaL's `max_head_offpolicyness`), or None."""
    return _staleness_limit(conn.execute(sa.select(RUN.c.extra).where(RUN.c.id == run_id)).scalar())


def lock_steps(conn: sa.Connection, keys: list[tuple[str, int | None]]) -> None:
    """On Postgres, take a transaction-scoped advisory lock per (run, step), in one statement and
    in one order for every writer (no deadlock); SQLite serialises writers anyway."""
    if conn.dialect.name != "postgresql" or not keys:
        return
    conn.execute(sa.text(
        "SELECT count(pg_advisory_xact_lock(hashtext(k.r), k.s)) FROM (SELECT r, s FROM "
        "unnest(CAST(:runs AS text[]), CAST(:steps AS int[])) AS u(r, s) ORDER BY r, s OFFSET 0) AS k"),
        {"runs": [k[0] for k in keys], "steps": [NO_STEP if k[1] is None else k[1] for k in keys]})


def _upsert(conn: sa.Connection, table: sa.Table, key: tuple[str, ...], rows: list[dict]) -> None:
    """One multi-row INSERT ... ON CONFLICT (key, NULL step as NO_STEP) DO UPDATE of every other
    column: the rows replace what was there."""
    if not rows:
        return
    ins = insert_for(conn, table)
    target = [sa.func.coalesce(table.c.step, sa.literal_column(str(NO_STEP))) if k == "step" else table.c[k]
              for k in key]
    cols = [c.name for c in table.c if c.name != "pk" and c.name not in key]
    for part in _param_chunks(rows):
        conn.execute(ins.values(part).on_conflict_do_update(index_elements=target,
                                                             set_={c: ins.excluded[c] for c in cols}))


MAX_PARAMS = 30_000  # bound parameters per multi-row statement (Postgres allows 65,535; SQLite 32,766 by default)


def _param_chunks(rows: list[dict]) -> list[list[dict]]:
    """`rows` in runs short enough for one multi-row VALUES statement each: one run for a batch
    of ingest, several for `rebuild`'s 50 steps of many tasks."""
    size = max(1, MAX_PARAMS // max(1, len(rows[0]) if rows else 1))
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def check_counts(conn: sa.Connection, keys: list[tuple[str, int | None]],
                 pk_range: tuple[int | None, int | None] | None = None) -> dict[tuple, dict]:
    """Per (run, step) of `keys`: what the checks found in the step's rollouts (see `finding_counts`)."""
    return finding_counts(conn, keys, pk_range)[0]


def finding_counts(conn: sa.Connection, keys: list[tuple[str, int | None]],
                   pk_range: tuple[int | None, int | None] | None = None) -> tuple[dict[tuple, dict], dict[tuple, set]]:
    """Per (run, step) of `keys`: what the checks found in the step's rollouts (the run page's
    checks table and findings chart), from the `finding` table:

    - `found` / `skipped`: kind → rollouts of the step with a finding / a skipped outcome of that
      kind: their own (rollout scope) plus those whose group has one (group scope), each rollout
      counted once per kind and scope;
    - `skip_reasons`: kind → message → skipped outcomes of the step's rollouts (rollout scope);
    - `group_skip_reasons`: kind → message → groups with that skipped outcome, each group counted
      at the first step of its members (so a run's total counts every group once);
    - `ran`: checks version (as text, `null` for a rollout stored before versions were kept) →
      rollouts of the step whose checks were that version (`rollout.checks_version`).

    and, second, (run, group) → the kinds of the group-scope findings (not skipped outcomes) of
    every group with a member in these steps: a group's finding counts for each of its members
    wherever the rollups count findings per rollout (`compute_step`'s `findings`, `by_ending`), as
    the list's `flag` filter selects them (app.queries.findings.has_finding).

    One statement (five grouped parts) whatever the number of steps; `pk_range`: the smallest and
    largest key of the steps' rollouts, when the caller has read them (else one more statement)."""
    out: dict[tuple, dict] = {k: empty_checks() for k in keys}
    kinds: dict[tuple, set] = {}
    if not keys:
        return out, kinds
    in_keys = _keys_where(R, keys)
    skipped = sa.case((F.c.severity == SKIPPED, 1), else_=0)
    no_message = sa.cast(sa.null(), sa.String)
    own = R.join(F, F.c.rollout_pk == R.c.pk)
    # the findings' keys bounded by the steps' first and last rollout (implied by the join): else
    # Postgres merge-joined from the start of the whole finding index, a walk as long as the run
    lo, hi = pk_range if pk_range is not None else conn.execute(
        sa.select(sa.func.min(R.c.pk), sa.func.max(R.c.pk)).where(in_keys)).one()
    in_bounds = F.c.rollout_pk.between(lo if lo is not None else 0, hi if hi is not None else -1)
    # group findings through the steps' groups (a few per step) and then their members in these
    # steps: joined straight from the rollouts, Postgres hashed every group finding of the run
    groups = sa.select(R.c.run_id, R.c.group_id).where(in_keys, R.c.group_id.is_not(None)).distinct().subquery()
    grouped = groups.join(F, sa.and_(F.c.rollout_pk.is_(None), F.c.run_id == groups.c.run_id,
                                     F.c.group_id == groups.c.group_id)) \
        .join(R, sa.and_(R.c.run_id == groups.c.run_id, R.c.group_id == groups.c.group_id))
    counts = [sa.select(sa.literal("count"), R.c.run_id, R.c.step, F.c.kind, skipped, no_message,
                        sa.func.count(sa.distinct(R.c.pk))).select_from(source).where(in_keys, *extra)
              .group_by(R.c.run_id, R.c.step, F.c.kind, skipped)
              for source, extra in ((own, [in_bounds]), (grouped, []))]
    reasons = (sa.select(sa.literal("reason"), R.c.run_id, R.c.step, F.c.kind, sa.literal(1), F.c.message,
                         sa.func.count()).select_from(own).where(in_keys, in_bounds, F.c.severity == SKIPPED)
               .group_by(R.c.run_id, R.c.step, F.c.kind, F.c.message))
    # the groups with a member in these steps, each at its first step
    M = R.alias("member")
    touched = sa.select(R.c.run_id, R.c.group_id).where(in_keys, R.c.group_id.is_not(None)).distinct()
    first = (sa.select(M.c.run_id, M.c.group_id, sa.func.min(M.c.step).label("step"))
             .where(sa.tuple_(M.c.run_id, M.c.group_id).in_(touched)).group_by(M.c.run_id, M.c.group_id).subquery())
    group_reasons = (sa.select(sa.literal("group_reason"), first.c.run_id, first.c.step, F.c.kind, sa.literal(1),
                               F.c.message, sa.func.count())
                     .select_from(first.join(F, sa.and_(F.c.rollout_pk.is_(None), F.c.run_id == first.c.run_id,
                                                        F.c.group_id == first.c.group_id)))
                     .where(F.c.severity == SKIPPED).group_by(first.c.run_id, first.c.step, F.c.kind, F.c.message))
    # rollouts per checks version (the kind column carries it)
    ran = (sa.select(sa.literal("ran"), R.c.run_id, R.c.step, sa.cast(R.c.checks_version, sa.String), sa.literal(0),
                     no_message, sa.func.count()).where(in_keys).group_by(R.c.run_id, R.c.step, R.c.checks_version))
    # the kinds each of these groups was flagged with (the message column carries the group id)
    group_kinds = (sa.select(sa.literal("group_kind"), groups.c.run_id, sa.cast(sa.null(), sa.Integer), F.c.kind,
                             sa.literal(0), groups.c.group_id, sa.func.count())
                   .select_from(groups.join(F, sa.and_(F.c.rollout_pk.is_(None), F.c.run_id == groups.c.run_id,
                                                       F.c.group_id == groups.c.group_id)))
                   .where(F.c.severity != SKIPPED).group_by(groups.c.run_id, groups.c.group_id, F.c.kind))
    for tag, run_id, step, kind, skip, message, n in conn.execute(
            sa.union_all(*counts, reasons, group_reasons, group_kinds, ran)):
        if tag == "group_kind":
            kinds.setdefault((run_id, message), set()).add(kind)
            continue
        c = out.get((run_id, step))
        if c is None:  # a group whose first step is not among these
            continue
        if tag == "ran":
            c["ran"][kind or "null"] = n
        elif tag == "count":
            d = c["skipped" if skip else "found"]
            d[kind] = d.get(kind, 0) + n
        else:
            c["skip_reasons" if tag == "reason" else "group_skip_reasons"].setdefault(kind, {})[message] = n
    return out, kinds


def _group_steps(conn: sa.Connection, groups: set[tuple[str, str]]) -> set[tuple[str, int | None]]:
    """(run, step) of every stored member of the (run, group) `groups`: a group's findings count
    in each step its members are in."""
    out: set = set()
    keys = sorted(groups)
    for i in range(0, len(keys), 500):
        out |= {(r, s) for r, s in conn.execute(sa.select(R.c.run_id, R.c.step).distinct().where(
            sa.tuple_(R.c.run_id, R.c.group_id).in_(keys[i:i + 500])))}
    return out


# --- per (run, task) over all steps -----------------------------------------------------------

def _fraction(text: str | None) -> Fraction:
    return Fraction(text) if text else Fraction(0)


def _contribution(t: Mapping) -> dict:
    """What one task_rollup row adds to its run's task row: counts, endings and the exact sums
    mean·scored (a mean stands for `scored` rollouts; a missing mean adds nothing); the exact
    Σx², Σx³ of its scored rewards, and `no_moments` 1 for a scored row without them."""
    m0, m1 = t.get("mean_reward"), t.get("mean_reward_no_errors")
    q2, q3 = t.get("reward_sum_sq"), t.get("reward_sum_cube")
    moments = m0 is not None and q2 is not None and q3 is not None
    return {"rollouts": t["rollouts"], "errors": t["errors"],
            "scored": t["scored"] if m0 is not None else 0,
            "scored_no_errors": t["scored_no_errors"] if m1 is not None else 0,
            "endings": t.get("endings") or {}, "by_ending": t.get("by_ending") or {},
            "s0": Fraction(m0) * t["scored"] if m0 is not None else Fraction(0),
            "s1": Fraction(m1) * t["scored_no_errors"] if m1 is not None else Fraction(0),
            "q2": Fraction(q2) if moments else Fraction(0), "q3": Fraction(q3) if moments else Fraction(0),
            "no_moments": int(m0 is not None and t["scored"] > 0 and not moments)}


def _lock_tasks(conn: sa.Connection, keys: list[tuple[str, str]]) -> None:
    """On Postgres, a transaction-scoped advisory lock per (run, task), in one order for every
    writer and after the step locks (`lock_steps`): the read-modify-write of run_task_rollup rows by
    two writers of different steps is serialised. Seed 1 of `hashtextextended` keeps these keys
    apart from the group locks (app.store.groups, seed 0)."""
    if conn.dialect.name != "postgresql" or not keys:
        return
    conn.execute(sa.text("SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT DISTINCT hashtextextended(n, 1) AS k "
                         "FROM unnest(CAST(:names AS text[])) AS n ORDER BY k OFFSET 0) AS keys"),
                 {"names": [f"{r}\x1f{t}" for r, t in keys]})


TASK_NUMBERS = ("rollouts", "errors", "scored", "scored_no_errors")
TASK_SUMS = ("s0", "s1", "q2", "q3", "no_moments")  # added exactly (fractions, integers)


def _apply_run_tasks(conn: sa.Connection, old: list[Mapping], new: list[Mapping]) -> None:
    """Bring run_task_rollup up to date after the task_rollup rows `old` were replaced by `new`
    (rows of the same steps): add each task's difference to its run row. Integer counts and
    fractions add exactly, so the rows equal a recomputation over all the run's step rows in any
    order of updates; a row left without rollouts goes."""
    delta: dict[tuple[str, str], dict] = {}
    for rows, sign in ((old, -1), (new, 1)):
        for t in rows:
            c = _contribution(t)
            d = delta.setdefault((t["run_id"], t["task_key"]), {k: 0 for k in TASK_NUMBERS} | {
                "endings": Counter(), "by_ending": Counter()} | {k: Fraction(0) for k in TASK_SUMS})
            for k in (*TASK_NUMBERS, *TASK_SUMS):
                d[k] += sign * c[k]
            for e, n in c["endings"].items():
                d["endings"][e] += sign * n
            for path, n in _flat(c["by_ending"]).items():
                d["by_ending"][path] += sign * n
    keys = sorted(k for k, d in delta.items() if any(d[x] for x in (*TASK_NUMBERS, *TASK_SUMS))
                  or any(d["endings"].values()) or any(d["by_ending"].values()))
    if not keys:
        return
    _lock_tasks(conn, keys)
    current: dict[tuple[str, str], Mapping] = {}
    for i in range(0, len(keys), 500):
        for r in conn.execute(sa.select(RT).where(sa.tuple_(RT.c.run_id, RT.c.task_key).in_(keys[i:i + 500]))):
            current[(r.run_id, r.task_key)] = r._mapping
    rows, gone = [], []
    for key in keys:
        d, cur = delta[key], current.get(key)
        sums = (cur["sums"] if cur is not None else None) or {}
        row = {k: (cur[k] if cur is not None else 0) + d[k] for k in TASK_NUMBERS}
        endings = Counter((cur["endings"] if cur is not None else None) or {})
        endings.update(d["endings"])
        nested = Counter(_flat((cur["by_ending"] if cur is not None else None) or {}))
        nested.update(d["by_ending"])
        s0 = _fraction(sums.get("errors_as_zero")) + d["s0"]
        s1 = _fraction(sums.get("errors_dropped")) + d["s1"]
        q2 = _fraction(sums.get("squares")) + d["q2"]
        q3 = _fraction(sums.get("cubes")) + d["q3"]
        no_moments = int(sums.get("no_moments") or 0) + int(d["no_moments"])
        if row["rollouts"] <= 0:
            gone.append(key)
            continue
        rows.append(dict(row, run_id=key[0], task_key=key[1],
                         endings={e: n for e, n in sorted(endings.items()) if n}, by_ending=_nest(nested),
                         mean_reward=_ratio(s0, row["scored"]),
                         mean_reward_no_errors=_ratio(s1, row["scored_no_errors"]),
                         sums={"errors_as_zero": str(s0), "errors_dropped": str(s1), "squares": str(q2),
                               "cubes": str(q3), "no_moments": no_moments}))
    if rows:
        ins = insert_for(conn, RT)
        for part in _param_chunks(rows):
            conn.execute(ins.values(part).on_conflict_do_update(
                index_elements=[RT.c.run_id, RT.c.task_key],
                set_={c.name: ins.excluded[c.name] for c in RT.c if c.name not in ("pk", "run_id", "task_key")}))
    for i in range(0, len(gone), 500):
        conn.execute(RT.delete().where(sa.tuple_(RT.c.run_id, RT.c.task_key).in_(gone[i:i + 500])))


def _flat(by_end: Mapping) -> dict[tuple[str, str, str], int]:
    """{ending: {"agents" | "findings": {value: n}}} → {(ending, part, value): n}."""
    return {(e, part, v): n for e, parts in by_end.items() for part, counts in parts.items() for v, n in counts.items()}


def _nest(flat: Mapping[tuple[str, str, str], int]) -> dict:
    """The inverse of `_flat`, without zero counts, every level sorted by key."""
    out: dict[str, dict] = {}
    for (e, part, v), n in sorted(flat.items()):
        if n:
            out.setdefault(e, {"agents": {}, "findings": {}})[part][v] = n
    return out


def _ratio(total: Fraction, n: int) -> float | None:
    """total / n correctly rounded, or None (nothing scored, or beyond a float)."""
    if n <= 0:
        return None
    try:
        v = float(total / n)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


TASK_COLUMNS = [TR.c.run_id, TR.c.step, TR.c.task_key, TR.c.rollouts, TR.c.errors, TR.c.scored, TR.c.scored_no_errors,
                TR.c.mean_reward, TR.c.mean_reward_no_errors, TR.c.endings, TR.c.by_ending, TR.c.reward_sum_sq,
                TR.c.reward_sum_cube]


def apply(conn: sa.Connection, *, inserted: Iterable[Mapping] = (), deleted: Iterable[Mapping] = (),
          groups: Iterable[tuple[str, str]] = ()) -> int:
    """Bring the rollups up to date after rollouts were inserted and/or deleted in this
    transaction. `inserted` / `deleted` are summary rows (anything with `run_id` and `step`, and
    `task_key` for deleted ones); every (run, step) they name is recomputed from its stored
    rollouts and findings, and so is every step with a member of a group they name (`group_id`)
    or of `groups` (their group findings were recomputed). A constant number of statements
    whatever the number of steps: (Postgres: one lock statement), the groups' steps, the steps'
    rows with their run's staleness limit, their findings (`check_counts`), their old task rows,
    one upsert per rollup table, the run-task rows they change (read, upsert), and on a
    replacement one delete per table for the rollups left empty. Returns the number of steps
    recomputed."""
    inserted, deleted = list(inserted), list(deleted)
    touched_groups = {(r["run_id"], r["group_id"]) for r in (*inserted, *deleted) if r.get("group_id") is not None}
    touched_groups |= set(groups)
    keyset = {(r["run_id"], r["step"]) for r in inserted} | {(r["run_id"], r["step"]) for r in deleted}
    if touched_groups:
        keyset |= _group_steps(conn, touched_groups)
    keys = sorted(keyset, key=lambda k: (k[0], k[1] is None, k[1] or 0))
    if not keys:
        return 0
    lock_steps(conn, keys)
    # the rows of every touched step, each with its run's staleness limit (one statement)
    limit_col = RUN.c.extra["max_staleness"].label("run_max_staleness")
    result = conn.execute(sa.select(*ROW_COLUMNS, limit_col).join(RUN, RUN.c.id == R.c.run_id)
                          .where(_keys_where(R, keys)))
    names = list(result.keys())
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    limits: dict[str, int | None] = {}
    for row in result:
        d = dict(zip(names, row))
        limits[d["run_id"]] = _staleness_limit({"max_staleness": d.pop("run_max_staleness")})
        by_key[(d["run_id"], d["step"])].append(d)
    pks = [d["pk"] for rows in by_key.values() for d in rows]
    checks, group_kinds = finding_counts(conn, keys, (min(pks), max(pks)) if pks else (None, None))
    for rows in by_key.values():  # a group's findings count for each of its members (`finding_counts`)
        for d in rows:
            extra = group_kinds.get((d["run_id"], d["group_id"])) if d["group_id"] is not None else None
            if extra:
                d["flags"] = sorted(set(d["flags"] or ()) | extra)
    old_tasks = [dict(r._mapping) for r in conn.execute(sa.select(*TASK_COLUMNS).where(_keys_where(TR, keys)))]
    step_out, task_out = [], []
    for run_id, step in keys:
        rows = by_key.get((run_id, step), [])
        if rows:
            step_row, tasks = compute_step(rows, max_staleness=limits.get(run_id), checks=checks[(run_id, step)])
            step_row["stats"] = _json_safe(step_row["stats"])  # storable: NUL and non-finite floats go
        else:  # the step lost its last rollout: its rollup goes (below)
            step_row = {"rollouts": 0, "mean_reward": None, "mean_reward_no_errors": None, "scored": 0,
                        "excluded": 0, "stats": None}
            tasks = []
        step_out.append(dict(step_row, run_id=run_id, step=step))
        present = {t["task_key"] for t in tasks}
        task_out += [dict(t, run_id=run_id, step=step) for t in tasks]
        # a task the step no longer has: its row is zeroed here and deleted below
        for task in sorted({t["task_key"] for t in old_tasks if (t["run_id"], t["step"]) == (run_id, step)} - present):
            task_out.append({"run_id": run_id, "step": step, "task_key": task, "rollouts": 0, "mean_reward": None,
                             "mean_reward_no_errors": None, "scored": 0, "scored_no_errors": 0, "errors": 0,
                             "endings": None, "by_ending": None, "reward_sum_sq": None, "reward_sum_cube": None})
    _upsert(conn, SR, STEP_KEY, step_out)
    _upsert(conn, TR, TASK_KEY, task_out)
    _apply_run_tasks(conn, old_tasks, task_out)
    if any(s["rollouts"] == 0 for s in step_out) or any(t["rollouts"] == 0 for t in task_out):
        for table in (SR, TR):
            conn.execute(table.delete().where(_keys_where(table, keys), table.c.rollouts == 0))
    return len(keys)


REBUILD_STEPS = 50  # steps recomputed per statement group by `rebuild` (bounds its memory)


def rebuild(conn: sa.Connection, run_id: str | None = None) -> int:
    """Recompute every rollup (of one run, or all): for migrations, `rollscope rebuild-analytics`
    and the benchmark's bulk load. Returns the number of steps."""
    for t in (SR, TR, RT):
        conn.execute(t.delete() if run_id is None else t.delete().where(t.c.run_id == run_id))
    q = sa.select(R.c.run_id, R.c.step).distinct()
    if run_id is not None:
        q = q.where(R.c.run_id == run_id)
    keys = [{"run_id": a, "step": b} for a, b in conn.execute(q)]
    for i in range(0, len(keys), REBUILD_STEPS):
        apply(conn, inserted=keys[i:i + REBUILD_STEPS])
    return len(keys)


def on_batch(conn: sa.Connection, written) -> None:
    """The batch hook (app.store.write.BATCH_HOOKS): recompute the steps the batch touched, then
    judge the completed steps they affect (step alerts, app/store/step_alerts.py)."""
    from app.store import step_alerts

    apply(conn, inserted=written.inserted, deleted=written.deleted)
    step_alerts.on_batch(conn, written)

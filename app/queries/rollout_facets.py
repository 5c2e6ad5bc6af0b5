"""Counts and facets of the rollouts list (app/queries/rollout_list.py: the filters and pages):
a total count, and facets whose counts follow the active filters.

Counts and facets under a step range, an ending and a task filter (exact or `*` prefix) come
from the rollups (each step's counts per ending, agent and finding kind; the task rows); under
other filters from the rollout table through its indexes.
"""
from __future__ import annotations

import dataclasses
import time

import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from app.queries.rollout_list import NO_AGENT, R, RolloutFilters, matches, where
from app.queries.steps import step_stats, task_volumes
from ingest.checks import SKIPPED
from ingest.stats import ENDINGS

F = models.Finding.__table__
TR = models.TaskRollup.__table__
RT = models.RunTaskRollup.__table__

COUNT_CAP = 100_000  # a filtered count stops here (the page says "100,000+"); rollup counts are exact


def from_rollups(f: RolloutFilters) -> bool:
    """The filters name only a step range and an ending: counts come from the step rollups."""
    # by key, not value: a filter of 0 (`staleness=0`, `reward_min=0`) is a filter
    return not any(k not in ("step", "steps", "ending") for k in f.as_query())


def from_task_rollups(f: RolloutFilters) -> bool:
    """The filters name a task (exact or prefix) and at most a step range and an ending: the task rollups
    hold the counts (per step and task, or per task over every step)."""
    return bool(f.task) and not any(k not in ("step", "steps", "ending", "task") for k in f.as_query())


def _run_task_endings(session: Session, run_id: str, task: str, ending: str | None = None) -> dict[str, int]:
    """Rollouts per ending (only `ending`, when given) of the tasks `task` matches (exact, or a `*` prefix), over
    every step: from the run's task rollups, one row per task."""
    out: dict[str, int] = {}
    for (endings,) in session.execute(
            sa.select(RT.c.endings).where(RT.c.run_id == run_id, matches(RT.c.task_key, task))):
        for e, n in (endings or {}).items():
            if ending is None or e == ending:
                out[e] = out.get(e, 0) + n
    return out


def _run_task_values(session: Session, run_id: str, task: str, ending: str | None, part: str) -> list[tuple]:
    """(agent or finding kind, rollouts) of the tasks `task` matches (exact, or a `*` prefix) (ending `ending`, when
    given) over every step, largest first: from the run's task rollups (`by_ending`)."""
    counts: dict[str, int] = {}
    for (by_end,) in session.execute(sa.select(RT.c.by_ending).where(RT.c.run_id == run_id,
                                                                     matches(RT.c.task_key, task))):
        for e, parts in (by_end or {}).items():
            if ending is None or e == ending:
                for v, n in parts.get(part, {}).items():
                    counts[v] = counts.get(v, 0) + n
    pairs = sorted(((v or NO_AGENT) if part == "agents" else v, n) for v, n in counts.items() if n)
    return sorted(pairs, key=lambda x: -x[1])


def _task_row_count(session: Session, ending: str | None):
    """A task_rollup row's rollouts, or those ending in `ending` (one of ENDINGS): the `errors`
    column, or the count in its `endings` document."""
    if not ending:
        return TR.c.rollouts
    if ending == "error":
        return TR.c.errors
    if session.get_bind().dialect.name == "postgresql":
        return sa.cast(TR.c.endings.op("->>")(sa.literal(ending)), sa.Integer)
    return sa.func.json_extract(TR.c.endings, f'$."{ending}"')


def _task_rollup_steps(session: Session, run_id: str, task: str, ending: str | None) -> dict[int, int]:
    """step → rollouts (ending `ending`, when given) of the tasks `task` matches (exact, or a `*` prefix), from the
    per-step task rollups (the rows of those tasks only, through the (run, task) index)."""
    if ending and ending not in ENDINGS:
        return {}
    n = _task_row_count(session, ending)
    return {step: int(k or 0) for step, k in session.execute(
        sa.select(TR.c.step, sa.func.sum(n)).where(TR.c.run_id == run_id, matches(TR.c.task_key, task),
                                                    TR.c.step.is_not(None)).group_by(TR.c.step))}


def list_sections(f: RolloutFilters) -> tuple[str, ...]:
    """What the list's counts and facets read of each step's stats: per ending only under an
    ending filter."""
    return ("endings", "agents", "findings") + (("by_ending",) if f.ending else ())


def _rollup_steps(session: Session, run_id: str, f: RolloutFilters) -> list:
    """The step rollups the filters' step range selects; the rollouts without a step too when
    the filters name no step (the same read for every count and facet of a request)."""
    rng = f.step_range()
    stats = step_stats(session=session, run_id=run_id, include_unstepped=True, sections=list_sections(f))
    if f.step is None and not f.steps:
        return stats
    return [s for s in stats if s.step is not None and (rng.first is None or s.step >= rng.first)
            and (rng.last is None or s.step <= rng.last)]


def _matching(s, ending: str | None) -> int:
    return s.endings.get(ending, 0) if ending else s.rollouts


def count(*, session: Session, run_id: str, filters: RolloutFilters) -> tuple[int, bool]:
    """Rollouts matching the filters (every attempt) and whether the count stopped at COUNT_CAP.
    Exact from the rollups when only steps and an ending filter; otherwise counted through the
    indexes, up to COUNT_CAP."""
    if from_rollups(filters):
        return sum(_matching(s, filters.ending) for s in _rollup_steps(session, run_id, filters)), False
    if from_task_rollups(filters) and not filters.step and not filters.steps:
        return sum(_run_task_endings(session, run_id, filters.task, filters.ending).values()), False
    inner = sa.select(sa.literal(1)).select_from(R).where(*where(run_id, filters)).limit(COUNT_CAP + 1).subquery()
    n = session.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one()
    return min(n, COUNT_CAP), n > COUNT_CAP


FACET_TASKS = 15
FACET_BUDGET_MS = 150  # all facets of one request that count rollouts share this time


class FacetBudget:
    """Runs facet queries against one deadline. SQLite: a progress handler interrupts the
    statement once the deadline has passed; Postgres: each statement runs in a savepoint with
    `statement_timeout` set to the time left. A statement cut short returns [] and its facet is
    named in `timed_out`."""

    def __init__(self, session: Session, ms: int):
        self.session, self.end = session, time.monotonic() + ms / 1000
        self.timed_out: list[str] = []
        self.pg = session.get_bind().dialect.name == "postgresql"
        self._raw = None

    def run(self, name: str, q) -> list:
        left_ms = int((self.end - time.monotonic()) * 1000)
        if left_ms <= 0:
            self.timed_out.append(name)
            return []
        try:
            if self.pg:
                with self.session.begin_nested():
                    self.session.execute(sa.text("SELECT set_config('statement_timeout', :ms, true)"),
                                         {"ms": str(left_ms)})
                    return list(self.session.execute(q).all())
            if self._raw is None:
                self._raw = self.session.connection().connection.driver_connection
                self._raw.set_progress_handler(lambda: time.monotonic() > self.end, 2000)
            return list(self.session.execute(q).all())
        except sa.exc.OperationalError:  # interrupted (SQLite) / canceled by statement_timeout (Postgres)
            self.timed_out.append(name)
            return []

    def close(self) -> None:
        if self._raw is not None:
            self._raw.set_progress_handler(None, 0)
        if self.pg:
            self.session.execute(sa.text("SELECT set_config('statement_timeout', '0', true)"))
STEP_BUCKETS = 10


def _step_buckets(first: int | None, last: int | None) -> list[tuple[int, int]]:
    if first is None or last is None:
        return []
    width = max(1, -(-(last - first + 1) // STEP_BUCKETS))
    return [(a, min(last, a + width - 1)) for a in range(first, last + 1, width)]


FACET_FILTER = {"ending": ("ending",), "task": ("task",), "agent": ("agent",), "flag": ("flag",),
                "steps": ("step", "steps")}  # the filters a facet ignores: its own


def _without(f: RolloutFilters, name: str) -> RolloutFilters:
    return dataclasses.replace(f, **{k: None for k in FACET_FILTER[name]})


def _task_counts(session: Session, run_id: str, f: RolloutFilters) -> list[tuple[str, int]]:
    """(task, rollouts) of the FACET_TASKS largest tasks under a step range and an ending filter,
    from the run's task rollups (every step) or the per-step task rollups (a range)."""
    rng, ending = f.step_range(), f.ending
    if not ending:
        got = task_volumes(session=session, run_id=run_id, steps=rng)
    elif ending not in ENDINGS:
        got = []
    elif rng.first is None and rng.last is None:
        got = [(t, (e or {}).get(ending, 0)) for t, e in session.execute(
            sa.select(RT.c.task_key, RT.c.endings).where(RT.c.run_id == run_id))]
    else:
        got = [(t, int(k or 0)) for t, k in session.execute(
            sa.select(TR.c.task_key, sa.func.sum(_task_row_count(session, ending)))
            .where(TR.c.run_id == run_id, rng.where(TR.c.step))
            .group_by(TR.c.task_key))]
    return sorted(((t, n) for t, n in got if n > 0), key=lambda x: (-x[1], x[0]))[:FACET_TASKS]


def _rollup_facet(session: Session, run_id: str, name: str, f: RolloutFilters) -> list[tuple]:
    """One facet's counts from the rollups, under filters `f` (its own filter already left out)
    that name only a step range and an ending (`from_rollups`)."""
    ending = f.ending
    if name == "task":
        return _task_counts(session, run_id, f)
    if name == "steps":
        stats = [s for s in _rollup_steps(session, run_id, f) if s.step is not None]
        present = [s.step for s in stats if _matching(s, ending)]
        buckets = _step_buckets(min(present), max(present)) if present else []
        return [(f"{a}-{b}", sum(_matching(s, ending) for s in stats if a <= s.step <= b)) for a, b in buckets]
    stats = _rollup_steps(session, run_id, f)
    if name == "ending":
        tot = {e: sum(s.endings[e] for s in stats) for e in ENDINGS}
        return [(e, n) for e, n in tot.items() if n]
    key = "agents" if name == "agent" else "findings"
    counts: dict[str, int] = {}
    for s in stats:
        part = s.get("by_ending", ending, key, default={}) if ending else (s.get(key) or {})
        for v, n in part.items():
            counts[v] = counts.get(v, 0) + n
    pairs = sorted(((v or NO_AGENT) if name == "agent" else v, n) for v, n in counts.items() if n)
    return sorted(pairs, key=lambda x: -x[1])


def _flag_counts(budget: FacetBudget, conds: list) -> list[tuple[str, int]]:
    """(kind, matching rollouts with a finding of that kind), largest first: a rollout's own
    findings through the (kind, rollout_pk) index, and for group-scope kinds every member of a
    flagged group through the (run_id, group_id) index, as `has_finding` selects them. One
    statement, under the facet budget."""
    own = sa.select(F.c.kind, R.c.pk).select_from(R.join(F, F.c.rollout_pk == R.c.pk)) \
        .where(*conds, F.c.severity != SKIPPED)
    grouped = sa.select(F.c.kind, R.c.pk).select_from(R.join(F, sa.and_(
        F.c.rollout_pk.is_(None), F.c.run_id == R.c.run_id, F.c.group_id == R.c.group_id))) \
        .where(*conds, F.c.severity != SKIPPED)
    both = sa.union(own, grouped).subquery()  # a rollout once per kind
    fq = sa.select(both.c.kind, sa.func.count().label("n")).group_by(both.c.kind).order_by(sa.desc("n"), both.c.kind)
    return [(k, n) for k, n in budget.run("flag", fq)]


def facets(*, session: Session, run_id: str, filters: RolloutFilters) -> dict:
    """Value counts for ending, task (the FACET_TASKS largest), agent, step range and findings.
    Each facet's counts apply every active filter except its own (so another value can be
    picked), and every value carries the filters that select it: {facet: [{"value", "count",
    "active", "params"}], "timed_out": [facet names]}.

    A facet whose other filters name only a step range and an ending counts from the rollups
    (exact, one row per step or task). Otherwise it is counted over the matching rollouts within
    FACET_BUDGET_MS for all such facets together (datasette's facet time limit): a facet that
    does not finish in time comes back empty and is named in `timed_out` (narrower filters make
    it fit). Findings are the rollouts' own and their group's (a group-scope finding counts for
    every member, as the `flag` filter selects them), not skipped outcomes, as in the rollups."""
    names = ("ending", "task", "agent", "flag", "steps")
    step_stats(session=session, run_id=run_id, include_unstepped=True, sections=list_sections(filters))  # one read
    out: dict[str, list] = {}
    for name in names:
        f = _without(filters, name)
        if from_rollups(f):
            out[name] = _rollup_facet(session, run_id, name, f)
        elif from_task_rollups(f) and name == "steps" and not f.step and not f.steps:
            per_step = {k: n for k, n in _task_rollup_steps(session, run_id, f.task, f.ending).items() if n}
            buckets = _step_buckets(min(per_step), max(per_step)) if per_step else []
            out[name] = [(f"{a}-{b}", sum(n for k, n in per_step.items() if a <= k <= b)) for a, b in buckets]
        elif from_task_rollups(f) and name == "ending" and not f.step and not f.steps:
            got = _run_task_endings(session, run_id, f.task)
            out[name] = [(e, got[e]) for e in ENDINGS if got.get(e)]
        elif from_task_rollups(f) and name in ("agent", "flag") and not f.step and not f.steps:
            out[name] = _run_task_values(session, run_id, f.task, f.ending, "agents" if name == "agent" else "findings")
    counted = [name for name in names if name not in out]
    # the rest within the budget (on SQLite its progress handler interrupts any statement past it)
    budget = FacetBudget(session, FACET_BUDGET_MS) if counted else None
    for name in counted:
        skip = "step" if name == "steps" else name

        def grouped(col, limit=None):
            q = sa.select(col, sa.func.count().label("n")).where(*where(run_id, filters, skip=skip)).group_by(col) \
                .order_by(sa.desc("n"), col)
            return [(v, n) for v, n in budget.run(name, q.limit(limit) if limit else q)]

        if name == "ending":
            out[name] = grouped(R.c.ending)
        elif name == "task":
            out[name] = [(t, n) for t, n in grouped(R.c.task_key, FACET_TASKS + 1) if t is not None][:FACET_TASKS]
        elif name == "agent":
            out[name] = [(a or NO_AGENT, n) for a, n in grouped(R.c.agent)]
        elif name == "flag":
            out[name] = _flag_counts(budget, where(run_id, filters, skip="flag"))
        else:
            span = budget.run("steps", sa.select(sa.func.min(R.c.step), sa.func.max(R.c.step))
                              .where(*where(run_id, filters, skip="step")))
            buckets = _step_buckets(span[0][0], span[0][1]) if span else []
            out[name] = []
            if buckets:
                bucket = sa.case(*[(R.c.step <= b, f"{a}-{b}") for a, b in buckets])
                got = dict(budget.run("steps", sa.select(bucket, sa.func.count()).where(
                    *where(run_id, filters, skip="step"), R.c.step.is_not(None)).group_by(bucket)))
                out[name] = [(f"{a}-{b}", got.get(f"{a}-{b}", 0)) for a, b in buckets] if got else []
    timed_out = []
    if budget is not None:
        budget.close()
        timed_out = sorted(set(budget.timed_out))
    active = filters.as_query()

    def values(name: str, pairs) -> list[dict]:
        key = {"steps": "steps", "flag": "flag"}.get(name, name)
        res = []
        for v, n in pairs:
            sel = dict(active)
            if name == "steps":
                sel.pop("step", None)
            chosen = str(active.get(key, "")) == str(v) if v != "" else False
            if chosen:
                sel.pop(key, None)
            else:
                sel[key] = v
            res.append({"value": v, "count": int(n), "active": chosen, "params": sel})
        return res

    got = {name: values(name, out[name]) for name in names}
    got["timed_out"] = timed_out
    return got


"""The rollouts list as researchers use lists: filters (prefix `task` / `group`, step ranges),
sortable columns with keyset pages that each have their own URL, a total count, facets whose
counts follow the active filters, and a CSV stream of everything that matches.

Keyset pages: the order is (sort column, pk), NULL values last in either direction; a cursor is
`<value>~<pk>` (`n~<pk>` inside the NULL tail). A page deep in a million rows costs what the first
page costs. `before=` walks back, so Back, reload and shared links return the same rows.

Prefix filters compare by range (`task >= p AND task < p + U+10FFFF`, plus an exact LIKE), so the
(run_id, task_key) / (run_id, group_id) indexes serve them; this is exact under byte-order
collations (SQLite, Postgres `C` / `C.UTF-8`).

Counts and facets without filters (or with only a step range) come from the rollups; with other
filters from the rollout table through its indexes.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session

from app.analytics.steps import StepRange, step_stats, run_totals
from app.db import models
from app.queries.annotations import labelled
from app.queries.common import SUMMARY_COLUMNS, attempt_columns
from app.queries.rollouts import RolloutFilters
from app.store.rollups import ENDINGS

R = models.Rollout.__table__
F = models.Finding.__table__
TR = models.TaskRollup.__table__
SORTS = {"step": R.c.step, "reward": R.c.reward, "tokens": R.c.n_tokens, "turns": R.c.n_turns}
TOP = "\U0010ffff"
NO_AGENT = "(none)"  # `agent=(none)`: the rollouts that name no agent (the agent facet's "(none)" value)


@dataclass
class ListFilters(RolloutFilters):
    """Query parameters of the rollouts page: the API's filters (app.queries.rollouts), where
    `task` and `group` match by prefix here, plus `steps` (a range `A-B`) and `agent`
    (`agent=(none)`, NO_AGENT, selects the rollouts without an agent)."""

    steps: str | None = None  # A-B, inclusive
    agent: str | None = None

    def only_steps(self) -> bool:
        return not any(v for k, v in self.as_query().items() if k not in ("step", "steps"))

    def step_range(self) -> StepRange:
        if self.step is not None:
            return StepRange(self.step, self.step)
        return StepRange.parse(self.steps)


def _prefix(col, prefix: str):
    esc = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return sa.and_(col >= prefix, col < prefix + TOP, col.like(esc + "%", escape="\\"))


def where(run_id: str, f: ListFilters, *, skip: str | None = None) -> list:
    """WHERE clauses of the filters (without the one named `skip`, for its own facet)."""
    out = [R.c.run_id == run_id]
    if skip != "step":
        if f.step is not None:
            out.append(R.c.step == f.step)
        elif f.steps:
            out.append(StepRange.parse(f.steps).where(R.c.step))
    if f.ending and skip != "ending":
        out.append(R.c.ending == f.ending)
    if f.group:
        out.append(_prefix(R.c.group_id, f.group))
    if f.task and skip != "task":
        out.append(_prefix(R.c.task_key, f.task))
    if f.agent and skip != "agent":
        out.append(sa.or_(R.c.agent.is_(None), R.c.agent == "") if f.agent == NO_AGENT else R.c.agent == f.agent)
    if f.reward_min is not None:
        out.append(R.c.reward >= f.reward_min)
    if f.reward_max is not None:
        out.append(R.c.reward <= f.reward_max)
    if f.flag and skip != "flag":
        from app.queries.findings import has_finding

        out.append(has_finding(f.flag))  # the rollout's own finding, or its group's for a group-scope kind
    if f.label:
        out.append(labelled(R.c.run_id, R.c.rollout_id, f.label))
    return out


def list_columns() -> list:
    """The summary columns of a list row, with its attempt count (app.queries.common)."""
    return [*SUMMARY_COLUMNS, *attempt_columns()]


# --- keyset pages -----------------------------------------------------------------------------

def encode_cursor(value, pk: int) -> str:
    if value is None:
        return f"n~{pk}"
    if isinstance(value, float):
        return f"{value!r}~{pk}"
    return f"{value}~{pk}"


def decode_cursor(cursor: str, sort: str) -> tuple[object, int]:
    """'value~pk' → (value or None, pk); ValueError for anything else."""
    value, sep, pk = cursor.rpartition("~")
    if not sep:
        raise ValueError(cursor)
    n = int(pk)
    if not 0 <= n <= 2**31 - 1:
        raise ValueError(cursor)
    if value == "n":
        return None, n
    v = float(value) if sort == "reward" else int(value)
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(cursor)
    if isinstance(v, int) and not -(2**31) <= v <= 2**31 - 1:
        raise ValueError(cursor)
    return v, n


def parse_sort(sort: str | None) -> tuple[str, bool]:
    """'-reward' → ('reward', True). ValueError for an unknown column."""
    s = sort or "step"
    desc = s.startswith("-")
    name = s.lstrip("-")
    if name not in SORTS:
        raise ValueError(f"sort: one of {', '.join(SORTS)} (prefix - for descending)")
    return name, desc


def page(*, session: Session, run_id: str, filters: ListFilters, columns: list, sort: str | None = None,
         after: str | None = None, before: str | None = None, limit: int = 50) -> dict:
    """One page of rows in (sort column, pk) order, NULLs last; `after` / `before` are cursors of
    the neighbouring page's last / first row. Returns {"rows", "next", "prev"} (cursors or None)."""
    name, desc = parse_sort(sort)
    col = SORTS[name]
    base = where(run_id, filters)
    back = before is not None
    cur = decode_cursor(before if back else after, name) if (before or after) else None
    # Walking forward in `desc` order is walking the index backwards; `before` flips it again.
    forward_desc = desc != back

    def ordered(q, nulls: bool):
        if nulls:
            return q.order_by(R.c.pk.desc() if back else R.c.pk)
        return q.order_by(*((col.desc(), R.c.pk.desc()) if forward_desc else (col, R.c.pk)))

    def value_part(n: int, cursor):
        q = sa.select(*columns).where(*base, col.is_not(None))
        if cursor is not None:
            v, pk = cursor
            cmp = sa.tuple_(col, R.c.pk) < sa.tuple_(sa.literal(v), sa.literal(pk)) if forward_desc else \
                sa.tuple_(col, R.c.pk) > sa.tuple_(sa.literal(v), sa.literal(pk))
            q = q.where(cmp)
        return list(session.execute(ordered(q, False).limit(n)).all())

    def null_part(n: int, after_pk: int | None, before_pk: int | None = None):
        q = sa.select(*columns).where(*base, col.is_(None))
        if after_pk is not None:
            q = q.where(R.c.pk > after_pk)
        if before_pk is not None:
            q = q.where(R.c.pk < before_pk)
        return list(session.execute(ordered(q, True).limit(n)).all())

    n = limit + 1
    if not back:
        if cur is not None and cur[0] is None:
            rows = null_part(n, cur[1])
        else:
            rows = value_part(n, cur)
            if len(rows) < n:
                rows += null_part(n - len(rows), None)
        more = len(rows) > limit
        rows = rows[:limit]
        has_prev = cur is not None
    else:
        if cur[0] is None:
            rows = null_part(n, None, cur[1])
            if len(rows) < n:
                rows += value_part(n - len(rows), None)
        else:
            rows = value_part(n, cur)
        more = len(rows) > limit  # rows before these exist
        rows = list(reversed(rows[:limit]))
        has_prev = more
        more = True  # we came back from a later page
    key = lambda r: encode_cursor(getattr(r, col.name), r.pk)  # noqa: E731
    return {"rows": rows, "next": key(rows[-1]) if rows and more else None,
            "prev": key(rows[0]) if rows and has_prev else None}


def neighbours(*, session: Session, run_id: str, filters: ListFilters, sort: str | None, row) -> tuple:
    """The rows just before and after `row` (a rollout row with its pk and sort column) in the
    list with these filters and this sort, in the order `page` shows it (NULLs last); None at
    either end. Two one-row keyset pages, so a rollout page's prev / next walk the list shown."""
    name, _ = parse_sort(sort)
    cursor = encode_cursor(getattr(row, SORTS[name].name), row.pk)
    cols = [R.c.pk, R.c.run_id, R.c.rollout_id, R.c.attempt, *SORTS.values()]
    prev = page(session=session, run_id=run_id, filters=filters, columns=cols, sort=sort, before=cursor, limit=1)
    nxt = page(session=session, run_id=run_id, filters=filters, columns=cols, sort=sort, after=cursor, limit=1)
    return (prev["rows"][0] if prev["rows"] else None), (nxt["rows"][0] if nxt["rows"] else None)


# --- counts and facets ------------------------------------------------------------------------

COUNT_CAP = 100_000  # a filtered count stops here (the page says "100,000+"); rollup counts are exact


def count(*, session: Session, run_id: str, filters: ListFilters) -> tuple[int, bool]:
    """Rollouts matching the filters (every attempt) and whether the count stopped at COUNT_CAP.
    Exact from the rollups when only steps filter; otherwise counted through the indexes, up to
    COUNT_CAP."""
    if filters.only_steps():
        return sum(s.rollouts for s in step_stats(session=session, run_id=run_id, steps=filters.step_range(),
                                                  include_unstepped=not filters.as_query())), False
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


def facets(*, session: Session, run_id: str, filters: ListFilters) -> dict:
    """Value counts for ending, task (the FACET_TASKS largest), agent, step range and findings.
    Each facet's counts apply every active filter except its own (so another value can be
    picked), and every value carries the filters that select it: {facet: [{"value", "count",
    "active", "params"}], "timed_out": [facet names]}.

    With only step filters the counts come from the rollups. Otherwise they are counted over the
    matching rollouts within FACET_BUDGET_MS for all facets together (datasette's facet time
    limit): a facet that does not finish in time comes back empty and is named in `timed_out`
    (narrower filters make it fit)."""
    out: dict[str, list] = {}
    timed_out: list[str] = []
    if filters.only_steps():
        rng = filters.step_range()
        stats = step_stats(session=session, run_id=run_id, steps=rng, include_unstepped=not filters.as_query())
        tot = run_totals(stats)
        out["ending"] = [(e, n) for e, n in tot["endings"].items() if n]
        out["agent"] = sorted(((a or NO_AGENT, n) for a, n in tot["agents"].items()), key=lambda x: -x[1])
        out["flag"] = sorted(tot["findings"].items(), key=lambda x: -x[1])
        tasks = session.execute(sa.select(TR.c.task_key, sa.func.sum(TR.c.rollouts).label("n"))
                                .where(TR.c.run_id == run_id, rng.where(TR.c.step)).group_by(TR.c.task_key)
                                .order_by(sa.desc("n"), TR.c.task_key).limit(FACET_TASKS)).all()
        out["task"] = [(t, int(n)) for t, n in tasks]
        all_steps = step_stats(session=session, run_id=run_id) if filters.as_query() else \
            [s for s in stats if s.step is not None]
        buckets = _step_buckets(*(lambda t: (t["first_step"], t["last_step"]))(run_totals(all_steps)))
        out["steps"] = [(f"{a}-{b}", sum(s.rollouts for s in all_steps if a <= s.step <= b)) for a, b in buckets]
    else:
        budget = FacetBudget(session, FACET_BUDGET_MS)

        def grouped(col, skip, limit=None):
            q = sa.select(col, sa.func.count().label("n")).where(*where(run_id, filters, skip=skip)).group_by(col) \
                .order_by(sa.desc("n"), col)
            return [(v, n) for v, n in budget.run(skip, q.limit(limit) if limit else q)]

        out["ending"] = grouped(R.c.ending, "ending")
        out["task"] = [(t, n) for t, n in grouped(R.c.task_key, "task", FACET_TASKS + 1) if t is not None][:FACET_TASKS]
        out["agent"] = [(a or NO_AGENT, n) for a, n in grouped(R.c.agent, "agent")]
        fq = sa.select(F.c.kind, sa.func.count(sa.distinct(F.c.rollout_pk)).label("n")).join(R, R.c.pk == F.c.rollout_pk) \
            .where(*where(run_id, filters, skip="flag")).group_by(F.c.kind).order_by(sa.desc("n"), F.c.kind)
        out["flag"] = [(k, n) for k, n in budget.run("flag", fq)]
        span = budget.run("steps", sa.select(sa.func.min(R.c.step), sa.func.max(R.c.step))
                          .where(*where(run_id, filters, skip="step")))
        buckets = _step_buckets(span[0][0], span[0][1]) if span else []
        if buckets:
            bucket = sa.case(*[(R.c.step <= b, f"{a}-{b}") for a, b in buckets])
            got = dict(budget.run("steps", sa.select(bucket, sa.func.count()).where(
                *where(run_id, filters, skip="step"), R.c.step.is_not(None)).group_by(bucket)))
            out["steps"] = [(f"{a}-{b}", got.get(f"{a}-{b}", 0)) for a, b in buckets] if got else []
        else:
            out["steps"] = []
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

    got = {name: values(name, pairs) for name, pairs in out.items()}
    got["timed_out"] = timed_out
    return got


def ordered_endings() -> list[str]:
    return ENDINGS

"""The one rollouts-list engine: the filters every list takes (the rollouts page, its JSON twin
and CSV, `/api/v1/runs/{run}/rollouts`, the export), sortable columns and keyset pages that each
have their own URL. Counts and facets: app/queries/rollout_facets.py. What each filter means is
documented once, in docs/api.md ("Filters").

Keyset pages: the order is (sort column, pk), NULL values last in either direction; a cursor is
`<value>~<pk>` (`n~<pk>` inside the NULL tail). A page deep in a million rows costs what the first
page costs. `before=` walks back, so Back, reload and shared links return the same rows.

`task` and `group` match exactly; a value ending in `*` matches by prefix (`task=gsm8k/*`).
A prefix compares by range (`task >= p AND task < p + U+10FFFF`, plus an exact LIKE), so the
(run_id, task_key) / (run_id, group_id) indexes serve it; this is exact under byte-order
collations (SQLite, Postgres `C` / `C.UTF-8`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from app.queries import reward_components as q_rc
from app.queries.annotations import labelled
from app.queries.common import SUMMARY_COLUMNS, attempt_columns
from app.queries.steps import StepRange
from ingest.fields import INT32_MAX, INT32_MIN

R = models.Rollout.__table__
SORTS = {"step": R.c.step, "reward": R.c.reward, "tokens": R.c.n_tokens, "turns": R.c.n_turns}
COMPONENT_SORT = "component:"  # `sort=component:<name>`: by that reward component's score (NULL: no such component)
SORT_VALUE = "sort_value"  # the column a component sort adds to the rows (its cursor's value)
TOP = "\U0010ffff"
NO_AGENT = "(none)"  # `agent=(none)`: the rollouts that name no agent (the agent facet's "(none)" value)
PREFIX = "*"  # a `task` / `group` value ending in it matches by prefix


@dataclass
class RolloutFilters:
    """The filters of every rollouts list (docs/api.md, "Filters"). `step` one step, or `steps`
    a range `A-B` (inclusive, either end open); `ending` exact; `task`, `group` exact, or a prefix
    when ending in `*`; `agent` exact, `(none)` (NO_AGENT) for the rollouts without one;
    `reward_min` / `reward_max` inclusive; `flag` a finding kind (the rollout's own, or its
    group's for a group-scope kind); `label` a label given to the rollout (any author);
    `staleness` policy versions behind (step − the oldest policy version that sampled it), exact;
    `component` a reward component's name (`Rollout.rewards`, exact): the rollouts that have it,
    scored within `component_min` / `component_max` (inclusive) when given; `signature` a
    failure signature's id in the run (docs/failures.md): the rollouts carrying it."""

    # in the order the URLs name them (`as_query`)
    step: int | None = None
    ending: str | None = None
    group: str | None = None
    task: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    flag: str | None = None
    label: str | None = None
    staleness: int | None = None
    steps: str | None = None
    agent: str | None = None
    component: str | None = None
    component_min: float | None = None
    component_max: float | None = None
    signature: int | None = None

    def as_query(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}

    def step_range(self) -> StepRange:
        """The steps the list covers: `step` and `steps` together are both applied (AND), so a
        step outside the range gives an empty range (first after last)."""
        rng = StepRange.parse(self.steps)
        if self.step is None:
            return rng
        inside = (rng.first is None or self.step >= rng.first) and (rng.last is None or self.step <= rng.last)
        return StepRange(self.step, self.step) if inside else StepRange(self.step, self.step - 1)


def is_prefix(value: str | None) -> bool:
    return bool(value) and value.endswith(PREFIX)


def _prefix(col, prefix: str):
    esc = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return sa.and_(col >= prefix, col < prefix + TOP, col.like(esc + "%", escape="\\"))


def matches(col, value: str):
    """`col` equal to `value`, or starting with it when it ends in `*` (by range: see above)."""
    return _prefix(col, value[:-1]) if is_prefix(value) else col == value


def where(run_id: str, f: RolloutFilters, *, skip: str | None = None) -> list:
    """WHERE clauses of the filters (without the one named `skip`, for its own facet)."""
    out = [R.c.run_id == run_id]
    if skip != "step":
        if f.step is not None and not f.steps:
            out.append(R.c.step == f.step)
        elif f.step is not None or f.steps:
            out.append(f.step_range().where(R.c.step))
    if f.ending and skip != "ending":
        out.append(R.c.ending == f.ending)
    if f.group:
        out.append(matches(R.c.group_id, f.group))
    if f.task and skip != "task":
        out.append(matches(R.c.task_key, f.task))
    if f.agent and skip != "agent":
        out.append(sa.or_(R.c.agent.is_(None), R.c.agent == "") if f.agent == NO_AGENT else R.c.agent == f.agent)
    if f.reward_min is not None:
        out.append(R.c.reward >= f.reward_min)
    if f.reward_max is not None:
        out.append(R.c.reward <= f.reward_max)
    if f.staleness is not None:
        out.append(R.c.staleness == f.staleness)
    if f.flag and skip != "flag":
        from app.queries.findings import has_finding

        out.append(has_finding(f.flag))  # the rollout's own finding, or its group's for a group-scope kind
    if f.label:
        out.append(labelled(R.c.run_id, R.c.rollout_id, f.label))
    if f.component:
        out.append(q_rc.has_component(f.component, f.component_min, f.component_max))
    if f.signature is not None:
        from app.queries.signatures import has_signature

        out.append(has_signature(run_id, f.signature))
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
    if not 0 <= n <= INT32_MAX:
        raise ValueError(cursor)
    if value == "n":
        return None, n
    v = float(value) if sort == "reward" or sort.startswith(COMPONENT_SORT) else int(value)
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(cursor)
    if isinstance(v, int) and not INT32_MIN <= v <= INT32_MAX:
        raise ValueError(cursor)
    return v, n


def parse_sort(sort: str | None) -> tuple[str, bool]:
    """'-reward' → ('reward', True); '-component:format' → ('component:format', True). ValueError
    for an unknown column or an empty component name."""
    s = sort or "step"
    desc = s.startswith("-")
    name = s[1:] if desc else s
    if name not in SORTS and not (name.startswith(COMPONENT_SORT) and len(name) > len(COMPONENT_SORT)):
        raise ValueError(f"sort: one of {', '.join(SORTS)} or {COMPONENT_SORT}<name> (prefix - for descending)")
    return name, desc


def sort_column(name: str):
    """The expression a list sorts by: a summary column, or (`component:<name>`) the score of that
    reward component labelled SORT_VALUE (app.queries.reward_components.score_of: a correlated
    lookup, for one row)."""
    if name.startswith(COMPONENT_SORT):
        return q_rc.score_of(name[len(COMPONENT_SORT):]).label(SORT_VALUE)
    return SORTS[name]


@dataclass
class _Sort:
    """How `page` reads a sort: `col` to compare and order by, `attr` the row attribute holding
    its value; `value_from` / `value_columns` the FROM and columns of the rows that have a value,
    `null_where` / `null_columns` those of the rows that have none (NULLs last)."""

    col: object
    attr: str
    value_columns: list
    null_columns: list
    null_where: object
    value_from: object = None


def _sort(name: str, columns: list) -> _Sort:
    """A summary column reads as itself. A component (`component:<name>`) is joined: the rollouts
    with that component scored, walked in (score, rollout pk) order by the
    (name, score, rollout_pk) index, and then the rest (no such component, or not scored) by pk."""
    if not name.startswith(COMPONENT_SORT):
        col = SORTS[name]
        return _Sort(col, col.name, columns, columns, col.is_(None))
    cname = name[len(COMPONENT_SORT):]
    RC = q_rc.RC.alias("sort_component")
    return _Sort(RC.c.score, SORT_VALUE, [*columns, RC.c.score.label(SORT_VALUE)],
                 [*columns, sa.null().label(SORT_VALUE)],
                 ~q_rc.has_component(cname, scored=True),
                 R.join(RC, sa.and_(RC.c.rollout_pk == R.c.pk, RC.c.name == cname)))


def page(*, session: Session, run_id: str, filters: RolloutFilters, columns: list, sort: str | None = None,
         after: str | None = None, before: str | None = None, limit: int = 50) -> dict:
    """One page of rows in (sort column, pk) order, NULLs last; `after` / `before` are cursors of
    the neighbouring page's last / first row. Returns {"rows", "next", "prev"} (cursors or None)."""
    name, desc = parse_sort(sort)
    srt = _sort(name, columns)
    col = srt.col
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
        q = sa.select(*srt.value_columns)
        if srt.value_from is not None:
            q = q.select_from(srt.value_from)
        q = q.where(*base, col.is_not(None))
        if cursor is not None:
            v, pk = cursor
            cmp = sa.tuple_(col, R.c.pk) < sa.tuple_(sa.literal(v), sa.literal(pk)) if forward_desc else \
                sa.tuple_(col, R.c.pk) > sa.tuple_(sa.literal(v), sa.literal(pk))
            q = q.where(cmp)
        return list(session.execute(ordered(q, False).limit(n)).all())

    def null_part(n: int, after_pk: int | None, before_pk: int | None = None):
        q = sa.select(*srt.null_columns).where(*base, srt.null_where)
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
    key = lambda r: encode_cursor(getattr(r, srt.attr), r.pk)  # noqa: E731
    return {"rows": rows, "next": key(rows[-1]) if rows and more else None,
            "prev": key(rows[0]) if rows and has_prev else None}


def neighbours(*, session: Session, run_id: str, filters: RolloutFilters, sort: str | None, row) -> tuple:
    """The rows just before and after `row` (a rollout row with its pk and sort column) in the
    list with these filters and this sort, in the order `page` shows it (NULLs last); None at
    either end. Two one-row keyset pages, so a rollout page's prev / next walk the list shown."""
    name, _ = parse_sort(sort)
    if name in SORTS:
        value = getattr(row, SORTS[name].name)
    else:
        value = session.execute(sa.select(sort_column(name)).where(R.c.pk == row.pk)).scalar()
    cursor = encode_cursor(value, row.pk)
    cols = [R.c.pk, R.c.run_id, R.c.rollout_id, R.c.attempt, *SORTS.values()]
    prev = page(session=session, run_id=run_id, filters=filters, columns=cols, sort=sort, before=cursor, limit=1)
    nxt = page(session=session, run_id=run_id, filters=filters, columns=cols, sort=sort, after=cursor, limit=1)
    return (prev["rows"][0] if prev["rows"] else None), (nxt["rows"][0] if nxt["rows"] else None)

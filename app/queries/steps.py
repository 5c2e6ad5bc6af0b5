"""Reads of the per-step and per-task rollups (app/store/rollups.py): what every chart, the
step page, compare and the runs list draw from. Keyword-only, the session passed explicitly.
A run with 1,000 steps is 1,000 small rows here, whatever the number of rollouts."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import orjson
import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from ingest.fields import INT32_MAX
from ingest.stats import ENDINGS, NO_GRADIENT_REASONS

SR = models.StepRollup.__table__
TR = models.TaskRollup.__table__
RT = models.RunTaskRollup.__table__
STEP_RANGE = re.compile(r"^\s*(\d+)?\s*-\s*(\d+)?\s*$|^\s*(\d+)\s*$")


@dataclass(frozen=True)
class StepRange:
    """`?steps=100-200` (inclusive; either end may be left open: `100-`, `-200`; or one step `150`)."""

    first: int | None = None
    last: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> "StepRange":
        """Raises ValueError for anything but `A-B`, `A-`, `-B` or `A` with whole numbers, and for
        a number above 2147483647 (INT32_MAX: a step is a Postgres INTEGER)."""
        if not text:
            return cls()
        m = STEP_RANGE.match(text)
        if not m:
            raise ValueError(f"steps: expected A-B, A-, -B or A, got {text!r}")
        for x in m.groups():
            if x is not None and (len(x.lstrip("0")) > 10 or int(x) > INT32_MAX):
                raise ValueError(f"steps: {x[:30]} is above {INT32_MAX} (the largest step)")
        if m.group(3) is not None:
            return cls(int(m.group(3)), int(m.group(3)))
        a, b = (int(x) if x is not None else None for x in m.group(1, 2))
        if a is not None and b is not None and a > b:
            raise ValueError(f"steps: {a} is after {b}")
        return cls(a, b)

    def __str__(self) -> str:
        if self.first is None and self.last is None:
            return ""
        if self.first == self.last:
            return str(self.first)
        return f"{'' if self.first is None else self.first}-{'' if self.last is None else self.last}"

    def where(self, column):
        clauses = []
        if self.first is not None:
            clauses.append(column >= self.first)
        if self.last is not None:
            clauses.append(column <= self.last)
        return sa.and_(sa.true(), *clauses)


@dataclass
class StepStats:
    """One training step's rollup: what a chart's build() receives, one per step, by step."""

    run_id: str
    step: int | None
    rollouts: int
    mean_reward: float | None  # errors scored 0
    mean_reward_no_errors: float | None  # errored rollouts dropped
    scored: int
    excluded: int
    stats: dict = field(default_factory=dict)

    @property
    def endings(self) -> dict[str, int]:
        cached = self.__dict__.get("_endings")
        if cached is None:
            cached = self.__dict__["_endings"] = {e: (self.stats.get("endings") or {}).get(e, 0) for e in ENDINGS}
        return cached

    def get(self, *path, default=None):
        """stats[path...] or `default`: `s.get("reward", "errors_as_zero", "median")`."""
        d = self.stats
        for k in path:
            if not isinstance(d, dict) or k not in d:
                return default
            d = d[k]
        return d

    def share(self, n: int | None) -> float | None:
        return (n or 0) / self.rollouts if self.rollouts else None

    def as_dict(self) -> dict:
        return {"step": self.step, "rollouts": self.rollouts, "mean_reward": self.mean_reward,
                "mean_reward_no_errors": self.mean_reward_no_errors, "scored": self.scored,
                "excluded": self.excluded, "endings": self.endings,
                **{k: v for k, v in self.stats.items() if k != "endings"}}


def _order(col):
    return (col.is_(None), col)


# What a run's totals and its page read of each step (run_totals below, the run
# page's table, checks and metadata, and `by_ending` for the headline endings chart's
# "reason contradicted" segments): not the chart-only sections (lengths, groups, advantages,
# mismatch, staleness) nor the ending details.
RUN_SECTIONS = ("endings", "by_ending", "reward", "no_gradient", "agents", "findings", "retries", "ingested", "sources",
                "checks")


def step_stats(*, session: Session, run_id: str, steps: StepRange = StepRange(),
               include_unstepped: bool = False, sections: tuple[str, ...] | None = None) -> list[StepStats]:
    """The run's step rollups in step order (rollouts without a step last, when asked for).
    `sections`: the top-level keys of `stats` to read (None: all of them); a chart reads one or
    two of the document's ~2 KB. Read once per session (request), run and sections; ranges are
    cut from that."""
    memo = session.info.setdefault("step_stats", {})
    key = next((k for k in memo if k[:2] == (run_id, include_unstepped) and (
        k[2] is None or (sections is not None and set(sections) <= set(k[2])))),  # a read that holds these
        (run_id, include_unstepped, sections))
    if key not in memo and steps.first is not None and steps.last is not None:
        return _read_step_stats(session, run_id, False, steps, sections)  # a few steps: read just those
    if key not in memo:
        memo[key] = _read_step_stats(session, run_id, include_unstepped, sections=sections)
    rows = memo[key]
    if steps.first is None and steps.last is None:
        return list(rows)
    return [r for r in rows if r.step is not None and (steps.first is None or r.step >= steps.first)
            and (steps.last is None or r.step <= steps.last)]


def _sections_text(session: Session, sections: tuple[str, ...] | None, doc):
    """`stats` (the column or expression `doc`) as JSON text: the whole document, or a JSON
    array of the values of `sections` (one parse of the stored document per row on SQLite,
    json_extract with several paths; a jsonb lookup per section on Postgres)."""
    if sections is None:
        return sa.cast(doc, sa.Text)
    if not sections:
        return sa.null()
    if session.get_bind().dialect.name == "postgresql":
        return sa.cast(sa.func.jsonb_build_array(*[doc.op("->")(sa.literal(k)) for k in sections]), sa.Text)
    paths = [f'$."{k}"' for k in sections]
    # with a single path json_extract returns the value itself, not an array: ask twice
    return sa.func.json_extract(sa.cast(doc, sa.Text), *(paths if len(paths) > 1 else paths * 2),
                                type_=sa.Text)


ROW = (SR.c.run_id, SR.c.step, SR.c.rollouts, SR.c.mean_reward, SR.c.mean_reward_no_errors, SR.c.scored, SR.c.excluded)


def _read_step_stats(session: Session, run_id: str | None, include_unstepped: bool,
                     steps: StepRange = StepRange(), sections: tuple[str, ...] | None = None) -> list[StepStats]:
    """The step rollups of one run (`run_id` None: of every run, by run), as `step_stats`."""
    where = [steps.where(SR.c.step) if include_unstepped is False
             else sa.or_(steps.where(SR.c.step), SR.c.step.is_(None))]
    if run_id is not None:
        where.append(SR.c.run_id == run_id)
    if not include_unstepped:
        where.append(SR.c.step.is_not(None))
    # stats as text, parsed here by orjson: they hold only counts and finite floats, so the
    # engine's careful JSON reader (ingest.jsonio.loads: long integers kept) would cost 10x more
    if session.get_bind().dialect.name == "postgresql" and sections and len(sections) > 1:
        # Postgres decompresses a stored (TOASTed, ~2 KB) document for each `->` on it: the run
        # page's 10 sections of 1,000 steps took 180 ms. `|| '{}'` below it (OFFSET 0: not
        # flattened into this query) decompresses it once, the lookups read that copy: 65 ms.
        inner = sa.select(*ROW, SR.c.stats.op("||")(sa.cast(sa.literal("{}"), SR.c.stats.type)).label("doc")) \
            .where(*where).offset(0).subquery()
        q = sa.select(*[inner.c[c.name] for c in ROW], _sections_text(session, sections, inner.c.doc).label("stats"))
        step_col, run_col = inner.c.step, inner.c.run_id
    else:
        q = sa.select(*ROW, _sections_text(session, sections, SR.c.stats).label("stats")).where(*where)
        step_col, run_col = SR.c.step, SR.c.run_id
    rows = session.execute(q.order_by(*(() if run_id is not None else (run_col,)), *_order(step_col))).all()

    def parse(text):
        if not text:
            return {}
        got = orjson.loads(text)
        if sections is None:
            return got or {}
        return {k: v for k, v in zip(sections, got) if v is not None}

    out = [StepStats(r.run_id, r.step, r.rollouts, r.mean_reward, r.mean_reward_no_errors, r.scored, r.excluded,
                     parse(r.stats)) for r in rows]
    if run_id is not None and (sections is None or COMPONENTS_SECTION in sections):
        _add_component_means(session, run_id, steps, out)
    return out


# Not stored in the rollup: each reward component's mean per step, computed when a read asks for
# this section or for all of them (app/queries/reward_components.py `step_means`, one GROUP BY over
# the steps read), as stats["reward_components"] = {name: {"mean", "n"}}.
COMPONENTS_SECTION = "reward_components"


def _add_component_means(session: Session, run_id: str, steps: StepRange, out: list[StepStats]) -> None:
    from app.queries import reward_components as q_rc

    by_step: dict[int, dict] = {}
    for name, points in q_rc.step_means(session=session, run_id=run_id, steps=steps).items():
        for p in points:
            by_step.setdefault(p["step"], {})[name] = {"mean": p["mean"], "n": p["n"]}
    for s in out:
        if s.step in by_step:
            s.stats[COMPONENTS_SECTION] = by_step[s.step]


def every_run_step_stats(*, session: Session, sections: tuple[str, ...]) -> dict[str, list[StepStats]]:
    """Every run's step rollups (with the rollouts without a step, last), by run: the runs list."""
    out: dict[str, list[StepStats]] = {}
    for s in _read_step_stats(session, None, True, sections=sections):
        out.setdefault(s.run_id, []).append(s)
    return out


def one_step(*, session: Session, run_id: str, step: int) -> StepStats | None:
    got = step_stats(session=session, run_id=run_id, steps=StepRange(step, step))
    return got[0] if got else None


def next_step(*, session: Session, run_id: str, step: int) -> int | None:
    """The run's first recorded step after `step`, or None."""
    return session.execute(sa.select(sa.func.min(SR.c.step)).where(SR.c.run_id == run_id, SR.c.step > step)).scalar()


def task_rows(*, session: Session, run_id: str, steps: list[int]) -> list:
    """The per-(step, task) rollups of the given steps of a run, by step then task."""
    return session.execute(sa.select(TR).where(TR.c.run_id == run_id, TR.c.step.in_(sorted(set(steps))))
                           .order_by(TR.c.step, TR.c.task_key)).all()


def task_totals(*, session: Session, run_ids: list[str], steps: StepRange = StepRange()) -> dict[str, dict[str, dict]]:
    """Per run, per task: rollouts, errored rollouts and mean rewards over the step range (means
    weighted by each step's scored count: the mean over all the task's rollouts). Over every
    step: the run's task rollups (one row per task, kept at ingest, exact weighted means);
    over a range: aggregated by the database, one row per (run, task) comes back."""
    out: dict[str, dict[str, dict]] = {r: {} for r in run_ids}
    if steps.first is None and steps.last is None:  # every step: the run's task rows, one per task
        for t in session.execute(sa.select(RT.c.run_id, RT.c.task_key, RT.c.rollouts, RT.c.errors, RT.c.mean_reward,
                                           RT.c.mean_reward_no_errors).where(RT.c.run_id.in_(run_ids))):
            out[t.run_id][t.task_key] = {"rollouts": t.rollouts, "errors": t.errors,
                                         "mean_reward": _finite(t.mean_reward),
                                         "mean_reward_no_errors": _finite(t.mean_reward_no_errors)}
        return out

    def weighted(mean, n):
        return sa.func.sum(mean * n) / sa.func.nullif(sa.func.sum(sa.case((mean.is_not(None), n), else_=0)), 0)

    q = (sa.select(TR.c.run_id, TR.c.task_key, sa.func.sum(TR.c.rollouts).label("rollouts"),
                   sa.func.sum(TR.c.errors).label("errors"),
                   weighted(TR.c.mean_reward, TR.c.scored).label("m0"),
                   weighted(TR.c.mean_reward_no_errors, TR.c.scored_no_errors).label("m1"))
         .where(TR.c.run_id.in_(run_ids), steps.where(TR.c.step)).group_by(TR.c.run_id, TR.c.task_key))
    for t in session.execute(q):
        out[t.run_id][t.task_key] = {"rollouts": int(t.rollouts), "errors": int(t.errors),
                                     "mean_reward": _finite(t.m0), "mean_reward_no_errors": _finite(t.m1)}
    return out


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def heatmap_tasks(*, session: Session, run_id: str, steps: StepRange, limit: int) -> tuple[list, int]:
    """The per-(step, task) rollups of the `limit` tasks with the most rollouts in the step range
    (by step then task), and how many tasks the range has: the heatmap reads these, not every
    task row of the run."""
    where = (TR.c.run_id == run_id, TR.c.step.is_not(None), steps.where(TR.c.step))
    volume = task_volumes(session=session, run_id=run_id, steps=steps, stepped=True)
    top = [k for k, _ in sorted(volume, key=lambda v: (-v[1], v[0]))[:limit]]
    if not top:
        return [], 0
    rows = session.execute(sa.select(TR.c.step, TR.c.task_key, TR.c.rollouts, TR.c.mean_reward, TR.c.scored)
                           .where(*where, TR.c.task_key.in_(top)).order_by(TR.c.step, TR.c.task_key)).all()
    return rows, len(volume)


def task_volumes(*, session: Session, run_id: str, steps: StepRange = StepRange(),
                 stepped: bool = False) -> list[tuple[str, int]]:
    """(task, rollouts) of every task of the run over the step range (`stepped`: only rollouts
    with a step). Over every step from the run's task rollups (one row per task); the rollouts
    without a step are then taken off from their few task rows."""
    if steps.first is None and steps.last is None:
        got = dict(session.execute(sa.select(RT.c.task_key, RT.c.rollouts).where(RT.c.run_id == run_id)).all())
        if stepped:
            for task, n in session.execute(sa.select(TR.c.task_key, TR.c.rollouts).where(TR.c.run_id == run_id,
                                                                                          TR.c.step.is_(None))):
                got[task] = got.get(task, 0) - n
        return [(t, n) for t, n in got.items() if n > 0]
    where = [TR.c.run_id == run_id, steps.where(TR.c.step)] + ([TR.c.step.is_not(None)] if stepped else [])
    return [(t, int(n)) for t, n in session.execute(sa.select(TR.c.task_key, sa.func.sum(TR.c.rollouts))
                                                    .where(*where).group_by(TR.c.task_key))]


def weighted_mean(pairs: list[tuple[float | None, int]]) -> float | None:
    """Σ mean·n / Σ n over (mean, n) pairs with a mean: the mean over all their values, taken
    as Σ mean·(n / N) so that huge finite means (1e308) do not overflow."""
    kept = [(m, n) for m, n in pairs if m is not None and n]
    total = sum(n for _, n in kept)
    if not total:
        return None
    out = math.fsum(m * (n / total) for m, n in kept)
    return out if math.isfinite(out) else None


def exact_total_mean(stats: list[StepStats], policy: str) -> float | None:
    """The mean reward over all the steps' rollouts under `policy` ("errors_as_zero" or
    "errors_dropped"), exactly rounded: `fsum` of every step's exact partial sums
    (ingest/stats.py `exact_partials`) over the total count. None when a step lacks its
    partials (a sum that overflowed) or nothing is scored; callers then weight the step means."""
    parts: list[float] = []
    n = 0
    for s in stats:
        k = s.get("reward", policy, "n", default=0)
        if not k:
            continue
        p = s.get("reward", policy, "partials")
        if p is None:
            return None
        parts += p
        n += k
    if not n:
        return None
    m = math.fsum(parts) / n
    return m if math.isfinite(m) else None


def run_totals(stats: list[StepStats]) -> dict:
    """Counts per ending, no-gradient reasons and agents summed over steps; mean rewards exactly
    rounded over all rollouts (`exact_total_mean`), else weighted step means."""
    endings = {e: sum(s.endings[e] for s in stats) for e in ENDINGS}
    m0 = exact_total_mean(stats, "errors_as_zero")
    if m0 is None:
        m0 = weighted_mean([(s.mean_reward, s.scored) for s in stats])
    m1 = exact_total_mean(stats, "errors_dropped")
    if m1 is None:
        m1 = weighted_mean([(s.mean_reward_no_errors, s.get("reward", "errors_dropped", "n", default=0))
                            for s in stats])
    agents: dict[str, int] = {}
    findings: dict[str, int] = {}
    for s in stats:
        for a, n in (s.get("agents") or {}).items():
            agents[a] = agents.get(a, 0) + n
        for k, n in (s.get("findings") or {}).items():
            findings[k] = findings.get(k, 0) + n
    return {"rollouts": sum(s.rollouts for s in stats), "endings": endings,
            "retries": sum(s.get("retries", default=0) for s in stats),
            "excluded": sum(s.excluded for s in stats),
            "mean_reward": m0, "mean_reward_no_errors": m1,
            "no_gradient": {k: sum(s.get("no_gradient", k, default=0) for s in stats) for k in NO_GRADIENT_REASONS},
            "agents": agents, "findings": findings,
            "first_step": min((s.step for s in stats if s.step is not None), default=None),
            "last_step": max((s.step for s in stats if s.step is not None), default=None)}


"""Step alerts at ingest: judge the completed steps a batch touched (ingest/step_alerts.py, the
rule) from their rollups and keep the flagged ones in `step_alert`. Ingest posts nothing: the
serve process's watcher (app/alerts/watcher.py) posts a flagged step to the webhook once it has
settled, so a verdict that a late writer's rollouts take back (two producers filling one step at
different speeds) never pages anyone.

A step is complete, and judged, once a later step of its run has rollouts: while it is the
newest step more of its rollouts may still arrive (a live run fills its steps one after
another). The newest step of a run is therefore never judged until the next one begins.

Which steps a batch judges: the complete steps among those it wrote, the step recorded before
each of them (it may just have become complete) and the `window` recorded steps after each
(their trailing window changed). Each is judged afresh against its trailing window from the
rollups and its row replaced, added or deleted: judging is idempotent, re-ingest adds nothing,
and `rebuild` (rollscope rebuild-analytics) gives the same rows as ingest did.
"""
from __future__ import annotations

import sqlalchemy as sa

from app import urls
from app.db import models
from app.db.engine import insert_for
from app.store.prepare import _json_safe
from ingest.step_alerts import Rule, StepFigures, design_effects, judge, reward_se

SR = models.StepRollup.__table__
TR = models.TaskRollup.__table__
SA = models.StepAlert.__table__


def _settings():
    from app.config import get_settings

    return get_settings()


def rule_of(settings) -> Rule:
    a = settings.alerts
    return Rule(window=a.window, min_steps=a.min_steps, threshold=a.threshold)


def figures_from(step: int, rollouts: int, mean_reward, mean_reward_no_errors, stats: dict | None,
                 tasks: list[tuple[int, dict, dict]] = ()) -> StepFigures:
    """A step's figures from its rollup row (stats as ingest/stats.py `compute_step` keeps it) and
    its task rows ((rollouts, endings, by_ending) per task: the design effects)."""
    stats = stats or {}
    reward = stats.get("reward") or {}
    by_end = stats.get("by_ending") or {}
    finding_endings: dict[str, dict[str, int]] = {}
    for ending, parts in by_end.items():
        for kind, n in ((parts or {}).get("findings") or {}).items():
            finding_endings.setdefault(kind, {})[ending] = n
    return StepFigures(step=step, rollouts=rollouts, endings=stats.get("endings") or {},
                       findings=stats.get("findings") or {}, mean_reward=mean_reward,
                       mean_reward_no_errors=mean_reward_no_errors,
                       reward_se=reward_se(reward.get("errors_as_zero")),
                       reward_se_no_errors=reward_se(reward.get("errors_dropped")),
                       ending_details=stats.get("ending_details") or {}, finding_endings=finding_endings,
                       groups=(stats.get("groups") or {}).get("groups") or 0,
                       deff=design_effects([(n, _task_counts(e, b)) for n, e, b in tasks]))


def _task_counts(endings: dict | None, by_ending: dict | None) -> dict[str, int]:
    """One task row's counts per share figure: its endings, and its rollouts per finding kind."""
    out = {f"ending:{e}": n for e, n in (endings or {}).items()}
    for parts in (by_ending or {}).values():
        for kind, n in ((parts or {}).get("findings") or {}).items():
            out[f"finding:{kind}"] = out.get(f"finding:{kind}", 0) + n
    return out


def _recorded_steps(conn: sa.Connection, run_id: str) -> tuple[list[int], dict[int, list]]:
    """The run's steps with rollouts, in order, and the figures of those already flagged (one
    statement); an alert of a step that lost its rollouts is found by `judge_steps`' delete."""
    q = (sa.select(SR.c.step, SA.c.figures)
         .select_from(SR.outerjoin(SA, sa.and_(SA.c.run_id == SR.c.run_id, SA.c.step == SR.c.step)))
         .where(SR.c.run_id == run_id, SR.c.step.is_not(None), SR.c.rollouts > 0).order_by(SR.c.step))
    steps, flagged = [], {}
    for step, figures in conn.execute(q):
        steps.append(step)
        if figures is not None:
            flagged[step] = figures
    return steps, flagged


def _read(conn: sa.Connection, run_id: str, steps: list[int]) -> dict[int, StepFigures]:
    """The figures of `steps` from their step and task rows: one statement per 500 steps (the two
    tables' rows in one UNION ALL, a task row's columns where the step row has its means)."""
    out = {}
    J = models.JSONType
    for i in range(0, len(steps), 500):
        part = steps[i:i + 500]
        step_q = sa.select(SR.c.step, sa.literal(0).label("task"), SR.c.rollouts, SR.c.mean_reward,
                           SR.c.mean_reward_no_errors, SR.c.stats, sa.cast(sa.null(), J).label("endings"),
                           sa.cast(sa.null(), J).label("by_ending")).where(SR.c.run_id == run_id, SR.c.step.in_(part))
        task_q = sa.select(TR.c.step, sa.literal(1), TR.c.rollouts, sa.cast(sa.null(), sa.Float),
                           sa.cast(sa.null(), sa.Float), sa.cast(sa.null(), J), TR.c.endings, TR.c.by_ending).where(
            TR.c.run_id == run_id, TR.c.step.in_(part))
        rows, tasks = {}, {}
        for step, is_task, n, m0, m1, stats, endings, by_end in conn.execute(sa.union_all(step_q, task_q)):
            if is_task:
                tasks.setdefault(step, []).append((n, endings, by_end))
            else:
                rows[step] = (n, m0, m1, stats)
        for step, (n, m0, m1, stats) in rows.items():
            out[step] = figures_from(step, n, m0, m1, stats, tasks.get(step, []))
    return out


def judge_steps(conn: sa.Connection, run_id: str, touched: set[int] | None, rule: Rule) -> list[dict]:
    """Judge the run's complete steps that `touched` (steps written; None: every step) affects,
    and bring `step_alert` up to date for them. Returns the newly flagged steps, each {"run",
    "step", "figures"}, in step order. Two statements whatever the number of steps (the steps
    with their alerts, the figures of the steps judged and their windows), and one write for each
    kind of change (alerts added or changed, alerts gone)."""
    recorded, existing_all = _recorded_steps(conn, run_id)
    index = {s: i for i, s in enumerate(recorded)}
    complete = set(recorded[:-1])
    if touched is None:
        targets = complete
    else:
        targets = set()
        for s in touched:
            pos = index.get(s)
            if pos is None:  # the step lost its rollups: its alert goes (below)
                targets.add(s)
                pos = next((i for i, r in enumerate(recorded) if r > s), len(recorded))
                lo, hi = pos - 1, pos + rule.window - 1
            else:
                lo, hi = pos - 1, pos + rule.window
            targets |= {recorded[i] for i in range(max(0, lo), min(len(recorded), hi + 1))}
        targets = {s for s in targets if s in complete or s not in index}
    if not targets:
        return []
    need = set()
    for s in targets:
        pos = index.get(s)
        if pos is not None:
            need |= set(recorded[max(0, pos - rule.window):pos + 1])
    figs = _read(conn, run_id, sorted(need))
    verdicts: dict[int, list[dict]] = {}
    for s in sorted(targets):
        pos = index.get(s)
        if pos is None or s not in figs:
            continue
        trailing = [figs[t] for t in recorded[max(0, pos - rule.window):pos] if t in figs]
        flagged = judge(figs[s], trailing, rule)
        if flagged:
            verdicts[s] = _json_safe(flagged)
    existing = {s: f for s, f in existing_all.items() if s in targets}
    # steps judged and not flagged, and touched steps that lost their rollups (their alert is not
    # in `existing_all`, which joins the rollups)
    gone = sorted({s for s in existing if s not in verdicts} | {s for s in targets if s not in index})
    if gone:
        for i in range(0, len(gone), 500):
            conn.execute(SA.delete().where(SA.c.run_id == run_id, SA.c.step.in_(gone[i:i + 500])))
    rows = [{"run_id": run_id, "step": s, "figures": f, "created_at": models.utcnow()}
            for s, f in sorted(verdicts.items()) if existing.get(s) != f]
    if rows:
        ins = insert_for(conn, SA)
        # a step flagged again keeps when it was first flagged
        conn.execute(ins.values(rows).on_conflict_do_update(index_elements=[SA.c.run_id, SA.c.step],
                                                            set_={"figures": ins.excluded.figures}))
    return [{"run": run_id, "step": s, "figures": f} for s, f in sorted(verdicts.items()) if s not in existing]


def apply(conn: sa.Connection, keys, *, settings=None) -> list[dict]:
    """Judge what the (run, step) `keys` written in this transaction affect (see the module).
    Returns the newly flagged steps (`{"run", "step", "figures"}`)."""
    settings = settings or _settings()
    rule = rule_of(settings)
    by_run: dict[str, set[int]] = {}
    for run_id, step in keys:
        if step is not None:
            by_run.setdefault(run_id, set()).add(step)
    new = []
    for run_id, steps in sorted(by_run.items()):
        new += judge_steps(conn, run_id, steps, rule)
    return new


def rebuild(conn: sa.Connection, run_id: str | None = None, *, settings=None) -> int:
    """Judge every complete step again (of one run, or all): `rollscope rebuild-analytics`.
    Sends no webhook. Returns the number of flagged steps."""
    rule = rule_of(settings or _settings())
    runs = [run_id] if run_id is not None else [r for (r,) in conn.execute(sa.select(SR.c.run_id).distinct())]
    conn.execute(SA.delete() if run_id is None else SA.delete().where(SA.c.run_id == run_id))
    return sum(len(judge_steps(conn, r, None, rule)) for r in sorted(runs))


def on_batch(conn: sa.Connection, written) -> None:
    """The batch hook (after app.store.rollups.on_batch): judge what the batch's steps affect."""
    keys = {(r["run_id"], r["step"]) for r in (*written.inserted, *written.deleted)}
    if keys:
        apply(conn, keys)


def payload(settings, alert: dict) -> dict:
    """The webhook's body for one flagged step: run, step, figures and absolute links to the step
    page and its rollouts (under `alerts.base_url`; paths when it is unset)."""
    base = (settings.alerts.base_url or "").rstrip("/")
    run_id, step = alert["run"], alert["step"]
    return {"run": run_id, "step": step, "figures": alert["figures"],
            "text": "; ".join(f["text"] for f in alert["figures"]),
            "links": {"step": base + urls.step(run_id, step), "rollouts": base + urls.rollouts(run_id, step=step),
                      "run": base + urls.run(run_id)}}

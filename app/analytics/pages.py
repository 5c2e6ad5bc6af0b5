"""Page data of the analytics pages: one chart, a training step's story, the task changes between
two steps, run comparison and search. Each function returns one plain JSON-safe structure that
the template renders and the JSON twin returns as is (None → 404). No HTML here.

Every number comes from the rollups (app/store/rollups.py) except the step page's lists, which
read the rollouts of that one step (bounded by the step's size, by the (run_id, step) index).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from urllib.parse import urlencode

import sqlalchemy as sa
from sqlmodel import Session

from app import charts, urls
from app.analytics import search as search_q
from app.analytics.steps import (RUN_SECTIONS, StepRange, StepStats, every_run_step_stats, heatmap_tasks, one_step,
                                 run_totals, step_stats, task_rows, task_totals)
from app.db import models
from app.queries import annotations as q_annotations
from app.queries.common import SUMMARY_COLUMNS
from app.store import rollups
from ingest.stats import ENDINGS, latest_attempts, no_gradient_reason
from app.views.common import iso, note_view
from ingest.advantages import Member, group_advantages

NO_GRADIENT_LABELS = {
    "trainer_filtered": "filtered by the trainer",
    "error_dropped": "error dropped (infrastructure failure says nothing about the policy)",
    "mask_zeroed": "loss mask zeroed by a filter",
    "too_stale": "too stale (beyond the run's max_staleness)",
    "zero_variance_group": "zero-variance group (every member got the same reward)",
}
LIST_CAP = 200  # rows of the step page's no-gradient list; the rest by the rollouts list


q = urls.q


def run_url(run_id: str, json: bool = False) -> str:
    return urls.run(run_id, json=json)


def rollouts_url(run_id: str, json: bool = False, **params) -> str:
    return urls.rollouts(run_id, json=json, **{k: v for k, v in params.items() if v != ""})


def step_url(run_id: str, step: int, json: bool = False) -> str:
    return urls.step(run_id, step, json=json)


def chart_url(run_id: str, chart_id: str, ext: str = "", **params) -> str:
    return urls.chart(run_id, chart_id, ext=ext, **params)


def rollout_url(run_id: str, rollout_id: str, attempt: int | None = None, json: bool = False) -> str:
    return urls.rollout(run_id, rollout_id, json=json, attempt=attempt or None)


def group_url(run_id: str, group_id: str, json: bool = False) -> str:
    return urls.group(run_id, group_id, json=json)


def _num(x):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _run(session: Session, run_id: str):
    return session.get(models.Run, run_id)


def chart_nav(run_id: str, steps: StepRange, window: int, json: bool = False) -> list[dict]:
    return [{"id": c.id, "title": c.title,
             "url": chart_url(run_id, c.id, ".json" if json else "", steps=str(steps) or None, smooth=window)}
            for c in charts.REGISTRY.values()]


def chart_figure(session: Session, run_id: str, chart: charts.Chart, steps: StepRange, window: int) -> dict:
    stats = step_stats(session=session, run_id=run_id, steps=steps, sections=chart.sections)
    tasks = heatmap_tasks(session=session, run_id=run_id, steps=steps, limit=charts.HEATMAP_TASKS) \
        if chart.needs_tasks else None
    return charts.figure(chart, run_id, stats, tasks, window=window)


def chart_page(session: Session, run_id: str, chart_id: str, *, steps: StepRange, window: int,
               json: bool = False) -> dict | None:
    """One chart of a run: its figure data (Plotly), caption, and the URLs of its JSON twin, CSV
    and neighbours. `steps` limits the step axis; `window` > 1 adds a trailing moving average.
    `json`: the run and neighbour links go to JSON twins; the figure's `customdata` stays page
    links, since the pages' script fetches this twin and navigates with them (static/app.js)."""
    run = _run(session, run_id)
    chart = charts.REGISTRY.get(chart_id)
    if run is None or chart is None:
        return None
    fig = chart_figure(session, run_id, chart, steps, window)
    params = {"steps": str(steps) or None, "smooth": window}
    return {
        "run": {"id": run.id, "name": run.name, "url": run_url(run.id, json)},
        "chart": {"id": chart.id, "title": chart.title, "caption": chart.caption,
                  "url": chart_url(run_id, chart.id, **params), "json_url": chart_url(run_id, chart.id, ".json", **params),
                  "csv_url": chart_url(run_id, chart.id, ".csv", **params)},
        "steps": str(steps), "smooth": window,
        "figure": fig,
        "charts": chart_nav(run_id, steps, window, json),
    }


# --- a step's story ---------------------------------------------------------------------------

def _groups_table(run_id: str, rows: list[dict], json: bool = False) -> list[dict]:
    """Per group of the step (latest attempts): size, endings, mean reward under both policies,
    zero variance and sign flips; most affected first (errors, then other non-task endings)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in latest_attempts(rows):
        if r["group_id"] is not None:
            groups[r["group_id"]].append(r)
    out = []
    for gid, members in groups.items():
        res = group_advantages([Member(str(m["pk"]), m["reward"], m["ending"]) for m in members])
        a0, a1 = res["errors_as_zero"], res["errors_dropped"]
        flips = sum(1 for m in members if (a0.advantages[str(m["pk"])] or 0) * (a1.advantages[str(m["pk"])] or 0) < 0)
        e = Counter(m["ending"] for m in members)
        out.append({"group_id": gid, "url": group_url(run_id, gid, json), "size": len(members),
                    "endings": {k: e[k] for k in ENDINGS if e.get(k)}, "errors": e.get("error", 0),
                    "not_finished": e.get("error", 0) + e.get("truncated", 0) + e.get("length_cut", 0),
                    "mean_errors_as_zero": _num(a0.mean), "mean_errors_dropped": _num(a1.mean),
                    "zero_variance": bool(a1.n and a1.std == 0), "sign_flips": flips})
    out.sort(key=lambda g: (-g["errors"], -g["not_finished"], -g["sign_flips"], g["group_id"]))
    return out


def _tasks_table(session: Session, run_id: str, step: int, prev: int | None, json: bool = False) -> list[dict]:
    """Per task at this step against the previous recorded step: rollouts, errors, mean reward
    and its change; most affected first (errors, then the largest change)."""
    here: dict[str, object] = {}
    before: dict[str, object] = {}
    for t in task_rows(session=session, run_id=run_id, steps=[step] if prev is None else [prev, step]):
        (here if t.step == step else before if t.step == prev else {})[t.task_key] = t
    out = []
    for key, t in here.items():
        b = before.get(key)
        delta = (t.mean_reward - b.mean_reward) if b is not None and t.mean_reward is not None \
            and b.mean_reward is not None else None
        out.append({"task": key, "rollouts": t.rollouts, "endings": t.endings or {},
                    "errors": (t.endings or {}).get("error", 0), "mean_reward": t.mean_reward,
                    "mean_reward_no_errors": t.mean_reward_no_errors,
                    "previous_mean_reward": b.mean_reward if b is not None else None, "delta": delta,
                    "url": rollouts_url(run_id, json, step=step, task=key)})
    out.sort(key=lambda t: (-t["errors"], -abs(t["delta"] or 0.0), t["task"]))
    return out


def step_page(session: Session, run_id: str, step: int, *, json: bool = False) -> dict | None:
    """A training step's story: counts per ending with the source's details, groups and tasks
    most affected, reward with and without errors against the previous steps, findings, the
    rollouts that carried no gradient with their reason, and the step's notes (`notes`: author,
    text, step, updated_at as RFC 3339 `Z`; by time). `json`: every link
    goes to a JSON twin (the chart link to the reward chart's twin)."""
    run = _run(session, run_id)
    if run is None:
        return None
    s = one_step(session=session, run_id=run_id, step=step)
    if s is None:
        return None
    history = step_stats(session=session, run_id=run_id, steps=StepRange(max(0, step - 10), step))
    prev = [h for h in history if h.step < step]
    nxt = session.execute(sa.select(sa.func.min(models.StepRollup.step)).where(
        models.StepRollup.run_id == run_id, models.StepRollup.step > step)).scalar()
    conn = session.connection()
    rows = rollups.step_rows(conn, run_id, step)
    limit = rollups.max_staleness(conn, run_id)
    group_table = _groups_table(run_id, rows, json)
    zv = {g["group_id"] for g in group_table if g["zero_variance"]}
    latest = {r["pk"] for r in latest_attempts(rows)}
    no_grad = []
    for r in sorted(rows, key=lambda r: (r["group_id"] or "", r["rollout_id"], r["attempt"])):
        reason = no_gradient_reason(r, zero_variance_groups=zv, latest=r["pk"] in latest, max_staleness=limit)
        if reason:
            no_grad.append({"rollout_id": r["rollout_id"], "attempt": r["attempt"], "reason": reason,
                            "detail": r["trainer_filtered"] if reason == "trainer_filtered" else
                            (r["ending_detail"] if reason == "error_dropped" else None),
                            "group_id": r["group_id"], "ending": r["ending"], "reward": _num(r["reward"]),
                            "url": rollout_url(run_id, r["rollout_id"], r["attempt"] or None, json)})
    details = s.get("ending_details") or {}
    headline = _headline(s, prev[-1] if prev else None, details)
    endings = [{"ending": e, "count": s.endings[e], "share": s.share(s.endings[e]),
                "url": rollouts_url(run_id, json, step=step, ending=e),
                "details": [{"detail": d or "(none recorded)", "count": n} for d, n in
                            sorted((details.get(e) or {}).items(), key=lambda kv: (-kv[1], kv[0]))]}
               for e in ENDINGS if s.endings[e]]
    return {
        "run": {"id": run.id, "name": run.name, "url": run_url(run.id, json)},
        "step": step,
        "headline": headline,
        "previous_url": step_url(run_id, prev[-1].step, json) if prev else None,
        "next_url": step_url(run_id, nxt, json) if nxt is not None else None,
        "rollouts": s.rollouts, "rollouts_url": rollouts_url(run_id, json, step=step),
        "endings": endings,
        "reward": {"mean": s.mean_reward, "mean_no_errors": s.mean_reward_no_errors, "excluded": s.excluded,
                   "errors_as_zero": s.get("reward", "errors_as_zero"), "errors_dropped": s.get("reward", "errors_dropped")},
        "history": [{"step": h.step, "url": step_url(run_id, h.step, json), "rollouts": h.rollouts,
                     "errors": h.endings["error"], "error_share": h.share(h.endings["error"]),
                     "mean_reward": h.mean_reward, "mean_reward_no_errors": h.mean_reward_no_errors,
                     "current": h.step == step} for h in history],
        "groups": {**{k: v for k, v in s.get("groups", default={}).items()}, "table": group_table[:20]},
        "tasks": _tasks_table(session, run_id, step, prev[-1].step if prev else None, json)[:20],
        "findings": [{"kind": k, "count": n, "url": rollouts_url(run_id, json, step=step, flag=k)}
                     for k, n in sorted((s.get("findings") or {}).items(), key=lambda kv: (-kv[1], kv[0]))],
        "no_gradient": {"counts": [{"reason": k, "label": NO_GRADIENT_LABELS[k], "count": n, "share": s.share(n)}
                                   for k, n in (s.get("no_gradient") or {}).items() if n],
                        "total": len(no_grad), "rollouts": no_grad[:LIST_CAP], "shown": min(len(no_grad), LIST_CAP)},
        "lengths": s.get("lengths"), "mismatch": s.get("mismatch"), "staleness": s.get("staleness"),
        "advantages": s.get("advantages"),
        "charts_url": chart_url(run_id, "reward", ".json" if json else "", steps=f"{max(0, step - 20)}-{step + 20}"),
        "task_changes_url": urls.task_changes(run_id, prev[-1].step if prev else step, step,
                                              ext=".json" if json else ""),
        "notes": step_notes(session, run_id, step),
    }


def step_notes(session: Session, run_id: str, step: int) -> list[dict]:
    """The notes on one step of a run, one per author, by time: author, text, step, updated_at
    (the API's note shape, app.views.common.NoteView)."""
    return [note_view(n).model_dump(mode="json") for n in q_annotations.notes_of(session=session, run_id=run_id, step=step)]


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _headline(s: StepStats, p: StepStats | None, details: dict) -> list[str]:
    """Plain sentences: how reward moved from the previous step under both error policies, and
    which endings (with the source's reasons) changed share the most."""
    out = []
    if p is not None:
        out.append(f"Mean reward {_fmt(p.mean_reward)} → {_fmt(s.mean_reward)} with errors scored 0, "
                   f"{_fmt(p.mean_reward_no_errors)} → {_fmt(s.mean_reward_no_errors)} with errors dropped "
                   f"(step {p.step} → {s.step}).")
    moves = []
    for e in ENDINGS:
        now, before = s.share(s.endings[e]) or 0.0, (p.share(p.endings[e]) or 0.0) if p else 0.0
        if s.endings[e] and (p is None or abs(now - before) >= 0.05):
            why = ", ".join(f"{d or 'no reason recorded'} {n}" for d, n in
                            sorted((details.get(e) or {}).items(), key=lambda kv: -kv[1])[:3])
            moves.append((abs(now - before), f"{s.endings[e]} of {s.rollouts} rollouts ({now:.0%}) ended as {e}"
                          + (f" ({why})" if why else "") + (f", against {before:.0%} the step before" if p else "")
                          + "."))
    out += [m for _, m in sorted(moves, key=lambda x: -x[0])[:3]]
    return out


# --- task changes between two steps -----------------------------------------------------------

def task_changes(session: Session, run_id: str, a: int, b: int, *, json: bool = False) -> dict | None:
    """Tasks whose ending counts or mean reward changed between steps `a` and `b`, largest change
    first, each linking to both steps' rollouts of the task (their JSON twins when `json`)."""
    run = _run(session, run_id)
    if run is None:
        return None
    by: dict[int, dict] = {a: {}, b: {}}
    for t in task_rows(session=session, run_id=run_id, steps=[a, b]):
        if t.step in by:
            by[t.step][t.task_key] = t
    rows = []
    for key in sorted(set(by[a]) | set(by[b])):
        ta, tb = by[a].get(key), by[b].get(key)
        ea, eb = (ta.endings if ta else {}) or {}, (tb.endings if tb else {}) or {}
        ma, mb = (ta.mean_reward if ta else None), (tb.mean_reward if tb else None)
        delta = mb - ma if ma is not None and mb is not None else None
        changed_endings = {e: [ea.get(e, 0), eb.get(e, 0)] for e in ENDINGS if ea.get(e, 0) != eb.get(e, 0)}
        if delta in (None, 0.0) and not changed_endings and ta is not None and tb is not None:
            continue
        rows.append({"task": key, "rollouts": [ta.rollouts if ta else 0, tb.rollouts if tb else 0],
                     "mean_reward": [ma, mb], "delta": delta, "endings": changed_endings,
                     "url_a": rollouts_url(run_id, json, step=a, task=key),
                     "url_b": rollouts_url(run_id, json, step=b, task=key)})
    rows.sort(key=lambda r: (-abs(r["delta"] or 0.0), -sum(abs(x - y) for x, y in r["endings"].values()), r["task"]))
    return {"run": {"id": run.id, "name": run.name, "url": run_url(run.id, json)}, "a": a, "b": b,
            "a_url": step_url(run_id, a, json), "b_url": step_url(run_id, b, json), "endings": ENDINGS, "tasks": rows}


# --- compare runs -----------------------------------------------------------------------------

def compare_page(session: Session, run_ids: list[str], *, steps: StepRange, window: int,
                 json: bool = False) -> dict | None:
    """Two or more runs on one step axis: every comparable chart overlaid, and the differences per
    ending (share of rollouts) and per task (mean reward, errors scored 0) over the step range.
    `json`: run and rollouts links go to JSON twins (charts' `json_url`/`csv_url` are data already)."""
    runs = [_run(session, r) for r in run_ids]
    missing = [r for r, got in zip(run_ids, runs) if got is None]
    if missing:
        return None
    # the totals compare shows: rollouts, endings, mean rewards (exact, from each step's partial
    # sums); without a step range, rollouts without a step count too, as on the run page and in
    # the task table
    whole = steps.first is None and steps.last is None
    stats = {r: step_stats(session=session, run_id=r, steps=steps, include_unstepped=whole,
                           sections=("endings", "reward")) for r in run_ids}
    params = {"runs": ",".join(run_ids), "steps": str(steps) or None, "smooth": window}
    q_ = urlencode({k: v for k, v in params.items() if v not in (None, "", 1)})
    figures = {c.id: {"title": c.title, "caption": c.caption, "json_url": f"/compare/charts/{c.id}.json?{q_}",
                      "csv_url": f"/compare/charts/{c.id}.csv?{q_}"}
               for c in charts.REGISTRY.values() if c.comparable}
    totals = {r: run_totals(stats[r]) for r in run_ids}
    ending_rows = []
    for e in ENDINGS:
        shares = [(totals[r]["endings"][e] / totals[r]["rollouts"]) if totals[r]["rollouts"] else None for r in run_ids]
        if any(totals[r]["endings"][e] for r in run_ids):
            ending_rows.append({"ending": e, "counts": [totals[r]["endings"][e] for r in run_ids], "shares": shares,
                                "delta": (shares[-1] - shares[0]) if None not in (shares[0], shares[-1]) else None})
    tt = task_totals(session=session, run_ids=run_ids, steps=steps)
    task_rows_ = []
    for key in sorted(set().union(*(tt[r].keys() for r in run_ids))):
        means = [tt[r].get(key, {}).get("mean_reward") for r in run_ids]
        errs = [tt[r].get(key, {}).get("errors", 0) for r in run_ids]
        task_rows_.append({"task": key, "rollouts": [tt[r].get(key, {}).get("rollouts", 0) for r in run_ids],
                           "mean_reward": means, "errors": errs,
                           "delta": (means[-1] - means[0]) if None not in (means[0], means[-1]) else None,
                           "urls": [rollouts_url(r, json, task=key) for r in run_ids]})
    task_rows_.sort(key=lambda t: (-abs(t["delta"] or 0.0), t["task"]))
    return {
        "runs": [{"id": r.id, "name": r.name, "url": run_url(r.id, json), "rollouts": totals[r.id]["rollouts"],
                  "mean_reward": totals[r.id]["mean_reward"], "mean_reward_no_errors": totals[r.id]["mean_reward_no_errors"],
                  "first_step": totals[r.id]["first_step"], "last_step": totals[r.id]["last_step"]} for r in runs],
        "steps": str(steps), "smooth": window,
        "charts": figures,
        "endings": ending_rows,
        "tasks": task_rows_[:200], "tasks_total": len(task_rows_),
    }


def compare_figure(session: Session, run_ids: list[str], chart: charts.Chart, *, steps: StepRange,
                   window: int) -> dict | None:
    """One chart with every run overlaid on the same step axis (`run: series` traces)."""
    if any(_run(session, r) is None for r in run_ids) or not chart.comparable:
        return None
    return charts.overlay({r: charts.figure(chart, r, step_stats(session=session, run_id=r, steps=steps,
                                                                 sections=chart.sections), None,
                                            window=window) for r in run_ids})


# --- search -----------------------------------------------------------------------------------

def search_page(session: Session, text: str, *, run_id: str | None, limit: int, before: int | None,
                json: bool = False) -> dict:
    """Messages whose text matches `text` (every word, as a prefix-free full-text match), newest
    first, within one run or across runs; each hit with a snippet (marked segments), the link
    to its message and `rollout_url`. `json`: `rollout_url` and `next_url` go to JSON twins (a
    hit's `url` is the message's deep link, a redirect to the rollout page)."""
    hits, nxt = search_q.search(session=session, text=text, run_id=run_id, limit=limit, before=before) \
        if text.strip() else ([], None)
    params = {"q": text, **({"run": run_id} if run_id else {})}
    return {
        "q": text, "run": run_id,
        "runs": [r for r in session.execute(sa.select(models.Run.id).order_by(models.Run.id)).scalars()],
        "hits": [dict(h, url=urls.message(h["run_id"], h["rollout_pk"], h["node_idx"]),
                      rollout_url=rollout_url(h["run_id"], h["rollout_id"], h["attempt"] or None, json))
                 for h in hits],
        "next_url": urls.search(json=json, **params, before=nxt) if nxt else None,
        "limit": limit,
    }


MESSAGES_PER_PAGE = 50  # as the rollout page (app.views.MESSAGES_PER_PAGE)


def message_url(session: Session, run_id: str, rollout_pk: int, idx: int) -> str | None:
    """The rollout-page URL showing message `idx` of a stored rollout: the first branch that
    holds it, the page of that branch it falls on, and its anchor; None when there is no such
    message in the run."""
    from ingest.graph import branches

    R, N = models.Rollout.__table__, models.Node.__table__
    row = session.execute(sa.select(R.c.rollout_id, R.c.attempt).where(R.c.pk == rollout_pk, R.c.run_id == run_id)).first()
    if row is None:
        return None
    graph = session.execute(sa.select(N.c.idx, N.c.parent).where(N.c.rollout_pk == rollout_pk).order_by(N.c.idx)).all()
    if not any(i == idx for i, _ in graph):
        return None

    class _N:
        __slots__ = ("parent",)

        def __init__(self, parent):
            self.parent = parent

    n_attempts = session.execute(sa.select(sa.func.count()).where(R.c.run_id == run_id,
                                                                  R.c.rollout_id == row.rollout_id)).scalar_one()
    for b, path in enumerate(branches([_N(p) for _, p in graph])):
        if idx in path:
            params = {"branch": b, "offset": path.index(idx) // MESSAGES_PER_PAGE * MESSAGES_PER_PAGE}
            if row.attempt or n_attempts > 1:
                params["attempt"] = row.attempt
            return f"{run_url(run_id)}/rollouts/{q(row.rollout_id)}?{urlencode(params)}#node-{idx}"
    return None


# --- run metadata and sparklines ----------------------------------------------------------------

def sparkline(points: list[tuple[int, float | None]], width: int = 120, height: int = 24) -> dict | None:
    """An SVG path ("M x y L ...") of a run's mean reward per step (errors scored 0), scaled to
    `width` × `height`; pooled to at most `width` points. Numbers only: safe in an attribute."""
    pts = [(s, v) for s, v in points if v is not None and math.isfinite(v)]
    if len(pts) < 2:
        return None
    if len(pts) > width:
        k = -(-len(pts) // width)
        pts = [(pts[i][0], sum(v for _, v in pts[i:i + k]) / len(pts[i:i + k])) for i in range(0, len(pts), k)]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = (width - 2) / ((x1 - x0) or 1)
    sy = (height - 2) / ((y1 - y0) or 1)
    d = " ".join(f"{'M' if i == 0 else 'L'}{1 + (x - x0) * sx:.1f} {height - 1 - (y - y0) * sy:.1f}"
                 for i, (x, y) in enumerate(pts))
    return {"path": d, "width": width, "height": height, "first": ys[0], "last": ys[-1], "min": y0, "max": y1}


def run_metadata(session: Session, run_id: str) -> dict:
    """What the source recorded about a run: the run's own fields (`extra`: config,
    hyperparameters, as the reader kept them), the tokenizer, the models that sampled (from the
    first stored rollout's calls), source files with their rollout counts, and the first and last
    ingest. Reads the rollups and one envelope, whatever the run's size."""
    run = _run(session, run_id)
    if run is None:
        return {}
    stats = step_stats(session=session, run_id=run_id, include_unstepped=True, sections=RUN_SECTIONS)
    sources: Counter = Counter()
    firsts, lasts = [], []
    for s in stats:
        sources.update(s.get("sources") or {})
        if s.get("ingested", "first"):
            firsts.append(s.get("ingested", "first"))
            lasts.append(s.get("ingested", "last"))
    R, D = models.Rollout.__table__, models.RolloutDetail.__table__
    first_pk = session.execute(sa.select(R.c.pk).where(R.c.run_id == run_id).order_by(R.c.pk).limit(1)).scalar()
    envelope = session.execute(sa.select(D.c.envelope).where(D.c.rollout_pk == first_pk)).scalar() if first_pk else None
    calls = (envelope or {}).get("calls") or []
    model_names = sorted({c.get("model") for c in calls if isinstance(c, dict) and c.get("model")})
    sampling = next((c.get("sampling") for c in calls if isinstance(c, dict) and c.get("sampling")), None)
    tok = session.get(models.Tokenizer, run.tokenizer_sha256) if run.tokenizer_sha256 else None
    return {
        "name": run.name, "type": run.type, "created_at": iso(run.created_at),
        "extra": run.extra or {},
        "models": model_names, "sampling": sampling,
        "tokenizer": {"name": tok.name, "kind": tok.kind, "n_vocab": tok.n_vocab, "sha256": tok.sha256} if tok else None,
        "sources": [{"source": k, "rollouts": n} for k, n in sources.most_common(20)],
        "first_ingest": min(firsts) if firsts else None, "last_ingest": max(lasts) if lasts else None,
    }


def run_charts(run_id: str, *, steps: StepRange = StepRange(), window: int = 1, skip: tuple = ()) -> dict:
    """The run page's chart section: every registered chart with its page, JSON twin and CSV URLs
    (the page fetches each figure from its JSON twin, so the run page stays light)."""
    params = {"steps": str(steps) or None, "smooth": window}
    return {"steps": str(steps), "smooth": window,
            "charts": [{"id": c.id, "title": c.title, "caption": c.caption, "url": chart_url(run_id, c.id, **params),
                        "json_url": chart_url(run_id, c.id, ".json", **params),
                        "csv_url": chart_url(run_id, c.id, ".csv", **params)} for c in charts.REGISTRY.values()
                       if c.id not in skip]}


# --- the rollouts list --------------------------------------------------------------------------

CSV_COLUMNS = ["run_id", "rollout_id", "attempt", "step", "group_id", "group_index", "task_key", "agent", "ending",
               "ending_detail", "reward", "reward_status", "n_turns", "n_tool_calls", "n_tokens", "n_trained_tokens",
               "n_response_tokens", "n_tool_errors", "staleness", "flags", "url"]


def csv_cell(v):
    """Spreadsheet-safe: text that a spreadsheet would run as a formula is prefixed with '."""
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return "" if v is None else v


def rollouts_csv(session: Session, run_id: str, filters, *, sort: str | None, chunk: int = 2000):
    """Every matching rollout as CSV lines (header first), fetched by keyset pages of `chunk`."""
    import csv as _csv
    import io as _io

    from app.analytics import listing

    def line(values) -> str:
        buf = _io.StringIO()
        _csv.writer(buf).writerow([csv_cell(v) for v in values])
        return buf.getvalue()

    yield line(CSV_COLUMNS)
    after = None
    while True:
        got = listing.page(session=session, run_id=run_id, filters=filters, columns=SUMMARY_COLUMNS, sort=sort, after=after,
                           limit=chunk)
        for r in got["rows"]:
            d = dict(r._mapping)
            d["flags"] = " ".join(d.get("flags") or [])
            d["url"] = urls.rollout(d["run_id"], d["rollout_id"], attempt=d["attempt"] or None)
            yield line([d.get(c) for c in CSV_COLUMNS])
        if not got["next"]:
            return
        after = got["next"]


STEPS_TABLE = 200  # steps listed on the run page; a longer run shows its last ones (narrow with ?steps=)


def run_overview(session: Session, run_id: str, *, steps: StepRange = StepRange(), window: int = 1) -> dict | None:
    """The run page from the rollups: per training step, counts per ending and mean reward (errors
    scored 0 / dropped), totals, the run's metadata and its charts. Costs the same at any run size:
    it reads one rollup row per step."""
    run = _run(session, run_id)
    if run is None:
        return None
    all_stats = step_stats(session=session, run_id=run_id, include_unstepped=True, sections=RUN_SECTIONS)
    shown = [s for s in all_stats if s.step is None or (
        (steps.first is None or s.step >= steps.first) and (steps.last is None or s.step <= steps.last))]
    stepped = [s for s in shown if s.step is not None]
    cut = len(stepped) > STEPS_TABLE
    listed = stepped[-STEPS_TABLE:] + [s for s in shown if s.step is None]
    tot = run_totals(all_stats)
    step_rows = []
    for s in listed:
        step_rows.append({"step": s.step, "rollouts": s.rollouts, "endings": s.endings,
                          "rates": {e: (n / s.rollouts if s.rollouts else 0.0) for e, n in s.endings.items()},
                          "mean_reward": s.mean_reward, "mean_reward_no_errors": s.mean_reward_no_errors,
                          "scored": s.scored, "excluded": s.excluded,
                          "url": rollouts_url(run_id, step=s.step),
                          "step_url": step_url(run_id, s.step) if s.step is not None else None})
    return {
        "run": {"id": run.id, "name": run.name, "type": run.type, "tokenizer": run.tokenizer_sha256,
                "url": run_url(run.id), "rollouts_url": f"{run_url(run.id)}/rollouts"},
        "endings": ENDINGS,
        "steps": step_rows,
        "steps_shown": {"listed": len([r for r in step_rows if r["step"] is not None]),
                        "of": len([s for s in all_stats if s.step is not None]), "cut": cut},
        "steps_recorded": any(s.step is not None for s in all_stats),
        "totals": {"rollouts": tot["rollouts"], "endings": tot["endings"],
                   "mean_reward": tot["mean_reward"], "mean_reward_no_errors": tot["mean_reward_no_errors"],
                   "excluded": tot["excluded"], "retries": tot["retries"],
                   "no_gradient": tot["no_gradient"]},
        # the two headline charts, embedded (as before); the rest are fetched from their twins
        "charts": {"ending_rates": charts.ending_rates(run_id, [s for s in shown if s.step is not None]),
                   "reward": charts.reward_trend(run_id, [s for s in shown if s.step is not None])}
        if any(s.step is not None for s in all_stats) else None,
        "analytics": run_charts(run_id, steps=steps, window=window, skip=("endings",)),
        "metadata": run_metadata(session, run_id),
        "compare_url": urls.compare([run_id]),
        "search_url": urls.search(run=run_id),
    }


def runs_overview(session: Session) -> dict:
    """Every run with rollouts, steps, mean reward (errors scored 0 / dropped), ending counts and a
    reward sparkline, from the rollups (one row per step), and the compare form's URL."""
    runs = list(session.execute(sa.select(models.Run).order_by(models.Run.created_at, models.Run.id)).scalars())
    # the totals shown: rollouts, steps, endings, mean rewards (exact, from each step's partial sums)
    by_run = every_run_step_stats(session=session, sections=("endings", "reward"))
    out = []
    for run in runs:
        stats = by_run.get(run.id, [])
        tot = run_totals(stats)
        stepped = [s for s in stats if s.step is not None]
        out.append({
            "id": run.id, "name": run.name, "type": run.type, "url": run_url(run.id),
            "rollouts": tot["rollouts"], "first_step": tot["first_step"], "last_step": tot["last_step"],
            "steps": len(stepped), "mean_reward": tot["mean_reward"],
            "mean_reward_no_errors": tot["mean_reward_no_errors"], "endings": tot["endings"],
            "tokenizer": run.tokenizer_sha256,
            "created_at": iso(run.created_at),
            "sparkline": sparkline([(s.step, s.mean_reward) for s in stepped]),
        })
    return {"runs": out, "endings": ENDINGS, "compare_url": "/compare"}

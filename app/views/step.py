"""A training step's story (`/runs/{run}/steps/{step}`): counts per ending with the source's
details, reward against the previous steps, the groups and tasks most affected, findings, and
the rollouts that carried no gradient with their reason.

Every number comes from the rollups (app/store/rollups.py) except the lists, which read the
rollouts of that one step (bounded by the step's size, by the (run_id, step) index).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from sqlmodel import Session

from app import urls
from app.queries import annotations as q_annotations
from app.queries import runs as q_runs
from app.queries.steps import StepRange, StepStats, next_step, one_step, step_stats, task_rows
from app.store import rollups
from app.views import failures
from app.views.chart import RunRef
from app.views.common import NoteView, PageModel, note_view, num
from app.views.step_alerts import StepAlertView, step_alert
from ingest.advantages import Member, group_advantages, one_member_group
from ingest.stats import ENDINGS, latest_attempts, no_gradient_reason

NO_GRADIENT_LABELS = {
    "trainer_filtered": "filtered by the trainer",
    "error_dropped": "error dropped (infrastructure failure says nothing about the policy)",
    "mask_zeroed": "loss mask zeroed by a filter",
    "too_stale": "too stale (beyond the run's max_staleness)",
    "zero_variance_group": "zero-variance group (every member got the same reward)",
    "one_member_group": "one-member group (no baseline)",
}
LIST_CAP = 200  # rows of the step page's no-gradient list; the rest by the rollouts list


class StepPage(PageModel):
    """One step. `endings`: per ending its count, share, rollouts URL and the source's details;
    `reward`: means with errors scored 0 / dropped and both policies' statistics; `history`: this
    step and up to 10 before it; `groups`: the step's group statistics and `table` (the 20 most
    affected groups); `tasks`: the 20 most affected tasks against the previous step;
    `no_gradient`: counts per reason and the first LIST_CAP rollouts with theirs; `lengths`,
    `mismatch`, `staleness`, `advantages`: the step rollup's sections as stored."""

    run: RunRef
    step: int
    headline: list[str]
    previous_url: str | None
    next_url: str | None
    rollouts: int
    rollouts_url: str
    endings: list[dict[str, Any]]
    reward: dict[str, Any]
    history: list[dict[str, Any]]
    groups: dict[str, Any]
    tasks: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    no_gradient: dict[str, Any]
    lengths: dict[str, Any] | None
    mismatch: dict[str, Any] | None
    staleness: dict[str, Any] | None
    advantages: dict[str, Any] | None
    charts_url: str
    task_changes_url: str
    notes: list[NoteView]
    # the step alert (docs/analytics.md "Step alerts"): the figures that left the trailing spread, or None
    alert: StepAlertView | None = None
    # failure signatures new at this step (docs/failures.md): id, template, count at this step, url
    # (the failures page at it), rollouts_url (this step's rollouts carrying it)
    new_signatures: list[dict[str, Any]] = []


def _groups_table(run_id: str, rows: list[dict], json: bool = False) -> list[dict]:
    """Per group of the step (latest attempts): size, endings, mean reward under both policies,
    zero variance and sign flips; most affected first (errors, then other non-task endings). A
    one-member group (`ingest.advantages.one_member_group`, the checks' definition) says
    `one_member` and is never zero-variance, as `ingest.stats.group_stats` counts it."""
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
        out.append({"group_id": gid, "url": urls.group(run_id, gid, json=json), "size": len(members),
                    "endings": {k: e[k] for k in ENDINGS if e.get(k)}, "errors": e.get("error", 0),
                    "not_finished": e.get("error", 0) + e.get("truncated", 0) + e.get("length_cut", 0),
                    "mean_errors_as_zero": num(a0.mean), "mean_errors_dropped": num(a1.mean),
                    "one_member": one_member_group(len(members)),
                    "zero_variance": bool(a1.n and a1.std == 0) and not one_member_group(len(members)),
                    "sign_flips": flips})
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
                    "url": urls.rollouts(run_id, json=json, step=step, task=key)})
    out.sort(key=lambda t: (-t["errors"], -abs(t["delta"] or 0.0), t["task"]))
    return out


def step_page(session: Session, run_id: str, step: int, *, json: bool = False) -> StepPage | None:
    """A training step's story: counts per ending with the source's details, groups and tasks
    most affected, reward with and without errors against the previous steps, findings, the
    rollouts that carried no gradient with their reason, the step's notes (`notes`: author,
    text, step, updated_at as RFC 3339 `Z`; by time), and its step alert (`alert`: the figures
    that left the trailing steps' spread, app/views/step_alerts.py; None when not flagged), and the failure
    signatures new at this step (`new_signatures`, app/views/failures.py `new_at`). `json`: every link
    goes to a JSON twin (the chart link to the reward chart's twin)."""
    run = q_runs.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    s = one_step(session=session, run_id=run_id, step=step)
    if s is None:
        return None
    history = step_stats(session=session, run_id=run_id, steps=StepRange(max(0, step - 10), step))
    prev = [h for h in history if h.step < step]
    nxt = next_step(session=session, run_id=run_id, step=step)
    conn = session.connection()
    rows = rollups.step_rows(conn, run_id, step)
    limit = rollups.max_staleness(conn, run_id)
    group_table = _groups_table(run_id, rows, json)
    zv = {g["group_id"] for g in group_table if g["zero_variance"]}
    one = {g["group_id"] for g in group_table if g["one_member"]}
    latest = {r["pk"] for r in latest_attempts(rows)}
    no_grad = []
    for r in sorted(rows, key=lambda r: (r["group_id"] or "", r["rollout_id"], r["attempt"])):
        reason = no_gradient_reason(r, zero_variance_groups=zv, latest=r["pk"] in latest, max_staleness=limit,
                                    one_member_groups=one)
        if reason:
            no_grad.append({"rollout_id": r["rollout_id"], "attempt": r["attempt"], "reason": reason,
                            "detail": r["trainer_filtered"] if reason == "trainer_filtered" else
                            (r["ending_detail"] if reason == "error_dropped" else None),
                            "group_id": r["group_id"], "ending": r["ending"], "reward": num(r["reward"]),
                            "url": urls.rollout(run_id, r["rollout_id"], json=json, attempt=r["attempt"] or None)})
    details = s.get("ending_details") or {}
    headline = _headline(s, prev[-1] if prev else None, details)
    endings = [{"ending": e, "count": s.endings[e], "share": s.share(s.endings[e]),
                "url": urls.rollouts(run_id, json=json, step=step, ending=e),
                "details": [{"detail": d or "(none recorded)", "count": n} for d, n in
                            sorted((details.get(e) or {}).items(), key=lambda kv: (-kv[1], kv[0]))]}
               for e in ENDINGS if s.endings[e]]
    return StepPage(**{
        "run": RunRef(id=run.id, name=run.name, url=urls.run(run.id, json=json)),
        "step": step,
        "headline": headline,
        "previous_url": urls.step(run_id, prev[-1].step, json=json) if prev else None,
        "next_url": urls.step(run_id, nxt, json=json) if nxt is not None else None,
        "rollouts": s.rollouts, "rollouts_url": urls.rollouts(run_id, json=json, step=step),
        "endings": endings,
        "reward": {"mean": s.mean_reward, "mean_no_errors": s.mean_reward_no_errors, "excluded": s.excluded,
                   "errors_as_zero": s.get("reward", "errors_as_zero"),
                   "errors_dropped": s.get("reward", "errors_dropped")},
        "history": [{"step": h.step, "url": urls.step(run_id, h.step, json=json), "rollouts": h.rollouts,
                     "errors": h.endings["error"], "error_share": h.share(h.endings["error"]),
                     "mean_reward": h.mean_reward, "mean_reward_no_errors": h.mean_reward_no_errors,
                     "current": h.step == step} for h in history],
        "groups": {**{k: v for k, v in s.get("groups", default={}).items()},
                   "one_member": len(one), "split_group_url": urls.rollouts(run_id, json=json, step=step,
                                                                            flag="split_group"),
                   "table": group_table[:20]},
        "tasks": _tasks_table(session, run_id, step, prev[-1].step if prev else None, json)[:20],
        "findings": [{"kind": k, "count": n, "url": urls.rollouts(run_id, json=json, step=step, flag=k)}
                     for k, n in sorted((s.get("findings") or {}).items(), key=lambda kv: (-kv[1], kv[0]))],
        "no_gradient": {"counts": [{"reason": k, "label": NO_GRADIENT_LABELS[k], "count": n, "share": s.share(n)}
                                   for k, n in (s.get("no_gradient") or {}).items() if n],
                        "total": len(no_grad), "rollouts": no_grad[:LIST_CAP], "shown": min(len(no_grad), LIST_CAP)},
        "lengths": s.get("lengths"), "mismatch": s.get("mismatch"), "staleness": s.get("staleness"),
        "advantages": s.get("advantages"),
        "charts_url": urls.chart(run_id, "reward", ext=".json" if json else "",
                                 steps=f"{max(0, step - 20)}-{step + 20}"),
        "task_changes_url": urls.task_changes(run_id, prev[-1].step if prev else step, step,
                                              ext=".json" if json else ""),
        "notes": step_notes(session, run_id, step),
        "alert": step_alert(session, run_id, step, json=json),
        "new_signatures": failures.new_at(session, run_id, step, json=json),
    })


def step_notes(session: Session, run_id: str, step: int) -> list[NoteView]:
    """The notes on one step of a run, one per author, by time (the API's note shape)."""
    return [note_view(n) for n in q_annotations.notes_of(session=session, run_id=run_id, step=step)]


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

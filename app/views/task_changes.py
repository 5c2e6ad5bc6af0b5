"""Task changes between two steps of a run (`/runs/{run}/task-changes?a=&b=`): the tasks whose
ending counts or mean reward changed, from the per-(step, task) rollups; its CSV download."""
from __future__ import annotations

from sqlmodel import Session

from app import urls
from app.queries import runs as q_runs
from app.queries.steps import task_rows
from app.views.chart import RunRef
from app.views.common import PageModel
from ingest.stats import ENDINGS


class TaskChange(PageModel):
    """One task at steps a and b: `rollouts` and `mean_reward` as [a, b], `delta` = b − a (None
    when either is missing), `endings` the endings whose counts differ ({ending: [a, b]}), and
    the task's rollouts at each step."""

    task: str
    rollouts: list[int]
    mean_reward: list[float | None]
    delta: float | None
    endings: dict[str, list[int]]
    url_a: str
    url_b: str


class TaskChangesPage(PageModel):
    run: RunRef
    a: int
    b: int
    a_url: str
    b_url: str
    endings: list[str]
    tasks: list[TaskChange]


def task_changes_page(session: Session, run_id: str, a: int, b: int, *, json: bool = False) -> TaskChangesPage | None:
    """Tasks whose ending counts or mean reward changed between steps `a` and `b`, largest change
    first, each linking to both steps' rollouts of the task (their JSON twins when `json`)."""
    run = q_runs.get_run(session=session, run_id=run_id)
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
                     "url_a": urls.rollouts(run_id, json=json, step=a, task=key),
                     "url_b": urls.rollouts(run_id, json=json, step=b, task=key)})
    rows.sort(key=lambda r: (-abs(r["delta"] or 0.0), -sum(abs(x - y) for x, y in r["endings"].values()), r["task"]))
    return TaskChangesPage(run=RunRef(id=run.id, name=run.name, url=urls.run(run.id, json=json)), a=a, b=b,
                           a_url=urls.step(run_id, a, json=json), b_url=urls.step(run_id, b, json=json),
                           endings=ENDINGS,
                           tasks=[TaskChange(**r) for r in rows])


CSV_COLUMNS = ["task", "rollouts_a", "rollouts_b", "mean_reward_a", "mean_reward_b", "delta", "endings_changed",
               "url_a", "url_b"]


def task_changes_csv(page: TaskChangesPage) -> list[dict]:
    """The table as CSV rows (CSV_COLUMNS): one per task, the changed endings as `e a→b; ...`."""
    return [{"task": t.task, "rollouts_a": t.rollouts[0], "rollouts_b": t.rollouts[1],
             "mean_reward_a": t.mean_reward[0], "mean_reward_b": t.mean_reward[1], "delta": t.delta,
             "endings_changed": "; ".join(f"{e} {x}→{y}" for e, (x, y) in t.endings.items()),
             "url_a": t.url_a, "url_b": t.url_b} for t in page.tasks]

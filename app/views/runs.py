"""The runs list and a run's page (per-step rollups and the two charts)."""
from __future__ import annotations

from typing import Any

from sqlmodel import Session

from app import charts, urls
from app.queries import findings as q_findings
from app.queries import nodes as q_nodes
from app.queries import runs as q_runs
from app.queries.common import ENDINGS
from app.queries import annotations as q_annotations
from app.views.common import NoteView, PageModel, iso, model_of, note_view
from ingest import checks
from rollscope import schemas

# A run in the runs list: the shape the client's `runs()` returns, defined once in rollscope/schemas.py.
RunRow = model_of(schemas.RunRow)


class RunsPage(PageModel):
    runs: list[RunRow]
    endings: list[str]


def runs_page(session: Session, *, json: bool = False) -> RunsPage:
    """Every run with its counts, step range, mean rewards and ending counts; links to the JSON
    twins when `json`."""
    rows = [RunRow(**(r | {"created_at": iso(r["created_at"])}), url=urls.run(r["id"], json=json))
            for r in q_runs.list_runs(session=session)]
    return RunsPage(runs=rows, endings=ENDINGS)


class RunHeader(PageModel):
    id: str
    name: str | None
    type: str
    tokenizer: str | None
    url: str
    rollouts_url: str


class StepView(PageModel):
    """One training step: counts and rates per ending, mean rewards, and its rollouts' URL."""

    step: int | None
    rollouts: int
    endings: dict[str, int]
    mean_reward: float | None
    mean_reward_no_errors: float | None
    scored: int
    excluded: int
    rates: dict[str, float]
    url: str


class RunTotals(PageModel):
    rollouts: int
    endings: dict[str, int]
    mean_reward: float | None
    mean_reward_no_errors: float | None
    excluded: int
    retries: int


class RunCharts(PageModel):
    """Plotly figure data (`{"data", "layout"}`), drawn by static/app.js."""

    ending_rates: dict[str, Any]
    reward: dict[str, Any]
    findings: dict[str, Any]  # share of rollouts with each finding per step


class CheckRow(PageModel):
    """What one registered check did in this run: rollouts with a finding (`url`: those
    rollouts), rollouts it decided on (`checked`), rollouts it could not decide on (`skipped`)
    and the commonest reasons why. A group-scope check counts the rollouts of its groups."""

    kind: str
    label: str
    scope: str
    severity: str
    rule: str
    rollouts: int
    checked: int
    skipped: int
    skip_reasons: list[dict[str, Any]]
    url: str


class RunPage(PageModel):
    run: RunHeader
    endings: list[str]
    steps: list[StepView]
    steps_recorded: bool
    totals: RunTotals
    charts: RunCharts | None
    checks: list[CheckRow]
    chat_template: bool  # a chat template is kept with the run's tokenizer (the template checks use it)
    notes: list[NoteView]  # notes on the run's training steps
    live: bool = False  # a rollout arrived from a live source (spool, HTTP, OTLP) in the last LIVE_SECONDS: the page refreshes itself every 2 s
    in_progress_step: int | None = None  # the newest step while live: more rollouts may still come
    version: str = ""  # changes when a rollout of the run is stored or replaced (live polling)


LIVE_SECONDS = 120  # a run that received a rollout from a live source this recently is "receiving"


class RunSummary(PageModel):
    """A run's header, its per-step rollups and its totals: what the API's run, steps and metrics
    answer, without the page's charts, checks and notes."""

    run: RunHeader
    endings: list[str]
    steps: list[StepView]
    totals: RunTotals


def run_summary(session: Session, run_id: str, *, json: bool = False) -> RunSummary | None:
    """The header, steps and totals of a run (one pass over its rollouts); None if there is no
    such run. Links go to the JSON twins when `json`."""
    run = q_runs.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    steps, total = q_runs.run_steps(session=session, run_id=run_id)
    return RunSummary(
        run=RunHeader(id=run.id, name=run.name, type=run.type, tokenizer=run.tokenizer_sha256,
                      url=urls.run(run.id, json=json), rollouts_url=urls.rollouts(run.id, json=json)),
        endings=ENDINGS,
        steps=[StepView(**s.__dict__, rates=s.rates(), url=urls.rollouts(run_id, json=json, step=s.step)) for s in steps],
        totals=RunTotals(rollouts=total.rollouts, endings={e: total.endings.get(e, 0) for e in ENDINGS},
                         mean_reward=total.mean_reward, mean_reward_no_errors=total.mean_reward_no_errors,
                         excluded=total.excluded, retries=q_runs.count_retries(session=session, run_id=run_id)),
    )


def run_page(session: Session, run_id: str, *, json: bool = False) -> RunPage | None:
    """A run: per training step, counts per ending and both means; the charts, the checks and the
    step notes; None if there is no such run. Links go to the JSON twins when `json` (the charts'
    links stay on the pages)."""
    summary = run_summary(session, run_id, json=json)
    if summary is None:
        return None
    steps = summary.steps
    checks_ran, per_step = _checks_table(session, run_id, summary.totals.rollouts)
    fired = [(c.kind, c.label) for c in checks_ran if c.rollouts]
    # Without a training step (Tunix files, tau-bench) a per-step chart has no axis to draw on.
    steps_recorded = any(s.step is not None for s in steps)
    live = q_runs.received_live_within(session=session, run_id=run_id, seconds=LIVE_SECONDS)
    newest = max((s.step for s in steps if s.step is not None), default=None)
    return RunPage(
        live=live, in_progress_step=newest if live else None,
        version=q_runs.run_version(session=session, run_id=run_id),
        run=summary.run,
        endings=summary.endings,
        steps=steps,
        steps_recorded=steps_recorded,
        totals=summary.totals,
        charts=RunCharts(ending_rates=charts.ending_rates(run_id, steps), reward=charts.reward_trend(run_id, steps),
                         findings=charts.finding_rates(run_id, steps, per_step, fired))
        if steps_recorded else None,
        checks=checks_ran,
        chat_template=q_nodes.has_chat_template(session=session, sha256=summary.run.tokenizer),
        notes=[note_view(n) for n in q_annotations.notes_of(session=session, run_id=run_id)],
    )


def _checks_table(session: Session, run_id: str, n_rollouts: int) -> tuple[list[CheckRow], dict]:
    """Every registered check with what it did in this run (see CheckRow), in registry order;
    and (step, kind) → rollouts with a finding, for the chart."""
    with_finding: dict[str, int] = {}
    undecided: dict[str, int] = {}
    per_step: dict[tuple, int] = {}
    for step, kind, skipped, n in q_findings.finding_counts(session=session, run_id=run_id):
        kind = checks.legacy_kind(kind)
        if skipped:
            undecided[kind] = undecided.get(kind, 0) + n
        else:
            with_finding[kind] = with_finding.get(kind, 0) + n
            per_step[(step, kind)] = per_step.get((step, kind), 0) + n
    reasons = q_findings.skip_reasons(session=session, run_id=run_id)
    table = [CheckRow(kind=kind, label=c.label, scope=c.scope, severity=c.severity, rule=c.doc,
                      rollouts=with_finding.get(kind, 0), skipped=undecided.get(kind, 0),
                      checked=max(0, n_rollouts - undecided.get(kind, 0)),
                      skip_reasons=[{"reason": m, "count": n} for m, n in reasons.get(kind, [])],
                      url=urls.rollouts(run_id, flag=kind))
             for kind, c in checks.REGISTRY.items()]
    return table, per_step

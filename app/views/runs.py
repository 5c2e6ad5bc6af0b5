"""The runs list and a run's page (per-step rollups, the checks table, the run's recorded
metadata and its charts), and the run summary the API answers; all from the rollups."""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from sqlmodel import Session

from app import charts, urls
from app.queries import annotations as q_annotations
from app.queries import nodes as q_nodes
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.queries.ingest_status import BANNER_WINDOW
from app.queries.steps import RUN_SECTIONS, StepRange, every_run_step_stats, run_totals, step_stats
from app.views.chart import RunCharts, run_charts
from app.views.common import NoteView, PageModel, iso, model_of, note_view
from app.views.ingest_status import IngestionBanner, ingestion_banner
from app.views.step_alerts import StepAlertView, run_alerts
from ingest import checks
from ingest.stats import ENDINGS
from rollscope import schemas

STEPS_TABLE = 200  # steps listed on the run page; a longer run shows its last ones (narrow with ?steps=)

# A run in the runs list: the shape the client's `runs()` returns, defined once in rollscope/schemas.py.
RunRow = model_of(schemas.RunRow, defaults={"sparkline": None})


class RunsPage(PageModel):
    runs: list[RunRow]
    endings: list[str]
    compare_url: str


def runs_page(session: Session, *, json: bool = False) -> RunsPage:
    """Every run with its counts, step range, mean rewards, ending counts and a reward sparkline,
    read from the per-step rollups (one row per step, at any run size); links to the JSON twins
    when `json`."""
    runs = q_runs.list_runs(session=session)
    # the totals shown: rollouts, steps, endings, mean rewards (exact, from each step's partial sums)
    by_run = every_run_step_stats(session=session, sections=("endings", "reward"))
    rows = []
    for run in runs:
        stats = by_run.get(run.id, [])
        tot = run_totals(stats)
        stepped = [s for s in stats if s.step is not None]
        rows.append(RunRow(
            id=run.id, name=run.name, type=run.type, url=urls.run(run.id, json=json),
            rollouts=tot["rollouts"], first_step=tot["first_step"], last_step=tot["last_step"],
            steps=len(stepped), mean_reward=tot["mean_reward"],
            mean_reward_no_errors=tot["mean_reward_no_errors"], endings=tot["endings"],
            tokenizer=run.tokenizer_sha256,
            created_at=iso(run.created_at),
            sparkline=sparkline([(s.step, s.mean_reward) for s in stepped]),
        ))
    return RunsPage(runs=rows, endings=ENDINGS, compare_url="/compare")


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


class HeadlineCharts(PageModel):
    """The charts embedded in the run page (Plotly figure data, drawn by static/app.js): the
    registry's `endings` and `findings` charts (app/charts.py) over the steps shown. The other
    registered charts are fetched from their twins (`analytics`)."""

    ending_rates: dict[str, Any]
    findings: dict[str, Any]


class CheckRow(PageModel):
    """What one registered check did in this run: rollouts with a finding (`url`: those
    rollouts), rollouts it decided on (`checked`), rollouts it could not decide on (`skipped`)
    and the commonest reasons why, rollouts stored before the check existed (`not_run`: their
    checks version is older than its `since`) and rollouts stored before Rollscope kept which
    checks ran (`unrecorded`); `rollscope recheck` runs today's checks on both. A group-scope
    check counts the rollouts of its groups."""

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
    not_run: int = 0
    unrecorded: int = 0


class RunPage(PageModel):
    run: RunHeader
    endings: list[str]
    steps: list[StepView]
    steps_recorded: bool
    totals: RunTotals
    charts: HeadlineCharts | None
    checks: list[CheckRow]
    chat_template: bool  # a chat template is kept with the run's tokenizer (the template checks use it)
    notes: list[NoteView]  # notes on the run's training steps
    # a rollout arrived from a live source (spool, HTTP, OTLP) in the last LIVE_SECONDS: the page refreshes
    # itself every 2 s
    live: bool = False
    in_progress_step: int | None = None  # the newest step while live: more rollouts may still come
    version: str = ""  # changes when a rollout of the run is stored or replaced (live polling)
    # every other registered chart's URLs (app/views/chart.py), the run's recorded metadata, how
    # many steps the table lists, and the link to search
    analytics: RunCharts | None = None
    metadata: dict[str, Any] | None = None
    steps_shown: dict[str, Any] | None = None
    search_url: str | None = None
    # the spools of its recent rollouts that no live worker reads (app.views.ingest_status)
    ingestion: IngestionBanner | None = None
    # the flagged steps within the steps shown (step alerts, docs/analytics.md), marked on the charts
    alerts: list[StepAlertView] = []


LIVE_SECONDS = 120  # a run that received a rollout from a live source this recently is "receiving"


class RunSummary(PageModel):
    """A run's header, its per-step rollups and its totals: what the API's run, steps and metrics
    answer, without the page's charts, checks and notes."""

    run: RunHeader
    endings: list[str]
    steps: list[StepView]
    totals: RunTotals


def run_summary(session: Session, run_id: str, *, json: bool = False) -> RunSummary | None:
    """The header, steps and totals of a run, from the per-step rollups (app/store/rollups.py:
    one row per step at any run size); None if there is no such run. Links go to the JSON twins
    when `json`."""
    run = q_runs.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    stats = step_stats(session=session, run_id=run_id, include_unstepped=True, sections=RUN_SECTIONS)
    steps = [q_runs.StepRow(step=s.step, rollouts=s.rollouts, endings=dict(s.endings), mean_reward=s.mean_reward,
                            mean_reward_no_errors=s.mean_reward_no_errors, scored=s.scored, excluded=s.excluded)
             for s in stats]
    tot = run_totals(stats)
    return RunSummary(
        run=RunHeader(id=run.id, name=run.name, type=run.type, tokenizer=run.tokenizer_sha256,
                      url=urls.run(run.id, json=json), rollouts_url=urls.rollouts(run.id, json=json)),
        endings=ENDINGS,
        steps=[StepView(**s.__dict__, rates=s.rates(), url=urls.rollouts(run_id, json=json, step=s.step))
               for s in steps],
        totals=RunTotals(rollouts=sum(s.rollouts for s in steps),
                         endings={e: sum(s.endings.get(e, 0) for s in steps) for e in ENDINGS},
                         mean_reward=tot["mean_reward"], mean_reward_no_errors=tot["mean_reward_no_errors"],
                         excluded=tot["excluded"], retries=tot["retries"]),
    )


def run_page(session: Session, run_id: str, *, json: bool = False, steps_range=None, window: int = 1) -> RunPage | None:
    """A run: per training step, counts per ending and both means (from the per-step rollups,
    app/store/rollups.py: one row per step at any run size), the checks table, the run's
    metadata and every analytics chart; None if there is no such run. `steps_range` limits the
    steps table and the charts, `window` adds a moving average to the charts. Links go to the
    JSON twins when `json` (the charts' links stay on the pages)."""
    run = q_runs.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    steps_range = steps_range or StepRange()
    stats = step_stats(session=session, run_id=run_id, include_unstepped=True, sections=RUN_SECTIONS)
    steps = [q_runs.StepRow(step=s.step, rollouts=s.rollouts, endings=dict(s.endings), mean_reward=s.mean_reward,
                            mean_reward_no_errors=s.mean_reward_no_errors, scored=s.scored, excluded=s.excluded)
             for s in stats]
    shown = [s for s in steps if s.step is None or (
        (steps_range.first is None or s.step >= steps_range.first)
        and (steps_range.last is None or s.step <= steps_range.last))]
    stepped = [s for s in shown if s.step is not None]
    shown_steps = {s.step for s in stepped}
    shown_stats = [s for s in stats if s.step is not None and s.step in shown_steps]  # the charts' rollups
    listed = stepped[-STEPS_TABLE:] + [s for s in shown if s.step is None]
    step_rows = [StepView(**s.__dict__, rates=s.rates(), url=urls.rollouts(run_id, json=json, step=s.step))
                 for s in listed]
    tot = run_totals(stats)
    means = {"mean_reward": tot["mean_reward"], "mean_reward_no_errors": tot["mean_reward_no_errors"],
             "excluded": tot["excluded"]}
    checks_ran = _checks_table(run_id, stats, sum(s.rollouts for s in steps))
    alerts = run_alerts(session, run_id, steps=steps_range, json=json)
    # Without a training step (Tunix files, tau-bench) a per-step chart has no axis to draw on.
    steps_recorded = any(s.step is not None for s in steps)
    # receiving: something arrived lately (the rollups know, no scan), and from a live source
    live = _last_ingest_age(stats) < LIVE_SECONDS and q_runs.received_live_within(
        session=session, run_id=run_id, seconds=LIVE_SECONDS)
    newest = max((s.step for s in steps if s.step is not None), default=None)
    banner = run_banner(session, run_id, stats)
    return RunPage(
        live=live, in_progress_step=newest if live else None,
        version=run_version(stats, banner),
        run=RunHeader(id=run.id, name=run.name, type=run.type, tokenizer=run.tokenizer_sha256,
                      url=urls.run(run.id, json=json), rollouts_url=urls.rollouts(run.id, json=json)),
        endings=ENDINGS,
        steps=step_rows,
        steps_recorded=steps_recorded,
        totals=RunTotals(rollouts=sum(s.rollouts for s in steps),
                         endings={e: sum(s.endings.get(e, 0) for s in steps) for e in ENDINGS},
                         mean_reward=means.get("mean_reward"),
                         mean_reward_no_errors=means.get("mean_reward_no_errors"),
                         excluded=means.get("excluded", 0),
                         retries=tot["retries"]),
        charts=HeadlineCharts(ending_rates=charts.mark_alerts(charts.figure(charts.REGISTRY["endings"], run_id,
                                                                            shown_stats), alerts),
                              findings=charts.figure(charts.REGISTRY["findings"], run_id, shown_stats))
        if steps_recorded else None,
        checks=checks_ran,
        chat_template=q_nodes.has_chat_template(session=session, sha256=run.tokenizer_sha256),
        notes=[note_view(n) for n in q_annotations.notes_of(session=session, run_id=run_id)],
        analytics=run_charts(run_id, steps=steps_range, window=window, skip=("endings", "findings")),
        metadata=run_metadata(session, run_id),
        steps_shown={"listed": len([r for r in step_rows if r.step is not None]),
                     "of": len([s for s in steps if s.step is not None]),
                     "cut": len(stepped) > STEPS_TABLE},
        search_url=urls.search(run=run_id),
        ingestion=banner,
        alerts=alerts,
    )


def run_banner(session: Session, run_id: str, stats) -> IngestionBanner | None:
    """The run page's ingest banner (app.views.ingest_status.ingestion_banner), looked for only
    when the run stored a rollout within BANNER_WINDOW (`stats`: its step rollups, the `ingested`
    section at least)."""
    if _last_ingest_age(stats) >= BANNER_WINDOW.total_seconds():
        return None
    return ingestion_banner(session.connection(), run_id)


def run_version(stats, banner: IngestionBanner | None) -> str:
    """The run page's `version` (its JSON twin's, and the live events' `id`): changes when a
    rollout is stored or replaced, and when the ingest banner comes, goes or moves on."""
    return _version(stats) + _banner_version(banner)


def _banner_version(banner: IngestionBanner | None) -> str:
    """The banner's part of the page's version: it changes when ingestion stops, resumes, or its
    "N min ago" moves on by a minute (a live page is sent an event then, not every second)."""
    if banner is None:
        return ""
    import hashlib
    from datetime import UTC, datetime

    now = datetime.now(UTC)

    def minutes(since: str) -> int:  # the banner moves on by the minute, not by the second
        at = datetime.fromisoformat(since)
        return int((now - (at if at.tzinfo else at.replace(tzinfo=UTC))).total_seconds() // 60)

    said = "|".join(f"{s.spool}:{s.worker_state}:{s.since}:{minutes(s.since)}" for s in banner.stopped)
    return "-s" + hashlib.sha1(said.encode()).hexdigest()[:8]


def _last_ingest_age(stats) -> float:
    """Seconds since the run's newest rollout was stored, from the step rollups (each keeps its
    newest ingest time): no scan of the rollouts. Infinity for a run without rollouts."""
    from datetime import UTC, datetime

    last = max((s.get("ingested", "last") or "" for s in stats), default="")
    if not last:
        return float("inf")
    at = datetime.fromisoformat(last)
    return (datetime.now(UTC) - (at if at.tzinfo else at.replace(tzinfo=UTC))).total_seconds()


def _version(stats) -> str:
    """A token that changes whenever a rollout of the run is stored or replaced, from the step
    rollups (no count over the rollouts): how many there are, and the newest ingest time (a
    replacement is a new ingest), hashed: an opaque token, not a timestamp shown in the page."""
    import hashlib

    last = max((s.get("ingested", "last") or "" for s in stats), default="")
    return f"{sum(s.rollouts for s in stats)}-{hashlib.sha1(str(last).encode()).hexdigest()[:12]}"


def _checks_table(run_id: str, stats, n_rollouts: int) -> list[CheckRow]:
    """Every registered check with what it did in this run (see CheckRow), in registry order. From
    the step rollups' `checks` (app.store.rollups.check_counts, kept at ingest): one row per step,
    whatever the number of rollouts and findings."""
    with_finding: dict[str, int] = {}
    undecided: dict[str, int] = {}
    reasons: dict[tuple[str, str, bool], int] = {}
    by_version: dict[str, int] = {}  # checks version ("null": not kept) → rollouts
    for s in stats:
        c = s.get("checks") or {}
        for version, n in (c.get("ran") or {}).items():
            by_version[version] = by_version.get(version, 0) + n
        for kind, n in (c.get("found") or {}).items():
            kind = checks.legacy_kind(kind)
            with_finding[kind] = with_finding.get(kind, 0) + n
        for kind, n in (c.get("skipped") or {}).items():
            kind = checks.legacy_kind(kind)
            undecided[kind] = undecided.get(kind, 0) + n
        for scope in ("skip_reasons", "group_skip_reasons"):
            for kind, messages in (c.get(scope) or {}).items():
                for message, n in messages.items():
                    key = (kind, message, scope == "group_skip_reasons")
                    reasons[key] = reasons.get(key, 0) + n
    top: dict[str, list[tuple[str, int]]] = {}  # the 3 commonest reasons per stored kind
    for (kind, message, _), n in sorted(reasons.items(), key=lambda x: (x[0][0], -x[1], x[0][1], x[0][2])):
        if len(top.setdefault(kind, [])) < 3:
            top[kind].append((message, n))
    unrecorded = by_version.pop("null", 0)
    table = []
    for kind, c in checks.REGISTRY.items():
        not_run = sum(n for version, n in by_version.items() if int(version) < c.since)
        table.append(CheckRow(kind=kind, label=c.label, scope=c.scope, severity=c.severity, rule=c.doc,
                              rollouts=with_finding.get(kind, 0), skipped=undecided.get(kind, 0),
                              checked=max(0, n_rollouts - undecided.get(kind, 0) - not_run - unrecorded),
                              not_run=not_run, unrecorded=unrecorded,
                              skip_reasons=[{"reason": m, "count": n} for m, n in top.get(kind, [])],
                              url=urls.rollouts(run_id, flag=kind)))
    return table


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
    run = q_runs.get_run(session=session, run_id=run_id)
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
    envelope = q_rollouts.first_envelope(session=session, run_id=run_id)
    calls = (envelope or {}).get("calls") or []
    model_names = sorted({c.get("model") for c in calls if isinstance(c, dict) and c.get("model")})
    sampling = next((c.get("sampling") for c in calls if isinstance(c, dict) and c.get("sampling")), None)
    tok = q_runs.get_tokenizer(session=session, sha256=run.tokenizer_sha256)
    return {
        "name": run.name, "type": run.type, "created_at": iso(run.created_at),
        "extra": run.extra or {},
        "models": model_names, "sampling": sampling,
        "tokenizer": ({"name": tok.name, "kind": tok.kind, "n_vocab": tok.n_vocab, "sha256": tok.sha256}
                      if tok else None),
        "sources": [{"source": k, "rollouts": n} for k, n in sources.most_common(20)],
        "first_ingest": min(firsts) if firsts else None, "last_ingest": max(lasts) if lasts else None,
    }

"""One chart of a run (`/runs/{run}/charts/{chart}`: the figure, its caption and the links to
its twin, CSV and the other charts), and the run page's chart section. The figures are built by
the chart registry (app/charts.py) from the step rollups (app/queries/steps.py)."""
from __future__ import annotations

from typing import Any

from sqlmodel import Session

from app import charts, urls
from app.queries import runs as q_runs
from app.queries.steps import StepRange, heatmap_tasks, step_stats
from app.views.common import PageModel


class RunRef(PageModel):
    """The run a page belongs to, with its page (or twin) URL."""

    id: str
    name: str | None
    url: str


class ChartLinks(PageModel):
    """A registered chart and its page, JSON twin (the figure) and CSV URLs."""

    id: str
    title: str
    caption: str
    url: str
    json_url: str
    csv_url: str


class ChartNav(PageModel):
    id: str
    title: str
    url: str


class ChartPage(PageModel):
    """One chart of a run: `figure` is Plotly figure data (`{"data", "layout"}`), every point's
    `customdata` the URL of the rollouts (or step page) behind it; `steps` the step range shown
    (`A-B`, "" for all), `smooth` the moving-average window (1: none)."""

    run: RunRef
    chart: ChartLinks
    steps: str
    smooth: int
    figure: dict[str, Any]
    charts: list[ChartNav]


class RunCharts(PageModel):
    """The run page's chart section: every registered chart but the ones embedded, each fetched
    from its JSON twin by static/app.js."""

    steps: str
    smooth: int
    charts: list[ChartLinks]


def chart_nav(run_id: str, steps: StepRange, window: int, json: bool = False) -> list[ChartNav]:
    return [ChartNav(id=c.id, title=c.title,
                     url=urls.chart(run_id, c.id, ext=".json" if json else "", steps=str(steps) or None, smooth=window))
            for c in charts.REGISTRY.values()]


def chart_figure(session: Session, run_id: str, chart: charts.Chart, steps: StepRange, window: int) -> dict:
    stats = step_stats(session=session, run_id=run_id, steps=steps, sections=chart.sections)
    tasks = heatmap_tasks(session=session, run_id=run_id, steps=steps, limit=charts.HEATMAP_TASKS) \
        if chart.needs_tasks else None
    fig = charts.figure(chart, run_id, stats, tasks, window=window)
    if chart.id in charts.ALERT_CHARTS:  # the flagged steps marked (step alerts)
        from app.views.step_alerts import run_alerts

        fig = charts.mark_alerts(fig, run_alerts(session, run_id, steps=steps))
    return fig


def chart_page(session: Session, run_id: str, chart_id: str, *, steps: StepRange, window: int,
               json: bool = False) -> ChartPage | None:
    """One chart of a run: its figure data (Plotly), caption, and the URLs of its JSON twin, CSV
    and neighbours. `steps` limits the step axis; `window` > 1 adds a trailing moving average.
    `json`: the run and neighbour links go to JSON twins; the figure's `customdata` stays page
    links, since the pages' script fetches this twin and navigates with them (static/app.js)."""
    run = q_runs.get_run(session=session, run_id=run_id)
    chart = charts.REGISTRY.get(chart_id)
    if run is None or chart is None:
        return None
    fig = chart_figure(session, run_id, chart, steps, window)
    params = {"steps": str(steps) or None, "smooth": window}
    return ChartPage(
        run=RunRef(id=run.id, name=run.name, url=urls.run(run.id, json=json)),
        chart=ChartLinks(id=chart.id, title=chart.title, caption=chart.caption,
                         url=urls.chart(run_id, chart.id, **params),
                         json_url=urls.chart(run_id, chart.id, ext=".json", **params),
                         csv_url=urls.chart(run_id, chart.id, ext=".csv", **params)),
        steps=str(steps), smooth=window,
        figure=fig,
        charts=chart_nav(run_id, steps, window, json),
    )


def run_charts(run_id: str, *, steps: StepRange = StepRange(), window: int = 1, skip: tuple = ()) -> RunCharts:
    """The run page's chart section: every registered chart with its page, JSON twin and CSV URLs
    (the page fetches each figure from its JSON twin, so the run page stays light)."""
    params = {"steps": str(steps) or None, "smooth": window}
    return RunCharts(steps=str(steps), smooth=window,
                     charts=[ChartLinks(id=c.id, title=c.title, caption=c.caption,
                                        url=urls.chart(run_id, c.id, **params),
                                        json_url=urls.chart(run_id, c.id, ext=".json", **params),
                                        csv_url=urls.chart(run_id, c.id, ext=".csv", **params))
                             for c in charts.REGISTRY.values() if c.id not in skip])

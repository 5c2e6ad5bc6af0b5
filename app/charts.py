"""Plotly figures as plain data (`{"data": [...], "layout": {...}}`), drawn by static/app.js.

Every point carries `customdata` = the URL of the rollouts behind it, so a click drills down.
"""
from __future__ import annotations

from app import urls
from app.queries.common import ENDINGS
from app.queries.runs import StepRow

ENDING_COLORS = {  # the ending badges' colours (static/app.css .ending-*): one colour per ending everywhere
    "submitted": "#2e7d32",
    "task_detected": "#43a047",
    "truncated": "#b58100",
    "length_cut": "#d35400",
    "error": "#c62828",
    "unknown": "#757575",
}


MAX_STEP_TICKS = 10


def step_dtick(steps: list[int]) -> int:
    """Spacing of the step axis ticks: whole steps (1, 2, 5, 10, 20, 50, ...), at most
    MAX_STEP_TICKS + 1 ticks over the run's step range. Plotly's own choice puts ticks at 2.5 or
    2.6 when a run has few steps."""
    span = max(steps) - min(steps) if steps else 0
    base = 1
    while True:
        for m in (1, 2, 5):
            if span <= MAX_STEP_TICKS * base * m:
                return base * m
        base *= 10


def _layout(title: str, yaxis: dict, steps: list[int]) -> dict:
    return {
        "title": {"text": title, "font": {"size": 14}},
        # Integer ticks only: a training step is a whole number.
        "xaxis": {"title": {"text": "training step"}, "tickmode": "linear", "tick0": 0,
                  "dtick": step_dtick(steps), "tickformat": "d"},
        "yaxis": yaxis,
        "margin": {"l": 50, "r": 10, "t": 40, "b": 40},
        # Plotly hides the legend of a one-trace figure; a run with one ending type still names it.
        "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25},
        "hovermode": "closest",
        "height": 320,
    }


def ending_rates(run_id: str, steps: list[StepRow]) -> dict:
    """Stacked bars: fraction of rollouts per ending at each training step."""
    rows = [s for s in steps if s.step is not None]
    data = []
    for ending in ENDINGS:
        if not any(s.endings.get(ending) for s in rows):
            continue
        data.append({
            "type": "bar", "name": ending,
            "x": [s.step for s in rows],
            "y": [s.endings.get(ending, 0) / s.rollouts if s.rollouts else 0 for s in rows],
            "text": [f"{s.endings.get(ending, 0)} of {s.rollouts}" for s in rows],
            "textposition": "none",
            "hovertemplate": "step %{x}<br>" + ending + ": %{y:.1%} (%{text})<extra></extra>",
            "marker": {"color": ENDING_COLORS[ending]},
            "customdata": [urls.rollouts(run_id, step=s.step, ending=ending) for s in rows],
        })
    layout = _layout("Ending-type rates per step",
                     {"title": {"text": "share of rollouts"}, "tickformat": ".0%", "range": [0, 1]},
                     [s.step for s in rows])
    layout["barmode"] = "stack"
    return {"data": data, "layout": layout}


def reward_trend(run_id: str, steps: list[StepRow]) -> dict:
    """Mean reward per step: errored rollouts scored 0, and errored rollouts dropped."""
    rows = [s for s in steps if s.step is not None]
    links = [urls.rollouts(run_id, step=s.step) for s in rows]
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "errors scored 0",
         "x": [s.step for s in rows], "y": [s.mean_reward for s in rows], "customdata": links,
         "hovertemplate": "step %{x}<br>mean reward %{y:.3f} (errors = 0)<extra></extra>",
         "line": {"color": "#1565c0"}},
        {"type": "scatter", "mode": "lines+markers", "name": "errors dropped",
         "x": [s.step for s in rows], "y": [s.mean_reward_no_errors for s in rows], "customdata": links,
         "hovertemplate": "step %{x}<br>mean reward %{y:.3f} (errors dropped)<extra></extra>",
         "line": {"color": "#6a1b9a", "dash": "dot"}},
    ]
    layout = _layout("Mean reward per step", {"title": {"text": "mean reward"}}, [s.step for s in rows])
    return {"data": data, "layout": layout}


def finding_rates(run_id: str, steps: list[StepRow], counts: dict[tuple[int | None, str], int],
                  kinds: list[tuple[str, str]]) -> dict:
    """Grouped bars: per kind, the share of a step's rollouts with that finding. `counts`:
    (step, kind) → rollouts with a finding; `kinds`: (kind, label) in registry order, only those
    that fired. Each bar links to the rollouts list filtered by step and kind."""
    rows = [s for s in steps if s.step is not None]
    data = []
    for kind, label in kinds:
        data.append({
            "type": "bar", "name": label,
            "x": [s.step for s in rows],
            "y": [counts.get((s.step, kind), 0) / s.rollouts if s.rollouts else 0 for s in rows],
            "text": [f"{counts.get((s.step, kind), 0)} of {s.rollouts}" for s in rows],
            "textposition": "none",
            "hovertemplate": "step %{x}<br>" + kind + ": %{y:.1%} (%{text})<extra></extra>",
            "customdata": [urls.rollouts(run_id, step=s.step, flag=kind) for s in rows],
        })
    layout = _layout("Rollouts with each finding per step",
                     {"title": {"text": "share of rollouts"}, "tickformat": ".0%", "range": [0, 1]},
                     [s.step for s in rows])
    layout["barmode"] = "group"
    return {"data": data, "layout": layout}

"""Plotly figures as plain data (`{"data": [...], "layout": {...}}`), drawn by static/app.js.

Every point carries `customdata` = the URL of the rollouts behind it, so a click drills down.
"""
from __future__ import annotations

import math
import re

from app import urls
from app.text import reveal_invisible
from ingest.stats import ENDINGS

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
    """The layout every step chart shares, after TensorBoard's and W&B's panels: the plot is the
    biggest thing in it; the legend is one compact row (or a few) below the plot, referenced to
    the container so Plotly reserves room for it under the axis title instead of drawing over it;
    every axis `automargin` so tick labels and axis titles (the right axis's too) are never
    clipped; hovering a step lists every series at that step (`x unified`). static/app.js sets
    the height for where the chart is shown and raises it until the plot area meets its floor."""
    return {
        "title": {"text": title, "font": {"size": 14}, "x": 0, "xref": "paper", "xanchor": "left",
                  "y": 1, "yref": "container", "yanchor": "top", "pad": {"t": 8}, "automargin": True},
        # Integer ticks only: a training step is a whole number.
        "xaxis": {"title": {"text": "training step", "standoff": 4}, "tickmode": "linear", "tick0": 0,
                  "dtick": step_dtick(steps), "tickformat": "d", "automargin": True},
        "yaxis": {**yaxis, "automargin": True},
        "margin": {"l": 8, "r": 8, "t": 36, "b": 4, "pad": 0},
        # Plotly hides the legend of a one-trace figure; a run with one ending type still names it.
        "showlegend": True,
        "legend": {"orientation": "h", "xref": "container", "yref": "container", "x": 0, "xanchor": "left",
                   "y": 0, "yanchor": "bottom", "font": {"size": 11}, "itemwidth": 30, "tracegroupgap": 0},
        "hovermode": "x unified",
        "height": 360,
    }


# --- the chart registry -----------------------------------------------------------------------
#
# Every training-step chart is one `Chart`: an id (its URL), a title and caption (the page and the
# docs say what it shows), and `build(run_id, steps, tasks)` turning the run's step rollups
# (app.queries.steps.StepStats, one per step) into Plotly figure data. Each figure serves as
# HTML (/runs/{run}/charts/{id}), JSON twin (.json) and CSV (.csv, one row per point), and every
# point carries the URL of the rollouts behind it. Adding a chart is one function and one
# `register(...)` line; tests/analytics/test_charts.py draws every registered chart.

from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

PALETTE = ["#1565c0", "#6a1b9a", "#2e7d32", "#ef6c00", "#c62828", "#00838f", "#5d4037", "#9e9d24", "#ad1457",
           "#455a64"]


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    caption: str
    build: Callable  # (run_id, steps: list[StepStats], tasks: list | None) -> {"data", "layout"}
    needs_tasks: bool = False  # build reads the per-task rollups of the largest tasks (heatmap)
    comparable: bool = True  # can be overlaid across runs on /compare
    sections: tuple[str, ...] = ()  # the keys of each step's stats that build reads (only those are read)


REGISTRY: dict[str, Chart] = {}


def register(chart: Chart) -> Chart:
    if chart.id in REGISTRY:
        raise ValueError(f"chart {chart.id!r} registered twice")
    REGISTRY[chart.id] = chart
    return chart


def _xs(steps) -> list[int]:
    return [s.step for s in steps]


def _line(name: str, steps, ys: list, links: list, color: str, *, dash: str | None = None, fmt: str = ".3f",
          unit: str = "", width: float = 2, yaxis: str | None = None) -> dict:
    t = {"type": "scatter", "mode": "lines+markers", "name": name, "x": _xs(steps), "y": ys, "customdata": links,
         "hovertemplate": f"{name}: %{{y:{fmt}}}{unit}<extra></extra>",
         "line": {"color": color, "width": width, **({"dash": dash} if dash else {})}, "marker": {"size": 4}}
    if yaxis:
        t["yaxis"] = yaxis
    return t


def _step_urls(run_id: str, steps, **params) -> list[str]:
    """urls.rollouts(run_id, step=s.step, **params) of every step, the shared part built once
    (a 1,000-step chart has thousands of points)."""
    base = urls.rollouts(run_id)
    rest = urls.rollouts(run_id, **params)[len(base) + 1:]
    rest = f"&{rest}" if rest else ""
    return [f"{base}?step={s.step}{rest}" if s.step is not None else urls.rollouts(run_id, **params) for s in steps]


def _step_page_urls(run_id: str, steps, anchor: str = "") -> list[str]:
    return [f"/runs/{urls.q(run_id)}/steps/{s.step}" + (f"#{anchor}" if anchor else "") for s in steps]


# The finding that says an ending's finish reason is not to be believed (ingest/checks/endings.py).
CONTRADICTED = "stop_reason_mismatch"


def _contradicted(s, ending: str) -> int:
    """Rollouts of `ending` at step `s` whose finish reason its tokens contradict (the step's
    `by_ending` finding counts)."""
    n = s.get("by_ending", ending, "findings", CONTRADICTED, default=0)
    return n if isinstance(n, int) else 0


def build_endings(run_id: str, steps, tasks=None) -> dict:
    """Stacked bars: share of rollouts per ending at each step (a click opens the step's page). The
    rollouts of an ending whose finish reason `stop_reason_mismatch` contradicts are their own
    hatched segment ("length_cut, reason contradicted"), linking to exactly them, not counted
    silently in it."""
    data = []
    for ending in ENDINGS:
        if not any(s.endings.get(ending) for s in steps):
            continue
        marked = [min(_contradicted(s, ending), s.endings.get(ending, 0)) for s in steps]
        plain = [s.endings.get(ending, 0) - m for s, m in zip(steps, marked)]
        data.append(_step_click({
            "type": "bar", "name": ending, "x": _xs(steps),
            "y": [n / s.rollouts if s.rollouts else 0 for s, n in zip(steps, plain)],
            "text": [f"{n} of {s.rollouts}" + (f"; {m} more marked: reason contradicted" if m else "")
                     for s, n, m in zip(steps, plain, marked)], "textposition": "none",
            "hovertemplate": ending + ": %{y:.1%} (%{text})<extra></extra>",
            "marker": {"color": ENDING_COLORS[ending]},
            "customdata": _step_urls(run_id, steps, ending=ending),
        }, run_id))
        if any(marked):
            name = f"{ending}, reason contradicted"
            data.append({
                "type": "bar", "name": name, "x": _xs(steps),
                "y": [m / s.rollouts if s.rollouts else 0 for s, m in zip(steps, marked)],
                "text": [f"{m} of {s.rollouts}" for s, m in zip(steps, marked)], "textposition": "none",
                "hovertemplate": name + ": %{y:.1%} (%{text}; the finish reason is contradicted "
                                 "by the tokens)<extra></extra>",
                "marker": {"color": ENDING_COLORS[ending], "pattern": {"shape": "x", "fgcolor": "#1d232b"}},
                "customdata": _step_urls(run_id, steps, ending=ending, flag=CONTRADICTED),
            })
    layout = _layout("Ending-type rates per step", {"title": {"text": "share of rollouts"}, "tickformat": ".0%",
                                                    "range": [0, 1]}, _xs(steps))
    layout["barmode"] = "stack"
    return {"data": data, "layout": layout}


# The two error policies (docs/analytics.md): a chart that shows a figure under both carries
# each trace's policy in `meta.policy`; one switch on the page (static/app.js) shows one policy at
# a time instead of doubling every trace. The figure data keep both (the CSV twin has both).
POLICIES = (("errors_as_zero", "errors scored 0"), ("errors_dropped", "errors dropped"))
DEFAULT_POLICY = "errors_as_zero"


def _policy(trace: dict, policy: str) -> dict:
    """`trace` tagged with its error policy (`meta.policy`); hidden unless the default policy."""
    trace["meta"] = {**(trace.get("meta") or {}), "policy": policy}
    if policy != DEFAULT_POLICY:
        trace["visible"] = False
    return trace


def _band(label: str, steps, lower: list, upper: list, links: list, color: str, fill: str, *, fmt: str = ".3f",
          low: str = "p10", high: str = "p90") -> list[dict]:
    """A quantile band: the lower quantile (no line, no legend entry) and the upper one filled down
    to it (`fill: tonexty`), one legend entry "p10–p90" for both."""
    common = {"type": "scatter", "mode": "lines", "x": _xs(steps), "customdata": links,
              "line": {"color": color, "width": 0}, "legendgroup": f"{label} band"}
    return [{**common, "name": f"{low} ({label})", "y": lower, "showlegend": False,
             "hovertemplate": f"{low} ({label}): %{{y:{fmt}}}<extra></extra>"},
            {**common, "name": f"{high} ({label})", "y": upper, "fill": "tonexty", "fillcolor": fill,
             "hovertemplate": f"{high} ({label}): %{{y:{fmt}}}<extra></extra>",
             "meta": {"legend": f"{low}–{high} ({label})"}}]


def _step_click(trace: dict, run_id: str) -> dict:
    """A click on the trace's points opens that step's story page (`meta.steps` + step), which
    links its rollouts; `customdata` (and the CSV's `url`) stays the point's rollouts."""
    trace["meta"] = {**(trace.get("meta") or {}), "steps": f"/runs/{urls.q(run_id)}/steps/"}
    return trace


def build_reward(run_id: str, steps, tasks=None) -> dict:
    """Mean, median and the p10–p90 band of reward per step, errors scored 0 and errors dropped
    (one policy shown at a time: `meta.policy`); a point opens its step's page."""
    links = _step_urls(run_id, steps)
    data = []
    for policy, label in POLICIES:
        color = "#1565c0" if policy == "errors_as_zero" else "#6a1b9a"
        q = lambda k: [s.get("reward", policy, k) for s in steps]  # noqa: E731
        data += [_policy(_step_click(t, run_id), policy) for t in (
            *_band(label, steps, q("p10"), q("p90"), links, color, color + "26"),
            _line(f"median ({label})", steps, q("median"), links, color, dash="dash", width=1.5),
            _line(f"mean ({label})", steps, q("mean"), links, color))]
    layout = _layout("Reward per step", {"title": {"text": "reward"}}, _xs(steps))
    layout["meta"] = {"policies": True}
    return {"data": data, "layout": layout}


HEATMAP_TASKS = 40  # rows: the tasks with the most rollouts in the range (narrow with ?steps=)
HEATMAP_COLUMNS = 100  # columns: consecutive steps are pooled into at most this many buckets


def build_task_heatmap(run_id: str, steps, tasks=None) -> dict:
    """Mean reward (errors scored 0) per task and step; a cell opens that task's rollouts.
    `tasks`: (per-(step, task) rollup rows of the largest tasks, the number of tasks in the range),
    app.queries.steps.heatmap_tasks.

    Bounded whatever the run's size: the HEATMAP_TASKS tasks with the most rollouts, and at most
    HEATMAP_COLUMNS columns, each pooling consecutive steps (a pooled cell is the mean over all its
    scored rollouts, and links to the rollouts of its step range)."""
    tasks, n_tasks = tasks or ([], 0)
    xs = _xs(steps)
    width = max(1, -(-len(xs) // HEATMAP_COLUMNS))
    buckets = [xs[i:i + width] for i in range(0, len(xs), width)]
    col_of = {s: i for i, b in enumerate(buckets) for s in b}
    volume: dict[str, int] = {}
    for t in tasks:
        volume[t.task_key] = volume.get(t.task_key, 0) + t.rollouts
    keys = sorted(sorted(volume, key=lambda k: (-volume[k], k))[:HEATMAP_TASKS])
    row = {k: i for i, k in enumerate(keys)}
    from app.queries.steps import weighted_mean

    cells = [[[[], 0] for _ in buckets] for _ in keys]  # (mean, scored) pairs, rollouts
    for t in tasks:
        if t.task_key in row and t.step in col_of:
            cell = cells[row[t.task_key]][col_of[t.step]]
            cell[0].append((t.mean_reward, t.scored))
            cell[1] += t.rollouts
    z = [[weighted_mean(c[0]) for c in r] for r in cells]
    text = [[f"{c[1]} rollouts" for c in r] for r in cells]
    labels = [b[0] if len(b) == 1 else f"{b[0]}–{b[-1]}" for b in buckets]
    x = [b[0] for b in buckets]

    def url(k: str, b: list[int]) -> str:
        return urls.rollouts(run_id, step=b[0], task=k) if len(b) == 1 else urls.rollouts(
            run_id, steps=f"{b[0]}-{b[-1]}", task=k)

    links = [[url(k, b) for b in buckets] for k in keys]
    data = [{"type": "heatmap", "x": x, "y": keys, "z": z, "text": text, "customdata": links,
             "colorscale": "Viridis", "hoverongaps": False, "name": "mean reward",
             "hovertemplate": "step %{x}" + (f" (+{width - 1} more)" if width > 1 else "")
                              + "<br>task %{y}<br>mean reward %{z:.3f} (%{text})<extra></extra>"}]
    title = "Mean reward per task and step (errors scored 0)"
    if n_tasks > len(keys) or width > 1:
        title += (f": {len(keys)} of {max(n_tasks, len(keys))} tasks"
                  + (f", {width} steps per column" if width > 1 else ""))
    layout = _layout(title, {"title": {"text": "task"}, "type": "category", "automargin": True}, x)
    layout["height"] = max(320, min(1200, 120 + 16 * len(keys)))
    layout["showlegend"] = False
    layout["hovermode"] = "closest"  # a cell is one task at one step
    layout["meta"] = {"columns": labels}
    return {"data": data, "layout": layout}


def build_lengths(run_id: str, steps, tasks=None) -> dict:
    """Response length in tokens per rollout (sampled tokens; empty responses count as 0)."""
    links = _step_urls(run_id, steps)
    q = lambda k: [s.get("lengths", "response_tokens", k) for s in steps]  # noqa: E731
    data = [_line("mean", steps, q("mean"), links, PALETTE[0], fmt=".1f"),
            _line("median", steps, q("median"), links, PALETTE[0], dash="dash", fmt=".1f", width=1),
            _line("p90", steps, q("p90"), links, PALETTE[0], dash="dot", fmt=".1f", width=1),
            _line("empty responses (share)", steps, [s.share(s.get("lengths", "empty_responses")) for s in steps],
                  links, PALETTE[4], fmt=".1%", yaxis="y2")]
    layout = _layout("Response length per step", {"title": {"text": "tokens per rollout"}}, _xs(steps))
    layout["yaxis2"] = {"title": {"text": "share empty"}, "overlaying": "y", "side": "right", "tickformat": ".0%",
                        "rangemode": "tozero", "automargin": True}
    return {"data": data, "layout": layout}


def build_turns(run_id: str, steps, tasks=None) -> dict:
    """Turns, tool calls and tool errors per rollout."""
    links = _step_urls(run_id, steps)
    data = [_line("turns", steps, [s.get("lengths", "turns") for s in steps], links, PALETTE[0], fmt=".2f"),
            _line("tool calls", steps, [s.get("lengths", "tool_calls") for s in steps], links, PALETTE[2], fmt=".2f"),
            _line("tool errors", steps, [(s.get("lengths", "tool_errors", default=0) / s.rollouts) if s.rollouts
                                         else None for s in steps], links, PALETTE[4], fmt=".2f")]
    return {"data": data, "layout": _layout("Turns, tool calls and tool errors per rollout",
                                            {"title": {"text": "per rollout"}, "rangemode": "tozero"}, _xs(steps))}


def build_latency(run_id: str, steps, tasks=None) -> dict:
    """Mean model and tool latency per rollout, over the rollouts that recorded timing."""
    links = _step_urls(run_id, steps)
    data = [_line("model", steps, [s.get("lengths", "model_latency") for s in steps], links, PALETTE[0],
                  fmt=".2f", unit=" s"),
            _line("tools / environment", steps, [s.get("lengths", "tool_latency") for s in steps], links, PALETTE[3],
                  fmt=".2f", unit=" s")]
    return {"data": data, "layout": _layout("Latency per rollout (where timed)",
                                            {"title": {"text": "seconds"}, "rangemode": "tozero"}, _xs(steps))}


def build_groups(run_id: str, steps, tasks=None) -> dict:
    """Share of groups with zero reward variance (no learning signal) under both error policies
    (one shown at a time: `meta.policy`), and of groups where dropping errored rollouts flips an
    advantage's sign."""
    links = _step_page_urls(run_id, steps, "groups")
    share = lambda k, p=None: [  # noqa: E731
        ((s.get("groups", k, p) if p else s.get("groups", k)) or 0) / s.get("groups", "groups")
        if s.get("groups", "groups") else None for s in steps]
    data = [_policy(_line("zero variance (errors dropped)", steps, share("zero_variance", "errors_dropped"), links,
                          PALETTE[1], fmt=".1%"), "errors_dropped"),
            _policy(_line("zero variance (errors scored 0)", steps, share("zero_variance", "errors_as_zero"), links,
                          PALETTE[0], fmt=".1%"), "errors_as_zero"),
            _line("one-member groups (no baseline)", steps, share("one_member"), links, PALETTE[2], fmt=".1%",
                  dash="dash"),
            _line("advantage sign flips", steps, share("sign_flip_groups"), links, PALETTE[4], fmt=".1%")]
    layout = _layout("Group statistics per step", {"title": {"text": "share of groups"}, "tickformat": ".0%",
                                                   "rangemode": "tozero"}, _xs(steps))
    layout["meta"] = {"policies": True}
    return {"data": data, "layout": layout}


def build_advantages(run_id: str, steps, tasks=None) -> dict:
    """Advantages (reward − group mean) per step under both error policies (one shown at a time:
    `meta.policy`): mean |A| and the p10–p90 band."""
    links = _step_page_urls(run_id, steps, "groups")
    data = []
    for policy, label in POLICIES:
        color = PALETTE[0] if policy == "errors_as_zero" else PALETTE[1]
        q = lambda k: [s.get("advantages", policy, k) for s in steps]  # noqa: E731
        data += [_policy(t, policy) for t in (*_band(label, steps, q("p10"), q("p90"), links, color, color + "26"),
                                              _line(f"mean |A| ({label})", steps, q("mean_abs"), links, color))]
    layout = _layout("Advantages per step", {"title": {"text": "advantage"}}, _xs(steps))
    layout["meta"] = {"policies": True}
    return {"data": data, "layout": layout}


def build_findings(run_id: str, steps, tasks=None) -> dict:
    """Rollouts with a finding of each trace-check kind, per step (one series per kind)."""
    kinds = sorted({k for s in steps for k in (s.get("findings") or {})})
    data = [{"type": "scatter", "mode": "lines+markers", "name": k, "x": _xs(steps),
             "y": [s.get("findings", k, default=0) for s in steps], "customdata": _step_urls(run_id, steps, flag=k),
             "line": {"color": PALETTE[i % len(PALETTE)]}, "marker": {"size": 4},
             "hovertemplate": f"{k}: %{{y}} rollouts<extra></extra>"} for i, k in enumerate(kinds)]
    return {"data": data, "layout": _layout("Findings per step", {"title": {"text": "rollouts with the finding"},
                                                                  "rangemode": "tozero"}, _xs(steps))}


def build_mismatch(run_id: str, steps, tasks=None) -> dict:
    """Training–inference mismatch over sampled tokens with both logprobs recorded: mean and max
    |Δ logprob| (left axis) and the share of tokens whose importance ratio leaves [0.8, 1.25]."""
    links = _step_urls(run_id, steps)
    tok = [s.get("mismatch", "tokens", default=0) for s in steps]
    data = [_line("mean |Δ logprob|", steps, [s.get("mismatch", "mean_abs") for s in steps], links, PALETTE[0],
                  fmt=".4f"),
            _line("max |Δ logprob|", steps, [s.get("mismatch", "max_abs") for s in steps], links, PALETTE[3], fmt=".4f",
                  dash="dot", width=1),
            _line("ratio outside [0.8, 1.25]", steps, [(s.get("mismatch", "out_of_range", default=0) / n) if n else None
                                                      for s, n in zip(steps, tok)], links, PALETTE[4], fmt=".2%",
                  yaxis="y2")]
    layout = _layout("Training–inference mismatch per step", {"title": {"text": "|Δ logprob|"}, "rangemode": "tozero"},
                     _xs(steps))
    layout["yaxis2"] = {"title": {"text": "share of tokens"}, "overlaying": "y", "side": "right", "tickformat": ".1%",
                        "rangemode": "tozero", "automargin": True}
    return {"data": data, "layout": layout}


def build_staleness(run_id: str, steps, tasks=None) -> dict:
    """Off-policy staleness: rollouts per number of trainer steps between the sampling policy
    and the step that trains on them, stacked per step. Each bar links to exactly the rollouts it
    counts (the list's `staleness` filter)."""
    values = sorted({int(k) for s in steps for k in (s.get("staleness", "histogram") or {})})
    data = [{"type": "bar", "name": f"{v} behind", "x": _xs(steps),
             "y": [s.get("staleness", "histogram", str(v), default=0) for s in steps],
             "customdata": _step_urls(run_id, steps, staleness=v), "marker": {"color": PALETTE[i % len(PALETTE)]},
             "hovertemplate": f"{v} steps behind: %{{y}} rollouts<extra></extra>"}
            for i, v in enumerate(values)]
    layout = _layout("Off-policy staleness per step", {"title": {"text": "rollouts"}}, _xs(steps))
    layout["barmode"] = "stack"
    return {"data": data, "layout": layout}


NO_GRADIENT_COLORS = {"trainer_filtered": "#5d4037", "error_dropped": "#c62828", "mask_zeroed": "#ef6c00",
                      "too_stale": "#00838f", "zero_variance_group": "#9e9e9e", "one_member_group": "#616161"}


def build_no_gradient(run_id: str, steps, tasks=None) -> dict:
    """Share of rollouts that carried no gradient, by reason (the first that applies)."""
    data = []
    for reason, color in NO_GRADIENT_COLORS.items():
        if not any(s.get("no_gradient", reason) for s in steps):
            continue
        data.append({"type": "bar", "name": reason.replace("_", " "), "x": _xs(steps),
                     "y": [s.share(s.get("no_gradient", reason)) for s in steps],
                     "text": [f"{s.get('no_gradient', reason, default=0)} of {s.rollouts}" for s in steps],
                     "textposition": "none", "marker": {"color": color},
                     "customdata": _step_page_urls(run_id, steps, "no-gradient"),
                     "hovertemplate": reason.replace("_", " ")
                                      + ": %{y:.1%} (%{text})<extra></extra>"})
    layout = _layout("Rollouts that carried no gradient", {"title": {"text": "share of rollouts"}, "tickformat": ".0%",
                                                           "rangemode": "tozero"}, _xs(steps))
    layout["barmode"] = "stack"
    return {"data": data, "layout": layout}


def build_reward_components(run_id: str, steps, tasks=None) -> dict:
    """Each reward component's mean score per step (`Rollout.rewards`, the `reward_component`
    table, averaged at read time: app/queries/steps.py `COMPONENTS_SECTION`), one line per
    component, the most frequent first; a point opens the step's page."""
    names = list(dict.fromkeys(n for s in steps for n in (s.get("reward_components") or {})))
    links = _step_page_urls(run_id, steps)
    # a component's name is trace text: escaped for Plotly's HTML subset, and kept out of the
    # hover template (where `%{...}` would be read as a variable)
    data = [_line(_plain(name), steps, [s.get("reward_components", name, "mean") for s in steps], links,
                  PALETTE[i % len(PALETTE)])
            | {"hovertemplate": "step %{x}<br>%{fullData.name}: %{y:.3f} (mean score)<extra></extra>"}
            for i, name in enumerate(names)]
    return {"data": data, "layout": _layout("Reward components per step", {"title": {"text": "mean score"}},
                                            _xs(steps))}


register(Chart("endings", "Ending-type rates",
               "Share of rollouts per ending at each training step. Click a bar for its rollouts. Hatched: the "
               "rollouts of that ending whose finish reason their tokens contradict (stop reason mismatch).",
               build_endings, sections=("endings", "by_ending")))
register(Chart("reward", "Reward",
               "Mean (solid), median (dashed) and the p10–p90 band of reward per step, errored rollouts scored 0 "
               "(blue) or dropped (purple), as the page's switch says. Missing or non-finite rewards are left out "
               "of both. Click a step for its story.",
               build_reward, sections=("reward",)))
register(Chart("reward_components", "Reward components",
               "Mean score of each named component of the reward per step (unweighted; rollouts scored on it), so "
               "you can see which part of the reward moved. Click a point for the step.",
               build_reward_components, sections=("reward_components",)))
register(Chart("task_heatmap", "Reward per task",
               "Mean reward (errors scored 0) of each task at each step. Click a cell for that task's rollouts at "
               "that step.",
               build_task_heatmap, needs_tasks=True, comparable=False, sections=()))
register(Chart("lengths", "Response length",
               "Tokens the policy sampled per rollout (empty responses count as 0): mean, median and p90, and the "
               "share of rollouts with an empty response (right axis).",
               build_lengths, sections=("lengths",)))
register(Chart("turns", "Turns and tool calls", "Assistant turns, tool calls and tool errors per rollout.",
               build_turns, sections=("lengths",)))
register(Chart("latency", "Latency",
               "Mean seconds per rollout spent in the model and in tools or the environment, over the rollouts "
               "that recorded timing.",
               build_latency, sections=("lengths",)))
register(Chart("groups", "Group statistics",
               "Share of groups whose rewards are all equal (zero variance: no learning signal), with errored "
               "rollouts dropped and scored 0, and of groups where dropping errored rollouts flips the sign of an "
               "advantage.",
               build_groups, sections=("groups",)))
register(Chart("advantages", "Advantages",
               "Advantage = reward − group mean, under both error policies: mean |A| and the p10–p90 range.",
               build_advantages, sections=("advantages",)))
register(Chart("findings", "Findings",
               "Rollouts with a finding of each trace-check kind per step. Click a point for those rollouts.",
               build_findings, sections=("findings",)))
register(Chart("mismatch", "Training–inference mismatch",
               "Where both the inference engine's and the trainer's logprobs of the sampled tokens are recorded: "
               "mean and max |Δ logprob|, and the share of tokens whose importance ratio exp(Δ) leaves [0.8, 1.25] "
               "(right axis).",
               build_mismatch, sections=("mismatch",)))
register(Chart("staleness", "Off-policy staleness",
               "Rollouts by how many trainer steps behind the policy that sampled them was (step − policy version).",
               build_staleness, sections=("staleness",)))
register(Chart("no_gradient", "No gradient",
               "Share of rollouts that contributed nothing to the step's gradient, by reason: filtered by the "
               "trainer, error dropped, loss mask zeroed by a filter, too stale, a zero-variance or a one-member "
               "group. Click for the step's list.",
               build_no_gradient, sections=("no_gradient",)))


def moving_average(ys: list, window: int) -> list:
    """Trailing mean of the last `window` points that have a value (None where none has)."""
    out, buf = [], []
    for y in ys:
        if y is not None:
            buf.append(y)
        buf = buf[-window:]
        out.append(sum(buf) / len(buf) if buf and y is not None else None)
    return out


def smooth(fig: dict, window: int) -> dict:
    """Add a moving-average line beside every line series (not the quantile bands); the raw points
    stay, drawn faint. (The pages' EMA slider, static/app.js, smooths on the client instead.)"""
    if window <= 1:
        return fig
    extra = []
    for t in fig["data"]:
        if t.get("type") == "scatter" and "lines" in t.get("mode", "") and not t.get("fill") \
                and t.get("showlegend", True):
            extra.append({**t, "name": f"{t['name']} (avg {window})", "mode": "lines",
                          "y": moving_average(t["y"], window), "fill": None,
                          "hovertemplate": f"avg {window} · " + t.get("hovertemplate", "")})
            t["mode"], t["opacity"] = "markers", 0.35
    fig["data"] += extra
    return fig


ALERT_CHARTS = ("endings", "reward")  # the charts that mark flagged steps (step alerts)
ALERT_COLOR = "#b91c1c"


def mark_alerts(fig: dict, alerts) -> dict:
    """Mark each flagged step (step alerts: anything with `step`, `text` and `url`) on a figure:
    a dashed vertical line at the step and a "⚠" above it whose hover text is the alert's
    explanation (Plotly layout `shapes` and `annotations`, as text, never markup: `text` is
    escaped, Plotly draws annotation text as its own limited HTML subset)."""
    if not alerts:
        return fig
    layout = fig.setdefault("layout", {})
    shapes, notes = list(layout.get("shapes") or []), list(layout.get("annotations") or [])
    for a in alerts:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": a.step, "x1": a.step, "y0": 0, "y1": 1,
                       "line": {"color": ALERT_COLOR, "width": 1.5, "dash": "dash"}, "layer": "above"})
        notes.append({"x": a.step, "y": 1, "xref": "x", "yref": "paper", "yanchor": "bottom", "showarrow": False,
                      "text": "⚠", "font": {"color": ALERT_COLOR, "size": 13},
                      "hovertext": _tidy(_plain(f"step {a.step} flagged: {a.text}")), "captureevents": False})
    layout["shapes"], layout["annotations"] = shapes, notes
    layout["meta"] = {**(layout.get("meta") or {}), "alerts": [{"step": a.step, "url": a.url} for a in alerts]}
    return fig  # a `figure()`, already tidy: only the alert's own text needed it


def _plain(text: str) -> str:
    """Text for a Plotly string that is read as its HTML subset: `<`, `>` and `&` escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _template_text(text: str) -> str:
    """Text put literally into a Plotly hover template: `_plain`, and `%` as its entity, so that
    `%{...}` in trace text is never read as a template variable."""
    return _plain(text).replace("%", "&#37;")


SIGNIFICANT = 6  # digits a figure's non-integer numbers keep (JSON, page and CSV alike)


def _tidy(value, key: str = ""):
    """A figure's values as drawn and exported: floats rounded to SIGNIFICANT significant digits
    (0.36250000000000004 → 0.3625; integers stay exact), and every string with its bidirectional
    controls and invisible characters shown as `⟨U+XXXX⟩` (app.text, as the pages' tables and
    chips show them): trace names, legend entries, hover text, titles, the heatmap's task labels.
    `customdata` (URLs, already percent-encoded) is left as it is."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT}g}") if math.isfinite(value) else value
    if isinstance(value, str):
        return reveal_invisible(value)
    if isinstance(value, list):
        return [_tidy(v, key) for v in value]
    if isinstance(value, dict):
        return {k: v if k == "customdata" else _tidy(v, k) for k, v in value.items()}
    return value


def tidy(fig: dict) -> dict:
    """`fig` with its numbers rounded and its text made visible (`_tidy`): every figure the
    registry serves passes here (`figure`; `overlay` again for what it adds: run ids, stacked
    bases); `mark_alerts` tidies only the text it adds to a `figure()`."""
    return _tidy(fig)


NOT_RECORDED = "not recorded in this run"
NO_STEPS = "no training steps in the range shown"


def _is_empty(trace: dict) -> bool:
    if trace.get("type") == "heatmap":
        return not any(v is not None for row in (trace.get("z") or []) for v in row)
    return not any(v is not None for v in (trace.get("y") or []))


def mark_empty(fig: dict, message: str = NOT_RECORDED) -> dict:
    """Say what this run did not record instead of drawing bare axes: a series with no value at any
    step gets `meta.empty` (static/app.js names it "… · not recorded in this run" in the legend
    and leaves it out of the plot); a figure whose every series is empty (or that has none) gets
    `layout.meta.empty` and the words "not recorded in this run" in the middle of the plot, its
    axes hidden (and its legend, by static/app.js)."""
    data, layout = fig["data"], fig.setdefault("layout", {})
    for t in data:
        if _is_empty(t):
            t["meta"] = {**(t.get("meta") or {}), "empty": True}
    if all(_is_empty(t) for t in data):
        layout["meta"] = {**(layout.get("meta") or {}), "empty": message}
        layout["annotations"] = [*(layout.get("annotations") or []),
                                 {"text": message, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                                  "showarrow": False, "font": {"size": 14, "color": "#5f6b7a"}}]
        for axis in ("xaxis", "yaxis", "yaxis2"):
            if axis in layout:
                layout[axis] = {**layout[axis], "visible": False}
    return fig


def figure(chart: Chart, run_id: str, steps, tasks=None, *, window: int = 1) -> dict:
    """The chart's figure for the given step rollups, with the moving average when asked, its
    series this run did not record marked (`mark_empty`; a step range with no steps says so
    instead), its numbers rounded and its text made visible (`tidy`), and the file name its PNG
    download takes (`layout.meta.filename`, "<run>-<chart>")."""
    fig = mark_empty(smooth(chart.build(run_id, steps, tasks), window), NOT_RECORDED if steps else NO_STEPS)
    fig["layout"]["meta"] = {**(fig["layout"].get("meta") or {}), "chart": chart.id,
                             "filename": _filename(f"{run_id}-{chart.id}")}
    return tidy(fig)


def _filename(text: str) -> str:
    """A download's file name: letters, digits, `.`, `_` and `-` (anything else `_`), at most 120."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:120] or "chart"


def figure_rows(fig: dict) -> list[dict]:
    """The figure as CSV rows, one per point: series, step, (task,) value, rollouts URL."""
    rows = []
    for t in fig["data"]:
        if t.get("type") == "heatmap":
            for i, task in enumerate(t["y"]):
                for j, step in enumerate(t["x"]):
                    if t["z"][i][j] is not None:
                        rows.append({"series": t.get("name", ""), "step": step, "task": task, "value": t["z"][i][j],
                                     "url": t["customdata"][i][j]})
            continue
        for j, step in enumerate(t.get("x", [])):
            urls = t.get("customdata") or []
            rows.append({"series": t.get("name", ""), "step": step, "task": "", "value": t["y"][j],
                         "url": urls[j] if j < len(urls) else ""})
    return rows


DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]


def _series_key(name: str) -> str:
    """A series' statistic without its error policy: "mean (errors dropped)" → "mean"."""
    for _, label in POLICIES:
        name = name.replace(f" ({label})", "")
    return name


def overlay(figures: dict[str, dict]) -> dict:
    """Several runs' figures of one chart on the same step axis, as W&B overlays runs: traces named
    `run: series`, one colour per run, the statistic by dash (mean solid, median dashed, ...: a
    series keeps its own dash, the others take the next free one; the error policy is the page's
    switch, `meta.policy`). Bars keep their series' colours (an ending's colour means that
    ending), side by side per run (`offsetgroup`; stacked ones by `base`), each run after the
    first lighter."""
    data, layout, steps = [], None, []
    for i, (run_id, fig) in enumerate(figures.items()):
        if layout is None and not (fig["layout"].get("meta") or {}).get("empty"):
            layout = fig["layout"]
        color = PALETTE[i % len(PALETTE)]
        label = _plain(run_id)  # trace names are read as Plotly's HTML subset
        hover_label = _template_text(run_id)
        own = {t["line"]["dash"] for t in fig["data"] if (t.get("line") or {}).get("dash")}
        free = [d for d in DASHES if d not in own]
        dash_of: dict[str, str] = {}
        for t in fig["data"]:
            meta = {**(t.get("meta") or {}), "run": run_id}
            if "legend" in meta:
                meta["legend"] = f"{label}: {meta['legend']}"
            t = {**t, "name": f"{label}: {t.get('name', '')}", "legendgroup": run_id, "meta": meta}
            if t.get("hovertemplate"):  # the hover names the run too, not only its colour
                t["hovertemplate"] = f"{hover_label}: {t['hovertemplate']}"
            if t.get("type") == "scatter":
                line = t.get("line") or {}
                if line.get("width") != 0:  # a band's edges have no line
                    key = _series_key(t["name"])
                    dash = line.get("dash") or dash_of.get(key) or free[len(dash_of) % len(free)]
                    if not line.get("dash"):
                        dash_of[key] = dash
                    line = {**line, "dash": dash}
                t["line"] = {**line, "color": color}
                t["marker"] = {**t.get("marker", {}), "color": color}
                if t.get("fill"):
                    t["fillcolor"] = color + "26"
            elif t.get("type") == "bar":
                t["offsetgroup"] = run_id
                if i:  # lighter: the hatch means "reason contradicted" on the ending chart
                    t["marker"] = {**t.get("marker", {}), "opacity": 0.5}
            data.append(t)
            steps += [x for x in t.get("x", []) if isinstance(x, int)]
    layout = {k: v for k, v in (layout or next(iter(figures.values()), {}).get("layout")
                                or _layout("", {}, [])).items() if k != "annotations"}
    layout["meta"] = {k: v for k, v in (layout.get("meta") or {}).items() if k != "empty"}
    chart_id = layout["meta"].get("chart") or "chart"
    layout["meta"]["filename"] = _filename(f"compare-{chart_id}-{'-'.join(figures)}")
    if steps:
        layout["xaxis"] = {**layout["xaxis"], "dtick": step_dtick(steps)}
    if layout.get("barmode") == "stack" and len(figures) > 1:
        # Plotly stacks every bar at a step together, whatever its offsetgroup: each run's bars side
        # by side (barmode group, one offsetgroup per run), stacked by their own `base`
        layout["barmode"] = "group"
        tops: dict[tuple, float] = {}
        for t in data:
            if t.get("type") == "bar":
                t["base"] = [tops.get((t["offsetgroup"], x), 0) for x in t["x"]]
                for x, y in zip(t["x"], t["y"]):
                    tops[(t["offsetgroup"], x)] = tops.get((t["offsetgroup"], x), 0) + (y or 0)
    no_steps = bool(figures) and all((f["layout"].get("meta") or {}).get("empty") == NO_STEPS
                                     for f in figures.values())
    return tidy(mark_empty({"data": data, "layout": layout}, NO_STEPS if no_steps else NOT_RECORDED))

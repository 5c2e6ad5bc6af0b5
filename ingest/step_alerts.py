"""Step alerts: is a training step unlike the steps before it? Pure functions on step figures
(no database); app/store/step_alerts.py reads the rollups, calls `judge` and stores the verdicts.

The figures of a step (`figures_of`): the share of each ending, the mean reward with errored
rollouts scored 0 and with them dropped, and the rate of each finding kind (rollouts with a
finding of that kind / rollouts).

The rule (a Hampel identifier: Hampel, "The influence curve and its role in robust estimation",
JASA 69 (1974); Davies & Gather, "The identification of multiple outliers", JASA 88 (1993);
`1.4826` makes the median absolute deviation a consistent estimate of a normal's standard
deviation, Rousseeuw & Croux, JASA 88 (1993)): for step N and each figure x, over the `window`
recorded steps before N (at least `min_steps` of them that have the figure, else no verdict),

    centre = median(trailing values)
    spread = max(1.4826 · MAD(trailing values), floor)
    flagged when |x − centre| > threshold · spread

A share (of an ending, or a finding's rate) is judged on Anscombe's variance-stabilising scale
for binomial counts, y = asin √((x + 3/8)/(n + 3/4)) for x of n rollouts (Anscombe, "The
transformation of Poisson, binomial and negative-binomial data", Biometrika 35 (1948)), where a
binomial share has standard deviation close to 1/(2√n) whatever its p, and its tails are near
normal even for rare endings (on the plain share scale a count of 9 against an expected 2.5 of
64 is a 4-sigma event; it is not rare enough to be an incident). A reward mean is judged as it is.

The floor keeps a steady series whose trailing values happen to agree (MAD 0) from flagging
on noise alone:
- a share: √deff/(2√n), the binomial standard deviation on that scale for n = step N's rollouts
  widened by the median over the trailing steps of the share's design effect deff (how much more
  a share varies because the rollouts of one task share their fate, `design_effects`), and at
  least SHARE_FLOOR; for a group-scope finding kind (a group's finding counts every member) n
  is the step's number of groups and x the rollouts' share of it, since its rollouts come in
  whole groups;
- a mean reward: the median over the trailing steps of their standard error σ̂/√n, σ̂ from each
  step's reward quantiles (`reward_se`), and at least REWARD_FLOOR.

The median and MAD are breakdown-point-½ statistics: one earlier incident inside the window
barely moves the centre or widens the spread, so the steps after an incident are judged against
the steady steps, not against the incident.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MAD_SCALE = 1.4826  # 1/Φ⁻¹(3/4): MAD → σ for normal data
SHARE_FLOOR = 0.01  # on the Anscombe scale: about one percentage point at a share of 5%
REWARD_FLOOR = 1e-6  # a reward series that never moved flags on any real change
DEFF_MIN_COUNT = 5  # design effects are estimated only from at least this many rollouts with and without
QUANTILE_WIDTH = 2.563  # p90 − p10 of a standard normal (2 × 1.2816)
ENDING_ORDER = ("submitted", "task_detected", "truncated", "length_cut", "error", "unknown")


@dataclass(frozen=True)
class StepFigures:
    """What the rule reads of one step (from its rollup, app/store/rollups.py)."""

    step: int
    rollouts: int
    endings: Mapping[str, int] = field(default_factory=dict)
    findings: Mapping[str, int] = field(default_factory=dict)  # kind → rollouts with a finding of it
    mean_reward: float | None = None  # errors scored 0
    mean_reward_no_errors: float | None = None  # errors dropped
    reward_se: float | None = None  # standard error of mean_reward (None: unknown)
    reward_se_no_errors: float | None = None
    ending_details: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # ending → detail → n
    finding_endings: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # kind → ending → n
    groups: int = 0  # the step's groups: a group-scope finding counts all members of a group at once
    deff: Mapping[str, float] = field(default_factory=dict)  # figure id → design effect (`design_effects`)


@dataclass(frozen=True)
class Rule:
    """The rule's settings (app/config.py `alerts`)."""

    window: int = 16
    min_steps: int = 6
    threshold: float = 5.0


def reward_se(quantiles: Mapping | None) -> float | None:
    """The standard error of a step's mean reward from its stored quantiles (ingest/stats.py
    `quantiles`: mean, p10, p90, n): σ̂/√n with σ̂ the larger of (p90 − p10)/2.563 (a normal's
    10–90% width) and √((p90 − mean)(mean − p10)) (the Bhatia–Davis bound on the variance with the
    10% and 90% points for the extremes: exact for 0/1 rewards, where the first says 0.39 for 0.5);
    None without them."""
    q = quantiles or {}
    if not q.get("n") or q.get("p10") is None or q.get("p90") is None:
        return None
    lo, hi, m = q["p10"], q["p90"], q.get("mean")
    sd = (hi - lo) / QUANTILE_WIDTH
    if m is not None:
        sd = max(sd, math.sqrt(max(0.0, (hi - m) * (m - lo))))
    return sd / math.sqrt(q["n"])


def figures_of(s: StepFigures) -> dict[str, tuple[str, float]]:
    """figure id → (kind, value) for one step: `ending:<e>` and `finding:<kind>` shares (kind
    "share"), `reward:errors_as_zero` and `reward:errors_dropped` (kind "reward"). A step
    without rollouts has no figures; a reward mean that is None is left out."""
    if s.rollouts <= 0:
        return {}
    out: dict[str, tuple[str, float]] = {}
    for e in ENDING_ORDER:
        out[f"ending:{e}"] = ("share", (s.endings.get(e) or 0) / s.rollouts)
    for kind, n in sorted(s.findings.items()):
        out[f"finding:{kind}"] = ("share", n / s.rollouts)
    if s.mean_reward is not None:
        out["reward:errors_as_zero"] = ("reward", s.mean_reward)
    if s.mean_reward_no_errors is not None:
        out["reward:errors_dropped"] = ("reward", s.mean_reward_no_errors)
    return out


def median(xs: Sequence[float]) -> float:
    v = sorted(xs)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    c = median(xs)
    return median([abs(x - c) for x in xs])


def anscombe(p: float, n: int) -> float:
    """A share p of n on Anscombe's binomial scale: asin √((p·n + 3/8)/(n + 3/4))."""
    return math.asin(math.sqrt((p * n + 0.375) / (n + 0.75)))


def from_anscombe(y: float, n: int) -> float:
    """The share of n whose `anscombe` is y (clipped to 0..1)."""
    y = min(max(y, 0.0), math.pi / 2)
    return min(1.0, max(0.0, (math.sin(y) ** 2 * (n + 0.75) - 0.375) / n))


def share_floor(n: int, deff: float = 1.0) -> float:
    """The least spread of a share of n on the Anscombe scale (see the module's rule), widened by
    the square root of the design effect `deff` (≥ 1) when the share's rollouts come in clusters."""
    return max(SHARE_FLOOR, math.sqrt(max(1.0, deff)) / (2 * math.sqrt(n)))


def design_effects(tasks: Sequence[tuple[int, Mapping[str, int]]]) -> dict[str, float]:
    """Per share figure, its design effect within one step from the step's tasks (Kish, "Survey
    Sampling" (1965), §8.2): rollouts of one task share their fate (a file-editing task is the
    only one that can end `task_detected`), so a share varies from step to step more than
    binomial noise says as the mix of tasks moves. `tasks`: (rollouts, {figure id: count}) per
    task. The ratio estimator's cluster variance T/(T−1)·Σ(x_t − p·n_t)²/n² over the binomial
    p(1−p)/n; 1 (left out) for fewer than two tasks, or fewer than DEFF_MIN_COUNT rollouts with
    (or without) the figure: two errors of a step that fall in one task would read as a design
    effect of 2 and hide the next incident."""
    n = sum(k for k, _ in tasks)
    if len(tasks) < 2 or n <= 0:
        return {}
    out = {}
    for fid in sorted({f for _, c in tasks for f in c}):
        x = sum(c.get(fid, 0) for _, c in tasks)
        p = x / n
        if min(x, n - x) < DEFF_MIN_COUNT:
            continue  # a handful of events cannot tell clustering from chance (and two in one task would say so)
        v = len(tasks) / (len(tasks) - 1) * math.fsum((c.get(fid, 0) - p * k) ** 2 for k, c in tasks) / n ** 2
        out[fid] = max(1.0, v / (p * (1 - p) / n))
    return out


def _value(s: StepFigures, fid: str, figs: dict | None = None) -> float | None:
    got = (figs if figs is not None else figures_of(s)).get(fid)
    if got is not None:
        return got[1]
    if fid.startswith("finding:") and s.rollouts > 0:
        return 0.0  # a kind no rollout of that step had: rate 0
    return None


def _se(s: StepFigures, fid: str) -> float | None:
    return s.reward_se if fid == "reward:errors_as_zero" else s.reward_se_no_errors


def contributors(s: StepFigures, fid: str) -> list[dict]:
    """What makes up a figure at step N, most first (at most 5): an ending's details (`sandbox_crash
    20`), a finding's endings, a mean reward's rollouts that did not finish (error, truncated,
    length_cut)."""
    if fid.startswith("ending:"):
        d = s.ending_details.get(fid.split(":", 1)[1]) or {}
        return [{"detail": k or "(none recorded)", "count": n}
                for k, n in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:5] if n]
    if fid.startswith("finding:"):
        d = s.finding_endings.get(fid.split(":", 1)[1]) or {}
        return [{"ending": k, "count": n} for k, n in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:5] if n]
    return [{"ending": e, "count": s.endings.get(e)} for e in ("error", "truncated", "length_cut")
            if s.endings.get(e)]


def judge(step: StepFigures, trailing: Sequence[StepFigures], rule: Rule = Rule()) -> list[dict] | None:
    """The flagged figures of `step` against the `trailing` steps before it (the last
    `rule.window` of them are used, in step order), or None when fewer than `rule.min_steps`
    trailing steps exist (no verdict). Each flagged figure: {"figure", "kind" ("share" |
    "reward"), "value", "median" (of the trailing values), "spread" (on the Anscombe scale for a
    share), "low", "high" (the trailing values' range), "band" (the values at step N that would
    not have flagged, as a share or reward), "steps" (trailing steps used), "contributors",
    "text"}. An empty list: judged, nothing flagged."""
    window = list(trailing)[-rule.window:]
    if len(window) < rule.min_steps or step.rollouts <= 0:
        return None
    mine = figures_of(step)
    theirs = [figures_of(t) for t in window]
    ids = set(mine) | {f for figs in theirs for f in figs if f.startswith("finding:")}
    groups = group_kinds()
    out = []
    for fid in sorted(ids, key=_figure_order):
        kind = "reward" if fid.startswith("reward:") else "share"
        x = _value(step, fid, mine)
        past = [(t, v) for t, figs in zip(window, theirs) if (v := _value(t, fid, figs)) is not None]
        if x is None or len(past) < rule.min_steps:
            continue
        values = [v for _, v in past]
        centre = median(values)
        if kind == "share":
            group = fid.removeprefix("finding:") in groups
            n_of = (lambda t: t.groups if group and t.groups > 0 else t.rollouts)  # noqa: E731
            n = n_of(step)
            ys = [anscombe(v, n_of(t)) for t, v in past]
            y_centre = median(ys)
            deffs = [t.deff.get(fid, 1.0) for t, _ in past]
            spread_y = max(MAD_SCALE * mad(ys), share_floor(n, median(deffs)))
            if abs(anscombe(x, n) - y_centre) <= rule.threshold * spread_y:
                continue
            band = [from_anscombe(y_centre - rule.threshold * spread_y, n),
                    from_anscombe(y_centre + rule.threshold * spread_y, n)]
            spread = spread_y
        else:
            ses = [se for t, _ in past if (se := _se(t, fid)) is not None]
            spread = max(MAD_SCALE * mad(values), REWARD_FLOOR, median(ses) if ses else 0.0)
            if abs(x - centre) <= rule.threshold * spread:
                continue
            band = [centre - rule.threshold * spread, centre + rule.threshold * spread]
        item = {"figure": fid, "kind": kind, "value": x, "median": centre, "spread": spread,
                "low": min(values), "high": max(values), "band": band,
                "steps": [t.step for t, _ in past], "contributors": contributors(step, fid)}
        item["text"] = explain(item)
        out.append(item)
    return out


def group_kinds() -> set[str]:
    """The registered group-scope check kinds (ingest/checks)."""
    from ingest.checks import registry

    return set(registry.kinds("group"))


def _figure_order(fid: str) -> tuple:
    group, _, name = fid.partition(":")
    rank = {"ending": 0, "reward": 1, "finding": 2}[group]
    return (rank, ENDING_ORDER.index(name) if group == "ending" and name in ENDING_ORDER else 0, name)


def label(fid: str) -> str:
    """How a figure reads: `ending:error` → "error share", `reward:errors_as_zero` → "mean reward
    (errors scored 0)", `finding:x` → "x rate"."""
    group, _, name = fid.partition(":")
    if group == "ending":
        return f"{name} share"
    if group == "reward":
        return "mean reward (errors scored 0)" if name == "errors_as_zero" else "mean reward (errors dropped)"
    return f"{name} rate"


def pct(x: float) -> str:
    """A share as people read it: whole percents, a tenth below 1% (0.3125 → "31%", 0.004 → "0.4%")."""
    return f"{x:.1%}" if 0 < abs(x) < 0.01 else f"{x:.0%}"


def explain(item: Mapping) -> str:
    """One line: "error share 31%, trailing 0–6%: sandbox_crash 20" (the trailing values' range)."""
    if item["kind"] == "share":
        lo, hi = pct(item["low"]), pct(item["high"])
        span = f"{lo.removesuffix('%')}–{hi}" if lo.endswith("%") and hi.endswith("%") else f"{lo}–{hi}"
        text = f"{label(item['figure'])} {pct(item['value'])}, trailing {span}"
    else:
        text = f"{label(item['figure'])} {item['value']:.3f}, trailing {item['low']:.3f}–{item['high']:.3f}"
    parts = [f"{c.get('detail', c.get('ending'))} {c['count']}" for c in item.get("contributors") or ()]
    return text + (": " + ", ".join(parts) if parts else "")

"""The rollout page's reward breakdown: each named component of the reward (`rewards` of the
stored envelope, docs/trace-format.md) with its weighted contribution and share, and the
scorer's or judge's explanation (untrusted model text: escaped by the template, never marked safe)."""
from __future__ import annotations

import math
from typing import Any

from typing_extensions import TypedDict

EXPLANATION_SHORT = 280  # characters shown before a longer explanation folds away (a <details>)


class ComponentView(TypedDict):
    """One reward component: `score` and `weight` as stored, `contribution` = score × weight
    (None when not scored), `share` = contribution / the total reward (a fraction, None when
    the components do not add up to the total or it is 0), `explanation` the source's own text
    (None when it records none), `long`: folded on the page."""

    name: str
    score: float | None
    weight: float
    contribution: float | None
    share: float | None
    explanation: str | None
    long: bool


def _finite(v: Any) -> float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def component_views(rewards: Any, total: float | None) -> list[ComponentView]:
    """`rewards` ({name: {score, weight, explanation?} | null}, the stored envelope's) as rows in
    the source's order. A share is given only when the scored contributions sum to `total` (the
    rollout's reward, within 1e-9 relative): a source whose `reward` is not Σ score·weight (Inspect's
    first scorer, a verl score beside its extras) shows contributions without shares."""
    if not isinstance(rewards, dict):
        return []
    rows: list[ComponentView] = []
    for name, r in rewards.items():
        r = r if isinstance(r, dict) else {}
        score, weight = _finite(r.get("score")), _finite(r.get("weight", 1.0))
        weight = 1.0 if weight is None else weight
        expl = r.get("explanation")
        expl = expl if isinstance(expl, str) and expl else None
        rows.append(ComponentView(name=str(name), score=score, weight=weight,
                                  contribution=None if score is None else score * weight, share=None,
                                  explanation=expl, long=expl is not None and (len(expl) > EXPLANATION_SHORT
                                                                               or expl.count("\n") > 3)))
    parts = [c["contribution"] for c in rows if c["contribution"] is not None]
    if total and parts and math.isclose(sum(parts), total, rel_tol=1e-9, abs_tol=1e-12):
        for c in rows:
            if c["contribution"] is not None:
                c["share"] = c["contribution"] / total
    return rows

"""Group baselines and advantages, the two policies of ../shared/domain.md.

- `errors_as_zero`: every rollout scored; an `error` ending gets reward 0.
- `errors_dropped`: `error` rollouts leave the group before the baseline is computed and get no
  advantage (no gradient). This is the default the seeds argue for.

Advantage = reward − group mean (GRPO's baseline, unnormalised; Shao et al. 2024, DeepSeekMath
§4.1 use the mean and optionally divide by the std, which `normalised` adds).
Rewards that are missing or non-finite are excluded from the baseline in both policies and
reported in `excluded`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Member:
    """What the baseline needs of one rollout."""

    key: str
    reward: float | None  # None when missing or non-finite
    ending: str


@dataclass
class PolicyResult:
    mean: float | None
    std: float | None
    n: int
    advantages: dict[str, float | None]  # key → advantage; None = no gradient / not scored


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population std of finite values, without overflow.

    The direct formula is used when it stays finite (it is what the worked examples check);
    huge finite rewards (1e308) overflow it (`(v - mean) ** 2` raises), so those are computed
    scaled by the largest magnitude. A result beyond the float range is inf (null in JSON)."""
    n = len(values)
    try:
        mean = math.fsum(values) / n  # exactly rounded: 0.560625, not 0.5606250000000066
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n)
        if math.isfinite(mean) and math.isfinite(std):
            return mean, std
    except OverflowError:
        pass
    scale = max(abs(v) for v in values)
    scaled = [v / scale for v in values]
    m = math.fsum(s / n for s in scaled)
    var = math.fsum((s - m) ** 2 for s in scaled) / n
    return m * scale, math.sqrt(var) * scale


def _policy(members: Sequence[Member], *, drop_errors: bool) -> PolicyResult:
    scored: dict[str, float] = {}
    for m in members:
        if m.ending == "error":
            if drop_errors:
                continue
            scored[m.key] = 0.0
        elif m.reward is not None and math.isfinite(m.reward):
            scored[m.key] = m.reward
    if not scored:
        return PolicyResult(None, None, 0, {m.key: None for m in members})
    mean, std = _mean_std(list(scored.values()))
    adv = {m.key: (scored[m.key] - mean if m.key in scored else None) for m in members}
    return PolicyResult(mean, std, len(scored), adv)


def group_advantages(members: Sequence[Member]) -> dict:
    """Both policies for one group.

    Returns `{"errors_as_zero": PolicyResult, "errors_dropped": PolicyResult,
    "excluded": [keys with missing/non-finite reward that are not errors]}`.
    """
    excluded = [m.key for m in members if m.ending != "error" and (m.reward is None or not math.isfinite(m.reward))]
    return {
        "errors_as_zero": _policy(members, drop_errors=False),
        "errors_dropped": _policy(members, drop_errors=True),
        "excluded": excluded,
    }

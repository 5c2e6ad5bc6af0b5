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
        mean = sum(values) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
        if math.isfinite(mean) and math.isfinite(std):
            return mean, std
    except OverflowError:
        pass
    scale = max(abs(v) for v in values)
    scaled = [v / scale for v in values]
    m = sum(s / n for s in scaled)
    var = sum((s - m) ** 2 for s in scaled) / n
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


# --- the estimators the field uses, on one policy's scored rewards ----------------------------

GRPO_EPS = 1e-6  # verl `compute_grpo_outcome_advantage(epsilon=1e-6)`; TRL uses 1e-4

ESTIMATORS = {
    "dr_grpo": "mean-centred: r − mean (Dr. GRPO, Liu et al. 2025 §3.2; no std, no length normalisation)",
    "grpo": "std-normalised: (r − mean) / (std + 1e-6), std the sample std with n − 1 (GRPO, Shao et al. 2024; "
            "torch.std as verl and TRL call it)",
    "rloo": "leave-one-out: r − mean of the other members (RLOO, Ahmadian et al. 2024); none for a group of one",
}


def _sample_std(values: list[float], std_population: float) -> float | None:
    """The sample std (Bessel's n − 1) from the population std, so huge rewards do not overflow."""
    n = len(values)
    if n < 2:
        return None
    return std_population * math.sqrt(n / (n - 1))


def estimators(scored: dict[str, float]) -> dict:
    """Advantages of one group's scored members (key → finite reward, after the error policy)
    under the three estimators of ESTIMATORS.

    Returns `{"mean": m, "std_population": σ, "std_sample": s, "advantages": {key: {"dr_grpo",
    "grpo", "rloo"}}}`; an estimator that is undefined for the group (GRPO and RLOO with one
    member) gives None, never 0."""
    if not scored:
        return {"mean": None, "std_population": None, "std_sample": None, "advantages": {}}
    values = list(scored.values())
    mean, std_pop = _mean_std(values)
    s = _sample_std(values, std_pop)
    n = len(values)
    out = {}
    for k, r in scored.items():
        out[k] = {"dr_grpo": r - mean,
                  "grpo": (r - mean) / (s + GRPO_EPS) if s is not None else None,
                  # r − mean of the others = n/(n−1) · (r − mean), without summing huge rewards
                  "rloo": (r - mean) * n / (n - 1) if n > 1 else None}
    return {"mean": mean, "std_population": std_pop, "std_sample": s, "advantages": out}


def scored_rewards(members: Sequence[Member], *, drop_errors: bool) -> dict[str, float]:
    """key → the reward the baseline uses under one error policy (errors 0, or dropped);
    missing and non-finite rewards are left out."""
    out: dict[str, float] = {}
    for m in members:
        if m.ending == "error":
            if not drop_errors:
                out[m.key] = 0.0
        elif m.reward is not None and math.isfinite(m.reward):
            out[m.key] = m.reward
    return out


def no_signal(scored: dict[str, float]) -> str | None:
    """Why a group carries no learning signal under a policy, or None: every advantage is 0 when
    all rewards are equal, and a single member has nothing to be compared with."""
    if len(scored) == 1:
        return "one member left"
    if len(scored) > 1 and len(set(scored.values())) == 1:
        return "all rewards equal"
    return None

"""Group baselines and advantages, under the two policies below (docs/views.md shows both).

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

import numpy as np

from ingest.arrays import node_arrays


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
    if min(values) == max(values):
        # Identical rewards: the mean is that reward and the std exactly 0, never the residue
        # of float summation (3 × 0.1 / 3 = 0.10000000000000002, std 1.4e-17).
        return values[0], 0.0
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


# --- recorded advantages and the estimators that may have produced them -----------------------

ESTIMATORS = ("mean_centred", "std_normalised", "leave_one_out")
ESTIMATOR_ALIASES = {
    "mean_centred": "mean_centred", "mean_centered": "mean_centred", "dr_grpo": "mean_centred",
    "std_normalised": "std_normalised", "std_normalized": "std_normalised", "grpo": "std_normalised",
    "leave_one_out": "leave_one_out", "rloo": "leave_one_out",
}
STD_EPS = 1e-4  # TRL GRPOTrainer: (r - mean) / (std + 1e-4); verl uses 1e-6 (within the tolerance)


def estimator_name(value: object) -> str | None:
    """The estimator a source declares, normalised to one of ESTIMATORS (aliases: grpo →
    std_normalised, dr_grpo → mean_centred, rloo → leave_one_out); None when not declared or
    not known."""
    return ESTIMATOR_ALIASES.get(str(value).strip().lower()) if isinstance(value, str) else None


def estimate(rewards: Sequence[float], estimator: str, *, ddof: int = 0) -> list[float]:
    """Advantages of `rewards` (one group's baseline set) under `estimator`:

    - `mean_centred`: A_i = r_i − mean(r) (Dr. GRPO, Liu et al. 2025, "Understanding R1-Zero-Like
      Training", §3.1: GRPO without the std division);
    - `std_normalised`: A_i = (r_i − mean(r)) / (std(r) + STD_EPS) (GRPO, Shao et al. 2024,
      DeepSeekMath §4.1.2; `ddof=1` is torch's unbiased std, which TRL uses);
    - `leave_one_out`: A_i = r_i − mean_{j≠i} r_j = n/(n−1) · (r_i − mean(r)) (RLOO, Ahmadian et
      al. 2024, "Back to Basics", §3.2; 0 for a group of one).

    Raises ValueError for an unknown estimator."""
    n = len(rewards)
    if n == 0:
        return []
    mean, std = _mean_std(list(rewards))
    centred = [r - mean for r in rewards]
    if estimator == "mean_centred":
        return centred
    if estimator == "std_normalised":
        if ddof and n > 1:
            std = std * math.sqrt(n / (n - 1))
        return [c / (std + STD_EPS) for c in centred]
    if estimator == "leave_one_out":
        return [c * n / (n - 1) for c in centred] if n > 1 else [0.0] * n
    raise ValueError(f"unknown advantage estimator {estimator!r} (known: {', '.join(ESTIMATORS)})")


def close(recorded: float, expected: float) -> bool:
    """Recorded and recomputed advantages agree: within 1e-3 absolute + 1e-2 relative (float32
    storage, eps conventions 1e-4 vs 1e-6)."""
    return abs(recorded - expected) <= 1e-3 + 1e-2 * abs(expected)


def recorded_advantage(rollout) -> float | None:
    """The advantage a source recorded for one rollout (`ingest.schema.Rollout`): a rollout-level
    `extra.advantage` or `metrics.advantage`, else the per-token `advantages` of its sampled
    tokens (mask 1) when they are all equal (a group-relative estimator gives every token of a
    rollout the same value). None when none is recorded, or the per-token values vary (a
    token-level estimator such as GAE, which group checks cannot recompute)."""
    for v in (rollout.extra.get("advantage"), rollout.metrics.get("advantage")):
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    first, low, high = None, math.inf, -math.inf
    for n in rollout.nodes:
        if not n.advantages:
            continue
        a = node_arrays(n)
        kept = a.advantages[np.isfinite(a.advantages) & a.mask] if a.mask is not None else \
            a.advantages[np.isfinite(a.advantages)]  # null is NaN: left out as not finite
        if len(kept):
            first = float(kept[0]) if first is None else first
            low, high = min(low, float(kept.min())), max(high, float(kept.max()))
    # rounding is monotonic: every sampled value rounds alike when the lowest and the highest do
    if first is not None and round(low, 6) == round(high, 6):
        return float(round(first, 6))


# --- the three estimators side by side, for the group page ------------------------------------

ESTIMATOR_TEXT = {
    "dr_grpo": "mean-centred: r − mean (Dr. GRPO, Liu et al. 2025; no std division)",
    "grpo": f"std-normalised: (r − mean) / (std + {STD_EPS:g}), std the sample std with n − 1 (GRPO, Shao et "
            "al. 2024; torch.std as TRL calls it)",
    "rloo": "leave-one-out: r − mean of the other members (RLOO, Ahmadian et al. 2024); none for a group of one",
}


def estimators(scored: dict[str, float]) -> dict:
    """Advantages of one group's scored members (key → finite reward, after the error policy)
    under the three estimators (`estimate`): `{"mean", "std_population", "std_sample",
    "advantages": {key: {"dr_grpo", "grpo", "rloo"}}}`. GRPO and RLOO are None for a group of
    one (nothing to compare with), never 0."""
    if not scored:
        return {"mean": None, "std_population": None, "std_sample": None, "advantages": {}}
    keys, values = list(scored), list(scored.values())
    n = len(values)
    mean, std_pop = _mean_std(values)
    dr = estimate(values, "mean_centred")
    grpo = estimate(values, "std_normalised", ddof=1) if n > 1 else [None] * n
    rloo = estimate(values, "leave_one_out") if n > 1 else [None] * n
    return {"mean": mean, "std_population": std_pop, "std_sample": std_pop * math.sqrt(n / (n - 1)) if n > 1 else None,
            "advantages": {k: {"dr_grpo": d, "grpo": g, "rloo": r} for k, d, g, r in zip(keys, dr, grpo, rloo)}}


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


def one_member_group(n_members: int) -> bool:
    """Whether a group of `n_members` rollouts (the latest attempt of each rollout id, whatever
    their endings and rewards) is a one-member group: its baseline is its own reward, so its
    advantage is 0 under every estimator and it has no variance to speak of (rllm-org/rllm#776,
    the samples of one prompt split into groups of one). The one definition the step page's
    zero-variance statement (`ingest.stats.group_stats`, app/views/step.py) and the group checks
    (`zero_variance_group`, `split_group`) share: such a group is counted as one-member, never as
    zero-variance."""
    return n_members == 1

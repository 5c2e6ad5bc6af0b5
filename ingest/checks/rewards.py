"""Checks on a rollout's reward."""
from __future__ import annotations

from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check
from ingest.schema import Rollout


@check("non_finite_reward", "error", label="non-finite reward")
def non_finite_reward(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The reward was NaN or ±Infinity (modelscope/ms-swift#8123): stored as NULL with
    `reward_status`, excluded from means and baselines."""
    status = r.reward_status()
    if status in ("nan", "inf"):
        yield Hit(f"reward is {status}; stored as missing", None, None, {"reward_status": status})

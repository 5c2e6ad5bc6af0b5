"""What the page models share: the base model, a rollout's summary row, JSON-safe numbers and
timestamps."""
from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from app import urls


class PageModel(BaseModel):
    """Base of every page model: plain data, no validation surprises (extra keys refused)."""

    model_config = ConfigDict(extra="forbid")


def num(x: Any) -> Any:
    """JSON-safe number: NaN/inf → None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def iso(dt: datetime | None) -> str | None:
    """A stored timestamp as text (ISO 8601)."""
    return dt.isoformat() if dt is not None else None


def pins_attempt(attempt: int, n_attempts: int | None) -> bool:
    """A link names its attempt when the rollout id has several, or when it is a retry (> 0):
    the bare rollout URL shows only the latest attempt."""
    return attempt > 0 or (n_attempts or 1) > 1


class FindingLink(PageModel):
    """A finding kind in a list row, with the rollouts list filtered by it."""

    kind: str
    label: str
    url: str


class RolloutSummary(PageModel):
    """One rollout as a list row: the summary columns (no bodies), its attempt count and links.

    `url` carries `?attempt=N` when the rollout id has several attempts or this one is a retry.
    """

    run_id: str
    rollout_id: str
    attempt: int
    step: int | None
    group_id: str | None
    group_index: int | None
    group_size: int | None
    episode_id: str | None
    agent: str | None
    task_key: str | None
    ending: str
    ending_detail: str | None
    reward: float | None
    reward_status: str
    advantage: float | None = None  # the advantage the source recorded, if any
    advantage_estimator: str | None = None  # the estimator the source declares, if any
    stop_condition: str | None
    policy_version_min: int | None
    policy_version_max: int | None
    n_nodes: int
    n_turns: int
    n_tool_calls: int
    n_tokens: int
    n_trained_tokens: int
    n_branches: int
    flags: list[str] | None
    # per-rollout analytics numbers (ingest/metrics.py)
    n_response_tokens: int = 0
    n_tool_errors: int = 0
    model_latency: float | None = None  # seconds
    tool_latency: float | None = None  # seconds
    staleness: int | None = None  # trainer steps behind the policy that sampled it
    mismatch_tokens: int = 0
    mismatch_abs_sum: float | None = None
    mismatch_abs_max: float | None = None
    mismatch_out_of_range: int = 0
    trainer_filtered: str | None = None
    findings: list[FindingLink] = []  # rollout and group findings, each linking to the filtered list
    source_format: str | None
    source_file: str | None
    source_line: int | None
    ingested_at: str | None
    n_attempts: int | None
    url: str
    group_url: str | None


def summary_fields(row, n_attempts: int | None = None) -> dict:
    """The fields of a `RolloutSummary` (or a subclass) from a summary row of app.queries."""
    d = dict(row._mapping)
    d.pop("pk", None)
    d.pop("latest_attempt", None)
    d["reward"] = num(d.get("reward"))
    d["ingested_at"] = iso(d.get("ingested_at"))
    if n_attempts is not None:
        d["n_attempts"] = n_attempts
    d.setdefault("n_attempts", None)
    attempt = d.get("attempt") or 0
    pinned = pins_attempt(attempt, d.get("n_attempts"))
    d["url"] = urls.rollout(d["run_id"], d["rollout_id"], attempt=attempt if pinned else None)
    d["group_url"] = urls.group(d["run_id"], d["group_id"]) if d.get("group_id") is not None else None
    return d


def summary_row(row, n_attempts: int | None = None) -> RolloutSummary:
    """A rollout summary row as page data."""
    return RolloutSummary.model_validate(summary_fields(row, n_attempts))

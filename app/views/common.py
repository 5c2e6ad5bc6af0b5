"""What the page models share: the base model, a rollout's summary row, JSON-safe numbers and
timestamps."""
from __future__ import annotations

import math
from datetime import UTC, datetime
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
    """A stored timestamp in RFC 3339, UTC, with `Z` (`2026-11-30T13:44:22.123456Z`). SQLite
    returns the stored UTC time without its zone; it is UTC."""
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


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
    labels: list[str] = []


class LabelView(PageModel):
    label: str
    author: str
    created_at: str | None


class NoteView(PageModel):
    """A note on a rollout, or on a training step (`step`), by the token named `author`."""

    author: str
    text: str
    step: int | None = None
    updated_at: str | None


def note_view(row) -> NoteView:
    return NoteView(author=row.author, text=row.text, step=row.step if row.step >= 0 else None,
                    updated_at=iso(row.updated_at))


def with_labels(session, run_id: str, items: list[dict]) -> list[dict]:
    """Add each row's `labels` (distinct label names, any author), one query for the page."""
    from app.queries.annotations import labels_of

    found = labels_of(session=session, run_id=run_id, rollout_ids=[d["rollout_id"] for d in items])
    for d in items:
        d["labels"] = sorted({r.label for r in found.get(d["rollout_id"], [])})
    return items


def summary_fields(row, n_attempts: int | None = None, *, json: bool = False) -> dict:
    """The fields of a `RolloutSummary` (or a subclass) from a summary row of app.queries; its
    links go to the JSON twins when `json`."""
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
    d["url"] = urls.rollout(d["run_id"], d["rollout_id"], json=json, attempt=attempt if pinned else None)
    d["group_url"] = urls.group(d["run_id"], d["group_id"], json=json) if d.get("group_id") is not None else None
    return d


def summary_row(row, n_attempts: int | None = None, *, json: bool = False) -> RolloutSummary:
    """A rollout summary row as page data."""
    return RolloutSummary.model_validate(summary_fields(row, n_attempts, json=json))

"""What the page models share: the base model (and models made from the API's wire shapes), a
rollout's summary row, JSON-safe numbers and timestamps."""
from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model

from app import urls
from rollscope import schemas


class PageModel(BaseModel):
    """Base of every page model: plain data, no validation surprises (extra keys refused)."""

    model_config = ConfigDict(extra="forbid")


def model_of(shape: type, defaults: dict[str, Any] | None = None) -> type[PageModel]:
    """A page model with the fields (names, types, order, docstring) of a TypedDict wire shape
    of rollscope/schemas.py: the client's types and the server's schema are one definition.
    Every field is required but those given in `defaults`."""
    hints, defaults = get_type_hints(shape), defaults or {}
    return create_model(shape.__name__, __base__=PageModel, __doc__=shape.__doc__,
                        **{name: (hints[name], defaults.get(name, ...)) for name in shape.__annotations__})


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


def readable(dt: datetime | None, *, zone: bool = True) -> str | None:
    """A stored timestamp for a person: UTC to the second (`2026-11-30 13:44:22 UTC`; without
    ` UTC` when `zone` is False, for a table that says so once)."""
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S" + (" UTC" if zone else ""))


def pins_attempt(attempt: int, n_attempts: int | None) -> bool:
    """A link names its attempt when the rollout id has several, or when it is a retry (> 0):
    the bare rollout URL shows only the latest attempt."""
    return attempt > 0 or (n_attempts or 1) > 1


class FindingLink(PageModel):
    """A finding kind in a list row, with the rollouts list filtered by it."""

    kind: str
    label: str
    url: str


class RolloutSummary(model_of(schemas.RolloutRow, defaults={
        "advantage": None, "advantage_estimator": None, "labels": [], "n_response_tokens": 0, "n_tool_errors": 0,
        "model_latency": None, "tool_latency": None, "staleness": None, "mismatch_tokens": 0,
        "mismatch_abs_sum": None, "mismatch_abs_max": None, "mismatch_out_of_range": 0, "trainer_filtered": None})):
    """One rollout as a list row: the summary columns (no bodies), its attempt count and links
    (the fields of `rollscope.schemas.RolloutRow`, what the API's list answers), and the links of
    its findings for the pages.

    `url` carries `?attempt=N` when the rollout id has several attempts or this one is a retry.
    """

    findings: list[FindingLink] = []  # rollout and group findings, each linking to the filtered list


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
    d.pop("sort_value", None)  # a component sort's value (app.queries.rollout_list.SORT_VALUE)
    d.pop("latest_attempt", None)
    d.pop("raw_hash", None)  # the ingest's bookkeeping (ingest/known.py), not a field of any page
    d.pop("checks_version", None)  # counted by the run page's checks table (app/views/runs.py), not listed
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


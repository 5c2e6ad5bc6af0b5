"""Rollouts: the filtered, keyset-paged list (with `fields=` selection), one rollout with its
envelope and message graph, a branch's messages, and a branch's token arrays as JSON or as a
compact binary NPZ archive."""
from __future__ import annotations

import io
from typing import Annotated, Any
from urllib.parse import unquote

import numpy as np
from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, create_model

from app import urls
from app.api.v1.schemas import Page
from app.db.tokenarrays import floats_or_none, unpack_bits, unpack_floats, unpack_ids
from app.deps import SessionDep
from app.errors import ApiError
from app.params import Count, Filters, OptCount, OptInt, check_cursors, check_rollout_filters
from app.queries import findings as q_findings
from app.queries import nodes as q_nodes
from app.queries import rollout_list
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.queries.rollout_list import RolloutFilters
from app.views.common import PageModel, RolloutSummary, model_of, summary_fields, with_labels
from app.views.rollout.findings import FindingView, finding_view
from app.views.rollout.models import AttemptView, RolloutHeader
from ingest import checks
from ingest.graph import branches
from rollscope import schemas

router = APIRouter(tags=["rollouts"])
RunId = Annotated[str, Path(description="run id (`/` encoded as `%2F`)")]
RolloutId = Annotated[str, Path(description="rollout id (`/` encoded as `%2F`)")]
NPZ = "application/x-ndarray"

# A list item: every summary field, each optional, so `fields=` may select any subset. The list
# page's `findings` links are page navigation; the API gives the kinds in `flags` (and /findings).
SUMMARY_FIELDS = [name for name in RolloutSummary.model_fields if name != "findings"]
RolloutItem = create_model("RolloutItem", __base__=BaseModel,
                           **{name: (RolloutSummary.model_fields[name].annotation | None, None)
                              for name in SUMMARY_FIELDS})


class RolloutPage(Page[RolloutItem]):  # type: ignore[valid-type]
    limit: int


def _limit(request: Request, limit: int | None) -> int:
    api = request.app.state.settings.api
    if limit is not None and limit > api.max_page_size:
        raise ApiError(422, f"limit must be at most {api.max_page_size}", field="limit")
    return limit or api.page_size


def known_run(session, run: str, filters: RolloutFilters, after: str | None = None) -> str:
    """The decoded run id; 404 for an unknown run, 422 for a filter value no rollout can have."""
    run_id = unquote(run)
    if q_runs.get_run(session=session, run_id=run_id) is None:
        raise ApiError(404, f"no run {run_id!r}", field="run")
    check_rollout_filters(session, run_id, filters)
    check_cursors(sort=None, after=after)
    return run_id


@router.get("/runs/{run}/rollouts", response_model=RolloutPage, response_model_exclude_unset=True)
def list_rollouts(
    request: Request, session: SessionDep, run: RunId, filters: Filters,
    after: Annotated[str | None, Query(description="`next` of the previous page")] = None,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    fields: Annotated[str | None, Query(description="comma-separated fields of each item, e.g. "
                                        "`rollout_id,reward,ending` (default: all)")] = None,
):
    """A run's rollouts, filtered as the list page is (the same filters, docs/api.md "Filters"),
    ordered by (step, ingest order), rollouts without a step last, one keyset page at a time."""
    run_id = known_run(session, run, filters, after)
    chosen = SUMMARY_FIELDS
    if fields:
        chosen = [f.strip() for f in fields.split(",") if f.strip()]
        unknown = [f for f in chosen if f not in SUMMARY_FIELDS]
        if unknown or not chosen:
            raise ApiError(422, f"unknown field(s) {', '.join(unknown) or '(none given)'}; fields: "
                           + ", ".join(SUMMARY_FIELDS), field="fields")
    n = _limit(request, limit)
    got = rollout_list.page(session=session, run_id=run_id, filters=filters, columns=rollout_list.list_columns(),
                            after=after, limit=n)
    rows, nxt = got["rows"], got["next"]
    full = [summary_fields(r, json=True) for r in rows]
    if "labels" in chosen:
        with_labels(session, run_id, full)
    items = [RolloutItem(**{k: d[k] for k in chosen}) for d in full]
    params = {**filters.as_query(), "limit": limit, "fields": fields, "after": nxt}
    return RolloutPage(items=items, next=nxt, limit=n,
                       next_url=urls.api_rollouts(run_id, **params) if nxt else None)


class GraphNode(PageModel):
    """A node of the message graph, without its body."""

    idx: int
    parent: int | None
    role: str
    sampled: bool
    n_tokens: int


class RolloutDetail(PageModel):
    """One rollout: its summary row, every attempt of its id, the stored envelope (calls, rewards,
    errors, timing, task, metrics, extra: docs/trace-format.md), its findings, the message graph
    and its branches (root-to-leaf node index paths)."""

    rollout: RolloutHeader
    attempts: list[AttemptView]
    envelope: dict[str, Any]
    findings: list[FindingView]
    graph: list[GraphNode]
    branches: list[list[int]]


def _row(session, run_id: str, rollout_id: str, attempt: int | None):
    row = q_rollouts.get_rollout(session=session, run_id=run_id, rollout_id=rollout_id, attempt=attempt)
    if row is None:
        what = f"rollout {rollout_id!r}" + (f" attempt {attempt}" if attempt is not None else "")
        raise ApiError(404, f"no {what} in run {run_id!r}", field="rollout")
    return row


class _Parent:
    __slots__ = ("parent",)

    def __init__(self, parent):
        self.parent = parent


def _paths(session, pk: int) -> tuple[list, list[list[int]]]:
    graph = q_nodes.graph_headers(session=session, rollout_pk=pk)
    return graph, (branches([_Parent(g.parent) for g in graph]) if graph else [])


@router.get("/runs/{run}/rollouts/{rollout}", response_model=RolloutDetail)
def get_rollout(session: SessionDep, run: RunId, rollout: RolloutId, attempt: OptInt = None):
    """One rollout (the latest attempt, or `attempt`): summary, attempts, envelope, findings,
    message graph and branches."""
    run_id, rollout_id = unquote(run), unquote(rollout)
    row = _row(session, run_id, rollout_id, attempt)
    tries = q_rollouts.rollout_attempts(session=session, run_id=run_id, rollout_id=rollout_id)
    summary = summary_fields(row, n_attempts=len(tries), json=True)
    graph, paths = _paths(session, row.pk)
    return RolloutDetail(
        rollout=RolloutHeader.model_validate(summary),
        attempts=[AttemptView(attempt=a.attempt, step=a.step, ending=a.ending, ending_detail=a.ending_detail,
                              reward=a.reward, reward_status=a.reward_status, current=a.attempt == row.attempt,
                              latest=i == len(tries) - 1,
                              url=urls.rollout(run_id, rollout_id, json=True, attempt=a.attempt))
                  for i, a in enumerate(tries)],
        envelope=q_rollouts.get_envelope(session=session, rollout_pk=row.pk),
        # Stored findings, under their registered kind and label; the checks that could not
        # decide (severity "skipped") are not findings.
        findings=[FindingView(**finding_view(f)) for f in q_findings.get_findings(session=session, rollout_pk=row.pk)
                  if f.severity != checks.SKIPPED],
        graph=[GraphNode(idx=g.idx, parent=g.parent, role=g.role, sampled=g.sampled, n_tokens=g.n_tokens)
               for g in graph],
        branches=paths,
    )


def _branch(session, run: str, rollout: str, attempt: int | None, branch: int):
    run_id, rollout_id = unquote(run), unquote(rollout)
    row = _row(session, run_id, rollout_id, attempt)
    _, paths = _paths(session, row.pk)
    if branch >= len(paths):
        raise ApiError(404, f"rollout {rollout_id!r} has {len(paths)} branch(es); branch {branch} does not exist",
                       field="branch")
    return row, paths[branch]


# Longest string (characters) of a message a list answers with: one 40 MB tool output made a
# 50-message page 40 MB. The full text is behind `full_text_url`.
MESSAGE_TEXT_CAP = 65_536


def _capped(value: Any, cut: list[bool]) -> Any:
    """`value` with every string longer than MESSAGE_TEXT_CAP cut to its first MESSAGE_TEXT_CAP
    characters (`cut[0]` set when any was)."""
    if isinstance(value, str):
        if len(value) > MESSAGE_TEXT_CAP:
            cut[0] = True
            return value[:MESSAGE_TEXT_CAP]
        return value
    if isinstance(value, list):
        return [_capped(v, cut) for v in value]
    if isinstance(value, dict):
        return {k: _capped(v, cut) for k, v in value.items()}
    return value


class MessageItem(PageModel):
    """A message of a branch: the stored message (role, content, tool calls, ...) and its
    place in the graph. Every string of `message` longer than 65,536 characters is cut there,
    with `truncated: true`; `full_text_url` gives the message's whole text (text/plain)."""

    idx: int
    parent: int | None
    role: str
    sampled: bool
    n_tokens: int
    policy_version: int | None
    timestamp: float | None
    message: dict[str, Any]
    truncated: bool = False
    full_text_url: str


class MessagePage(PageModel):
    items: list[MessageItem]
    branch: int
    offset: int
    total: int
    next_offset: int | None


@router.get("/runs/{run}/rollouts/{rollout}/branches/{branch}/messages", response_model=MessagePage)
def get_branch_messages(request: Request, session: SessionDep, run: RunId, rollout: RolloutId,
                        branch: Annotated[Count, Path()], attempt: OptInt = None, offset: OptCount = None,
                        limit: Annotated[int | None, Query(ge=1, le=1000)] = None):
    """The messages of one branch, root first, `limit` at a time from `offset`. Strings longer
    than 65,536 characters are cut (`truncated: true`); `full_text_url` has the whole text."""
    row, path = _branch(session, run, rollout, attempt, branch)
    start, n = offset or 0, _limit(request, limit)
    nodes = q_nodes.get_nodes(session=session, rollout_pk=row.pk, idxs=path[start:start + n])
    nxt = start + n if start + n < len(path) else None
    items = []
    for x in nodes:
        cut = [False]
        message = _capped(x.message or {}, cut)
        items.append(MessageItem(idx=x.idx, parent=x.parent, role=x.role, sampled=x.sampled, n_tokens=x.n_tokens,
                                 policy_version=x.policy_version, timestamp=x.timestamp, message=message,
                                 truncated=cut[0], full_text_url=urls.node_text(run, row.pk, x.idx)))
    return MessagePage(items=items, branch=branch, offset=start, total=len(path), next_offset=nxt)


BranchTokens = model_of(schemas.BranchTokens)


def _arrays(session, pk: int, path: list[int]) -> dict[str, np.ndarray]:
    ids, mask, lps, advs, owner = [], [], [], [], []
    for r in q_nodes.node_arrays(session=session, rollout_pk=pk, idxs=path):
        t = unpack_ids(r.token_ids)
        n = len(t)
        ids.append(t)
        mask.append(unpack_bits(r.mask, n) if r.mask else np.zeros(n, dtype=bool))
        lp, ad = unpack_floats(r.logprobs), unpack_floats(r.advantages)
        lps.append(lp if lp is not None and len(lp) == n else np.full(n, np.nan, dtype="<f4"))
        advs.append(ad if ad is not None and len(ad) == n else np.full(n, np.nan, dtype="<f4"))
        owner.append(np.full(n, r.idx, dtype="<i4"))

    def cat(parts, dtype):
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

    return {"node": cat(owner, "<i4"), "token_ids": cat(ids, "<i4"), "mask": cat(mask, bool),
            "logprobs": cat(lps, "<f4"), "advantages": cat(advs, "<f4")}


@router.get("/runs/{run}/rollouts/{rollout}/branches/{branch}/tokens", response_model=BranchTokens,
            responses={200: {"content": {NPZ: {"schema": {"type": "string", "format": "binary"}}},
                             "description": "JSON, or with `Accept: application/x-ndarray` a NumPy .npz "
                                            "archive of int32 `node`, `token_ids`, bool `mask`, float32 "
                                            "`logprobs`, `advantages` (NaN = missing)"}})
def get_branch_tokens(request: Request, session: SessionDep, run: RunId, rollout: RolloutId,
                      branch: Annotated[Count, Path()], attempt: OptInt = None):
    """A branch's token arrays. JSON by default; `Accept: application/x-ndarray` gives the compact
    binary form, a NumPy NPZ archive (`numpy.load(io.BytesIO(body))`), float32 as stored."""
    row, path = _branch(session, run, rollout, attempt, branch)
    arrays = _arrays(session, row.pk, path)
    if NPZ in request.headers.get("accept", ""):
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return Response(buf.getvalue(), media_type=NPZ)
    return BranchTokens(branch=branch, nodes=path, node=arrays["node"].tolist(), token_ids=arrays["token_ids"].tolist(),
                        mask=arrays["mask"].tolist(), logprobs=floats_or_none(arrays["logprobs"]) or [],
                        advantages=floats_or_none(arrays["advantages"]) or [])

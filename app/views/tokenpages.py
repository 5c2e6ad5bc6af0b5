"""Token-level page data beside the rollout page: a window of a branch's token sequence (what a
long strip loads as it scrolls, and the JSON twin's "tokens around offset T"), and two branches
side by side from their fork point with the first differing token.

A branch is one token sequence: the concatenation of its nodes' `token_ids` (docs/trace-format.md).
Offsets `t` count tokens along that sequence from 0.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from sqlmodel import Session

from app import urls
from app.db.tokenarrays import unpack_ids
from app.errors import ApiError
from app.queries import graph as q_graph
from app.queries import nodes as q_nodes
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.views.common import PageModel
from app.views.rollout.links import check_branch, span
from app.views.rollout.models import MarkedToken
from app.views.rollout.windows import Pieces, _declares_byte_level, _load_vocab, _token_chips
from ingest.graph import branches, fork_points, samples

MAX_WINDOW = 4096  # tokens per window request
SIDE_CONTEXT = 32  # tokens shown before the first difference
SIDE_AFTER = 480  # tokens shown from the first difference on


class PageLink(PageModel):
    id: str
    url: str


class RolloutLink(PageModel):
    rollout_id: str
    url: str


class SideMessage(PageModel):
    """The chips of one message of a branch, from the shown offset on."""

    node: int
    role: str
    sampled: bool
    tokens: list[MarkedToken]


class BranchSide(PageModel):
    """One branch of the two: the sample it becomes, where and why it forked
    (ingest.graph.fork_points), its length, and its messages from `shown_from`; `more` tokens
    follow past what is shown."""

    branch: int
    sample: int | None
    fork: dict[str, Any] | None
    n_tokens: int
    url: str
    messages: list[SideMessage]
    more: int


class BranchComparePage(PageModel):
    """Two branches of a rollout side by side (`?branch=A&vs=B`): the nodes they share, the
    first branch offset where their token sequences differ (None: one is a prefix of the other),
    and both sides from `shown_from`."""

    run: PageLink
    rollout: RolloutLink
    shared_nodes: list[int]
    fork_node: int | None
    first_difference: int | None
    common_prefix: int
    shown_from: int
    sides: list[BranchSide]


def _rollout(session: Session, run_id: str, rollout_id: str, attempt: int | None):
    row = q_rollouts.get_rollout(session=session, run_id=run_id, rollout_id=rollout_id, attempt=attempt)
    if row is None:
        return None
    gnodes = q_graph.graph_nodes(session=session, rollout_pk=row.pk)
    paths = branches(gnodes) if gnodes else []
    return row, gnodes, paths


def _pieces(session: Session, run_id: str, pk: int) -> Pieces:
    run = q_runs.get_run(session=session, run_id=run_id)
    vocab = _load_vocab(session, run.tokenizer_sha256 if run else None)
    return Pieces(vocab, byte_level=_declares_byte_level(run, q_rollouts.get_envelope(session=session, rollout_pk=pk)))


def token_window_page(session: Session, run_id: str, rollout_id: str, *, branch: int = 0, attempt: int | None = None,
                      node: int | None = None, start: int = 0, end: int | None = None,
                      at: int | None = None, radius: int = 128) -> dict | None:
    """Token chips of one branch, by node (`node`, tokens `start..end` of that node) or around a
    branch offset (`at` ± `radius`, across node boundaries). At most MAX_WINDOW tokens.

    Returns `{rollout_id, branch, from, to, total, tokens: [chip + node]}` (chips as
    `tokenview.token_views` gives them, each with the `node` it belongs to); None when the
    rollout does not exist. A branch, node, `from`/`to`, `at` or `radius` out of range raises
    ApiError 422 naming the parameter (`from` > the node's tokens, `to` before `from` or past
    them, a window over MAX_WINDOW, `at` past the branch's last token, `radius` > MAX_WINDOW / 2)."""
    got = _rollout(session, run_id, rollout_id, attempt)
    if got is None:
        return None
    row, gnodes, paths = got
    check_branch(branch, paths)
    path = paths[branch]
    starts = np.concatenate([[0], np.cumsum([gnodes[i].n_tokens for i in path])]).astype(int)
    total = int(starts[-1])
    if node is not None:
        if node not in path:
            raise ApiError(422, f"node {node} is not on branch {branch} (its nodes: {span(path)})", field="node")
        pos = path.index(node)
        n = gnodes[node].n_tokens
        if start > n:
            raise ApiError(422, f"from must be 0..{n}: node {node} has {n} tokens", field="from")
        e = min(n, start + MAX_WINDOW) if end is None else end
        if not start <= e <= n:
            raise ApiError(422, f"to must be {start}..{n}: node {node} has {n} tokens", field="to")
        if e - start > MAX_WINDOW:
            raise ApiError(422, f"a window is at most {MAX_WINDOW} tokens (to - from)", field="to")
        lo, hi = int(starts[pos]) + start, int(starts[pos]) + e
    elif at is not None:
        if radius > MAX_WINDOW // 2:
            raise ApiError(422, f"radius must be 0..{MAX_WINDOW // 2}", field="radius")
        if at >= total:
            raise ApiError(422, f"at must be a token position 0..{total - 1}: branch {branch} has {total} tokens"
                           if total else f"branch {branch} has no tokens", field="at")
        lo, hi = max(0, at - radius), min(total, at + radius + 1)
    else:
        lo, hi = 0, min(total, MAX_WINDOW)
    pieces = _pieces(session, run_id, row.pk)
    first = int(np.searchsorted(starts, lo, side="right")) - 1 if hi > lo else len(path)
    chips: list[dict] = []
    k = max(first, 0)
    while k < len(path) and starts[k] < hi:
        a, b = max(lo, int(starts[k])) - int(starts[k]), min(hi, int(starts[k + 1])) - int(starts[k])
        if b > a:
            (nd,) = q_nodes.get_nodes(session=session, rollout_pk=row.pk, idxs=[path[k]])
            for c in _token_chips(nd, pieces, a, b, int(starts[k])):
                c["node"] = nd.idx
                chips.append(c)
        k += 1
    return {"rollout_id": rollout_id, "branch": branch, "from": lo, "to": hi, "total": total, "tokens": chips}


def _branch_ids(session: Session, pk: int, path: list[int]) -> tuple[np.ndarray, np.ndarray, list]:
    """The branch's token ids, the branch offset of each node's first token, and its nodes."""
    nodes = q_nodes.get_nodes(session=session, rollout_pk=pk, idxs=path)
    ids = [unpack_ids(n.token_ids) for n in nodes]
    starts = np.concatenate([[0], np.cumsum([len(x) for x in ids])]).astype(int)
    return (np.concatenate(ids) if ids else np.zeros(0, dtype="<i4")), starts, nodes


def _side(nodes, starts, pieces: Pieces, lo: int, hi: int, diff_at: int | None) -> list[dict]:
    """Chips from branch offset lo..hi in message groups: `[{node, role, tokens}]`."""
    out = []
    for k, nd in enumerate(nodes):
        a, b = max(lo, int(starts[k])), min(hi, int(starts[k + 1]))
        if b <= a:
            continue
        chips = _token_chips(nd, pieces, a - int(starts[k]), b - int(starts[k]), int(starts[k]))
        for c in chips:
            c["first_diff"] = c["t"] == diff_at
        out.append({"node": nd.idx, "role": nd.role, "sampled": nd.sampled, "tokens": chips})
    return out


def branch_compare_page(session: Session, run_id: str, rollout_id: str, *, a: int, b: int,
                        attempt: int | None = None) -> BranchComparePage | None:
    """Two branches side by side from their fork point: the nodes they share, the offset of the
    first token where their sequences differ (None when one is a prefix of the other: then the
    shorter simply ends), and each side's tokens from a little before that point.

    Returns None when the rollout does not exist; a branch out of range raises ApiError 422
    (field `branch` or `vs`)."""
    got = _rollout(session, run_id, rollout_id, attempt)
    if got is None:
        return None
    row, gnodes, paths = got
    check_branch(a, paths)
    check_branch(b, paths, field="vs")
    pieces = _pieces(session, run_id, row.pk)
    ids_a, starts_a, nodes_a = _branch_ids(session, row.pk, paths[a])
    ids_b, starts_b, nodes_b = _branch_ids(session, row.pk, paths[b])
    n = min(len(ids_a), len(ids_b))
    neq = np.nonzero(ids_a[:n] != ids_b[:n])[0]
    diff_at = int(neq[0]) if len(neq) else None
    common = diff_at if diff_at is not None else n
    lo = max(0, common - SIDE_CONTEXT)
    hi = common + SIDE_AFTER
    shared = []
    for x, y in zip(paths[a], paths[b]):
        if x != y:
            break
        shared.append(x)
    forks = fork_points(gnodes, paths)
    sample_of = samples(gnodes, paths)

    def side(k, ids, starts, nodes):
        return {"branch": k, "sample": sample_of[k], "fork": forks[k], "n_tokens": int(len(ids)),
                "url": urls.rollout(run_id, rollout_id, branch=k, attempt=attempt),
                "messages": _side(nodes, starts, pieces, lo, min(hi, len(ids)), diff_at),
                "more": max(0, len(ids) - hi)}

    return BranchComparePage.model_validate({
        "run": {"id": run_id, "url": urls.run(run_id)},
        "rollout": {"rollout_id": rollout_id, "url": urls.rollout(run_id, rollout_id, attempt=attempt)},
        "shared_nodes": shared,
        "fork_node": shared[-1] if shared else None,
        "first_difference": diff_at,
        "common_prefix": common,
        "shown_from": lo,
        "sides": [side(a, ids_a, starts_a, nodes_a), side(b, ids_b, starts_b, nodes_b)],
    })

"""One rollout's page: header, attempts, envelope, findings, branches, and one page of the
messages of one branch, each with its tool calls paired to results and its token strip."""
from __future__ import annotations

from typing import Any

from typing_extensions import TypedDict

from sqlmodel import Session

from app import urls
from app.config import WebSettings
from app.db.tokenarrays import f32, floats_or_none, unpack_bits, unpack_floats, unpack_ids
from app.queries import findings as q_findings
from app.queries import nodes as q_nodes
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.views.common import PageModel, RolloutSummary, num, pins_attempt, summary_fields
from ingest import checks
from ingest.graph import branches, pair_tool_calls
from ingest.schema import content_text


# --- models ---------------------------------------------------------------------------------
# Per-token data are TypedDicts: a page may hold tens of thousands of tokens, validated in bulk.

class Piece(TypedDict):
    """How a token is drawn: its text, its bytes in hex, and what is odd about it."""

    text: str
    hex: str
    partial: bool  # bytes of a character split across tokens
    special: bool
    unknown: bool  # id outside the vocabulary
    lost: bool  # U+FFFD: bytes the source had already lost


class TokenView(TypedDict):
    i: int
    id: int
    trained: bool  # loss mask 1
    logprob: float | None  # behaviour logprob, as float32
    advantage: float | None
    piece: Piece | None  # None: no vocabulary, show the id
    drift: bool
    suspect: bool
    sampled: bool  # the message is the policy's (assistant); mask 1 elsewhere is not "sampled"
    flags: list[str] | None  # labels of the findings that point at this token
    anchor: str | None  # the element id a finding's link targets (`node-N-tP`)


class CallRef(PageModel):
    node: Any
    position: Any
    url: str | None


class FindingView(PageModel):
    """A stored finding of the trace checks, with a link to its node (and, for
    `duplicate_tool_call_id`, to every call sharing the id)."""

    kind: str
    label: str
    severity: str
    node: int | None
    position: int | None
    message: str
    detail: dict[str, Any] | None
    url: str | None = None
    anchor: str | None = None  # the token (`node-N-tP`) or call (`node-N-call-P`) it points at
    calls: list[CallRef] | None = None


class CheckSkipped(PageModel):
    """A check that could not decide on this rollout or group, and why (it never passes silently)."""

    kind: str
    label: str
    reason: str


def finding_view(f) -> dict:
    """A stored finding as page data; old stored kinds are read under their registered kind."""
    kind = checks.legacy_kind(f.kind)
    return {"kind": kind, "label": checks.label(kind), "severity": f.severity,
            "node": f.node_idx, "position": f.position, "message": f.message, "detail": f.detail}


class ToolCallView(PageModel):
    id: str | None
    name: str | None
    position: int
    result_node: int | None
    result_url: str | None
    arguments: str | None = None


class Answers(PageModel):
    """The call a tool message answers."""

    node: int
    id: str | None
    name: str | None
    url: str | None


class NodeView(PageModel):
    """One message: role, text preview, tool calls with results, token strip; with every token
    array (`token_ids`, `mask`, `logprobs`, `advantages`) when all tokens were asked for."""

    idx: int
    parent: int | None
    role: str
    sampled: bool
    timestamp: float | None
    policy_version: int | None
    reward: float | None
    mc_return: float | None
    content: str
    content_len: int
    content_truncated: bool
    content_url: str
    reasoning: str | None
    tool_calls: list[ToolCallView]
    answers: Answers | None
    name: str | None
    source_role: str | None
    n_tokens: int
    n_trained: int
    tokens: list[TokenView]
    tokens_shown: int
    token_ids: list[int] | None
    mask: list[bool] | None
    logprobs: list[float | None] | None
    advantages: list[float | None] | None
    bytes_lost: bool
    bytes_lost_badge: bool
    empty_response: bool
    findings: list[FindingView]
    extra: dict[str, Any]


class RolloutRunLink(PageModel):
    id: str
    name: str | None
    url: str
    tokenizer: bool


class RolloutHeader(RolloutSummary):
    content_hash: str


class AttemptView(PageModel):
    attempt: int
    step: int | None
    ending: str
    ending_detail: str | None
    reward: float | None
    reward_status: str
    url: str
    current: bool
    latest: bool


class BranchView(PageModel):
    index: int
    nodes: int
    leaf: int | None
    url: str


class RolloutPage(PageModel):
    """The envelope fields (`ending`, `rewards`, `task`, `calls`, `errors`, `timing`, `metrics`,
    `extra`) are as stored (docs/trace-format.md); `calls` items gain `node_url`."""

    run: RolloutRunLink
    rollout: RolloutHeader
    attempts: list[AttemptView]
    ending: dict[str, Any]
    rewards: dict[str, Any]
    reward: float | None
    reward_status: str
    task: Any
    calls: list[Any]
    errors: list[Any]
    timing: dict[str, Any]
    metrics: dict[str, Any]
    extra: dict[str, Any]
    findings: list[FindingView]
    checks_skipped: list[CheckSkipped]
    n_trained_environment: int  # trained tokens of messages the policy did not sample (mask_on_unsampled)
    trains_on_nothing: bool
    has_tokens: bool
    bare_ids: bool
    branches: list[BranchView]
    branch: int
    offset: int
    limit: int
    messages: list[NodeView]
    messages_total: int
    next_offset: int | None
    next_url: str | None
    all_tokens_url: str


# --- building -------------------------------------------------------------------------------

class Pieces:
    """Token id → display piece, from the run's stored vocabulary (None = show ids)."""

    def __init__(self, vocab):
        self.vocab = vocab

    def tokens(self, ids, source_hex: list | None) -> list[Piece | None]:
        """The source's own bytes win when it recorded them (they are what the server
        returned); else the run's vocabulary; else None (show the id)."""
        from ingest.tokenizer import decode_pieces, piece_from_bytes

        if source_hex and len(source_hex) == len(ids):
            return [_piece(piece_from_bytes(int(i), bytes.fromhex(h.replace(" ", "")) if isinstance(h, str) else b""))
                    for i, h in zip(ids, source_hex)]
        if self.vocab is not None:
            return [_piece(p) for p in decode_pieces(self.vocab, [int(i) for i in ids])]
        return [None] * len(ids)


def _piece(p) -> Piece:
    """A TokenPiece for the page; `lost` marks U+FFFD, bytes the source had already lost."""
    return {"text": p.text, "hex": p.hex, "partial": p.partial, "special": p.special, "unknown": p.unknown,
            "lost": "\ufffd" in p.text}


def _load_vocab(session: Session, sha256: str | None):
    if not sha256:
        return None
    from ingest.tokenizer import cached_from_blob, from_blob

    def loader():
        t = q_nodes.get_tokenizer(session=session, sha256=sha256)
        if t is None:
            raise LookupError(sha256)
        return from_blob(t.vocab, t.name, t.kind, t.sha256)

    try:
        return cached_from_blob(sha256, loader)
    except LookupError:
        return None


def _at(values, i: int) -> float | None:
    """values[i] (float32) as the float it was written as, None when absent or NaN."""
    if values is None or i >= len(values):
        return None
    return f32(values[i])


def _flagged_tokens(node_findings: list[dict], shown: int) -> dict[int, list[str]]:
    """Token index → labels of the findings on a node that point at it (`detail.positions`, else
    `position`), for checks whose position is a token."""
    out: dict[int, list[str]] = {}
    for f in node_findings:
        c = checks.REGISTRY.get(f["kind"])
        if c is None or c.at != "token":
            continue
        positions = (f.get("detail") or {}).get("positions")
        if not isinstance(positions, list):
            positions = [f["position"]] if isinstance(f["position"], int) else []
        for p in positions:
            if isinstance(p, int) and 0 <= p < shown:
                out.setdefault(p, []).append(f["label"])
    return out


def _anchor(f: dict, tokens_inline: int) -> str | None:
    """The id of the element a finding points at: a token (`node-N-tP`) or a tool call
    (`node-N-call-P`); None when it concerns the whole message or rollout."""
    c = checks.REGISTRY.get(f["kind"])
    if f["node"] is None or not isinstance(f["position"], int) or c is None:
        return None
    if c.at == "call":
        return f"node-{f['node']}-call-{f['position']}"
    return f"node-{f['node']}-t{f['position']}" if 0 <= f["position"] < tokens_inline else None


def _suspected_padding(node_findings: list[dict]) -> set[int]:
    """Token indices of a node flagged by `suspected_logprob_padding`: `position` is where the
    trailing run of 0.0 logprobs starts, `detail.run` its length."""
    out: set[int] = set()
    for f in node_findings:
        run = (f.get("detail") or {}).get("run")
        if f["kind"] == "suspected_logprob_padding" and isinstance(f["position"], int) and isinstance(run, int):
            out.update(range(f["position"], f["position"] + run))
    return out


def _node_view(node, pieces: Pieces, calls_by_node: dict, answer_of: dict, findings_by_node: dict,
               run_id: str, rollout_pk: int, all_tokens: bool, web: WebSettings) -> dict:
    msg = node.message or {}
    text = content_text(msg.get("content"))
    ids = unpack_ids(node.token_ids)
    n = len(ids)
    mask = unpack_bits(node.mask, n) if node.mask else None
    logprobs = unpack_floats(node.logprobs)
    advantages = unpack_floats(node.advantages)
    extra = node.extra or {}
    shown = n if all_tokens else min(n, web.tokens_inline)
    piece_list = pieces.tokens(ids[:shown], (extra.get("token_bytes") or [])[:shown] if extra.get("token_bytes") else None)
    drift = extra.get("token_drift") or {}
    drift_at = drift.get("index") if isinstance(drift.get("index"), int) else None
    node_findings = findings_by_node.get(node.idx, [])
    suspect = _suspected_padding(node_findings)
    flagged = _flagged_tokens(node_findings, shown)
    anchors = {f["position"] for f in node_findings if f.get("anchor")}
    sampled = node.role == "assistant"
    tokens = []
    for i in range(shown):
        tokens.append({"i": i, "id": int(ids[i]), "trained": bool(mask[i]) if mask is not None else False,
                       "logprob": _at(logprobs, i), "advantage": _at(advantages, i),
                       "piece": piece_list[i], "drift": i == drift_at, "suspect": i in suspect,
                       # a token of a message the policy did not write is never "sampled", mask or not
                       "sampled": sampled, "flags": flagged.get(i),
                       "anchor": f"node-{node.idx}-t{i}" if i in anchors else None})
    n_trained = int(mask.sum()) if mask is not None else 0
    bytes_lost = any(p and p.get("lost") for p in piece_list)
    return {
        "idx": node.idx, "parent": node.parent, "role": node.role, "sampled": node.sampled,
        "timestamp": node.timestamp, "policy_version": node.policy_version,
        "reward": node.reward, "mc_return": node.mc_return,
        "content": text[:web.preview_chars], "content_len": node.content_len,
        "content_truncated": node.content_len > web.preview_chars,
        "content_url": urls.node_text(run_id, rollout_pk, node.idx),
        "reasoning": msg.get("reasoning_content"),
        "tool_calls": calls_by_node.get(node.idx, []),
        "answers": answer_of.get(node.idx),
        "name": msg.get("name"),
        # a role the source used that the native model has no word for (kept by the reader)
        "source_role": (msg.get("extra") or {}).get("source_role"),
        "n_tokens": n, "n_trained": n_trained, "tokens": tokens, "tokens_shown": shown,
        "token_ids": [int(x) for x in ids] if all_tokens else None,
        "mask": [bool(x) for x in mask] if (all_tokens and mask is not None) else None,
        "logprobs": floats_or_none(logprobs) if all_tokens else None,
        "advantages": floats_or_none(advantages) if all_tokens else None,
        "bytes_lost": bytes_lost,
        # The bytes_lost_upstream finding already names this on the node: one badge, not two.
        "bytes_lost_badge": bytes_lost and not any(f["kind"] == "bytes_lost_upstream" for f in node_findings),
        # Shown only where the stored check fired (it deliberately skips a turn whose source
        # recorded tokens but no text): pages never recompute a check.
        "empty_response": any(f["kind"] == "empty_response" for f in node_findings),
        "findings": node_findings,
        "extra": {k: v for k, v in extra.items() if k not in ("token_bytes",)},
    }


class NodeLinks:
    """Where a link to node N must go: `#node-N` when N is on the page being viewed, else
    `?branch=B&offset=O#node-N` with B the current branch if it holds N (else the first branch
    that does) and O the start of the page holding N. A node's position is its depth, the same
    on every branch that holds it."""

    def __init__(self, run_id: str, rollout_id: str, paths: list[list[int]], branch: int, offset: int, limit: int,
                 attempt: int | None):
        self.run_id, self.rollout_id = run_id, rollout_id
        self.paths, self.branch, self.offset, self.limit = paths, branch, offset, limit
        self.attempt = attempt
        self.current = {idx: p for p, idx in enumerate(paths[branch])} if paths else {}
        self._first: dict[int, tuple[int, int]] | None = None

    def _locate(self, idx: int) -> tuple[int, int] | None:
        if idx in self.current:
            return self.branch, self.current[idx]
        if self._first is None:  # built once, only when a link leaves the current branch
            self._first = {}
            for b, path in enumerate(self.paths):
                for p, i in enumerate(path):
                    self._first.setdefault(i, (b, p))
        return self._first.get(idx)

    def page_url(self, branch: int, offset: int, **more) -> str:
        return urls.rollout(self.run_id, self.rollout_id, branch=branch, offset=offset, attempt=self.attempt, **more)

    def __call__(self, idx) -> str | None:
        if not isinstance(idx, int):
            return None
        where = self._locate(idx)
        if where is None:
            return None
        b, p = where
        if b == self.branch and self.offset <= p < self.offset + self.limit:
            return f"#node-{idx}"
        return f"{self.page_url(b, p // self.limit * self.limit)}#node-{idx}"


class _ParentOnly:
    """A node reduced to its parent, for ingest.graph.branches."""

    __slots__ = ("parent",)

    def __init__(self, parent):
        self.parent = parent


def rollout_page(session: Session, run_id: str, rollout_id: str, *, web: WebSettings, branch: int = 0,
                 offset: int = 0, attempt: int | None = None, all_tokens: bool = False) -> RolloutPage | None:
    """The rollout page: header, findings, branches, one page (`web.messages_per_page`) of the
    messages of one branch. None if there is no such rollout (or attempt).

    `attempt=None` shows the latest attempt. Every attempt of the rollout id is listed with its
    link (the one shown marked `current`); when there are several, the page's own links (branches,
    pages, nodes) name the attempt shown."""
    limit = web.messages_per_page
    row = q_rollouts.get_rollout(session=session, run_id=run_id, rollout_id=rollout_id, attempt=attempt)
    if row is None:
        return None
    pk = row.pk
    tries = q_rollouts.rollout_attempts(session=session, run_id=run_id, rollout_id=rollout_id)
    attempts = [{"attempt": a.attempt, "step": a.step, "ending": a.ending, "ending_detail": a.ending_detail,
                 "reward": num(a.reward), "reward_status": a.reward_status,
                 "url": urls.rollout(run_id, rollout_id, attempt=a.attempt if pins_attempt(a.attempt, len(tries)) else None),
                 "current": a.attempt == row.attempt, "latest": i == len(tries) - 1}
                for i, a in enumerate(tries)]
    run = q_runs.get_run(session=session, run_id=run_id)
    envelope = q_rollouts.get_envelope(session=session, rollout_pk=pk)
    stored = q_findings.get_findings(session=session, rollout_pk=pk)
    findings = [finding_view(f) for f in stored if f.severity != checks.SKIPPED]
    skipped = [{"kind": f.kind, "label": checks.label(f.kind), "reason": f.message}
               for f in stored if f.severity == checks.SKIPPED]
    findings_by_node: dict[int, list] = {}
    for f in findings:
        if f["node"] is not None:
            findings_by_node.setdefault(f["node"], []).append(f)

    graph = q_nodes.node_graph(session=session, rollout_pk=pk)
    paths = branches([_ParentOnly(p) for _, p in graph]) if graph else []
    branch = max(0, min(branch, len(paths) - 1)) if paths else 0
    path = paths[branch] if paths else []
    link = NodeLinks(run_id, rollout_id, paths, branch, offset, limit,
                     row.attempt if attempt is not None or len(attempts) > 1 else None)
    for f in findings:
        f["anchor"] = _anchor(f, web.tokens_inline)
        f["url"] = link(f["node"])
        if f["url"] and f["anchor"]:  # to the token or call itself, not only its message
            f["url"] = f["url"].rsplit("#", 1)[0] + "#" + f["anchor"]
        calls = (f["detail"] or {}).get("calls") if f["kind"] == "duplicate_tool_call_id" else None
        if isinstance(calls, list):  # every call that shares the id, not only the first
            f["calls"] = [{"node": c[0], "position": c[1], "url": link(c[0])} for c in calls
                          if isinstance(c, list | tuple) and len(c) == 2]
    headers = q_nodes.node_headers(session=session, rollout_pk=pk, idxs=path)
    messages = [headers.get(i, {"role": "user"}) for i in range(len(graph))] if graph else []
    for i, h in headers.items():
        messages[i] = h
    pairs = pair_tool_calls(path, messages)
    calls_by_node: dict[int, list] = {}
    answer_of: dict[int, dict] = {}
    for c in pairs:
        calls_by_node.setdefault(c.node, []).append(
            {"id": c.id, "name": c.name, "position": c.position, "result_node": c.result_node,
             "result_url": link(c.result_node)})
        if c.result_node is not None:
            answer_of[c.result_node] = {"node": c.node, "id": c.id, "name": c.name, "url": link(c.node)}
    page = path[offset:offset + limit]
    nodes = q_nodes.get_nodes(session=session, rollout_pk=pk, idxs=page)
    vocab = _load_vocab(session, run.tokenizer_sha256 if run else None)
    pieces = Pieces(vocab)
    node_views = []
    for node in nodes:
        v = _node_view(node, pieces, calls_by_node, answer_of, findings_by_node, run_id, pk, all_tokens, web)
        raw_calls = (node.message or {}).get("tool_calls") or []  # the raw arguments, as sampled
        v["tool_calls"] = [dict(c) for c in v["tool_calls"]]
        for c in v["tool_calls"]:
            if c["position"] < len(raw_calls):
                c["arguments"] = raw_calls[c["position"]].get("arguments", "")
        node_views.append(v)
    model_calls = [dict(c, node_url=link(c.get("node"))) if isinstance(c, dict) else c
                   for c in envelope.get("calls", [])]
    summary = summary_fields(row, n_attempts=len(attempts))
    nxt = offset + limit if offset + limit < len(path) else None
    return RolloutPage.model_validate({
        "run": {"id": run_id, "name": run.name if run else None, "url": urls.run(run_id), "tokenizer": bool(vocab)},
        "rollout": summary,
        "attempts": attempts,
        "ending": envelope.get("ending", {"type": summary["ending"]}),
        "rewards": envelope.get("rewards", {}),
        "reward": num(summary["reward"]),
        "reward_status": summary["reward_status"],
        "task": envelope.get("task"),
        "calls": model_calls,
        "errors": envelope.get("errors", []),
        "timing": envelope.get("timing", {}),
        "metrics": envelope.get("metrics", {}),
        "extra": envelope.get("extra", {}),
        "findings": findings,
        "checks_skipped": skipped,
        "n_trained_environment": sum((f["detail"] or {}).get("count", 0) for f in findings
                                     if f["kind"] == "mask_on_unsampled"),
        # Tokens were recorded but none carries loss: a filter (Tunix overlong_filter) zeroed the
        # mask. Shown, but it trains on nothing.
        "trains_on_nothing": summary["n_tokens"] > 0 and summary["n_trained_tokens"] == 0 and summary["n_turns"] > 0,
        # The token legend explains what is drawn: only when there are tokens, and the tokenizer
        # note only when some token on this page is drawn as a bare id.
        "has_tokens": summary["n_tokens"] > 0,
        "bare_ids": any(t["piece"] is None for m in node_views for t in m["tokens"]),
        "branches": [{"index": b, "nodes": len(p), "leaf": p[-1] if p else None,
                      "url": link.page_url(b, 0)} for b, p in enumerate(paths)],
        "branch": branch,
        "offset": offset,
        "limit": limit,
        "messages": node_views,
        "messages_total": len(path),
        "next_offset": nxt,
        "next_url": link.page_url(branch, nxt) if nxt is not None else None,
        "all_tokens_url": link.page_url(branch, offset, tokens="all"),
    })

"""One rollout's page: header, attempts, envelope, findings, the drawn message graph, branches
(each labelled with the sample it becomes and why it forked), and one page of the messages of
one branch, each with its tool calls paired to results and its token strip (app/views/tokens.py:
six token states, overlay buckets, windows of a long strip)."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import numpy as np
from typing_extensions import NotRequired, TypedDict

from sqlmodel import Session

from app import urls
from app.config import WebSettings
from app.errors import ApiError
from app.queries import rollout_list
from app.db.tokenarrays import floats_or_none, unpack_bits, unpack_floats, unpack_ids
from app.queries import findings as q_findings
from app.queries import graph as q_graph
from app.queries import nodes as q_nodes
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.views import graph_svg, tokens as tokenview
from app.views.common import PageModel, RolloutSummary, num, pins_attempt, summary_fields
from app.queries import annotations as q_annotations
from app.views.common import LabelView, NoteView, iso, note_view, with_labels
from ingest import checks
from ingest.graph import branches, fork_points, pair_tool_calls, samples
from ingest.schema import content_text
from ingest.formats._openai import MEDIA_PARTS

MEDIA_TYPES = frozenset(MEDIA_PARTS.values())  # the types a stored media placeholder has


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
    raw: NotRequired[str]  # the byte-level BPE piece as written (ingest/bytelevel.py)
    joined: NotRequired[str]  # the character(s) a run of partial pieces spells
    join: NotRequired[str]  # start | mid | end: this piece's place in that run


class TokenView(TypedDict):
    """One token chip (app/views/tokens.py token_views)."""

    i: int  # position in its message
    t: int  # position in the branch's token sequence (the #t-N of a deep link)
    id: int
    state: str  # trained | context | filtered | fault | special | placeholder
    trained: bool  # loss mask 1
    logprob: float | None  # behaviour logprob, as float32
    advantage: float | None
    trainer_logprob: float | None
    delta: float | None  # trainer − behaviour logprob (nats), mask-1 tokens with both only
    ratio: float | None  # exp(delta)
    lpb: int | None  # overlay buckets: None = nothing to draw, -1 = missing (hatched)
    advb: int | None
    dlb: int | None
    piece: Piece | None  # None: no vocabulary, show the id
    drift: bool
    suspect: bool
    sampled: bool  # the message is the policy's (assistant); mask 1 elsewhere is not "sampled"
    flags: list[str] | None  # labels of the findings that point at this token
    anchor: str | None  # set when a finding links to this token: its id, `t-T`


class MarkedToken(TokenView):
    """A chip on a page that compares two sequences: `first_diff` marks the first token where
    they differ."""

    first_diff: bool


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
    anchor: str | None = None  # the token (`t-T`, its branch offset) or call (`node-N-call-P`) it points at
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
    """One tool call with its result; `duration` (seconds) where both messages carry a timestamp
    (`_tool_duration`)."""

    id: str | None
    name: str | None
    position: int
    result_node: int | None
    result_url: str | None
    duration: float | None = None
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
    media: list[dict[str, Any]] = []  # image/audio/file parts: type, media_type, bytes, sha256 (never the bytes)
    reasoning: str | None
    reasoning_dropped_in: list[int] = []  # later branches whose re-rendered prompt leaves this reasoning out
    tool_calls: list[ToolCallView]
    answers: Answers | None
    name: str | None
    source_role: str | None
    n_tokens: int
    n_trained: int
    tokens: list[TokenView]
    tokens_shown: int
    t0: int  # branch offset of its first token
    segments: list[dict[str, Any]]  # windows of the strip: drawn (`tokens`) or loaded on scroll (`url`)
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
    """One branch: a root-to-leaf path, one token sequence; `sample` is the training row it
    becomes (None: no mask-1 token), `fork` where and why it leaves the branches before it
    (ingest.graph.fork_points)."""

    index: int
    nodes: int
    leaf: int | None
    url: str
    sample: int | None
    fork: dict[str, Any] | None
    n_tokens: int
    n_trained: int
    compare_with: int | None
    compare_url: str | None


class RolloutPage(PageModel):
    """The envelope fields (`ending`, `rewards`, `task`, `calls`, `errors`, `timing`, `metrics`,
    `extra`) are as stored (docs/trace-format.md); `calls` items gain `node_url`."""

    run: RolloutRunLink
    rollout: RolloutHeader
    list_nav: dict[str, Any] | None  # previous / next rollout in the list the reader came from
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
    labels: list[LabelView]
    notes: list[NoteView]
    checks_skipped: list[CheckSkipped]
    n_trained_environment: int  # trained tokens of messages the policy did not sample (mask_on_unsampled)
    trains_on_nothing: bool
    no_gradient: bool  # an errored rollout: its mask-1 tokens get no gradient under the default policy
    task_answer: Any
    timeline: dict[str, Any] | None
    has_tokens: bool
    bare_ids: bool
    token_states: list[dict[str, str]]
    overlays: dict[str, Any]
    has_trainer_logprobs: bool
    delta_outliers: list[dict[str, Any]]
    branches: list[BranchView]
    branch: int
    branch_prev_url: str | None
    branch_next_url: str | None
    # JSON twin, on the first page of a branch (offset 0) or with `graph=1`: nodes with parent,
    # role, sampled, tokens, kind, branches. Later pages carry `graph_url` instead (a 5,000-turn
    # rollout's 10,002 nodes were 1.1 MB of every 50-message page).
    graph: dict[str, Any] | None
    graph_url: str | None
    svg: dict[str, Any]  # the drawn graph's geometry (app/views/graph_svg.py)
    offset: int
    limit: int
    focus: str | None
    range: dict[str, int] | None  # messages first–last of total shown
    messages: list[NodeView]
    messages_total: int
    prev_offset: int | None
    prev_url: str | None
    next_offset: int | None
    next_url: str | None
    all_tokens_url: str


# --- building -------------------------------------------------------------------------------

Pieces = tokenview.Pieces


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


def _flagged_tokens(node_findings: list[dict], n: int) -> dict[int, list[str]]:
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
            if isinstance(p, int) and 0 <= p < n:
                out.setdefault(p, []).append(f["label"])
    return out


def _anchor(f: dict, token_offset) -> str | None:
    """The id of the element a finding points at: a token (`t-T`, T its offset in the branch
    shown by the link) or a tool call (`node-N-call-P`); None when it concerns the whole message
    or rollout. `token_offset(node)` is the branch offset of the node's first token (None when
    the node is on no branch)."""
    c = checks.REGISTRY.get(f["kind"])
    if f["node"] is None or not isinstance(f["position"], int) or c is None:
        return None
    if c.at == "call":
        return f"node-{f['node']}-call-{f['position']}"
    t0 = token_offset(f["node"])
    return f"t-{t0 + f['position']}" if t0 is not None and f["position"] >= 0 else None


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
               run_id: str, rollout_pk: int, all_tokens: bool, web: WebSettings, *, t0: int = 0,
               include_token: int | None = None, window_url=None, budget: list[int] | None = None) -> dict:
    """One message of the page. Its token strip is cut into windows (`tokenview.windows`): the
    first, and the one holding `include_token` (a deep link, node-relative), are drawn; the rest
    carry the URL that loads them as they scroll into view. `t0` is the branch offset of the
    node's first token. With `all_tokens` (the JSON twin, `tokens=all`) every token is drawn."""
    msg = node.message or {}
    text = content_text(msg.get("content"))
    ids = unpack_ids(node.token_ids)
    n = len(ids)
    mask = unpack_bits(node.mask, n) if node.mask else None
    extra = node.extra or {}
    node_findings = findings_by_node.get(node.idx, [])
    # `budget[0]`: tokens the page may still draw inline (the rest of the page loads by window)
    first = tokenview.FIRST if budget is None else min(tokenview.FIRST, budget[0])
    spans = [(0, n, True)] if all_tokens else tokenview.windows(n, first=first, include=include_token)
    segments, tokens = [], []
    for s, e, drawn in spans:
        if drawn:
            chips = _token_chips(node, pieces, s, e, t0, ids=ids, mask=mask, findings=node_findings)
            tokens.extend(chips)
            segments.append({"start": s, "end": e, "tokens": chips})
        else:
            segments.append({"start": s, "end": e, "t0": t0 + s, "t1": t0 + e, "tokens": None,
                             "url": window_url(node.idx, s, e) if window_url else None})
    if budget is not None:
        budget[0] = max(0, budget[0] - len(tokens))
    n_trained = int(mask.sum()) if mask is not None else 0
    bytes_lost = any(t["piece"] and t["piece"].get("lost") for t in tokens)
    logprobs = unpack_floats(node.logprobs)
    advantages = unpack_floats(node.advantages)
    parts = msg.get("content") if isinstance(msg.get("content"), list) else []
    view = {
        "idx": node.idx, "parent": node.parent, "role": node.role, "sampled": node.sampled,
        "timestamp": node.timestamp, "policy_version": node.policy_version,
        "reward": node.reward, "mc_return": node.mc_return,
        "content": text[:web.preview_chars], "content_len": node.content_len,
        "content_truncated": node.content_len > web.preview_chars,
        "content_url": urls.node_text(run_id, rollout_pk, node.idx),
        # parts only: a string content is text (walking a 12 MB string char by char took 1 s)
        "media": [{k: p.get(k) for k in ("type", "media_type", "bytes", "sha256")} for p in parts
                  if isinstance(p, dict) and p.get("type") in MEDIA_TYPES],
        "reasoning": msg.get("reasoning_content"),
        "tool_calls": calls_by_node.get(node.idx, []),
        "answers": answer_of.get(node.idx),
        "name": msg.get("name"),
        # a role the source used that the native model has no word for (kept by the reader)
        "source_role": (msg.get("extra") or {}).get("source_role"),
        "n_tokens": n, "n_trained": n_trained, "tokens": tokens, "tokens_shown": len(tokens),
        "t0": t0, "segments": segments,
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
        "extra": {k: v for k, v in extra.items() if k not in ("token_bytes", "trainer_logprobs")},
    }
    return view


def _token_chips(node, pieces: Pieces, start: int, end: int, t0: int, *, ids=None, mask=None,
                 findings: list | None = None) -> list[dict]:
    """Chips for tokens start..end of `node` (tokenview.token_views)."""
    ids = unpack_ids(node.token_ids) if ids is None else ids
    n = len(ids)
    if mask is None and node.mask:
        mask = unpack_bits(node.mask, n)
    extra = node.extra or {}
    hexes = extra.get("token_bytes")
    piece_list = pieces.tokens(ids[start:end], hexes[start:end] if hexes else None)
    drift = extra.get("token_drift") or {}
    drift_at = drift.get("index") if isinstance(drift, dict) and isinstance(drift.get("index"), int) else None
    trainer = extra.get("trainer_logprobs")
    trainer = np.asarray([np.nan if v is None else v for v in trainer], dtype="<f4") \
        if isinstance(trainer, list) and all(v is None or isinstance(v, int | float) for v in trainer) else None
    chips = tokenview.token_views(
        ids=ids, mask=mask, logprobs=unpack_floats(node.logprobs), advantages=unpack_floats(node.advantages),
        trainer_logprobs=trainer, pieces=piece_list, node_sampled=bool(node.sampled), start=start, end=end,
        t0=t0, drift_at=drift_at, suspect=_suspected_padding(findings or []))
    flagged = _flagged_tokens(findings or [], n)
    anchors = {f["position"] for f in findings or [] if f.get("anchor")}
    sampled = node.role == "assistant"
    for c in chips:
        # a token of a message the policy did not write is never "sampled", mask or not
        c["sampled"] = sampled
        c["flags"] = flagged.get(c["i"])
        c["anchor"] = f"t-{c['t']}" if c["i"] in anchors else None  # the chip's own id: a finding links here
    return chips


class NodeLinks:
    """Where a link to node N must go: `#m-N` when N is on the page being viewed, else
    `?branch=B&offset=O#m-N` with B the current branch if it holds N (else the first branch
    that does) and O the start of the page holding N. A node's position is its depth, the same
    on every branch that holds it."""

    def __init__(self, run_id: str, rollout_id: str, paths: list[list[int]], branch: int, offset: int, limit: int,
                 attempt: int | None, json: bool = False):
        self.json = json
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
        return urls.rollout(self.run_id, self.rollout_id, json=self.json, branch=branch, offset=offset,
                            attempt=self.attempt, **more)

    def __call__(self, idx) -> str | None:
        if not isinstance(idx, int):
            return None
        where = self._locate(idx)
        if where is None:
            return None
        b, p = where
        if b == self.branch and self.offset <= p < self.offset + self.limit:
            return f"#m-{idx}"
        return f"{self.page_url(b, p // self.limit * self.limit)}#m-{idx}"


def _span(xs: list[int]) -> str:
    """`[0, 1, 2, 7]` → "0–2, 7": a short list of numbers for an error message."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    out = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs[:8])
    return out + (", …" if len(runs) > 8 else "")


def check_branch(branch: int, paths: list[list[int]], *, field: str = "branch") -> None:
    """422 (ApiError, naming `field`) unless `branch` is a branch of this rollout (0..len-1)."""
    if not 0 <= branch < len(paths):
        raise ApiError(422, f"{field} must be 0..{len(paths) - 1}: this rollout has {len(paths)} branches"
                       if paths else f"{field}: this rollout has no messages", field=field)


def _resolve_focus(focus: str | None, paths: list[list[int]], branch: int, starts) -> tuple[int, int | None, int | None]:
    """A deep link's target → (branch, position on the branch, token index within that node).

    `m-N` / `node-N`: message N, on `branch` when it holds N, else on the first branch that does.
    `t-N`: token offset N of the branch's token sequence. A message no branch holds, or a token
    past the branch's last, raises ApiError 422 (field `focus`)."""
    if not focus:
        return branch, None, None
    kind, _, num = focus.partition("-")
    n = int(num)  # the route's pattern guarantees digits
    if kind in ("m", "node"):
        if paths and n in paths[branch]:
            return branch, paths[branch].index(n), None
        for b, p in enumerate(paths):
            if n in p:
                return b, p.index(n), None
        count = len({i for p in paths for i in p})
        raise ApiError(422, f"focus: no message {n}; this rollout has messages 0..{count - 1}" if count
                       else f"focus: no message {n}; this rollout has no messages", field="focus")
    total = int(starts[-1]) if len(starts) else 0
    if n >= total:
        raise ApiError(422, f"focus: no token {n}; branch {branch} has tokens 0..{total - 1}" if total
                       else f"focus: no token {n}; branch {branch} has no tokens", field="focus")
    pos = int(np.searchsorted(starts, n, side="right")) - 1
    return branch, pos, n - int(starts[pos])


def rollout_page(session: Session, run_id: str, rollout_id: str, *, web: WebSettings, branch: int = 0,
                 offset: int = 0, attempt: int | None = None, all_tokens: bool = False, limit: int | None = None,
                 focus: str | None = None, came_from: tuple[rollout_list.RolloutFilters, str | None] | None = None,
                 json: bool = False, with_graph: bool = False) -> RolloutPage | None:
    """The rollout page: header, findings, the drawn message graph, branches (each labelled with
    the sample it becomes and why it forked), and one page of messages of one branch.

    `attempt=None` shows the latest attempt. Every attempt of the rollout id is listed with its
    link (the one shown marked `current`); when there are several, the page's own links (branches,
    pages, nodes) name the attempt shown.

    `focus` (`m-N`, `node-N` or `t-N`, a deep link's fragment) opens the page of messages that
    holds message N or branch token N, with that token's window drawn; `range` then says which
    messages are shown ("messages 100–122 of 123") and `prev_url` loads the earlier ones.

    The JSON twin (`json`) carries the whole message graph on a branch's first page (offset 0)
    or when `with_graph`; other pages link it (`graph_url`) rather than repeat it.

    `came_from`: the filters and sort of the rollouts list the reader came from; `list_nav` then
    links the previous and next rollout of that list in its order (app.queries.rollout_list, the
    list page's own engine), and back to it. Links go to the JSON twins when
    `json`."""
    limit = limit or web.messages_per_page
    row = q_rollouts.get_rollout(session=session, run_id=run_id, rollout_id=rollout_id, attempt=attempt)
    if row is None:
        return None
    pk = row.pk
    tries = q_rollouts.rollout_attempts(session=session, run_id=run_id, rollout_id=rollout_id)
    attempts = [{"attempt": a.attempt, "step": a.step, "ending": a.ending, "ending_detail": a.ending_detail,
                 "reward": num(a.reward), "reward_status": a.reward_status,
                 "url": urls.rollout(run_id, rollout_id, json=json,
                                     attempt=a.attempt if pins_attempt(a.attempt, len(tries)) else None),
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

    headers: dict[int, dict] = {}
    gnodes = q_graph.graph_nodes(session=session, rollout_pk=pk, headers=headers)
    paths = branches(gnodes) if gnodes else []
    if paths or branch:
        check_branch(branch, paths)
    starts = np.concatenate([[0], np.cumsum([gnodes[i].n_tokens for i in paths[branch]])]) if paths else np.zeros(1)
    branch, focus_pos, focus_token = _resolve_focus(focus, paths, branch, starts)
    path = paths[branch] if paths else []
    if paths and focus_pos is not None:
        starts = np.concatenate([[0], np.cumsum([gnodes[i].n_tokens for i in path])])
        offset = focus_pos // limit * limit
    if offset and offset >= len(path):
        raise ApiError(422, f"offset must be 0..{max(0, len(path) - 1)}: branch {branch} has "
                       f"{len(path)} messages", field="offset")
    pinned = row.attempt if attempt is not None or len(attempts) > 1 else None
    link = NodeLinks(run_id, rollout_id, paths, branch, offset, limit, pinned, json)
    offsets: dict[int, dict[int, int]] = {}  # branch → node → offset of its first token

    def token_offset(idx: int) -> int | None:
        where = link._locate(idx)
        if where is None:
            return None
        b = where[0]
        if b not in offsets:
            acc, offsets[b] = 0, {}
            for i in paths[b]:
                offsets[b][i] = acc
                acc += gnodes[i].n_tokens
        return offsets[b][idx]

    for f in findings:
        f["anchor"] = _anchor(f, token_offset)
        f["url"] = link(f["node"])
        if f["url"] and f["anchor"]:  # to the token or call itself, not only its message
            f["url"] = f["url"].rsplit("#", 1)[0] + "#" + f["anchor"]
        calls = (f["detail"] or {}).get("calls") if f["kind"] == "duplicate_tool_call_id" else None
        if isinstance(calls, list):  # every call that shares the id, not only the first
            f["calls"] = [{"node": c[0], "position": c[1], "url": link(c[0])} for c in calls
                          if isinstance(c, list | tuple) and len(c) == 2]
    messages = [headers.get(i, {"role": "user"}) for i in range(len(gnodes))] if gnodes else []
    pairs = pair_tool_calls(path, messages)
    page = path[offset:offset + limit]
    on_page = set(page)  # links are built for what the page shows, not for every call of the branch
    calls_by_node: dict[int, list] = {}
    answer_of: dict[int, dict] = {}
    for c in pairs:
        if c.node in on_page:
            calls_by_node.setdefault(c.node, []).append(
                {"id": c.id, "name": c.name, "position": c.position, "result_node": c.result_node,
                 "result_url": link(c.result_node), "duration": _tool_duration(c, messages)})
        if c.result_node is not None and c.result_node in on_page:
            answer_of[c.result_node] = {"node": c.node, "id": c.id, "name": c.name, "url": link(c.node)}
    nodes = q_nodes.get_nodes(session=session, rollout_pk=pk, idxs=page)
    vocab = _load_vocab(session, run.tokenizer_sha256 if run else None)
    pieces = Pieces(vocab, byte_level=_declares_byte_level(run, envelope))
    pos_of = {idx: offset + k for k, idx in enumerate(page)}

    def window_url(idx: int, s: int, e: int) -> str:
        return urls.rollout(run_id, rollout_id, json=json, branch=branch, attempt=pinned, node=idx, **{"from": s, "to": e})

    # A prompt re-rendered (or compacted) into a new branch after a message, without it: that
    # message's reasoning was not in the context of the later turns.
    forks = fork_points(gnodes, paths)
    rerendered = [(f["first"], b) for b, f in enumerate(forks)
                  if f and f["reason"] in ("rerender", "compaction") and f["first"] is not None]
    member = [set(p) for p in paths] if rerendered else []
    node_views = []
    budget = [web.tokens_inline]
    for node in nodes:
        pos = pos_of[node.idx]
        v = _node_view(node, pieces, calls_by_node, answer_of, findings_by_node, run_id, pk, all_tokens, web,
                       t0=int(starts[pos]), include_token=focus_token if pos == focus_pos else None,
                       window_url=window_url, budget=budget)
        v["reasoning_dropped_in"] = [b for first, b in rerendered if first > node.idx and node.idx not in member[b]] \
            if v["reasoning"] else []
        raw_calls = (node.message or {}).get("tool_calls") or []  # the raw arguments, as sampled
        v["tool_calls"] = [dict(c) for c in v["tool_calls"]]
        for c in v["tool_calls"]:
            if c["position"] < len(raw_calls):
                c["arguments"] = raw_calls[c["position"]].get("arguments", "")
        node_views.append(v)
    model_calls = [dict(c, node_url=link(c.get("node"))) if isinstance(c, dict) else c
                   for c in envelope.get("calls", [])]
    summary = with_labels(session, run_id, [summary_fields(row, n_attempts=len(attempts), json=json)])[0]
    labels = q_annotations.labels_of(session=session, run_id=run_id, rollout_ids=[rollout_id]).get(rollout_id, [])
    notes = q_annotations.notes_of(session=session, run_id=run_id, rollout_id=rollout_id)
    nxt = offset + limit if offset + limit < len(path) else None
    sample_of = samples(gnodes, paths)
    branch_rows = [{"index": b, "nodes": len(p), "leaf": p[-1] if p else None, "url": link.page_url(b, 0),
                    "sample": sample_of[b], "fork": forks[b],
                    "n_tokens": sum(gnodes[i].n_tokens for i in p), "n_trained": sum(gnodes[i].n_trained for i in p)}
                   for b, p in enumerate(paths)]
    for b, row_ in enumerate(branch_rows):  # the branch it forked from, else its neighbour
        other = (forks[b] or {}).get("from_branch")
        other = other if other is not None else (b - 1 if b else (1 if len(paths) > 1 else None))
        row_["compare_with"] = other
        row_["compare_url"] = urls.rollout(run_id, rollout_id, json=json, branch=b, vs=other, attempt=pinned) \
            if other is not None else None

    def graph_href(b: int, idx: int) -> str:
        return urls.rollout(run_id, rollout_id, json=json, branch=b, attempt=pinned, focus=f"m-{idx}") + f"#m-{idx}"

    list_nav = None
    if came_from is not None:
        filters, sort = came_from
        before, after = rollout_list.neighbours(session=session, run_id=run_id, filters=filters, sort=sort, row=row)
        keep = {**filters.as_query(), **({"sort": sort} if sort else {})}
        listq = urlencode(keep)

        def there(n):
            return urls.rollout(n.run_id, n.rollout_id, json=json, attempt=n.attempt or None, list=listq) if n else None

        list_nav = {"prev_url": there(before), "next_url": there(after), "prev": before.rollout_id if before else None,
                    "next": after.rollout_id if after else None,
                    "list_url": urls.rollouts(run_id, json=json, **keep)}

    error_policy = "errors_dropped"  # the group default (ingest.advantages): an errored rollout has no gradient
    no_gradient = summary["ending"] == "error" and error_policy == "errors_dropped"
    task = envelope.get("task")
    return RolloutPage.model_validate({
        "run": {"id": run_id, "name": run.name if run else None, "url": urls.run(run_id, json=json),
                "tokenizer": bool(vocab)},
        "rollout": summary,
        "list_nav": list_nav,
        "attempts": attempts,
        "ending": envelope.get("ending", {"type": summary["ending"]}),
        "rewards": envelope.get("rewards", {}),
        "reward": num(summary["reward"]),
        "reward_status": summary["reward_status"],
        "task": task,
        "task_answer": _task_answer(task),
        "calls": model_calls,
        "timeline": _timeline(model_calls, pairs, messages, link),
        "errors": envelope.get("errors", []),
        "timing": envelope.get("timing", {}),
        "metrics": envelope.get("metrics", {}),
        "extra": envelope.get("extra", {}),
        "findings": findings,
        "labels": [{"label": r.label, "author": r.author, "created_at": iso(r.created_at)} for r in labels],
        "notes": [note_view(n) for n in notes],
        "checks_skipped": skipped,
        "n_trained_environment": sum((f["detail"] or {}).get("count", 0) for f in findings
                                     if f["kind"] == "mask_on_unsampled"),
        # Tokens were recorded but none carries loss: a filter (Tunix overlong_filter) zeroed the
        # mask. Shown, but it trains on nothing.
        "trains_on_nothing": summary["n_tokens"] > 0 and summary["n_trained_tokens"] == 0 and summary["n_turns"] > 0,
        # mask-1 tokens of an errored rollout carry no gradient under the default policy
        "no_gradient": no_gradient,
        # The token legend explains what is drawn: only when there are tokens, and the tokenizer
        # note only when some token on this page is drawn as a bare id.
        "has_tokens": summary["n_tokens"] > 0,
        "bare_ids": any(t["piece"] is None for m in node_views for t in m["tokens"]),
        "token_states": [{"key": k, "label": lab, "text": txt} for k, lab, txt in tokenview.STATES],
        "overlays": tokenview.overlay_legends(),
        "has_trainer_logprobs": any(t["trainer_logprob"] is not None for m in node_views for t in m["tokens"]),
        "delta_outliers": tokenview.outliers([t for m in node_views for t in m["tokens"]]),
        "branches": branch_rows,
        "branch": branch,
        "branch_prev_url": link.page_url(branch - 1, 0) if branch > 0 else None,
        "branch_next_url": link.page_url(branch + 1, 0) if branch + 1 < len(paths) else None,
        "graph": graph_svg.graph_data(gnodes, paths) if json and (offset == 0 or with_graph) else None,
        "graph_url": link.page_url(branch, offset, graph=1) if json and not (offset == 0 or with_graph) else None,
        "svg": graph_svg.layout(gnodes, paths, branch, graph_href),
        "offset": offset,
        "limit": limit,
        "focus": focus,
        "range": {"first": offset, "last": offset + len(node_views) - 1, "total": len(path)} if node_views else None,
        "messages": node_views,
        "messages_total": len(path),
        "prev_offset": max(0, offset - limit) if offset > 0 else None,
        "prev_url": link.page_url(branch, max(0, offset - limit), limit=min(limit, offset) if offset < limit else None)
                    if offset > 0 else None,
        "next_offset": nxt,
        "next_url": link.page_url(branch, nxt) if nxt is not None else None,
        "all_tokens_url": link.page_url(branch, offset, tokens="all"),
    })


def _declares_byte_level(run, envelope: dict) -> bool:
    """The run or the rollout says its token pieces are byte-level BPE spelling
    (`extra.byte_level_bpe: true` on the run or the rollout)."""
    return bool(((run.extra or {}) if run else {}).get("byte_level_bpe") or (envelope.get("extra") or {}).get("byte_level_bpe"))


def _task_answer(task) -> object | None:
    """The task's reference answer where the source has one (`task.data.answer`, or
    `reference_answer` / `ground_truth` / `target`)."""
    data = (task or {}).get("data") if isinstance(task, dict) else None
    if isinstance(data, dict):
        for k in ("answer", "reference_answer", "ground_truth", "target", "solution"):
            if data.get(k) is not None:
                return data[k]
    return None


TIMELINE_ROWS = 200  # rows drawn (and in the twin); a 5,000-turn rollout says how many more


def _tool_duration(call, messages) -> float | None:
    """Seconds from the message that made a tool call to the message with its result, both as
    the reader stamped them (`node.timestamp`; OpenHands: the action and observation events,
    verifiers and ATIF: the messages' own times). None when either has no timestamp or the
    result is stamped before the call."""
    if call.result_node is None:
        return None
    t0, t1 = messages[call.node].get("timestamp"), messages[call.result_node].get("timestamp")
    if t0 is None or t1 is None or t1 < t0:
        return None
    return float(t1) - float(t0)


def _timeline(calls: list, pairs: list, messages, link) -> dict | None:
    """Model calls (`calls[].time`) and the tool calls of the branch shown (`_tool_duration`) on
    one time axis: per row its kind (`model` | `tool`), start and duration in seconds from the
    first recorded start, and its place as percentages of the whole for drawing; in start order,
    at most TIMELINE_ROWS (`rows_total` counts all). None when nothing has timing."""
    spans = []
    for k, c in enumerate(calls):
        t = (c or {}).get("time") or {}
        if isinstance(t, dict) and isinstance(t.get("start"), int | float) and isinstance(t.get("end"), int | float):
            spans.append((float(t["start"]), float(t["end"]), {
                "kind": "model", "call": k, "node": c.get("node"), "url": c.get("node_url"), "model": c.get("model"),
                "name": None, "result_node": None, "error": bool(c.get("error"))}))
    for c in pairs:
        d = _tool_duration(c, messages)
        if d is not None:
            start = float(messages[c.node]["timestamp"])
            spans.append((start, start + d, {
                "kind": "tool", "call": c.position, "node": c.node, "url": None, "model": None,
                "name": c.name, "result_node": c.result_node, "error": False}))
    if not spans:
        return None
    spans.sort(key=lambda x: x[0])
    t0 = spans[0][0]
    t1 = max(e for _, e, _ in spans)
    total = max(t1 - t0, 1e-9)
    return {"seconds": t1 - t0, "n_model": sum(r["kind"] == "model" for _, _, r in spans),
            "n_tool": sum(r["kind"] == "tool" for _, _, r in spans), "rows_total": len(spans), "rows": [
                {**r, "url": link(r["node"]) if r["kind"] == "tool" else r["url"], "start": s - t0, "duration": e - s,
                 "left": (s - t0) / total * 100, "width": max((e - s) / total * 100, 0.5)}
                for s, e, r in spans[:TIMELINE_ROWS]]}

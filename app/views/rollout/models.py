"""The rollout page's models: its JSON twin's shape (RolloutPage) and its parts. Per-token data
are TypedDicts: a page may hold tens of thousands of tokens, validated in bulk."""
from __future__ import annotations

from typing import Any

from typing_extensions import NotRequired, TypedDict

from app.views.common import LabelView, NoteView, PageModel, RolloutSummary
from app.views.rollout.findings import CheckSkipped, FindingView
from app.views.rollout.rewards import ComponentView


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
    oov: NotRequired[int]  # the id is at or beyond the vocabulary's size (this many ids): "not in the tokenizer"


class TokenView(TypedDict):
    """One token chip (app/views/tokens.py token_views, app/views/rollout/windows.py)."""

    i: int  # position in its message
    t: int  # position in the branch's token sequence (the #t-N of a deep link)
    id: int
    state: str  # trained | context | filtered | fault | special | special_trained | placeholder
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


class ResultLink(PageModel):
    """A message of the branch: its node and link (None when not on the branch)."""

    node: int
    url: str | None


class ToolCallView(PageModel):
    """One tool call with its result; `duration` (seconds) where both messages carry a timestamp
    (timeline.tool_duration)."""

    id: str | None
    name: str | None
    position: int
    result_node: int | None
    result_url: str | None
    duration: float | None = None
    arguments: str | None = None
    # further results of the call after `result_node`, which they supersede (tool_answered_twice)
    later_results: list[ResultLink] = []


class Answers(PageModel):
    """The call a tool message answers; for a call answered twice (`tool_answered_twice`), the
    later result that supersedes this one (`superseded_by`) or the earlier one it supersedes."""

    node: int
    id: str | None
    name: str | None
    url: str | None
    superseded_by: ResultLink | None = None
    supersedes: ResultLink | None = None


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
    # image/audio/video/file parts: type, media_type, bytes, sha256, url, inline, label, link (never the bytes)
    media: list[dict[str, Any]] = []
    reasoning: str | None
    reasoning_dropped_in: list[int] = []  # later branches whose re-rendered prompt leaves this reasoning out
    tool_calls: list[ToolCallView]
    answers: Answers | None
    tool_error: str | None = None  # a failed tool result: the error's message, else the signal's name
    # the failed result was superseded by a later result of the same call: not a failure of the rollout
    tool_error_superseded: bool = False
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
    reward_components: list[ComponentView]  # the reward's breakdown (app/views/rollout/rewards.py)
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
    n_trained_padding: int  # trained tokens of sampled turns the policy did not generate (mask_on_padding)
    trains_on_nothing: bool
    no_gradient: bool  # an errored (or trainer-filtered) rollout: its mask-1 tokens get no gradient (default policy)
    # why it carries no gradient by itself (ingest.stats.own_no_gradient), and the tokens that do
    # carry one: 0 then, else the mask-1 count (the rollouts list's "trained" column)
    no_gradient_reason: str | None = None
    n_gradient_tokens: int = 0
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
    # JSON twin, on the first page of a branch (offset 0) of a graph of at most 1,000 nodes, or
    # with `graph=1`: nodes with parent, role, sampled, tokens, kind, branches. Other pages carry
    # `graph_url` instead (a 5,000-turn rollout's 10,002 nodes were 1.2 MB of each page).
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
    # the twin of a page with more tokens than app.views.rollout.TWIN_TOKEN_BUDGET: its per-token
    # arrays are left out; `tokens`, `budget`, `tokens_url` (the API's arrays of the branch), `note`
    tokens_omitted: dict[str, Any] | None = None


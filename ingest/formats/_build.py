"""`RolloutBuilder`: the message graph of one rollout under construction, shared by every reader
(generalised from the Tunix reader's chain and the chat reader's token turns).

It owns what readers used to do each in their own way: appending nodes (a linear chain by
default, any parent on request), one `Call` per model request, per-token arrays fitted to the
tokens (`ingest.align`), token turns given as full prompts (a prompt that extends the previous
prompt + completion holds only its delta; one that does not starts a new branch and is recorded
as drift, never merged), and the ending evidence every reader fills the same way.

Stable API (other readers build on it; change only by adding):

- `b = RolloutBuilder(policy_version=None, auto_calls=False)`
- `b.add(message, tokens=None, *, sampled=False, mask=None, logprobs=None, parent=LAST, ...) -> int`
- `b.call(node, finish_reason_raw=None, usage=None, **fields) -> Call`
- `b.prompt(messages, tokens, extra=None)`, `b.env(messages, tokens, mask, logprobs=None)`
- `b.token_turn(TokenTurn, turn_index, content=None) -> dict | None` (drift, if any)
- `b.request(message, prompt_ids, completion_ids, logprobs, ...) -> int`: a sampled message
  whose request's full prompt ids are known, the prompt turned into per-node deltas
- `b.finish(rollout, token_counts_known=True) -> Rollout`
- `set_tokens(node, ids, sampled=..., logprobs=..., hexes=...)`, `first_divergence(expected, found)`,
  `text_from_pieces(node)`
- `mask_runs(mask)`, `align_segments(segments, runs)`: split one flat token sequence with a loss
  mask (Tunix Token mode, Atropos, verl) into per-message spans
- `mark_restated_branches(nodes)`: in a graph given as nodes with delta tokens (verifiers), a
  request whose prompt restates the previous history on a new branch gets `extra.token_drift`
- ids that are not tokens (-100 ignore-index, -200 image placeholders) stay as written, their
  positions and values listed in `node.extra.placeholder_token_ids` (`Node.mark_placeholders`,
  on every path); the `placeholder_token_id` check reports them
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ingest import endings
from ingest.align import fill_node, fit
from ingest.formats._openai import call_for
from ingest.schema import Call, Message, Node, PolicySpan, Reward, Rollout, Usage

LAST = object()  # `parent=LAST`: the node added just before (None for the first node)


def set_tokens(node: Node, ids: Sequence[int], *, sampled: bool, logprobs: Sequence[Any] | None = None,
               hexes: Sequence[str | None] | None = None, mask: Sequence[Any] | None = None) -> Node:
    """Put `ids` on `node` with a mask (given, else 1 when `sampled`, 0 otherwise), logprobs and
    source bytes (`extra.token_bytes`, hex per token), each fitted to the tokens."""
    node.token_ids = list(ids)
    node.mark_placeholders()
    fill_node(node, mask=mask if mask is not None else [sampled] * len(node.token_ids), logprobs=logprobs)
    if hexes is not None:
        node.extra["token_bytes"] = fit(node, "token_bytes", hexes)
    return node


def text_from_pieces(node: Node) -> None:
    """A token-only node has no message text; when the source gave every token's piece, the
    text is those bytes decoded (U+FFFD where they are not valid UTF-8), marked as derived."""
    hexes = node.extra.get("token_bytes")
    if node.message.content is not None or not hexes or "token_bytes" in node.extra.get("source_lengths", {}):
        return
    if any(h is None for h in hexes):
        return
    node.message.content = bytes.fromhex("".join(hexes)).decode("utf-8", "replace")
    node.extra["content_from"] = "token_bytes"


def first_divergence(expected: Sequence[int], found: Sequence[int]) -> tuple[int, int, int | None] | None:
    """(index, expected id, found id or None when `found` is shorter) where `found` stops
    starting with `expected`; None when it does start with it."""
    for i, e in enumerate(expected):
        if i >= len(found):
            return i, e, None
        if found[i] != e:
            return i, e, found[i]
    return None


def _node_path(nodes: Sequence[Node], i: int) -> list[int]:
    out, cur, seen = [], i, set()
    while cur is not None and cur not in seen and 0 <= cur < len(nodes):
        seen.add(cur)
        out.append(cur)
        cur = nodes[cur].parent
    return out[::-1]


def _same_turn(a: Message, b: Message) -> bool:
    """The same conversational message, however it was rendered (reasoning aside)."""
    return a.role == b.role and a.text() == b.text() and \
        [tc.id for tc in a.tool_calls or []] == [tc.id for tc in b.tool_calls or []]


def mark_restated_branches(nodes: Sequence[Node]) -> bool:
    """Mark re-rendered histories in a graph stored as delta tokens per node (verifiers v1: a
    request's prompt reuses the stored nodes of its messages while they are the same message, and
    a message that differs, e.g. a history turn restated without its reasoning, starts a branch).
    When a request's branch leaves the previous request's path at a node that restates the
    message at that depth of the previous path, and the tokens differ, the first node of the
    branch gets `extra.token_drift = {request, index, expected, found}` (as `request` writes it),
    so the checks compare both prompts. Branches that do not restate (compaction, subagents) stay
    unmarked. Returns whether any was marked."""
    sampled = [i for i, n in enumerate(nodes) if n.sampled and n.token_ids]
    marked = False
    for t, (a, b) in enumerate(zip(sampled, sampled[1:]), start=1):
        pa, pb = _node_path(nodes, a), _node_path(nodes, b)
        if a in pb:
            continue
        common = next((k for k, (x, y) in enumerate(zip(pa, pb)) if x != y), min(len(pa), len(pb)))
        if common >= len(pb) - 1 or common >= len(pa):
            continue
        fork = pb[common]
        if nodes[fork].extra.get("token_drift") or not _same_turn(nodes[pa[common]].message, nodes[fork].message):
            continue
        expected = [x for j in pa for x in nodes[j].token_ids]
        div = first_divergence(expected, [x for j in pb[:-1] for x in nodes[j].token_ids])
        if div is None:
            continue
        nodes[fork].extra["token_drift"] = {"request": t, "index": div[0], "expected": div[1], "found": div[2]}
        marked = True
    return marked


def mask_runs(mask: Sequence[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of equal mask values as (value≠0, start, end)."""
    out: list[tuple[int, int, int]] = []
    for i, x in enumerate(mask):
        v = 1 if x else 0
        if out and out[-1][0] == v:
            out[-1] = (v, out[-1][1], i + 1)
        else:
            out.append((v, i, i + 1))
    return out


def align_segments(segments: list[tuple[str, list[int]]],
                   runs: list[tuple[int, int, int]]) -> list[tuple[int, int]] | None:
    """Token span (start, end) per segment, from mask runs: a run of 1s is an assistant message,
    the run of 0s after it the observation that follows. A 0-run with no observation to take it
    is the assistant's parser-appended end tokens. Segments after the last run may stay without
    tokens only for the final turn (a terminal observation is not tokenized; an ENV_TIMEOUT turn
    has no tokens). Anything else: None (do not split)."""
    spans: list[tuple[int, int] | None] = [None] * len(segments)
    si = 0
    for value, start, end in runs:
        kind = segments[si][0] if si < len(segments) else None
        if (kind == "a" and value == 1) or (kind == "e" and value == 0):
            spans[si] = (start, end)
            si += 1
        elif value == 0 and si > 0 and segments[si - 1][0] == "a" and spans[si - 1] is not None:
            prev = spans[si - 1]
            spans[si - 1] = (prev[0], end)  # type: ignore[index]
        else:
            return None
    if len(segments) - si > 1:
        return None
    return [s if s is not None else (0, 0) for s in spans]


@dataclass
class TokenTurn:
    """One model request given as token ids: its full prompt, what it sampled, and what came
    with it. `prompt_hex`/`completion_hex`: source bytes per token (hex). `rest`: the turn's
    other fields, kept on the completion node's `extra.turn_fields`."""

    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float | None] | None = None
    prompt_hex: list[str | None] | None = None
    completion_hex: list[str | None] | None = None
    finish_reason: str | None = None
    rest: dict = field(default_factory=dict)
    usage: Usage | None = None  # the usage the source reports for this request (OpenAI `usage`)
    sampling: dict | None = None  # the request's caps (`max_tokens`), as the source recorded them


def turn_drift(prev: TokenTurn, turn: TokenTurn, t: int) -> dict | None:
    """`{turn, index, expected, found}` where turn t's prompt does not start with turn t-1's
    prompt + completion (re-tokenization drift); None when it does or either prompt is missing."""
    if prev.prompt_ids is None or turn.prompt_ids is None:
        return None
    div = first_divergence(prev.prompt_ids + (prev.completion_ids or []), turn.prompt_ids)
    if div is None:
        return None
    i, e, f = div
    return {"turn": t, "index": i, "expected": e, "found": f}


def apply_completion(node: Node, turn: TokenTurn) -> None:
    """Put one turn's completion tokens on `node` (sampled: mask 1, logprobs fitted)."""
    if turn.completion_ids is not None:
        set_tokens(node, turn.completion_ids, sampled=True, logprobs=turn.logprobs, hexes=turn.completion_hex)
    elif turn.logprobs is not None:
        node.extra["logprobs_without_tokens"] = turn.logprobs
    if turn.rest:
        node.extra["turn_fields"] = turn.rest


def turn_opening(prompt: Sequence[int]) -> int | None:
    """The id that opens every rendered turn, learnt from a first prompt without a tokenizer: its
    first id when that id recurs (ChatML `<|im_start|>`), else its second when that one recurs (a
    BOS first, then Llama 3's `<|start_header_id|>`); None when neither recurs."""
    for k in (0, 1):
        if len(prompt) > k and list(prompt).count(prompt[k]) > 1:
            return prompt[k]
    return None


def split_turns(ids: Sequence[int], k: int, opening: int | None, closing: int | None) -> list[list[int]] | None:
    """The prompt delta `ids` between two requests, shared among the `k` environment messages it
    renders, when it holds exactly one closed turn per message: `k` closing ids (the end-of-turn
    id that ended the previous completion) and `k` opening ids, or `k + 1` with the generation
    prompt's. Message i's share runs from its turn's opening id to the next message's (the first
    share also keeps the separator before its turn, the last the generation prompt). None when
    the turns do not match the messages one to one (results grouped into one turn, as ChatML
    templates render parallel tool results): the caller keeps the whole delta on the last
    message. Issue 20: `tool_results_split` needs each result's own tokens to see the turns."""
    if opening is None or closing is None or opening == closing or k < 2:
        return None
    at = [p for p, t in enumerate(ids) if t == opening]
    if sum(1 for t in ids if t == closing) != k or len(at) not in (k, k + 1):
        return None
    cuts = [0, *at[1:k], len(ids)]
    return [list(ids[a:b]) for a, b in zip(cuts, cuts[1:])]


@dataclass
class RolloutBuilder:
    """Nodes and calls of one rollout. `auto_calls`: every sampled node added gets a Call (with
    its sampled-token count as usage), for sources where each assistant message is one request.
    `policy_version`: stamped on sampled nodes and their calls, and on `rollout.policy`."""

    policy_version: int | None = None
    auto_calls: bool = False
    nodes: list[Node] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # rollout-level notes (token_drift, ...) merged at finish
    _last: int | None = None
    _prev_turn: TokenTurn | None = None
    _prev_request: tuple[list[int], list[int]] | None = None  # (prompt, completion) of the last tokenized request
    _requests: int = 0
    _gap: bool = False
    _opening: int | None = None  # the turn-opening token id, learnt from the first prompt (`turn_opening`)

    @property
    def last(self) -> int | None:
        """Index of the node the next `add(parent=LAST)` hangs under."""
        return self._last

    def add(self, message: Message, tokens: Sequence[int] | None = None, *, sampled: bool = False,
            mask: Sequence[Any] | None = None, logprobs: Sequence[Any] | None = None,
            parent: Any = LAST, timestamp: float | None = None, reward: float | None = None,
            mc_return: float | None = None, hexes: Sequence[str | None] | None = None,
            extra: dict | None = None) -> int:
        """Append a node (under the last node unless `parent` says otherwise); returns its index.
        Per-token arrays are fitted to `tokens` (a mismatch is recorded, never repaired)."""
        node = Node(parent=self._last if parent is LAST else parent, message=message, sampled=sampled,
                    timestamp=timestamp, reward=reward, mc_return=mc_return, extra=dict(extra or {}))
        if tokens is not None:
            node.token_ids = list(tokens)
            node.mark_placeholders()
        fill_node(node, mask=mask, logprobs=logprobs)
        if hexes is not None:
            node.extra["token_bytes"] = fit(node, "token_bytes", hexes)
        idx = len(self.nodes)
        self.nodes.append(node)
        self._last = idx
        if sampled:
            node.policy_version = self.policy_version
            if self.auto_calls:
                out = sum(1 for m in node.mask if m) if node.token_ids and node.mask else None
                self.calls.append(Call(node=idx, policy_version=self.policy_version,
                                       usage=Usage(output_tokens=out) if out is not None else None))
        return idx

    def call(self, node: int | None, finish_reason_raw: str | None = None, usage: Usage | None = None,
             **fields: Any) -> Call:
        """Record the model request that produced `node` (finish reason normalized, raw kept)."""
        fields.setdefault("policy_version", self.policy_version)
        c = call_for(node, finish_reason_raw, usage, **fields)
        self.calls.append(c)
        return c

    def prompt(self, messages: list[Message], tokens: Sequence[int] | None, extra: dict | None = None) -> None:
        """The prompt messages as the root chain; `tokens` (mask 0) on the last of them. Prompt
        tokens without prompt messages get a placeholder user node."""
        if tokens is not None and not messages:
            messages = [Message(role="user", content=None, extra={"synthetic": "prompt tokens without messages"})]
        for i, msg in enumerate(messages):
            if i == len(messages) - 1 and tokens is not None:
                self.add(msg, tokens, mask=[0] * len(tokens), extra=extra)
            else:
                self.add(msg)

    def env(self, messages: list[Message], tokens: Sequence[int] | None, mask: Sequence[Any] | None,
            logprobs: Sequence[Any] | None = None) -> None:
        """One observation: a node per message, its tokens on the last one."""
        if tokens is not None and not messages:
            messages = [Message(role="user", content=None, extra={"synthetic": "env tokens without a message"})]
        for i, msg in enumerate(messages):
            last = i == len(messages) - 1
            self.add(msg, tokens if last else None, mask=mask if last else None, logprobs=logprobs if last else None)

    def token_turn(self, turn: TokenTurn, t: int, *, content: str | None = None,
                   turn_extra: bool = True) -> dict | None:
        """One request given as full prompt ids + completion ids: a prompt node (mask 0) holding
        only the delta when the prompt extends the previous prompt + completion, else (drift) a
        new root holding the full prompt, with `extra.token_drift`; then the completion node
        (sampled). Returns the drift, if any. A Call is recorded when the prompt length or the
        finish reason is known."""
        prev = self._prev_turn
        parent = self._last
        prompt_len = None
        drift = None
        if turn.prompt_ids is not None:
            prompt_len = len(turn.prompt_ids)
            ids, hexes = turn.prompt_ids, turn.prompt_hex
            if prev is not None and prev.prompt_ids is not None:
                drift = turn_drift(prev, turn, t)
                if drift is None:
                    cut = len(prev.prompt_ids) + len(prev.completion_ids or [])
                    ids = turn.prompt_ids[cut:]
                    hexes = turn.prompt_hex[cut:] if turn.prompt_hex is not None else None
                else:
                    parent = None  # re-tokenization drift: a new branch holding the full prompt
            if ids or drift or parent is None:
                extra: dict[str, Any] = {"segment": "prompt", "turn": t}
                if drift:
                    extra["token_drift"] = drift
                    self.extra["token_drift"] = True
                idx = self.add(Message(role="user"), parent=parent, extra=extra)
                node = self.nodes[idx]
                set_tokens(node, ids, sampled=False, hexes=hexes)
                text_from_pieces(node)
                parent = idx
        elif prev is not None:
            self.extra.setdefault("prompt_ids_missing", []).append(t)
        if turn.completion_ids is not None or turn.logprobs is not None:
            idx = self.add(Message(role="assistant", content=content), parent=parent,
                           extra={"turn": t} if turn_extra else {})
            node = self.nodes[idx]
            node.sampled = True
            node.policy_version = self.policy_version
            apply_completion(node, turn)
            text_from_pieces(node)
            parent = idx
            if prompt_len is not None or turn.finish_reason is not None or turn.usage is not None:
                self.call(idx, turn.finish_reason, turn.usage or Usage(input_tokens=prompt_len,
                                                                       output_tokens=len(turn.completion_ids)
                                                                       if turn.completion_ids is not None else None),
                          sampling=turn.sampling)
        self._last = parent
        self._prev_turn = turn
        return drift

    def request(self, message: Message, prompt_ids: Sequence[int] | None, completion_ids: Sequence[int] | None,
                logprobs: Sequence[Any] | None = None, *, mask: Sequence[Any] | None = None,
                timestamp: float | None = None, extra: dict | None = None) -> int:
        """Add the sampled `message` of one model request, under the last node, turning the
        request's full prompt ids (as ATIF `prompt_token_ids` and NeMo Gym write them) into
        per-node deltas, so a branch's concatenated tokens are exactly what the model saw:

        - first tokenized request: the whole prompt goes on the last node (the last message the
          model saw) when it carries no tokens yet, else on a new prompt node;
        - a prompt that starts with the previous prompt + completion: only the rest (the
          observations and template tokens in between) goes on the last node, or a new prompt
          node when the last node already has tokens;
        - a prompt that does not (re-tokenization drift), or that follows a request without
          tokens: a new root holding the full prompt, `extra.token_drift` = `{request, index,
          expected, found}` (or `{request, reason}`), never merged.

        The completion goes on the new node with mask 1 (or `mask`) and its logprobs. Returns the
        node index. `prompt_ids`/`completion_ids` of None (or both empty) mean "not recorded"."""
        t = self._requests
        self._requests += 1
        prompt = list(prompt_ids) if prompt_ids else None
        completion = list(completion_ids) if completion_ids is not None else None
        if prompt is None and not completion:
            if self._prev_request is not None:
                self._prev_request = None
                self._gap = True
            return self.add(message, None, sampled=True, timestamp=timestamp, extra=extra)
        parent: Any = LAST
        if prompt is not None:
            prev = self._prev_request
            gap = self._gap
            drift = None
            if prev is not None:
                div = first_divergence(prev[0] + prev[1], prompt)
                if div is None:
                    self._place_prompt(prompt[len(prev[0]) + len(prev[1]):], t)
                else:
                    drift = {"request": t, "index": div[0], "expected": div[1], "found": div[2]}
            elif gap:
                drift = {"request": t, "reason": "the previous request recorded no tokens"}
            else:
                self._place_prompt(prompt, t)
            if drift is not None:
                self.extra["token_drift"] = True
                parent = self.add(Message(role="user"), prompt, mask=[0] * len(prompt), parent=None,
                                  extra={"segment": "prompt", "request": t, "token_drift": drift})
        idx = self.add(message, completion or [], sampled=True, parent=parent, timestamp=timestamp, extra=extra,
                       mask=mask if mask is not None else [1] * len(completion or []), logprobs=logprobs)
        self._prev_request = (prompt or [], completion or []) if prompt is not None else None
        self._gap = prompt is None
        return idx

    def _place_prompt(self, ids: list[int], t: int) -> None:
        if not ids:
            return
        if self._opening is None and self._prev_request is None:
            self._opening = turn_opening(ids)
        last = self.nodes[self._last] if self._last is not None else None
        if last is not None and not last.token_ids and not last.sampled:
            run = self._environment_run()
            prev = self._prev_request[1] if self._prev_request else []
            parts = split_turns(ids, len(run), self._opening, prev[-1] if prev else None) if len(run) > 1 else None
            for j, part in zip(run, parts or [[]] * (len(run) - 1) + [ids]):
                if part:
                    set_tokens(self.nodes[j], part, sampled=False)
        else:
            self.add(Message(role="user"), ids, mask=[0] * len(ids), extra={"segment": "prompt", "request": t})

    def _environment_run(self) -> list[int]:
        """The tokenless, unsampled nodes on the branch since the last sampled node, oldest first
        (the environment messages one request's prompt delta renders)."""
        run, j = [], self._last
        while j is not None and not self.nodes[j].sampled and not self.nodes[j].token_ids:
            run.append(j)
            j = self.nodes[j].parent
        return run[::-1] if j is not None and self.nodes[j].sampled else run[:1]

    def assistants(self) -> list[Node]:
        return [n for n in self.nodes if n.message.role == "assistant"]

    def finish(self, rollout: Rollout, *, token_counts_known: bool = True) -> Rollout:
        """Attach nodes and calls to `rollout` and fill its ending evidence the one way every
        reader does: last finish reason (of the last call without an error), turns (assistant
        messages), and output tokens (sampled tokens with mask 1) when every sampled node
        carries its tokens and `token_counts_known`."""
        rollout.nodes, rollout.calls = self.nodes, self.calls
        if self.extra:
            rollout.extra.update(self.extra)
        if self.policy_version is not None and rollout.policy is None:
            rollout.policy = PolicySpan(start=self.policy_version, end=self.policy_version)
        ev = rollout.ending.evidence
        if ev.turns is None:
            ev.turns = len(self.assistants())
        sampled = [n for n in self.nodes if n.sampled]
        if ev.output_tokens is None and token_counts_known and sampled and all(n.token_ids and n.mask for n in sampled):
            ev.output_tokens = endings.generated_tokens(rollout)
        if ev.last_output_tokens is None:
            lc = next((c for c in reversed(self.calls) if c.error is None and c.node is not None), None)
            if lc is not None and lc.usage is not None and lc.usage.output_tokens is not None:
                ev.last_output_tokens = lc.usage.output_tokens
        if ev.last_finish_reason is None:
            last = next((c for c in reversed(self.calls) if c.error is None and c.finish_reason_raw), None)
            if last is not None:
                ev.last_finish_reason = last.finish_reason_raw
        endings.settle(rollout)
        return rollout


def breakdown_components(values: Any) -> dict[str, Reward]:
    """A record's own reward breakdown ({name: number}: the chat format's `reward_components`,
    Trackio metadata `rewards` / `reward_components` / `reward_breakdown`) as reward components:
    weight 1 (the breakdown's values as given; the source records no weights) and
    `extra.metric: true`, so they never replace or change the record's own `reward`
    (`Rollout.total_reward`). Finite numbers only (NaN, ±inf and null stay in `metrics`)."""
    if not isinstance(values, dict):
        return {}
    return {str(k): Reward(score=float(v), weight=1.0, extra={"metric": True}) for k, v in values.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and float(v) - float(v) == 0}

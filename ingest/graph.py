"""The message graph: branches (root-to-leaf paths) and tool-call pairing.

Pairing never uses the tool-call id as a unique key: ids are reused (tau-bench reuses one id for
two sequential calls; parallel calls can share an id). The rule (docs/formats.md, "Pairing tool
results with their calls"), for each tool message along a branch, in order:

1. it names an id that an unanswered call carries → the nearest preceding such call (among
   parallel calls of one message that share the id, the first): results that arrive in another
   order than their calls are paired by id;
2. otherwise it names a tool (`name`) → the oldest unanswered call of that tool;
3. otherwise → the oldest unanswered call.

Rules 2 and 3 decide only when one unanswered call is a candidate. With several candidates the
result is paired with the oldest and the pairing is marked `ambiguous` (the candidates are
listed): the data cannot decide, so the guess is never silent. A later result that takes one of
those candidates is marked too, since its pairing rests on the same guess. A result that names an id no
unanswered call carries, or that comes when no call is waiting, is unpaired, except:

4. it names the id of a call already answered on this branch (and no unanswered call carries that
   id) → a second result of that call (the nearest preceding one with the id): the harness answered
   one call twice, e.g. a recovery error and then the re-executed output (OpenHands
   software-agent-sdk#1782). Both results are kept (`CallRef.later_results`); the first is
   superseded, and the `tool_answered_twice` check reports it (never `unpaired_tool_result`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


class _NodeLike(Protocol):
    parent: int | None


def branches(nodes: Sequence[_NodeLike]) -> list[list[int]]:
    """Every root-to-leaf path as a list of node indices, ordered by leaf index. O(n). A chain
    (each node the child of the one before it, the usual agent trace) is told in C: its one
    branch is every node in order."""
    parents = [n.parent for n in nodes]
    if parents and parents[0] is None and parents[1:] == list(range(len(parents) - 1)):
        return [list(range(len(parents)))]
    has_child = [False] * len(nodes)
    for p in parents:
        if p is not None and 0 <= p < len(nodes):
            has_child[p] = True
    paths = []
    for leaf, child in enumerate(has_child):
        if child:
            continue
        path, cur, seen = [], leaf, set()
        while cur is not None and cur not in seen and 0 <= cur < len(nodes):
            seen.add(cur)
            path.append(cur)
            cur = nodes[cur].parent
        paths.append(path[::-1])
    return paths


@dataclass
class CallRef:
    """One tool call: node index, position within the node's `tool_calls`, id, name.

    `ambiguous`: the (node, position) of every call that could have taken this call's result
    when the data could not decide (rules 2-3 above); empty when the pairing is certain.
    `ends_rollout`: the call ended the rollout (a submit or finish tool), so no result follows.
    `later_results`: the nodes of further results of this call after `result_node` (rule 4), in
    order; `result_node` is then superseded by them."""

    node: int
    position: int
    id: str | None
    name: str
    result_node: int | None = None
    ambiguous: list[tuple[int, int]] = field(default_factory=list)
    ends_rollout: bool = False
    later_results: list[int] = field(default_factory=list)  # rule 4: further results naming this call's id


@dataclass
class Pairing:
    """Calls in order (with their results) and the tool messages no call took."""

    calls: list[CallRef]
    unpaired_results: list[int]


def pairing_fields(m) -> dict:
    """The fields of a message (`ingest.schema.Message`) that pairing reads (`pair`), without its
    content: a full `model_dump` of every message cost about 10 µs each. A message that is neither
    an assistant's nor a tool's gets one shared dict with role None (pairing passes it by)."""
    d = m.__dict__  # a model's field values, read from its dict: once per node of every rollout
    role = d["role"]
    if role != "assistant" and role != "tool":
        return _BYSTANDER  # pairing reads nothing else of a system or user message
    calls = d["tool_calls"]
    return {"role": role, "tool_call_id": d["tool_call_id"], "name": d["name"],
            "tool_calls": [{"id": tc.id, "name": tc.name, "extra": tc.extra} for tc in calls] if calls else []}


_BYSTANDER: dict = {"role": None}  # shared, never written: `pair` only reads a message dict


def on_restated_branch(nodes: Sequence[GraphNode], i: int) -> bool:
    """Whether node `i`, or one before it on its branch, starts a branch that restates the history
    (`extra.token_drift`, set by the reader: verifiers' graph stores a history turn sent
    differently as new nodes under the last shared one)."""
    cur, seen = i, set()
    while cur is not None and cur not in seen and 0 <= cur < len(nodes):
        if (getattr(nodes[cur], "extra", None) or {}).get("token_drift"):
            return True
        seen.add(cur)
        cur = nodes[cur].parent
    return False


def pair_tool_calls(path: Sequence[int], messages: Sequence[dict]) -> list[CallRef]:
    """Pair tool calls with results along one branch (see the module docstring).

    `path`: node indices in order; `messages[i]`: the message dict of node i (role, tool_calls,
    tool_call_id, name). Returns every call in order, `result_node` None when no result was
    recorded."""
    return pair(path, messages).calls


def pair(path: Sequence[int], messages: Sequence[dict]) -> Pairing:
    """`pair_tool_calls`, plus the tool messages that answer no call."""
    calls: list[CallRef] = []
    open_calls: list[CallRef] = []
    unpaired: list[int] = []
    doubt: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i in path:
        msg = messages[i]
        role = msg.get("role")
        if role == "assistant":
            for pos, tc in enumerate(msg.get("tool_calls") or []):
                ref = CallRef(i, pos, tc.get("id"), tc.get("name") or "",
                              ends_rollout=bool((tc.get("extra") or {}).get("ends_rollout")))
                calls.append(ref)
                open_calls.append(ref)
        elif role == "tool":
            match, candidates = _match(msg, open_calls)
            if match is None:
                answered = _answered(msg, calls)
                if answered is not None:
                    answered.later_results.append(i)
                else:
                    unpaired.append(i)
                continue
            match.result_node = i
            if len(candidates) > 1:
                match.ambiguous = [(c.node, c.position) for c in candidates]
                for c in candidates:  # the others' pairings rest on this guess too
                    doubt.setdefault((c.node, c.position), match.ambiguous)
            elif candidates and (match.node, match.position) in doubt:
                match.ambiguous = doubt[(match.node, match.position)]
            open_calls.remove(match)
    return Pairing(calls, unpaired)


def _answered(msg: dict, calls: list[CallRef]) -> CallRef | None:
    """Rule 4: the nearest preceding answered call carrying the id the result names, or None."""
    wanted = msg.get("tool_call_id")
    if wanted is None:
        return None
    return next((c for c in reversed(calls) if c.id == wanted and c.result_node is not None), None)


def superseded_results(pairing_calls: Sequence[CallRef]) -> dict[int, int]:
    """Result node → the node of the later result that supersedes it, for every call answered
    twice or more (rule 4): each result but the last is superseded by the next one."""
    out: dict[int, int] = {}
    for c in pairing_calls:
        if c.later_results and c.result_node is not None:
            chain = [c.result_node, *c.later_results]
            out.update(zip(chain, chain[1:]))
    return out


def _match(msg: dict, open_calls: list[CallRef]) -> tuple[CallRef | None, list[CallRef]]:
    wanted = msg.get("tool_call_id")
    if wanted is not None:
        for match in reversed(open_calls):
            if match.id == wanted:
                # Reused ids: the nearest preceding unanswered call with this id, but among several
                # open calls of one node (parallel), answer them in order.
                for c in open_calls:
                    if c.id == wanted and c.node == match.node:
                        return c, []
        if not open_calls or any(c.id is not None for c in open_calls):
            return None, []  # names a call that is not waiting
    name = msg.get("name")
    candidates = [c for c in open_calls if name and c.name == name] or open_calls
    return (candidates[0], candidates) if candidates else (None, [])


# --- the drawn graph: node kinds, why branches fork, which branch becomes which sample ---------

NODE_KINDS = {
    "compaction": "compaction: a summary that replaces earlier turns for later requests",
    "subagent": "subagent: a child conversation that returns only its result",
    "retry": "retry: the same request sent again",
    "rerender": "re-render: the prompt was re-tokenized and does not extend the previous prompt",
}

FORK_REASONS = {
    "rerender": "the template re-render did not extend the previous prompt",
    "compaction": "compaction replaced earlier turns",
    "subagent": "a subagent's conversation",
    "retry": "a retry of the same request",
    "resample": "another sample from the same context (best-of-n)",
    "fork": "the conversation forks here",
    "root": "a separate conversation (new root)",
}


def node_kind(extra: dict | None) -> str | None:
    """What a node is in the graph, from `node.extra` (docs/views.md): `kind` when a reader set
    one of NODE_KINDS; `context_management.type == "compaction"` (ATIF); `subagent` /
    `subagent_trajectory_id` (a child conversation); `retry_of`; `token_drift` (the reader
    started a new root because the prompt was re-tokenized). None for an ordinary message."""
    if not extra:
        return None
    kind = extra.get("kind")
    if kind in NODE_KINDS:
        return kind
    cm = extra.get("context_management")
    if isinstance(cm, dict) and cm.get("type") == "compaction":
        return "compaction"
    if extra.get("subagent") or extra.get("subagent_trajectory_id"):
        return "subagent"
    if extra.get("retry_of") is not None:
        return "retry"
    if extra.get("token_drift"):
        return "rerender"
    return None


@dataclass
class GraphNode:
    """What the drawn graph needs of a node: no message body, no token arrays."""

    idx: int
    parent: int | None
    role: str
    sampled: bool = False
    n_tokens: int = 0
    n_trained: int = 0
    kind: str | None = None


def fork_points(nodes: Sequence[GraphNode], paths: Sequence[Sequence[int]]) -> list[dict | None]:
    """Per branch, where and why it leaves the branches before it (None for branch 0).

    `at`: the last node it shares with an earlier branch (None when it starts at its own root);
    `first`: its first node of its own; `from_branch`: the earlier branch it shares `at` with;
    `position`: the depth of `first` on the branch; `reason`: a key of FORK_REASONS, from the
    kind of `first` (compaction, subagent, retry, re-render), else `resample` when `first` was
    sampled (another answer to the same context), else `fork` (or `root`). O(total path length)."""
    owner: dict[int, int] = {}
    out: list[dict | None] = []
    for b, path in enumerate(paths):
        if b == 0:
            out.append(None)
        else:
            k = 0
            while k < len(path) and path[k] in owner:
                k += 1
            at = path[k - 1] if k else None
            first = path[k] if k < len(path) else None
            kind = nodes[first].kind if first is not None and first < len(nodes) else None
            if kind:
                reason = kind
            elif at is None:
                reason = "root"
            elif first is not None and nodes[first].sampled:
                reason = "resample"
            else:
                reason = "fork"
            out.append({"at": at, "first": first, "position": k, "reason": reason, "text": FORK_REASONS[reason],
                        "from_branch": owner.get(at) if at is not None else None})
        for i in path:
            owner.setdefault(i, b)
    return out


def samples(nodes: Sequence[GraphNode], paths: Sequence[Sequence[int]]) -> list[int | None]:
    """Per branch, the training row it becomes: the index among branches that carry any mask-1
    token (a trainable branch is one sample); None for a branch with nothing to train on."""
    out, k = [], 0
    for path in paths:
        if any(nodes[i].n_trained for i in path if i < len(nodes)):
            out.append(k)
            k += 1
        else:
            out.append(None)
    return out

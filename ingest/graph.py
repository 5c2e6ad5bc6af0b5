"""The message graph: branches (root-to-leaf paths) and tool-call pairing.

Pairing never uses the tool-call id as a unique key: ids are reused (tau-bench reuses one id for
two sequential calls; parallel calls can share an id). A tool message answers the nearest
preceding unanswered call with its id, in order; a tool message without an id answers the
oldest unanswered call.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class _NodeLike(Protocol):
    parent: int | None


def branches(nodes: Sequence[_NodeLike]) -> list[list[int]]:
    """Every root-to-leaf path as a list of node indices, ordered by leaf index. O(n)."""
    has_child = [False] * len(nodes)
    for n in nodes:
        if n.parent is not None and 0 <= n.parent < len(nodes):
            has_child[n.parent] = True
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
    """One tool call: node index, position within the node's `tool_calls`, id, name."""

    node: int
    position: int
    id: str | None
    name: str
    result_node: int | None = None


def pair_tool_calls(path: Sequence[int], messages: Sequence[dict]) -> list[CallRef]:
    """Pair tool calls with results along one branch.

    `path`: node indices in order; `messages[i]`: the message dict of node i (role, tool_calls,
    tool_call_id). Returns every call in order, `result_node` None when no result was recorded.
    """
    calls: list[CallRef] = []
    open_calls: list[CallRef] = []
    for i in path:
        msg = messages[i]
        role = msg.get("role")
        if role == "assistant":
            for pos, tc in enumerate(msg.get("tool_calls") or []):
                ref = CallRef(i, pos, tc.get("id"), tc.get("name") or "")
                calls.append(ref)
                open_calls.append(ref)
        elif role == "tool" and open_calls:
            wanted = msg.get("tool_call_id")
            match = None
            if wanted is not None:
                match = next((c for c in reversed(open_calls) if c.id == wanted), None)
                # Reused ids: the nearest preceding unanswered call with this id, but among
                # several open calls of one node (parallel), answer them in order.
                if match is not None:
                    same = [c for c in open_calls if c.id == wanted and c.node == match.node]
                    match = same[0]
            if match is None and wanted is None:
                match = open_calls[0]
            if match is not None:
                match.result_node = i
                open_calls.remove(match)
    return calls

"""Checks on tool calls and their results (pairing rules in ingest/graph.py)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check
from ingest.graph import CallRef, branches, pair_tool_calls
from ingest.schema import Rollout


def _calls_per_branch(r: Rollout) -> Iterator[list[CallRef]]:
    messages = [n.message.model_dump() for n in r.nodes]
    for path in branches(r.nodes):
        yield pair_tool_calls(path, messages)


@check("duplicate_tool_call_id", "warning", label="duplicate tool-call id")
def duplicate_tool_call_id(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """One tool-call id used by several calls (tau-bench reuses ids); pairing follows position,
    not the id alone. `detail.calls` lists every (node, position) sharing the id."""
    seen: set[str] = set()
    for calls in _calls_per_branch(r):
        for cid, n in Counter(c.id for c in calls if c.id).items():
            if n > 1 and cid not in seen:
                seen.add(cid)
                where = [(c.node, c.position) for c in calls if c.id == cid]
                yield Hit(f"tool-call id {cid!r} used by {n} calls", where[0][0], None, {"id": cid, "calls": where})


@check("unanswered_tool_call", "warning", label="unanswered tool call")
def unanswered_tool_call(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A tool call with no recorded result; the page shows "no result recorded". `position` is
    the call's index within its message's `tool_calls`."""
    seen: set[tuple[int, int]] = set()
    for calls in _calls_per_branch(r):
        for c in calls:
            if c.result_node is None and (c.node, c.position) not in seen:
                seen.add((c.node, c.position))
                yield Hit(f"call {c.id or c.name!r} has no recorded result", c.node, c.position,
                          {"id": c.id, "name": c.name})

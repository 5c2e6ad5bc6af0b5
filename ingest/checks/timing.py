"""Checks on the timing of model and tool calls (the rule of a span: ingest/call_timing.py)."""
from __future__ import annotations

from collections.abc import Iterator

from ingest.call_timing import CallSpan, model_call_span, tool_call_span
from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check
from ingest.checks.tools import _pairings
from ingest.schema import Rollout

_SAID = {"open": "has a start and no end", "negative": "ends before it starts"}


def _facts(s: CallSpan) -> dict:
    return {"start": s.start, "end": s.end, "duration": s.duration, "status": s.status}


@check("timing_incomplete", "warning", label="timing incomplete", at="call")
def timing_incomplete(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A model call (`calls[k].time`) or a tool call (its calling and result messages' timestamps,
    else the result's `extra.timing`) with a start and no end, or an end before its start
    (UKGovernmentBEIS/inspect_ai#4226: a model event never completed). Skipped when no call has
    timing. `detail`: `call` ("model" | "tool"), the model call's `index` or the tool call's `id`
    and `name`, `start`, `end` (None when not recorded), `duration`, `status` ("open" |
    "negative"); `position` is the tool call's index in its message."""
    timed = False
    for k, c in enumerate(r.calls):
        s = model_call_span(c.time)
        timed = timed or s is not None
        if s is not None and s.status != "complete":
            yield Hit(f"model call {k} {_SAID[s.status]}", c.node, None, {"call": "model", "index": k, **_facts(s)})
    seen: set[tuple[int, int]] = set()
    for p in _pairings(r):
        for c in p.calls:
            if c.result_node is None or (c.node, c.position) in seen:
                continue
            seen.add((c.node, c.position))
            result = r.nodes[c.result_node]
            s = tool_call_span(r.nodes[c.node].timestamp, result.timestamp, result.message.extra.get("timing"))
            timed = timed or s is not None
            if s is not None and s.status != "complete":
                yield Hit(f"tool call {c.id or c.name!r} {_SAID[s.status]}", c.node, c.position,
                          {"call": "tool", "id": c.id, "name": c.name, "result_node": c.result_node, **_facts(s)})
    if not timed:
        raise Skip("no model or tool call has timing recorded")

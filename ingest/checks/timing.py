"""Checks on the timing of model and tool calls (the rule of a span: ingest/call_timing.py)."""
from __future__ import annotations

from collections.abc import Iterator

from ingest.call_timing import CallSpan, end_without_start, model_call_span, tool_call_span
from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check
from ingest.checks.scan import index
from ingest.checks.tools import _pairings
from ingest.schema import Rollout

_SAID = {"open": "has a start and no end", "negative": "ends before it starts", "no_start": "has an end and no start"}


def _facts(s: CallSpan) -> dict:
    return {"start": s.start, "end": s.end, "duration": s.duration, "status": s.status}


def _no_start(end: float) -> dict:
    return {"start": None, "end": end, "duration": None, "status": "no_start"}


@check("timing_incomplete", "warning", label="timing incomplete", at="call")
def timing_incomplete(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A model call (`calls[k].time`) or a tool call (its calling and result messages' timestamps,
    else the result's `extra.timing`) with a start and no end, or an end before its start
    (UKGovernmentBEIS/inspect_ai#4226: a model event never completed), or an end recorded with no
    start (incomplete too: status "no_start"). Skipped when no call has timing. `detail`: `call`
    ("model" | "tool"), the model call's `index` or the tool call's `id` and `name`, `start`, `end`
    (None when not recorded), `duration`, `status` ("open" | "negative" | "no_start");
    `position` is the tool call's index in its message."""
    timed = False
    for k, c in enumerate(r.calls):
        s = model_call_span(c.time)
        timed = timed or s is not None
        if s is not None and s.status != "complete":
            yield Hit(f"model call {k} {_SAID[s.status]}", c.node, None, {"call": "model", "index": k, **_facts(s)})
        elif s is None and (end := end_without_start(c.time)) is not None:
            timed = True
            yield Hit(f"model call {k} {_SAID['no_start']}", c.node, None,
                      {"call": "model", "index": k, **_no_start(end)})
    seen: set[tuple[int, int]] = set()
    # a tool call's span needs a timestamp or a result's `extra.timing`: none in the rollout, none to look at
    for p in _pairings(r) if index(r).timed else ():
        for c in p.calls:
            if c.result_node is None or (c.node, c.position) in seen:
                continue
            seen.add((c.node, c.position))
            result = r.nodes[c.result_node]
            s = tool_call_span(r.nodes[c.node].timestamp, result.timestamp, result.message.extra.get("timing"))
            timed = timed or s is not None
            facts = _facts(s) if s is not None and s.status != "complete" else None
            if s is None and (end := end_without_start(result.message.extra.get("timing"))) is not None:
                timed, facts = True, _no_start(end)
            if facts is not None:
                yield Hit(f"tool call {c.id or c.name!r} {_SAID[facts['status']]}", c.node, c.position,
                          {"call": "tool", "id": c.id, "name": c.name, "result_node": c.result_node, **facts})
    if not timed:
        raise Skip("no model or tool call has timing recorded")

"""The rollout's timeline: model calls and the tool calls of the branch shown on one time axis,
and how long each tool call took (from the message that made it to the message with its result).

A call with a start and no end (an Inspect model event that never completed,
UKGovernmentBEIS/inspect_ai#4226) is drawn as a mark at its start and says "end not recorded"; a
call that ends before it starts is drawn as a mark too (never a negative width) with its negative
duration shown. The spans' rule is ingest/call_timing.py, as for the `timing_incomplete` check;
the latency figures cover the complete calls only and say how many of the calls they are."""
from __future__ import annotations

from ingest.call_timing import coverage, model_call_span, tool_call_span

TIMELINE_ROWS = 200  # rows drawn (and in the twin); a 5,000-turn rollout says how many more
MARK = 0.5  # the width (% of the axis) of a call drawn as a mark: too short to see, open, or negative


def tool_span(call, messages):
    """The CallSpan of a tool call (ingest.call_timing.tool_call_span), or None when nothing places
    it (no result, no timestamps, no `extra.timing` on the result)."""
    if call.result_node is None:
        return None
    result = messages[call.result_node]
    return tool_call_span(messages[call.node].get("timestamp"), result.get("timestamp"), result.get("timing"))


def tool_duration(call, messages) -> float | None:
    """Seconds from the message that made a tool call to the message with its result, both as
    the reader stamped them (`node.timestamp`; OpenHands: the action and observation events,
    verifiers and ATIF: the messages' own times), else the result's `extra.timing`. None when
    nothing times it, it has no end, or the result is stamped before the call."""
    s = tool_span(call, messages)
    return s.duration if s is not None and s.status == "complete" else None


def timeline(calls: list, pairs: list, messages, link) -> dict | None:
    """Model calls (`calls[].time`) and the tool calls of the branch shown (`tool_span`) on one
    time axis: per row its kind (`model` | `tool`), `status` (`complete` | `open` | `negative`),
    start and duration in seconds from the first recorded start (duration None when open), its
    place as percentages of the whole for drawing; in start order, at most TIMELINE_ROWS
    (`rows_total` counts all). `model_latency` / `tool_latency`: ingest.call_timing.coverage over
    every call of that kind (`calls`, `timed`, `total`, `median`). None when nothing has timing."""
    spans, model_spans, tool_spans = [], [], []
    for k, c in enumerate(calls):
        s = model_call_span((c or {}).get("time") if isinstance(c, dict) else None)
        model_spans.append(s)
        if s is not None:
            spans.append((s, {"kind": "model", "call": k, "node": c.get("node"), "url": c.get("node_url"),
                              "model": c.get("model"), "name": None, "result_node": None,
                              "error": bool(c.get("error"))}))
    for c in pairs:
        s = tool_span(c, messages)
        tool_spans.append(s)
        if s is not None:
            spans.append((s, {"kind": "tool", "call": c.position, "node": c.node, "url": None, "model": None,
                              "name": c.name, "result_node": c.result_node, "error": False}))
    if not spans:
        return None
    spans.sort(key=lambda x: x[0].start)
    t0 = min(min(s.start, s.end if s.end is not None else s.start) for s, _ in spans)
    t1 = max(max(s.start, s.end if s.end is not None else s.start) for s, _ in spans)
    total = max(t1 - t0, 1e-9)
    rows = []
    for s, r in spans[:TIMELINE_ROWS]:
        width = max(s.duration / total * 100, MARK) if s.status == "complete" else MARK
        left = min((s.start - t0) / total * 100, 100 - MARK)
        rows.append({**r, "url": link(r["node"]) if r["kind"] == "tool" else r["url"], "status": s.status,
                     "start": s.start - t0, "duration": s.duration, "left": left, "width": width})
    return {"seconds": t1 - t0, "n_model": sum(r["kind"] == "model" for _, r in spans),
            "n_tool": sum(r["kind"] == "tool" for _, r in spans), "rows_total": len(spans),
            "n_open": sum(s.status == "open" for s, _ in spans),
            "n_negative": sum(s.status == "negative" for s, _ in spans),
            "model_latency": coverage(model_spans, len(model_spans)),
            "tool_latency": coverage(tool_spans, len(tool_spans)), "rows": rows}

"""The rollout's timeline: model calls and the tool calls of the branch shown on one time axis,
and how long each tool call took (from the message that made it to the message with its result)."""
from __future__ import annotations

TIMELINE_ROWS = 200  # rows drawn (and in the twin); a 5,000-turn rollout says how many more


def tool_duration(call, messages) -> float | None:
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


def timeline(calls: list, pairs: list, messages, link) -> dict | None:
    """Model calls (`calls[].time`) and the tool calls of the branch shown (`tool_duration`) on
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
        d = tool_duration(c, messages)
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

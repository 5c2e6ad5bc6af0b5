"""Checks on tool calls and their results (pairing rules in ingest/graph.py)."""
from __future__ import annotations

import json
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


@check("unanswered_tool_call", "warning", label="unanswered tool call", at="call")
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


def arguments_shape(arguments: str, source_type: str | None = None) -> str:
    """The shape of a tool call's raw arguments: "object" (one well-formed JSON object, the
    only good shape), "object_not_string" (an object where the source's API requires a JSON
    string), "double_encoded" (a JSON string holding the JSON object), "cut_off" (JSON that
    ends early), "not_json", "scalar" (a bare string, number, boolean or null), "array", or
    "missing" (no arguments at all)."""
    if source_type is not None:
        return "object_not_string"
    if not arguments.strip():
        return "missing"
    try:
        value = json.loads(arguments)
    except ValueError:
        return "cut_off" if _truncated_json(arguments) else "not_json"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return "scalar"
        return "double_encoded" if isinstance(inner, dict | list) else "scalar"
    return "scalar"


def _truncated_json(text: str) -> bool:
    """JSON that opens an object or array and stops before it closes (JSONDecodeError at the
    end of the text)."""
    t = text.strip()
    if not t.startswith(("{", "[")):
        return False
    try:
        json.loads(t)
    except json.JSONDecodeError as e:
        return e.pos >= len(t) - 1 or e.msg.startswith("Unterminated")
    return False


SHAPE_WORDS = {
    "object_not_string": "an object where the API requires a JSON string",
    "double_encoded": "JSON encoded twice",
    "cut_off": "cut off",
    "not_json": "not JSON",
    "scalar": "a bare scalar",
    "array": "an array, not an object",
    "missing": "missing",
}


@check("malformed_tool_arguments", "warning", label="malformed tool arguments", at="call")
def malformed_tool_arguments(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """Tool-call arguments that are not one well-formed JSON object: encoded twice, cut off, a
    bare scalar, missing, or an object where the source's API requires a string (case 21,
    ml-explore/mlx-lm#1065). `detail.shape` says which; these are usually why the call failed.
    `position` is the call's index within its message's `tool_calls`."""
    for i, node in enumerate(r.nodes):
        for pos, tc in enumerate(node.message.tool_calls or []):
            shape = arguments_shape(tc.arguments, tc.extra.get("arguments_source_type"))
            if shape != "object":
                yield Hit(f"node {i}: arguments of call {tc.id or tc.name!r} are {SHAPE_WORDS[shape]}", i, pos,
                          {"shape": shape, "id": tc.id, "name": tc.name, "arguments": tc.arguments[:200]})

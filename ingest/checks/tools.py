"""Checks on tool calls and their results (pairing rules in ingest/graph.py)."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import orjson

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check, memo
from ingest.checks.scan import branches, index
from ingest.graph import CallRef, Pairing, on_restated_branch, pair, pairing_fields
from ingest.jsonio import cut_short
from ingest.metrics import tool_failure
from ingest.schema import Rollout
from ingest.tool_markup import unparsed_call, uses_structured_calls


def _pairings(r: Rollout) -> list[Pairing]:
    """The pairing of each branch; derived once per check run (four checks read it)."""
    def build() -> list[Pairing]:
        messages = [pairing_fields(n.message) for n in r.nodes]
        return [pair(path, messages) for path in branches(r)]

    return memo("tool_pairings", build)


def _calls_per_branch(r: Rollout) -> Iterator[list[CallRef]]:
    for p in _pairings(r):
        yield p.calls


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


def _answered_where_restated(r: Rollout) -> set[tuple[int, int]]:
    """(node, position) of calls answered on a branch that restates their turn (verifiers: the
    next prompt sent the turn differently, so its results hang under the restated copy)."""
    def key(m):
        return m.role, m.text(), tuple(tc.id for tc in m.tool_calls or [])

    restated = {key(r.nodes[j].message): j for j in index(r).with_calls
                if not r.nodes[j].sampled and on_restated_branch(r.nodes, j)}
    if not restated:
        return set()
    answered = {(c.node, c.position) for calls in _calls_per_branch(r) for c in calls if c.result_node is not None}
    out = set()
    for i in index(r).with_calls:
        n = r.nodes[i]
        j = restated.get(key(n.message)) if n.sampled else None
        if j is not None:
            out |= {(i, k) for k in range(len(n.message.tool_calls)) if (j, k) in answered}
    return out


@check("unanswered_tool_call", "warning", label="unanswered tool call", at="call")
def unanswered_tool_call(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A tool call with no recorded result; the page shows "no result recorded". `position` is
    the call's index within its message's `tool_calls`."""
    seen: set[tuple[int, int]] = set()
    seen |= _answered_where_restated(r)
    for calls in _calls_per_branch(r):
        for c in calls:
            if c.result_node is None and not c.ends_rollout and (c.node, c.position) not in seen:
                seen.add((c.node, c.position))
                yield Hit(f"call {c.id or c.name!r} has no recorded result", c.node, c.position,
                          {"id": c.id, "name": c.name})


@check("ambiguous_tool_result", "warning", label="ambiguous tool result")
def ambiguous_tool_result(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A tool result that names no call id (only a tool name, or nothing) while several calls
    wait for one: paired with the oldest candidate, never silently. `detail.candidates` lists the
    (node, position) of every call that could have taken it; `detail.paired_with` the one chosen."""
    seen: set[int] = set()
    for calls in _calls_per_branch(r):
        for c in calls:
            if c.ambiguous and c.result_node is not None and c.result_node not in seen:
                seen.add(c.result_node)
                yield Hit(f"node {c.result_node}: the result names no call id and {len(c.ambiguous)} calls "
                          "could take it; "
                          f"paired with {c.name!r} at node {c.node}", c.result_node, None,
                          {"paired_with": [c.node, c.position], "candidates": [list(x) for x in c.ambiguous]})


@check("unpaired_tool_result", "warning", label="unpaired tool result")
def unpaired_tool_result(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A tool result that answers no waiting call: it names an id no unanswered call carries, or
    it comes when no call waits (a log that dropped the assistant turn). Kept and shown. A rollout
    whose tool use is all text (no structured call and no result id anywhere: Atropos messages are
    role and content, the calls stay markup in the agent's text) has nothing to pair (issue 20)."""
    if not any(n.message.tool_calls or n.message.tool_call_id for n in r.nodes):
        return
    seen: set[int] = set()
    for p in _pairings(r):
        for i in p.unpaired_results:
            if i not in seen:
                seen.add(i)
                m = r.nodes[i].message
                said = (f"tool result {m.tool_call_id!r}" if m.tool_call_id else
                        f"a tool result of {m.name!r} with no call id" if m.name else "a tool result with no call id")
                yield Hit(f"node {i}: {said} answers no waiting call", i, None,
                          {"id": m.tool_call_id, "name": m.name})


@check("tool_answered_twice", "warning", label="tool call answered twice", at="call")
def tool_answered_twice(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """One tool call with two (or more) results naming its id: a recovery error and then the
    re-executed output (OpenHands/software-agent-sdk#1782), or a harness that retried a call and
    logged both. Both results are kept and shown with the call (pairing rule 4, ingest/graph.py);
    the earlier one is superseded, so a superseded error is not counted as a tool error of the
    rollout (ingest/metrics.py `tool_errors`), and neither result is an `unpaired_tool_result`.
    `position` is the call's index within its message's `tool_calls`; `detail`: the call's `id`,
    `name`, `call_node`, `result_nodes` (in order) and `first_error` (the first result reported a
    failure, `ingest.metrics.tool_failure`: its reason, else None)."""
    seen: set[tuple[int, int]] = set()
    for calls in _calls_per_branch(r):
        for c in calls:
            if not c.later_results or c.result_node is None or (c.node, c.position) in seen:
                continue
            seen.add((c.node, c.position))
            nodes = [c.result_node, *c.later_results]
            first = r.nodes[c.result_node].message
            error = tool_failure(first.extra, first.text())
            yield Hit(f"node {c.node}: call {c.id!r} ({c.name}) has {len(nodes)} results (nodes "
                      f"{', '.join(map(str, nodes))}); the first{' (an error)' if error else ''} is superseded",
                      c.node, c.position, {"id": c.id, "name": c.name, "call_node": c.node, "result_nodes": nodes,
                                           "first_error": error})


def arguments_shape(arguments: str) -> str:
    """The shape of a tool call's raw arguments: "object" (one well-formed JSON object, the
    only good shape, whether the source wrote it as a JSON string or as an object: the chat
    reader keeps an object's serialisation as the raw text), "double_encoded" (a JSON string
    holding the JSON object), "cut_off" (JSON that ends early), "not_json", "scalar" (a bare
    string, number, boolean or null), "array", or "missing" (no arguments at all)."""
    try:  # the common shape, at C speed: what orjson reads as an object, json reads as one too
        if isinstance(orjson.loads(arguments), dict):
            return "object"
    except orjson.JSONDecodeError:
        pass
    if not arguments.strip():
        return "missing"
    try:
        value = json.loads(arguments)
    except ValueError:
        return "cut_off" if cut_short(arguments) else "not_json"
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


SHAPE_WORDS = {
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
    bare scalar, an array, not JSON, or missing (case 21, ml-explore/mlx-lm#1065). A
    well-formed object is never flagged, whether written as a string or as an object.
    `detail.shape` says which; these are usually why the call failed.
    `position` is the call's index within its message's `tool_calls`."""
    for i in index(r).with_calls:
        for pos, tc in enumerate(r.nodes[i].message.tool_calls):
            shape = arguments_shape(tc.arguments)
            if shape != "object":
                yield Hit(f"node {i}: arguments of call {tc.id or tc.name!r} are {SHAPE_WORDS[shape]}", i, pos,
                          {"shape": shape, "id": tc.id, "name": tc.name, "arguments": tc.arguments[:200]})


@check("unparsed_tool_call", "error", label="tool call left as text")
def unparsed_tool_call(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """Tool-call markup (Hermes `<tool_call>{...}</tool_call>`, Qwen3-Coder `<tool_call><function=...>`,
    Llama 3 `<|python_tag|>`, Mistral `[TOOL_CALLS]`) left in an assistant message's text: the
    server's tool parser failed and the call stayed in the content (vllm-project/vllm#18791), so the
    harness took a tool call for a final answer; or it parsed one call and left the next as text
    (vllm-project/vllm#26345), flagged when the text holds a complete call beyond the message's
    structured calls (a text repeating the structured calls' markup, as Tunix's content does, is
    not). Markup inside an inline reasoning block (`<think>...</think>`) or fenced code is not a
    failed parse. Names the dialect and the tool (the shared detector, ingest/tool_markup.py). Only
    where the rollout uses structured tool calls (it declares `tools`, or another turn carries a
    structured call): a harness whose protocol is the text itself (Atropos environments, which
    parse `<tool_call>` from the reply; mini-swe-agent and old SWE-agent, whose calls a reader
    parsed from the text, `extra.parsed_from_text`) is not one. Stored before issue 20 as
    `tool_call_markup_unparsed`."""
    if not uses_structured_calls(r):
        return
    assistant = index(r).assistant
    last = assistant[-1] if assistant else None
    for i in assistant:  # markup is looked for in assistant messages only
        node = r.nodes[i]
        found = unparsed_call(node.message)
        if found is None:
            continue
        tool, parsed = found.tool, len(node.message.tool_calls or ())
        where = (f"beside {parsed} structured call{'s' if parsed > 1 else ''} (the server's tool parser stopped "
                 "early)" if parsed else "with no structured tool call (the server's tool parser failed)")
        yield Hit(f"node {i}: a {found.dialect} tool call{f' to {tool}' if tool else ''} left in the "
                  f"message text, {where}", i, None,
                  {"dialect": found.dialect, "convention": found.dialect, "tool": tool, "at": found.at,
                   "structured_calls": parsed, "final_answer": i == last and not parsed})

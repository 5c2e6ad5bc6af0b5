"""Checks on what a model turn contains."""
from __future__ import annotations

from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check
from ingest.checks.scan import index
from ingest.schema import Rollout
from ingest.words import plural


@check("empty_response", "warning", label="empty response")
def empty_response(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """An assistant message with no text, reasoning or tool call (PrimeIntellect-ai/prime-rl#2316).
    A message whose source recorded tokens but no text (content null) is not empty: its text
    was simply not written."""
    for i in index(r).assistant:
        node = r.nodes[i]
        m = node.message
        if m.content is None and node.token_ids:
            continue
        if (m.role == "assistant" and not m.text().strip() and not m.tool_calls
                and not (m.reasoning_content or "").strip()):
            n = len(node.token_ids)
            yield Hit(f"node {i}: empty model response ({plural(n, 'token')})", i, None, {"tokens": n})


REASONING_PARTS = ("thinking", "redacted_thinking", "reasoning")


def _answer_text(m) -> str:
    """The answer text of a message: its text parts only (reasoning parts are not an answer)."""
    if m.content is None:
        return ""
    if isinstance(m.content, str):
        return m.content
    return "".join(str(p.get("text", "")) for p in m.content if p.get("type") == "text")


def _has_reasoning(m) -> bool:
    if (m.reasoning_content or "").strip():
        return True
    return isinstance(m.content, list) and any(p.get("type") in REASONING_PARTS for p in m.content)


@check("empty_reasoning_only", "warning", label="reasoning without an answer")
def empty_reasoning_only(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A turn that has reasoning (a reasoning field or thinking content blocks) and no answer:
    no text and no tool call. The model thought and then said nothing (often a generation cut
    inside the reasoning, or a parser that put the answer into the reasoning)."""
    for i in index(r).assistant:
        m = r.nodes[i].message
        if m.role == "assistant" and _has_reasoning(m) and not _answer_text(m).strip() and not m.tool_calls:
            yield Hit(f"node {i}: reasoning but no answer, text or tool call", i, None,
                      {"reasoning_chars": len(m.reasoning_content or "")})


@check("content_not_recorded", "warning", label="message text not recorded")
def content_not_recorded(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """Model calls that report output tokens, in a rollout with no assistant turn that has text,
    reasoning, a tool call or token ids: what the model said was not recorded (content capture
    off, or carried where the reader did not look: the span events of older OpenTelemetry GenAI
    conventions, open-telemetry/opentelemetry-python-contrib#4038). Never a silent rollout that
    reads as a finished answer with nothing in it."""
    used = [c for c in r.calls if c.usage is not None and (c.usage.output_tokens or 0) > 0]
    if not used:
        return
    said = any(n.message.role == "assistant" and (n.message.text().strip() or n.message.tool_calls
                                                   or (n.message.reasoning_content or "").strip() or n.token_ids)
               for n in r.nodes)
    if said:
        return
    tokens = sum(c.usage.output_tokens or 0 for c in used)
    yield Hit(f"{plural(len(used), 'model call')} produced {plural(tokens, 'output token')}, but no message text "
              f"was recorded ({plural(len(r.nodes), 'message')} in the trace)", None, None,
              {"calls": len(used), "output_tokens": tokens, "messages": len(r.nodes)})

"""Checks on what a model turn contains."""
from __future__ import annotations

from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check, plural
from ingest.schema import Rollout


@check("empty_response", "warning", label="empty response")
def empty_response(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """An assistant message with no text, reasoning or tool call (PrimeIntellect-ai/prime-rl#2316).
    A message whose source recorded tokens but no text (content null) is not empty: its text
    was simply not written."""
    for i, node in enumerate(r.nodes):
        m = node.message
        if m.content is None and node.token_ids:
            continue
        if m.role == "assistant" and not m.text().strip() and not m.tool_calls and not (m.reasoning_content or "").strip():
            n = len(node.token_ids)
            yield Hit(f"node {i}: empty model response ({plural(n, 'token')})", i, None, {"tokens": n})

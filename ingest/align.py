"""Fitting per-token arrays to a node's tokens, and remembering when they did not fit.

Readers call `fit()` for every per-token array they take from a source. A short array is padded
with None (a missing logprob is missing, never 0.0); a long one is cut and the overflow kept.
The source's own length is recorded in `node.extra["source_lengths"]`, which the lockstep check
reads, so the mismatch is reported, not repaired silently.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ingest.schema import Node


def fit(node: Node, name: str, values: Sequence[Any] | None, fill: Any = None) -> list[Any] | None:
    """Return `values` with exactly `len(node.token_ids)` entries (None stays None)."""
    if values is None:
        return None
    values = list(values)
    n = len(node.token_ids)
    if len(values) == n:
        return values
    node.extra.setdefault("source_lengths", {})[name] = len(values)
    if len(values) < n:
        return values + [fill] * (n - len(values))
    node.extra.setdefault("overflow", {})[name] = values[n:]
    return values[:n]


def fill_node(node: Node, *, mask=None, logprobs=None, is_content=None, advantages=None,
              reference_logprobs=None) -> Node:
    """Set the per-token arrays of `node`, each fitted to its tokens."""
    if mask is not None:
        node.mask = [bool(x) for x in fit(node, "mask", mask, False)]
    if logprobs is not None:
        node.logprobs = fit(node, "logprobs", logprobs)
    if is_content is not None:
        node.is_content = [bool(x) for x in fit(node, "is_content", is_content, False)]
    if advantages is not None:
        node.advantages = fit(node, "advantages", advantages)
    if reference_logprobs is not None:
        node.reference_logprobs = fit(node, "reference_logprobs", reference_logprobs)
    return node

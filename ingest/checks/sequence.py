"""Checks on the token sequence across turns: is the next request's prompt the previous prompt
plus what was sampled? (huggingface/trl#5224: re-tokenizing the history changes the ids the
policy is trained on.)"""
from __future__ import annotations

from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check
from ingest.checks.scan import with_extra
from ingest.schema import Rollout


@check("token_drift", "warning", label="token drift")
def token_drift(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The next request's prompt is not the previous prompt plus what was sampled
    (re-tokenization); the reader kept both sequences as branches and recorded where they
    diverge (`detail.index`, `expected`, `found`). Where the drift is reasoning a template
    stripped, `reasoning_stripped` is reported instead."""
    from ingest.checks.template import stripped_reasoning

    marked = [i for i in with_extra(r) if r.nodes[i].extra.get("token_drift")]
    classified = stripped_reasoning(r, ctx) if marked else {}
    for i in marked:
        drift = r.nodes[i].extra.get("token_drift")
        if drift and i not in classified:
            yield Hit(f"node {i}: prompt diverges from previous prompt + completion at index "
                      f"{drift.get('index')} (expected {drift.get('expected')}, found {drift.get('found')})",
                      i, drift.get("index"), dict(drift))

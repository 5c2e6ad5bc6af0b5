"""verifiers' compact per-token arrays: one value per sampled (mask-true) token, where the native
node aligns a value to every token (None where the mask is 0). `expand` reads them, `compact`
writes them; `COMPACT` names the node arrays verifiers stores this way."""
from __future__ import annotations

from ingest.align import fit
from ingest.schema import Node

COMPACT = ("logprobs", "advantages", "reference_logprobs")


def expand(node: Node, name: str, values: list[float | None] | None) -> list[float | None] | None:
    """A compact per-sampled-token array (verifiers: one value per mask-true token, in order) →
    one value per token, None where the mask is 0. A length other than Σ mask is fitted by
    position and its length recorded in `node.extra.source_lengths` (the lockstep check reads it)."""
    if values is None:
        return None
    n_sampled = sum(1 for m in node.mask if m)
    if len(values) != n_sampled:
        if len(values) == len(node.token_ids):  # already aligned (a writer that did not compact)
            return list(values)
        node.extra.setdefault("source_lengths", {})[name] = len(values)
        node.extra["compact_mismatch"] = True
        return fit(node, name, values)
    it = iter(values)
    return [next(it) if m else None for m in node.mask]


def compact(node: Node, values: list[float | None] | None) -> list[float | None] | None:
    """The inverse of `expand`: the values at mask-true positions."""
    if values is None:
        return None
    return [v for v, m in zip(values, node.mask) if m]

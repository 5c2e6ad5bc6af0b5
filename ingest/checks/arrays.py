"""Checks on a node's per-token arrays (token ids, loss mask, behaviour logprobs, token bytes):
the faults of writers that build these arrays by hand and let them drift apart."""
from __future__ import annotations

from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check, plural
from ingest.schema import Rollout

REPLACEMENT_HEX = "efbfbd"
FLOAT32_MAX = 3.4028234663852886e38  # logprobs are stored as float32
LOGPROB_EPS = 1e-6  # rounding can leave a certain token's logprob a hair above 0


@check("array_len_mismatch", "error", label="array length mismatch")
def array_len_mismatch(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A per-token array (`detail.array`: logprobs, mask, is_content, advantages,
    reference_logprobs) did not have one entry per token in the source; it was padded with
    missing values or cut, and the source length is recorded.

    A short logprob array shifts every later position: the trainer pairs each token with the
    next token's logprob (rllm-org/rllm#898)."""
    for i, node in enumerate(r.nodes):
        for name, n_src in (node.extra.get("source_lengths") or {}).items():
            yield Hit(f"node {i}: {name} has {n_src} entries for {len(node.token_ids)} tokens",
                      i, min(n_src, len(node.token_ids)),
                      {"array": name, "source_length": n_src, "tokens": len(node.token_ids)})


@check("suspected_logprob_padding", "warning", label="suspected logprob padding")
def suspected_logprob_padding(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A trailing run (>= 2) of exact 0.0 logprobs on a node's sampled tokens: 0.0 is
    probability 1, which writers use as padding. `position` is the token index within the node
    where the run starts, `detail.run` its length."""
    for i, node in enumerate(r.nodes):
        if not node.mask or not node.logprobs:
            continue
        sampled = [k for k, m in enumerate(node.mask) if m]
        run = 0
        for k in reversed(sampled):
            lp = node.logprobs[k]
            if lp is not None and lp == 0.0:
                run += 1
            else:
                break
        if run >= 2:
            yield Hit(f"node {i}: last {run} sampled logprobs are exactly 0.0 (suspected padding)",
                      i, sampled[len(sampled) - run], {"run": run})


@check("invalid_logprob", "error", label="invalid logprob")
def invalid_logprob(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A logprob above 0 (a probability above 1), NaN, ±inf, or beyond the float32 range the
    store keeps: a writer bug. The values are kept and their positions listed."""
    for i, node in enumerate(r.nodes):
        bad = [k for k, lp in enumerate(node.logprobs)
               if lp is not None and not (-FLOAT32_MAX <= lp <= LOGPROB_EPS)]
        if bad:
            yield Hit(f"node {i}: {plural(len(bad), 'logprob')} outside (-inf, 0]", i, bad[0],
                      {"positions": bad[:50], "values": [str(node.logprobs[k]) for k in bad[:5]]})


@check("bytes_lost_upstream", "warning", label="bytes lost upstream")
def bytes_lost_upstream(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The source's token bytes are U+FFFD replacement bytes: the true bytes were lost before
    the trace was written, and text is not rebuilt from them."""
    for i, node in enumerate(r.nodes):
        pieces = node.extra.get("token_bytes") or []
        lost = [k for k, h in enumerate(pieces) if isinstance(h, str) and REPLACEMENT_HEX in h.replace(" ", "")]
        if lost:
            yield Hit(f"node {i}: {len(lost)} token(s) carry U+FFFD; the true bytes are gone", i, lost[0],
                      {"positions": lost})

"""Checks on the loss mask: only what the policy sampled carries gradient (docs/checks.md,
"Kinds"). Environment tokens trained on as if the policy wrote them, and sampled tokens
silently left out, change the gradient without crashing anything."""
from __future__ import annotations

from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check, plural
from ingest.graph import branches, on_restated_branch
from ingest.schema import Rollout

SAMPLED_ROLE = "assistant"


def _require_mask(r: Rollout) -> None:
    if not any(n.mask for n in r.nodes):
        raise Skip("no loss mask recorded")


@check("mask_on_unsampled", "error", label="mask on unsampled tokens")
def mask_on_unsampled(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """Loss mask 1 on tokens of a message the policy did not sample (system, user, tool,
    environment): they are trained on as if the policy had written them. One finding per
    message, with its role and the token positions (case 30)."""
    _require_mask(r)
    for i, node in enumerate(r.nodes):
        if node.message.role == SAMPLED_ROLE or not any(node.mask):
            continue
        on = [k for k, m in enumerate(node.mask) if m]
        if on:
            yield Hit(f"node {i} ({node.message.role}): loss mask 1 on {plural(len(on), 'token')} "
                      "the policy did not sample",
                      i, on[0], {"role": node.message.role, "positions": on[:500], "count": len(on)})


@check("sampled_mask_zero", "warning", label="sampled tokens masked out")
def sampled_mask_zero(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """Sampled (assistant) tokens with loss mask 0, other than template tokens a parser appends
    and the whole-rollout zeroing of a filter (Tunix's overlong filter, shown as "trains on
    nothing"). Template tokens are those with `is_content` 0 when the source records it;
    otherwise the leading and trailing mask-0 tokens of a turn. So this fires on mask-0 holes
    inside a turn, on content tokens (`is_content` 1) with mask 0, and on a whole turn left
    out while other turns train. An unsampled assistant node with mask 0 on a branch that restates
    the history (`token_drift`, e.g. verifiers' restated turn) is context, not a sample."""
    _require_mask(r)
    if not any(any(n.mask) for n in r.nodes):
        raise Skip("the whole loss mask is 0 (a filter zeroed the rollout: it trains on nothing)")
    for i, node in enumerate(r.nodes):
        if node.message.role != SAMPLED_ROLE or not node.mask or all(node.mask):
            continue  # a turn trained on whole has no mask-0 tokens to report
        if not node.sampled and not any(node.mask) and on_restated_branch(r.nodes, i):
            continue  # a history turn the prompt restated (verifiers: a new, unsampled node): context, not a sample
        n = len(node.mask)
        if node.is_content and any(node.is_content):
            off = [k for k in range(n) if node.is_content[k] and not node.mask[k]]
            how = "content tokens (is_content 1)"
        else:
            on = [k for k in range(n) if node.mask[k]]
            if not on:
                off, how = list(range(n)), "the whole turn"
            else:
                off, how = [k for k in range(on[0], on[-1]) if not node.mask[k]], "inside the turn"
        if off:
            yield Hit(f"node {i}: loss mask 0 on {plural(len(off), 'sampled token')} ({how})", i, off[0],
                      {"positions": off[:500], "count": len(off), "where": how})


@check("terminal_env_tokenized", "warning", label="terminal environment message tokenized")
def terminal_env_tokenized(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The environment message of a terminal step (a tool or user message at the end of a
    branch, after the policy's last turn) was tokenized into the training sequence, although
    nothing follows it: the sample carries context the policy never conditioned on."""
    if not any(n.token_ids for n in r.nodes):
        raise Skip("no token ids recorded")
    seen: set[int] = set()
    for path in branches(r.nodes):
        leaf = path[-1] if path else None
        if leaf is None or leaf in seen:
            continue
        node = r.nodes[leaf]
        if node.message.role in ("tool", "user") and node.token_ids and \
                any(r.nodes[j].message.role == SAMPLED_ROLE for j in path[:-1]):
            seen.add(leaf)
            trained = sum(1 for m in node.mask if m)
            yield Hit(f"node {leaf} ({node.message.role}): the terminal environment message has "
                      f"{plural(len(node.token_ids), 'token')} in the sequence"
                      + (f", {trained} with loss mask 1" if trained else ""),
                      leaf, 0, {"role": node.message.role, "tokens": len(node.token_ids), "trained": trained})

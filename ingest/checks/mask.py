"""Checks on the loss mask: only what the policy sampled carries gradient (docs/checks.md,
"Kinds"). Environment tokens trained on as if the policy wrote them, and sampled tokens
silently left out, change the gradient without crashing anything."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ingest.arrays import node_arrays
from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check
from ingest.checks.scan import Tokens, branches, tokens
from ingest.graph import on_restated_branch
from ingest.schema import Rollout
from ingest.words import plural

SAMPLED_ROLE = "assistant"


def _require_mask(r: Rollout) -> Tokens:
    """The rollout's flat tokens (ingest/checks/scan.py), which have a mask; Skip when none has."""
    t = tokens(r)
    if t.mask is None:
        raise Skip("no loss mask recorded")
    return t


def _assistant(r: Rollout, t: Tokens, slots: list[int]) -> list[int]:
    """The slots among `slots` whose node is an assistant message."""
    return [s for s in slots if r.nodes[t.nodes[s]].message.role == SAMPLED_ROLE]


@check("mask_on_unsampled", "error", label="mask on unsampled tokens")
def mask_on_unsampled(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """Loss mask 1 on tokens of a message the policy did not sample (system, user, tool,
    environment): they are trained on as if the policy had written them. One finding per
    message, with its role and the token positions (case 30)."""
    t = _require_mask(r)
    for s in t.slots(t.mask):
        i = t.nodes[s]
        node = r.nodes[i]
        if node.message.role == SAMPLED_ROLE:
            continue
        on = np.flatnonzero(t.arrays[s].mask).tolist()
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
    t = _require_mask(r)
    if not t.mask.any():
        raise Skip("the whole loss mask is 0 (a filter zeroed the rollout: it trains on nothing)")
    # a turn trained on whole has no mask-0 tokens to report
    for s in _assistant(r, t, np.flatnonzero(t.has_mask & ~t.per_node_all(t.mask)).tolist()):
        i, a = t.nodes[s], t.arrays[s]
        node = r.nodes[i]
        if not node.sampled and not a.mask.any() and on_restated_branch(r.nodes, i):
            continue  # a history turn the prompt restated (verifiers: a new, unsampled node): context, not a sample
        if a.is_content is not None and a.is_content.any():
            off = np.flatnonzero(a.is_content & ~a.mask).tolist()
            how = "content tokens (is_content 1)"
        else:
            on = np.flatnonzero(a.mask)
            if not len(on):
                off, how = list(range(len(a.mask))), "the whole turn"
            else:
                off = (np.flatnonzero(~a.mask[on[0]:on[-1]]) + on[0]).tolist()
                how = "inside the turn"
        if off:
            yield Hit(f"node {i}: loss mask 0 on {plural(len(off), 'sampled token')} ({how})", i, off[0],
                      {"positions": off[:500], "count": len(off), "where": how})


@check("terminal_env_tokenized", "warning", label="terminal environment message tokenized")
def terminal_env_tokenized(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The environment message of a terminal step (a tool or user message at the end of a
    branch, after the policy's last turn) was tokenized into the training sequence, although
    nothing follows it: the sample carries context the policy never conditioned on."""
    if not tokens(r).nodes:
        raise Skip("no token ids recorded")
    seen: set[int] = set()
    for path in branches(r):
        leaf = path[-1] if path else None
        if leaf is None or leaf in seen:
            continue
        node = r.nodes[leaf]
        if node.message.role in ("tool", "user") and node.token_ids and \
                any(r.nodes[j].message.role == SAMPLED_ROLE for j in path[:-1]):
            seen.add(leaf)
            trained = int(np.count_nonzero(node_arrays(node).mask)) if node.mask else 0
            yield Hit(f"node {leaf} ({node.message.role}): the terminal environment message has "
                      f"{plural(len(node.token_ids), 'token')} in the sequence"
                      + (f", {trained} with loss mask 1" if trained else ""),
                      leaf, 0, {"role": node.message.role, "tokens": len(node.token_ids), "trained": trained})


# The pad and end-of-sequence tokens of the common tokenizer families, by text (the run's
# tokenizer says which it has; `template_kwargs` adds its declared `pad_token` / `eos_token`).
PAD_TOKENS = ("<|pad|>", "<pad>", "<|finetune_right_pad_id|>", "[PAD]", "<|PAD_TOKEN|>")
EOS_TOKENS = ("<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "</s>", "<eos>", "<|endoftext|>", "<end_of_turn>",
              "<|eom_id|>")
POSITIONS_CAP = 500  # positions listed in a finding's detail (the count says how many in all)


def _declared_ids(ctx: CheckContext, texts: tuple[str, ...], kwarg: str) -> set[int]:
    """Ids of the special tokens among `texts` and of `template_kwargs[kwarg]`, as the run's
    tokenizer declares them (its added tokens, its config's `*_token`)."""
    out = {ctx.special_tokens[t] for t in texts if t in ctx.special_tokens}
    declared = ctx.template_kwargs.get(kwarg)
    if isinstance(declared, str) and declared:
        tid = ctx.special_tokens.get(declared)
        if tid is None and ctx.tokenizer is not None:
            tid = ctx.tokenizer.token_to_id(declared)
        if isinstance(tid, int):
            out.add(tid)
    return out


def pad_and_eos_ids(ctx: CheckContext) -> tuple[set[int], set[int]]:
    """(pad ids, end-of-sequence ids) the run's tokenizer declares; both empty without one."""
    return _declared_ids(ctx, PAD_TOKENS, "pad_token"), _declared_ids(ctx, EOS_TOKENS, "eos_token")


def generated_per_node(r: Rollout) -> dict[int, int]:
    """Node index → output tokens its model call(s) report (`calls[k].usage.output_tokens`,
    summed when several calls name one node); nodes without such a call are absent."""
    out: dict[int, int] = {}
    for c in r.calls:
        n = c.usage.output_tokens if c.usage is not None else None
        if c.node is not None and isinstance(n, int) and n >= 0:
            out[c.node] = out.get(c.node, 0) + n
    return out


@check("mask_on_padding", "error", label="mask on padding")
def mask_on_padding(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """Loss mask 1 on tokens of a sampled turn that the policy did not generate: a pad token, a
    token after the turn's end-of-sequence token, or more tokens with mask 1 in the turn than its
    model call generated (`usage.output_tokens`). A trainer that pads a generation cut without
    an EOS and builds the response mask from the EOS trains on the pads (verl-project/verl#3805,
    case 38). The pad and EOS ids come from the run's tokenizer; without one the output-token
    count still decides. One finding per turn: the positions, the pad id, trained vs generated."""
    _require_mask(r)
    pads, eos = pad_and_eos_ids(ctx)
    generated = generated_per_node(r)
    if not pads and not eos and not generated:
        raise Skip("no pad or EOS id known (the run has no tokenizer) and no model call records its "
                   "output tokens")
    pad_list, eos_list = sorted(pads), sorted(eos)
    t = tokens(r)
    is_eos = np.isin(t.ids, eos_list) if eos_list else np.zeros(len(t.ids), dtype=bool)
    is_pad = np.isin(t.ids, pad_list) & t.mask if pad_list else np.zeros(len(t.ids), dtype=bool)
    eos_any, pad_any = t.per_node_any(is_eos), t.per_node_any(is_pad)
    trained = np.add.reduceat(t.mask.view(np.uint8), t.starts[:-1], dtype=np.int64) if t.nodes else []
    for s in _assistant(r, t, np.flatnonzero(np.asarray(trained) > 0).tolist()):
        i, a = t.nodes[s], t.arrays[s]
        node = r.nodes[i]
        n_gen = generated.get(i)
        if not eos_any[s] and not pad_any[s] and (n_gen is None or trained[s] <= n_gen):
            continue  # no pad, no EOS, no more trained tokens than generated: nothing to report
        on_flags = a.mask
        on = np.flatnonzero(on_flags)
        eos_at = np.flatnonzero(np.isin(a.token_ids, eos_list)) if eos_list else on[:0]
        first_eos = int(eos_at[0]) if len(eos_at) else None
        # a pad id that is also an EOS id (Qwen's <|endoftext|>) is the turn's end the first time
        pad_flags = on_flags & np.isin(a.token_ids, pad_list) if pad_list else np.zeros_like(on_flags)
        if first_eos is not None:
            pad_flags[first_eos] = False
        pad_at = np.flatnonzero(pad_flags).tolist()
        after_eos = on[on > first_eos].tolist() if first_eos is not None else []
        beyond = on[n_gen:].tolist() if n_gen is not None and len(on) > n_gen else []
        positions = sorted(set(pad_at) | set(after_eos) | set(beyond))
        if not positions:
            continue
        on = on.tolist()
        pad_id = next((node.token_ids[k] for k in pad_at), next(iter(pad_list), None))
        pad_text = next((t for t, tid in ctx.special_tokens.items() if tid == pad_id), None)
        why = [w for w, hit in (("pad", pad_at), ("after_eos", after_eos), ("more_than_generated", beyond)) if hit]
        said = []
        if pad_at:
            said.append(f"{plural(len(pad_at), 'pad token')} ({pad_text + ', ' if pad_text else ''}id {pad_id})")
        if after_eos:
            said.append(f"{plural(len(after_eos), 'token')} after the EOS at {first_eos}")
        if beyond:
            said.append(f"{len(on)} trained tokens where the call reports {n_gen} output tokens" if n_gen else
                        f"{len(on)} trained tokens where the call reports no output tokens (usage.output_tokens 0)")
        yield Hit(f"node {i}: loss mask 1 on {plural(len(positions), 'token')} the policy did not generate: "
                  + "; ".join(said), i, positions[0],
                  {"positions": positions[:POSITIONS_CAP], "count": len(positions), "why": why, "pad_id": pad_id,
                   "pad_token": pad_text, "eos_at": first_eos, "trained": len(on), "generated": n_gen})

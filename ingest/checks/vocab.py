"""Checks of token ids against the run's tokenizer alone (its size and its special ids), with no
chat template needed:

- `token_out_of_vocab`: an id at or beyond the tokenizer's size (vllm-project/vllm#340: a model
  whose embedding is larger than its tokenizer samples ids the tokenizer cannot decode).
- `duplicate_bos`: a request's prompt opens with two BOS tokens (huggingface/trl#3856: the chat
  template writes `bos_token`, then the tokenizer adds its own).

Requests and their prompts are template.py's `requests()`: `extra.prompt_ids` when the reader
recorded the request's prompt, else the tokens of the nodes before it on its branch.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check
from ingest.checks.scan import tokens
from ingest.checks.template import MAX_FINDINGS, requests
from ingest.schema import Rollout
from ingest.words import plural


@check("token_out_of_vocab", "error", label="token out of vocabulary")
def token_out_of_vocab(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A token id at or beyond the run's tokenizer size (`CheckContext.vocab_size`: the
    tokenizer's ids with its added tokens, a tokenizer.json's or a SentencePiece model's): no
    tokenizer can decode it, so the model sampled (or a writer put) an id outside the vocabulary.
    One finding per node: its positions, the ids, the vocabulary size, and whether the node was
    sampled. Negative ids are `placeholder_token_id`'s."""
    size = ctx.vocab_size()
    if size is None:
        raise Skip("the vocabulary size is unknown: the run has no tokenizer (ingest with --tokenizer)")
    t = tokens(r)
    if not t.nodes:
        raise Skip("no token ids recorded")
    if t.ids.max() < size:
        return
    for s in t.slots(t.ids >= size):
        i, a = t.nodes[s], t.arrays[s].token_ids
        node = r.nodes[i]
        at = np.flatnonzero(a >= size)
        bad = at.tolist()
        ids = np.unique(a[at]).tolist()
        sampled = node.message.role == "assistant"
        yield Hit(f"node {i}: {plural(len(bad), 'sampled id' if sampled else 'id')} "
                  f"({', '.join(map(str, ids[:5]))}) not in the tokenizer ({size} ids)", i, bad[0],
                  {"positions": bad[:200], "count": len(bad), "ids": ids[:10], "vocab_size": size,
                   "sampled": sampled})


@check("duplicate_bos", "warning", label="duplicate BOS")
def duplicate_bos(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A request's prompt opens with the BOS token twice (positions 0 and 1), the BOS id being
    the config's `bos_token` or the first of `<|begin_of_text|>`, `<s>`, `<bos>` the tokenizer
    declares. Reported on the first request whose prompt opens so, once for all the requests that
    share a branch's opening; `detail`: bos id and text, the leading BOS count, where the prompt
    came from (`prompt_ids` or `branch`, then `bos_node`/`bos_position` hold the first BOS), the
    requests. Where `template_mismatch` also runs, it leaves out a prompt whose
    only difference from the rendering is this extra BOS."""
    bos = ctx.bos()
    if bos is None:
        raise Skip("no BOS token known for this run (no tokenizer with <|begin_of_text|>, <s>, <bos> "
                   "or a bos_token stored)")
    text, bos_id = bos
    seen: dict[tuple, dict] = {}
    for q in requests(r):
        head = q.prompt_head(2)
        if len(head) < 2 or head[0][2] != bos_id or head[1][2] != bos_id:
            continue
        node, pos = head[0][0], head[0][1]
        key = ("request", q.node) if node is None else ("branch", node)
        if key in seen:
            seen[key]["detail"]["requests"].append(q.node)
            continue
        if len(seen) >= MAX_FINDINGS:
            break
        detail = {"bos_id": bos_id, "bos_token": text, "positions": [0, 1],
                  "prompt": "branch" if key[0] == "branch" else "prompt_ids", "requests": [q.node]}
        if node is None:  # a recorded prompt: positions are the prompt's
            rec = q.recorded
            detail["leading_bos"] = next((k for k, t in enumerate(rec) if t != bos_id), len(rec))
        else:  # the branch's own tokens: say which message holds the first BOS
            detail |= {"leading_bos": max(2, _leading(r.nodes[node].token_ids, pos, bos_id)),
                       "bos_node": node, "bos_position": pos}
        # on the request whose prompt it opens, whichever way the format records prompts (the matrix)
        seen[key] = {"node": q.node, "position": None, "detail": detail}
    for f in seen.values():
        d = f["detail"]
        yield Hit(f"node {d['requests'][0]}: the prompt opens with {d['leading_bos']} BOS tokens ({d['bos_token']})",
                  f["node"], f["position"], d)


def _leading(ids: list[int], pos: int, bos_id: int) -> int:
    """How many BOS ids run from `ids[pos]` on."""
    k = pos
    while k < len(ids) and ids[k] == bos_id:
        k += 1
    return k - pos

"""Checks that the token ids the policy was trained on are what its chat template makes of the
messages: the faults of multi-turn RL that crash nothing.

- `reasoning_stripped`: re-rendering the history dropped the reasoning the model sampled
  (Qwen3-style templates strip `<think>` blocks from earlier turns; axon-rl/gem#44,
  verl-project/verl#6854). A classified `token_drift`, reported in its place.
- `tool_results_split`: k parallel tool results rendered as k turns where the template renders
  one (THUDM/slime#2263: equal lengths of ids and mask proved nothing).
- `template_mismatch`: re-render every request's messages with the run's chat template
  (ingest/chat_template.py, sandboxed), tokenize, compare with the recorded prompt ids.

A request is an assistant node with token ids; its prompt is `extra.prompt_ids` when the reader
recorded the request's full prompt, else the tokens of the nodes before it on its branch.
"""
from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice

import numpy as np

from ingest.chat_template import TemplateError, render
from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check, memo
from ingest.checks.scan import index, with_extra
from ingest.schema import Message, Rollout
from ingest.words import plural

THINK_TOKENS = ("<think>", "</think>")
MAX_FINDINGS = 10
MAX_RENDERS = 64  # requests re-rendered per rollout by template_mismatch (the first and last 32)
WINDOW = 24  # tokens of text shown on each side of a divergence


@dataclass
class Request:
    """One request: the assistant node it produced and what it sampled. Its `path` and `prompt`
    are computed on first use: a long rollout's branch prompts together are quadratic in its
    turns, and most checks need few of them (`prompt_head` needs none)."""

    node: int  # the assistant node this request produced
    completion: list[int]
    rollout: Rollout = field(repr=False, compare=False)

    @cached_property
    def path(self) -> list[int]:
        """Node indices from the root to `node`, inclusive."""
        return _path(self.rollout, self.node)

    @property
    def recorded(self) -> list[int] | None:
        """The request's full prompt as the reader recorded it (`extra.prompt_ids`), or None."""
        v = self.rollout.nodes[self.node].extra.get("prompt_ids")
        return list(v) if isinstance(v, list) and all(isinstance(t, int) for t in v) else None

    @cached_property
    def prompt(self) -> list[int] | None:
        """The prompt ids: `recorded`, else the tokens of the nodes before `node` on its branch
        (None when they have none)."""
        if (rec := self.recorded) is not None:
            return rec
        before = list(itertools.chain.from_iterable(self.rollout.nodes[j].token_ids for j in self.path[:-1]))
        return before if before else None

    def prompt_head(self, n: int) -> list[tuple[int | None, int, int]]:
        """The first `n` prompt ids as (node holding it, position in that node, id), without
        building the prompt; the node is None for a recorded prompt (positions are the prompt's)."""
        if (rec := self.recorded) is not None:
            return [(None, k, t) for k, t in enumerate(rec[:n])]
        parent = self.rollout.nodes[self.node].parent
        return memo(f"branch_heads:{n}", lambda: branch_heads(self.rollout, n)).get(parent, [])


def _path(r: Rollout, i: int) -> list[int]:
    out, cur, seen = [], i, set()
    while cur is not None and cur not in seen and 0 <= cur < len(r.nodes):
        seen.add(cur)
        out.append(cur)
        cur = r.nodes[cur].parent
    return out[::-1]


def branch_heads(r: Rollout, n: int) -> dict[int, list[tuple[int, int, int]]]:
    """node → the first `n` tokens of its branch from the root through it, as (node, position in
    it, id): one pass over the nodes (each node extends its parent's head, shared once full)."""
    heads: dict[int, list[tuple[int, int, int]]] = {}
    for i in range(len(r.nodes)):
        chain, on, cur = [], set(), i
        while cur is not None and 0 <= cur < len(r.nodes) and cur not in heads and cur not in on:
            chain.append(cur)
            on.add(cur)
            cur = r.nodes[cur].parent
        base = heads.get(cur, []) if cur is not None else []
        for j in reversed(chain):
            if len(base) < n:
                base = base + [(j, k, t) for k, t in enumerate(r.nodes[j].token_ids[:n - len(base)])]
            heads[j] = base
    return heads


def requests(r: Rollout) -> list[Request]:
    """Every request (assistant node with token ids), in node order; built once per check run
    (several checks read them, and a request keeps the prompt it built)."""
    return memo("requests", lambda: [Request(i, list(node.token_ids), r) for i, node in enumerate(r.nodes)
                                     if node.message.role == "assistant" and node.token_ids])


def _first_divergence(expected: list[int], found: list[int]) -> int | None:
    """The first index where `found` differs from `expected` or ends before it; None when
    `found` starts with all of `expected`. Compared at C speed (equal lists first, then numpy)."""
    n = min(len(expected), len(found))
    if expected[:n] == found[:n]:
        return n if n < len(expected) else None
    try:
        return int(np.flatnonzero(_ids(expected[:n]) != _ids(found[:n]))[0])
    except OverflowError:  # a recorded id beyond int64: compared one by one
        return next(k for k in range(n) if expected[k] != found[k])


def _ids(ids: list[int]) -> np.ndarray:
    """int64 array of a list of ids; OverflowError for an id beyond int64."""
    return np.fromiter(ids, dtype=np.int64, count=len(ids))


def _pack(ids: list[int]) -> bytes:
    return struct.pack(f"<{len(ids)}i", *ids)


def _resync(expected: list[int], found: list[int], d: int) -> tuple[int, int]:
    """(deleted, inserted): the fewest tokens of `expected` from `d` on that must go so that
    its rest reappears in `found` from `d + inserted` on."""
    fb = _pack(found)
    for deleted in range(0, len(expected) - d + 1):
        tail = expected[d + deleted:]
        if not tail:
            return deleted, 0
        tb, start = _pack(tail), d * 4
        while (pos := fb.find(tb, start)) >= 0:
            if pos % 4 == 0:
                return deleted, pos // 4 - d
            start = pos + 1
    return len(expected) - d, 0


def _has_reasoning(m: Message, completion: list[int], ctx: CheckContext) -> bool:
    if (m.reasoning_content or "").strip():
        return True
    if isinstance(m.content, list) and any(p.get("type") in ("thinking", "redacted_thinking", "reasoning")
                                           for p in m.content):
        return True
    if "<think>" in m.text() or "</think>" in m.text():
        return True
    think = {ctx.special_tokens[t] for t in THINK_TOKENS if t in ctx.special_tokens}
    return bool(think & set(completion))


def _drift_node(r: Rollout, req: Request) -> int:
    """The node that holds the reader's token_drift record for this request (else the request)."""
    return next((j for j in reversed(req.path) if r.nodes[j].extra.get("token_drift")), req.node)


def stripped_reasoning(r: Rollout, ctx: CheckContext) -> dict[int, dict]:
    """node → facts, for each request whose prompt lost reasoning the previous request sampled:
    the prompt diverges from previous prompt + completion inside that completion, the previous
    turn had reasoning, and tokens of it vanished (replaced by fewer, e.g. an empty think block)."""
    if not any(r.nodes[i].extra.get("prompt_ids") is not None or r.nodes[i].extra.get("token_drift")
               for i in with_extra(r)):
        return {}  # prompts are the graph's own prefixes: one cannot drop what the other sampled
    reqs = [q for q in requests(r) if q.prompt is not None]
    out = {}
    for a, b in zip(reqs, reqs[1:]):
        # b follows a: a is on b's branch, or b's branch is one a drift started (a new root, or a
        # fork that restates the history, as verifiers' graph stores it)
        if a.node not in b.path and not any(r.nodes[j].extra.get("token_drift") for j in b.path):
            continue
        expected = a.prompt + a.completion
        d = _first_divergence(expected, b.prompt)
        if d is None or d < len(a.prompt):
            continue
        deleted, inserted = _resync(expected, b.prompt, d)
        if deleted <= inserted or not _has_reasoning(r.nodes[a.node].message, a.completion, ctx):
            continue
        out[_drift_node(r, b)] = {"index": d, "vanished": deleted, "replaced_by": inserted,
                                  "previous_node": a.node, "request_node": b.node,
                                  "expected": expected[d], "found": b.prompt[d] if d < len(b.prompt) else None}
    return out


@check("reasoning_stripped", "error", label="reasoning stripped")
def reasoning_stripped(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The next request's prompt lacks the reasoning the model sampled in the previous turn,
    because a chat template re-rendered the history (a Qwen3-style empty think block where the
    sampled reasoning was is the common form). Reports the first divergent index and the number
    of sampled tokens that vanished; reported in place of the generic `token_drift`."""
    for node, f in stripped_reasoning(r, ctx).items():
        yield Hit(f"node {node}: the prompt drops {plural(f['vanished'], 'sampled reasoning token')} of node "
                  f"{f['previous_node']} from index {f['index']}"
                  + (f" (replaced by {f['replaced_by']})" if f["replaced_by"] else ""), node, f["index"], f)


def _role_after(ctx: CheckContext, ids: list[int], k: int) -> str:
    """The role name that follows a turn-start token at `k` (text up to the newline)."""
    return ctx.decode(ids[k + 1:k + 6]).split("\n")[0].strip().lower()


def _turn_openings(ctx: CheckContext, ids: list[int], start_id: int) -> list[int]:
    """Positions of turn starts in `ids` that do not open the model's own turn."""
    if start_id not in ids:
        return []
    try:
        at = np.flatnonzero(_ids(ids) == start_id).tolist()
    except OverflowError:  # a recorded id beyond int64: looked at one by one
        at = [k for k, t in enumerate(ids) if t == start_id]
    return [k for k in at if not _role_after(ctx, ids, k).startswith(("assistant", "model"))]


def _message_dict(m: Message) -> dict:
    """A message as chat templates expect it (OpenAI shape; tool arguments parsed when they are
    a JSON object, as HF templates apply `tojson` to them)."""
    d: dict = {"role": m.role, "content": m.content if m.content is not None else ""}
    if m.reasoning_content is not None:
        d["reasoning_content"] = m.reasoning_content
    if m.tool_calls:
        calls = []
        for tc in m.tool_calls:
            try:
                args = json.loads(tc.arguments) if tc.arguments else {}
            except ValueError:
                args = tc.arguments
            calls.append({"id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": args}})
        d["tool_calls"] = calls
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        d["name"] = m.name
    return d


def _render_ids(r: Rollout, ctx: CheckContext, path: list[int], *, generation: bool) -> list[int]:
    text = render(ctx.chat_template, [_message_dict(r.nodes[j].message) for j in path], tools=r.tools or None,
                  add_generation_prompt=generation, **ctx.template_kwargs)
    return ctx.encode(text)


def _results_span(r: Rollout, i: int) -> list[int] | None:
    """The ids the environment added after request `i` when the messages carry no tokens but each
    request its full prompt (`extra.prompt_ids`, e.g. chat records with `turns`): the next
    request's prompt after request `i`'s prompt + completion. None when either prompt is not
    recorded or the next prompt does not extend this one (that is a `token_drift`)."""
    reqs = [q for q in requests(r) if q.prompt is not None and r.nodes[q.node].extra.get("prompt_ids") is not None]
    k = next((n for n, q in enumerate(reqs) if q.node == i), None)
    if k is None or k + 1 >= len(reqs):
        return None
    head = reqs[k].prompt + reqs[k].completion
    nxt = reqs[k + 1].prompt
    return nxt[len(head):] if nxt[:len(head)] == head else None


def _span_openings(results: list[int], openings: list[int]) -> list[tuple[int, int]]:
    """(node, position) of each turn opening in a span that no message holds: the k-th opening
    starts the k-th result's share of the span (position 0), as a collector tokenizing message by
    message would store it; openings beyond the results stay on the last, at their offset."""
    out = []
    for k, at in enumerate(openings):
        out.append((results[k], 0) if k < len(results) else (results[-1], at - openings[len(results) - 1]))
    return out


@check("tool_results_split", "error", label="tool results split")
def tool_results_split(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """After an assistant turn with k parallel calls, the k results were rendered as k separate
    turns, where the chat template renders one grouped turn. Turn boundaries are counted from the
    turn-start token the tokenizer declares (`<|im_start|>`, `<start_of_turn>`, ...). With a
    stored chat template the results are re-rendered and the first id that differs is reported;
    without one, ChatML-family tokenizers (Qwen) are taken to group results, as their templates
    do, and other families are skipped. Equal lengths of ids and mask prove nothing here.
    Where the reader could keep the tokens between two requests only as one delta on the last
    result (formats that record each request's full prompt, not each message's tokens: NeMo Gym),
    the turns are counted in that delta, and the finding lands on it at the second turn's first
    token (positions are those of the stored node; `detail.pooled` says so). Where no result
    carries tokens but each request records its full prompt (chat records with `turns`), the
    turns are counted in the ids the next prompt adds, the k-th opening starting the k-th result."""
    parallel = index(r).parallel
    if not parallel:
        return
    children: dict[int, list[int]] = {}
    for j, n in enumerate(r.nodes):
        if n.parent is not None:
            children.setdefault(n.parent, []).append(j)
    candidates = []
    for i in parallel:
        node = r.nodes[i]
        results, cur = [], i  # the chain of tool messages that follows the call
        while len(results) < len(node.message.tool_calls):
            nxt = next((j for j in children.get(cur, []) if r.nodes[j].message.role == "tool"), None)
            if nxt is None:
                break
            results.append(nxt)
            cur = nxt
        with_tokens = [j for j in results if r.nodes[j].token_ids]
        if len(with_tokens) >= 2 or (len(results) >= 2 and with_tokens == results[-1:]):
            candidates.append((i, results, with_tokens, None))  # one delta on the last: the reader could not split
        elif len(results) >= 2 and (span := _results_span(r, i)) is not None:
            candidates.append((i, results, results, span))  # no message tokens: the next prompt has them
    if not candidates:
        return
    start_id = ctx.turn_start_id()
    if start_id is None or ctx.tokenizer is None:
        raise Skip("no tokenizer with turn-start special tokens stored for this run")
    found = 0
    for i, chain, results, span in candidates:
        if span is None:
            ids = list(itertools.chain.from_iterable(r.nodes[j].token_ids for j in results))
            where = [(j, k) for j in results for k in _turn_openings(ctx, r.nodes[j].token_ids, start_id)]
        else:
            ids = span
            where = _span_openings(chain, _turn_openings(ctx, span, start_id))
        if len(where) < 2:
            continue
        detail = {"calls": len(r.nodes[i].message.tool_calls), "results": len(chain), "turns": len(where),
                  "assistant_node": i, **({"pooled": True} if span is None and len(results) < len(chain) else {})}
        if ctx.chat_template:
            path = _path(r, chain[-1])
            try:
                before = _render_ids(r, ctx, path[:path.index(i) + 1], generation=False)
                rendered = _render_ids(r, ctx, path, generation=False)[len(before):]
            except TemplateError as e:
                raise Skip(f"the chat template failed to render: {e}") from None
            turns = len(_turn_openings(ctx, rendered, start_id))
            if turns >= len(where):
                continue  # the template renders each result as its own turn too (Llama 3 style)
            k = _first_divergence(rendered, ids)
            detail |= {"template_turns": turns, "index": k,
                       "expected": rendered[k] if k is not None and k < len(rendered) else None,
                       "found": ids[k] if k is not None and k < len(ids) else None}
        elif start_id != ctx.special_tokens.get("<|im_start|>"):
            raise Skip(f"{len(where)} tool results rendered as {len(where)} turns; no chat template stored to tell "
                       f"whether this model's template groups them")
        else:
            detail["template_turns"] = None
        node, pos = where[1]
        found += 1
        yield Hit(f"node {i}: {detail['results']} parallel tool results rendered as {len(where)} separate turns"
                  + ("" if detail.get("template_turns") is None
                     else f"; the chat template renders {detail['template_turns']}"),
                  node, pos, detail)
        if found >= MAX_FINDINGS:
            return


@check("template_mismatch", "error", label="template mismatch")
def template_mismatch(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """Each request's messages, re-rendered with the run's chat template (sandboxed Jinja2) and
    tokenized with the run's tokenizer, differ from the prompt ids that were recorded. Reports
    the first index that differs and the text on both sides: "the messages say X, but the model
    was trained on Y". A rendering with or without the generation prompt may match. A prompt
    that differs only by a second BOS in front is left to `duplicate_bos`. At most
    MAX_RENDERS requests per rollout are re-rendered (the first and the last 32)."""
    if not ctx.chat_template:
        raise Skip("no chat template stored for this run (give --tokenizer a folder or a tokenizer_config.json "
                   "with chat_template)")
    if ctx.tokenizer is None:
        raise Skip("no tokenizer.json to tokenize the rendered template (a SentencePiece model, or a tokenizer "
                   "stored before its encoder was kept: ingest again with --tokenizer)")
    reqs = [q for q in requests(r) if q.prompt_head(1)]  # a prompt is built only for a request rendered
    if not reqs:
        raise Skip("no prompt token ids recorded")

    def with_messages(q: Request) -> bool:
        return not any(r.nodes[j].extra.get("segment") == "prompt" for j in q.path)

    # the first and the last MAX_RENDERS // 2 requests with messages: the rest costs a render each
    first = list(islice(filter(with_messages, reqs), MAX_RENDERS // 2))
    taken = {q.node for q in first}
    last = [q for q in islice(filter(with_messages, reversed(reqs)), MAX_RENDERS // 2) if q.node not in taken]
    usable = first + last[::-1]
    if not usable:
        raise Skip("the prompts were recorded as token ids only, without their messages")
    found = 0
    bos = ctx.bos()
    for q in usable:
        # a prompt that is the rendering with one more BOS in front is `duplicate_bos`'s (reported there)
        extra_bos = bos is not None and q.prompt[:2] == [bos[1], bos[1]]
        try:
            rendered = _render_ids(r, ctx, q.path[:-1], generation=True)
            if rendered == q.prompt or (extra_bos and rendered == q.prompt[1:]):
                continue
            plain = _render_ids(r, ctx, q.path[:-1], generation=False)
            if plain == q.prompt or (extra_bos and plain == q.prompt[1:]):
                continue
        except TemplateError as e:
            raise Skip(f"the chat template failed to render: {e}") from None
        k = _first_divergence(rendered, q.prompt)
        if k is None:
            k = len(rendered)  # the recorded prompt goes on past the rendering
        lo = max(0, k - WINDOW)
        detail = {"index": k, "rendered_tokens": len(rendered), "recorded_tokens": len(q.prompt),
                  "expected": rendered[k] if k < len(rendered) else None,
                  "found": q.prompt[k] if k < len(q.prompt) else None,
                  "rendered_text": ctx.decode(rendered[lo:k + WINDOW]),
                  "recorded_text": ctx.decode(q.prompt[lo:k + WINDOW])}
        found += 1
        yield Hit(f"node {q.node}: {_divergence(detail['expected'], detail['found'], k)}", q.node, None, detail)
        if found >= MAX_FINDINGS:
            return


def _divergence(expected: int | None, found: int | None, k: int) -> str:
    """Where the rendering and the recorded prompt part, said of the side that goes on: never
    "recorded None" (a shorter recorded prompt ends; a longer one goes on past the rendering)."""
    if found is None:
        return f"the messages render to {expected} at token {k} but the recorded prompt ends at token {k}"
    if expected is None:
        return f"the rendering ends at token {k} but the recorded prompt goes on with {found}"
    return f"the messages render to {expected} but the prompt recorded {found} at token {k}"

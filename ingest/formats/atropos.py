"""Atropos ScoredDataGroup JSONL (docs/formats.md).

Source: NousResearch/atropos `atroposlib/envs/base.py` (`ScoredDataGroup`, written one group per
line by the environment's `process` / `--data_path_to_save_groups` JSONL dump):

    {tokens: [[int]], masks: [[int]] (-100 = not trained, else the token id repeated),
     scores: [float], advantages?: [[float]], ref_logprobs?: [[float]],
     inference_logprobs?: [[float]], messages?: [[{role, content}]], generation_params?,
     overrides?: [dict], group_overrides?: dict, images?, token_scores?, token_weights?, ...}

One line = one group; sample i = one rollout (`<source>#<line-1>.<i>`, group `<source>#<line-1>`,
index i, size = number of samples). Roles `agent` → assistant and `environment` → user, the
source role kept. The flat token sequence (Atropos's `tokenize_for_trainer`: the messages through
the chat template) is split into per-message spans, by the first rule that applies:

1. The template's turn marker: a token id that opens every rendered message, at position 0 or
   right after a BOS, and occurs exactly once per message (Llama 3 `<|start_header_id|>`, ChatML
   `<|im_start|>`, Gemma `<start_of_turn>`). Each message gets its own tokens, its mask as
   recorded (`extra.token_span = "turns"` on the rollout). A run of tool results that a ChatML
   template renders as one turn counts once; the turn is cut where each result's wrapper opens
   (`<tool_response>`: an id near the turn's start that occurs once per result), else it goes to
   the run's last message, marked `extra.token_span = "joined"` as in rule 2 (issue 20: a mask
   hole no longer unsplits the sample).
   An agent turn's untrained role header (the generation prompt) goes with the message before
   it, so the agent's node starts at its first trained token. The real rubiks group shows why
   this rule comes first: its mask trains the *last environment message* (the role header token
   after the marker reads `environment`), not the agent's turn; mask runs alone gave those tokens
   to the agent and every earlier token to one user message (issue 19).
2. Mask runs (trained runs are the agent's turns; `_build.align_segments`): the messages between
   two agent turns share one span, on the last of them, which says so: `extra.token_span =
   "joined"` and `extra.token_messages` (the message indices whose tokens it holds).
3. Otherwise all tokens go on the last message with `extra.token_span = "unsplit"`.

`inference_logprobs` of 1.0 at an untrained position is Atropos's filler for a token nobody
sampled (the ManagedServer's prompt positions), read as no logprob (issue 20: it is no invalid
logprob). Per-token arrays (advantages, inference and reference logprobs, token weights and scores) follow the same
spans. The score is the reward. Atropos writes no ending: `unknown`.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ingest.align import fill_node
from ingest.errors import RecordError
from ingest.fields import FieldError, floats, ints, is_number_or_none
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder, align_segments, mask_runs
from ingest.formats.base import ReadContext, guarded, shape_error
from ingest.schema import Ending, EndingInfo, GroupRef, Message, Rollout, RunRef
from ingest.source import Source

NAME = "atropos"
EXPECTS = "JSONL of ScoredDataGroups (`tokens`, `masks`, `scores` lists, one entry per sample)"

IGNORE = -100  # Atropos mask value for untrained tokens
UNSAMPLED = 1.0  # Atropos inference_logprobs value at prompt / environment positions (issue 20)
ROLES = {"agent": "assistant", "environment": "user"}
PER_SAMPLE = ("tokens", "masks", "scores", "advantages", "ref_logprobs", "inference_logprobs", "messages",
              "token_scores", "token_weights", "overrides", "parsed_actions", "images", "distill_token_ids",
              "distill_logprobs")


def _is_group(d: Any) -> bool:
    return isinstance(d, dict) and all(isinstance(d.get(k), list) for k in ("tokens", "masks", "scores"))


def sniff(source: Source) -> bool:
    return source.kind in ("jsonl", "json") and _is_group(source.first)


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    stem = ctx.source_key(source)
    if source.kind == "jsonl":
        items: Any = ((line, f"{stem}#{line - 1}", v) for line, v in source.lines())
    else:
        items = iter([(None, stem, source.document)])
    for line, gid, value in items:
        if isinstance(value, RecordError):
            yield value
            continue
        if not _is_group(value):
            yield shape_error(source.name, line, None, value, "Atropos ScoredDataGroup",
                              (("tokens", "array"), ("masks", "array"), ("scores", "array")))
            continue
        n = len(value["tokens"])
        for key in ("masks", "scores"):
            if len(value[key]) != n:
                yield RecordError(source.name, line, key, f"{len(value[key])} entries for {n} samples")
                break
        else:
            for i in range(n):
                yield guarded(source.name, line, f"[{i}]",
                              lambda: _rollout(source, ctx, value, i, n, line, gid))


def _sample(d: dict, key: str, i: int) -> Any:
    v = d.get(key)
    if isinstance(v, list) and i < len(v):
        return v[i]
    return None


def _message(m: Any, path: str) -> Message:
    if isinstance(m, dict) and isinstance(m.get("role"), str) and m["role"].lower() in ROLES:
        src = m["role"]
        msg = _openai.message_from_openai({**m, "role": ROLES[src.lower()]}, path).message
        msg.extra["source_role"] = src
        return msg
    return _openai.message_from_openai(m, path).message


def _turn_spans(tokens: list[int], messages: list[Message]) -> tuple[list[tuple[int, int]], dict] | None:
    """Per-message (start, end) spans from the chat template's turn marker (module docstring,
    rule 1), or None when no token id opens every turn: the first of tokens[0:2] that occurs
    exactly once per message, first at position 0 or 1 (after a BOS, which joins the first span).
    ChatML templates render a run of tool results as one turn: when the marker occurs once per
    message with each run of consecutive tool messages counted once, the run's turn goes to its
    last message (`joined`: {that message: the run's message indices}), the others get no tokens.
    Returns (spans, joined)."""
    n = len(messages)
    if n < 2 or len(tokens) < 2:
        return None
    units: list[list[int]] = []  # messages that share one turn
    for k, m in enumerate(messages):
        if m.role == "tool" and units and messages[units[-1][-1]].role == "tool":
            units[-1].append(k)
        else:
            units.append([k])
    for grouping in ([[k] for k in range(n)], units):
        if grouping is units and len(units) == n:
            break
        for t in dict.fromkeys(tokens[:2]):
            at = [j for j, x in enumerate(tokens) if x == t]
            if len(at) == len(grouping) and at[0] <= 1 and len(tokens) >= 2 * len(grouping):
                starts = [0, *at[1:], len(tokens)]
                spans = [(0, 0)] * n
                joined = {}
                for u, idxs in enumerate(grouping):
                    parts = _results_in_turn(tokens, starts[u], starts[u + 1], len(idxs), t)
                    if parts is not None:
                        for k, part in zip(idxs, parts):
                            spans[k] = part
                        continue
                    spans[idxs[-1]] = (starts[u], starts[u + 1])
                    if len(idxs) > 1:
                        joined[idxs[-1]] = idxs
                return spans, joined
    return None


def _results_in_turn(tokens: list[int], s: int, e: int, k: int, marker: int) -> list[tuple[int, int]] | None:
    """The spans of `k` tool results rendered in one turn `tokens[s:e]`, cut where each result's
    wrapper opens: the id that first occurs earliest in the turn (within its first 4 tokens, after
    the marker) and occurs exactly `k` times (ChatML's `<tool_response>`); the first result keeps
    the turn's head, the last its tail. None when no id does (the run stays joined)."""
    if k < 2:
        return None
    head = tokens[s + 1:min(e, s + 5)]
    for t in dict.fromkeys(head):
        if t == marker:
            continue
        at = [j for j in range(s, e) if tokens[j] == t]
        if len(at) == k:
            cuts = [s, *at[1:], e]
            return [(a, b) for a, b in zip(cuts, cuts[1:])]
    return None


def _headers_to_prompt(span_of: dict[int, tuple[int, int]], messages: list[Message], trained: list[bool]) -> None:
    """An agent turn's untrained head (the role header the template wrote: the generation prompt
    of that request) joins the message before it, so the agent's node starts at what was sampled,
    as in every reader with per-request prompts (token positions agree across formats; issue 20).
    A turn with no trained token keeps its span (the rubiks group trains the environment's turn)."""
    for k in sorted(span_of):
        s, e = span_of[k]
        if messages[k].role != "assistant" or k == 0:
            continue
        first = next((j for j in range(s, e) if trained[j]), None)
        before = max((j for j in span_of if j < k), default=None)
        if first is None or first == s or before is None or span_of[before][1] != s:
            continue
        span_of[before] = (span_of[before][0], first)
        span_of[k] = (first, e)


def _rollout(source: Source, ctx: ReadContext, d: dict, i: int, n: int, line: int | None, gid: str) -> Rollout:
    tokens = ints(d["tokens"][i], f"tokens[{i}]") or []
    raw_mask = ints(d["masks"][i], f"masks[{i}]") or []
    if len(raw_mask) != len(tokens):
        raise FieldError(f"masks[{i}]", f"{len(raw_mask)} mask values for {len(tokens)} tokens")
    trained = [m != IGNORE for m in raw_mask]
    mismatch = sum(1 for m, t, tr in zip(raw_mask, tokens, trained) if tr and m != t)
    inference = floats(_sample(d, "inference_logprobs", i), f"inference_logprobs[{i}]")
    if inference is not None:  # Atropos fills the positions nobody sampled with 1.0 (ManagedServer): not a logprob
        inference = [None if x == UNSAMPLED and k < len(trained) and not trained[k] else x
                     for k, x in enumerate(inference)]
    per_token = {
        "advantages": floats(_sample(d, "advantages", i), f"advantages[{i}]"),
        "logprobs": inference,
        "reference_logprobs": floats(_sample(d, "ref_logprobs", i), f"ref_logprobs[{i}]"),
        "token_weights": floats(_sample(d, "token_weights", i), f"token_weights[{i}]"),
        "token_scores": floats(_sample(d, "token_scores", i), f"token_scores[{i}]"),
    }
    raw_msgs = _sample(d, "messages", i)
    if raw_msgs is not None and not isinstance(raw_msgs, list):
        raise FieldError(f"messages[{i}]", "expected a list of messages")
    messages = [_message(m, f"messages[{i}][{k}]") for k, m in enumerate(raw_msgs or [])]
    if not messages:
        messages = [Message(role="assistant", content=None, extra={"synthetic": "tokens without messages"})]

    turns = _turn_spans(tokens, messages)
    # Segments (rule 2): each assistant message alone, each run of other messages together.
    segments: list[tuple[str, list[int]]] = []
    for k, m in enumerate(messages):
        kind = "a" if m.role == "assistant" else "e"
        if kind == "e" and segments and segments[-1][0] == "e":
            segments[-1][1].append(k)
        else:
            segments.append((kind, [k]))
    spans = align_segments(segments, mask_runs([1 if t else 0 for t in trained])) if tokens and not turns else None
    span_of: dict[int, tuple[int, int]] = {}
    joined: dict[int, list[int]] = {}
    if turns is not None:
        turns, joined = turns
        span_of = {k: span for k, span in enumerate(turns) if span[1] > span[0]}
        _headers_to_prompt(span_of, messages, trained)
    elif spans is not None:
        for (_, idxs), span in zip(segments, spans):
            if span[1] > span[0]:
                span_of[idxs[-1]] = span
                if len(idxs) > 1:
                    joined[idxs[-1]] = idxs
        covered = sum(e - s for s, e in span_of.values())
        if covered != len(tokens):
            spans = None
    unsplit = bool(tokens) and spans is None and turns is None
    if unsplit:
        span_of, joined = {len(messages) - 1: (0, len(tokens))}, {}

    b = RolloutBuilder()
    for k, msg in enumerate(messages):
        sampled = msg.role == "assistant"
        if k in span_of:
            s, e = span_of[k]
            extra: dict[str, Any] = {"token_span": "unsplit"} if unsplit else {}
            if k in joined:
                extra = {"token_span": "joined", "token_messages": joined[k]}
            idx = b.add(msg, tokens[s:e], sampled=sampled, mask=trained[s:e],
                        logprobs=per_token["logprobs"][s:e] if per_token["logprobs"] is not None else None,
                        extra=extra)
            node = b.nodes[idx]
            adv, ref = per_token["advantages"], per_token["reference_logprobs"]
            fill_node(node, advantages=adv[s:e] if adv is not None else None,
                      reference_logprobs=ref[s:e] if ref is not None else None)
            if per_token["token_weights"] is not None:
                node.loss_weights = {"token_weights": list(per_token["token_weights"][s:e])}  # null: none given
            if per_token["token_scores"] is not None:
                node.extra["token_scores"] = per_token["token_scores"][s:e]
        else:
            b.add(msg, sampled=sampled)

    score = d["scores"][i]
    if not is_number_or_none(score):
        raise FieldError(f"scores[{i}]", "expected a number")
    extra: dict[str, Any] = {k: v for k, v in d.items() if k not in PER_SAMPLE}
    for key in ("overrides", "parsed_actions", "images"):
        v = _sample(d, key, i)
        if v is not None:
            extra[key] = v
    if mismatch:
        extra["mask_value_mismatch"] = mismatch  # trained positions whose mask is not the token id
    if unsplit and tokens:
        extra["token_span"] = "unsplit"
    elif turns is not None:
        extra["token_span"] = "turns"
    elif joined:
        extra["token_span"] = "joined"
    rollout = Rollout(
        id=f"{gid}.{i}", run=RunRef(id=ctx.run_for(source)), step=ctx.step,
        group=GroupRef(id=gid, index=i, size=n), nodes=b.nodes, calls=b.calls,
        reward=None if score is None else float(score), extra=extra,
        ending=EndingInfo(type=Ending.unknown, message="Atropos ScoredDataGroups carry no ending"),
        source={"format": NAME, "file": source.name, "line": line, "path": f"[{i}]"},
    )
    return b.finish(rollout)

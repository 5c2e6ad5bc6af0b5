"""Atropos ScoredDataGroup JSONL (NousResearch/atropos `atroposlib/envs/base.py`; ingest/formats/atropos.py;
/work/shared/formats-reference.md §5), as an environment's `--data_path_to_save_groups` dump writes it:
one group per line, one entry per sample in each list.

The shape is copied from tests/fixtures/realdata/atropos/rubiks_process_results_32.line1.jsonl:
`tokens` (the whole conversation through the chat template, `tokenize_for_trainer`), `masks` (-100
where not trained, else the token id), `scores`, `messages` (`{role, content}`, roles as
atroposlib's `Message` allows: system, user, assistant, tool; the agent's content as sampled, its
`<think>` block and any tool-call markup inline), plus the optional `advantages` (per token) and
`inference_logprobs` (per token; 1.0 where nothing was sampled, as Atropos's managed server fills
the prompt positions), `generation_params`, `group_overrides`.

What a ScoredDataGroup has no field for: each request's own prompt (one flat sequence per sample),
finish reasons, usage, timing, structured tool calls and the tools offered (messages are role and
content), a trainer logprob array (`ref_logprobs` is the reference model's), token bytes, the
training step, a declared group size or index (the samples' order is the index, their count the
size), an ending (so an errored sample cannot be said to have errored)."""
from __future__ import annotations

import json
from pathlib import Path

from tests.checks.matrix.episode import Episode, env_segments, tok_of

NAME = "atropos"
CARRIES = frozenset({"trailing_env_tokens", "token_ids", "env_tokens", "mask", "logprobs", "advantages",
                     "reward", "group", "parallel_arrays"})
IGNORE = -100
UNSAMPLED = 1.0  # Atropos's inference_logprobs value for positions the model did not sample


def _content(ep: Episode, k: int) -> str:
    """A message's content as Atropos keeps it: the agent's as the template rendered the sample."""
    turn = ep.turns[k]
    if turn.request is None or turn.role != "assistant":
        return turn.message.get("content") or ""
    tok = tok_of(ep)
    text = tok.ctx.decode(turn.request.completion_ids)
    return text[:text.rindex(tok.eos)] if tok.eos in text else text


def sample(ep: Episode) -> dict:
    """One sample's `tokens`, `masks`, `inference_logprobs`, `advantages` and `messages`."""
    tok = tok_of(ep)
    reqs = ep.requests()
    k_last, last = reqs[-1]
    tokens = list(last.prompt_ids) + list(last.completion_ids) + list(ep.trailing_ids or [])
    masks = [IGNORE] * len(tokens)
    logprobs = [UNSAMPLED] * len(tokens)
    for k, req in reqs:
        at = len(req.prompt_ids) if k != k_last else len(last.prompt_ids)
        n = len(req.completion_ids)
        mask = req.mask if req.mask is not None else [1] * n
        for j in range(n):
            masks[at + j] = tokens[at + j] if mask[j] else IGNORE
        logprobs[at:at + len(req.logprobs[:n])] = req.logprobs[:n]
    short = len(last.completion_ids) - len(last.logprobs)
    if short > 0:  # the collector's array ended `short` values early: written as it ended
        logprobs = logprobs[:len(last.prompt_ids) + len(last.logprobs)]
    # environment messages whose tokens the collator trained (mask = token id)
    bounds = [(k, len(req.prompt_ids) + len(req.completion_ids)) for k, req in reqs]
    for (k, end), (k2, _) in zip(bounds, reqs[1:] + [(len(ep.turns), None)]):
        upto = len(ep.turns[k2].request.prompt_ids) if k2 < len(ep.turns) else len(tokens)
        env = list(range(k + 1, k2))
        if not env or not any(ep.turns[j].env_mask for j in env):
            continue
        parts = env_segments(tokens[end:upto], [ep.turns[j].message.get("content") or "" for j in env], tok)
        at = end
        for j, part in zip(env, parts):
            if ep.turns[j].env_mask:
                masks[at:at + len(part)] = tokens[at:at + len(part)]
            at += len(part)
    adv = [ep.advantage if m != IGNORE else 0.0 for m in masks] if ep.advantage is not None else None
    messages = [{"role": t.role, "content": _content(ep, k)} for k, t in enumerate(ep.turns)]
    return {"tokens": tokens, "masks": masks, "inference_logprobs": logprobs, "advantages": adv,
            "messages": messages}


def group_line(episodes: list[Episode]) -> dict:
    """One ScoredDataGroup: the samples of one group, in their order."""
    samples = [sample(ep) for ep in episodes]
    group = {key: [s[key] for s in samples] for key in ("tokens", "masks")}
    group["scores"] = [ep.reward for ep in episodes]  # json.dumps writes a NaN score as NaN, as Atropos does
    if all(s["advantages"] is not None for s in samples):
        group["advantages"] = [s["advantages"] for s in samples]
    group["ref_logprobs"] = None
    group["inference_logprobs"] = [s["inference_logprobs"] for s in samples]
    group["messages"] = [s["messages"] for s in samples]
    group["generation_params"] = {"temperature": 1.0, "max_tokens": 64}
    group["overrides"] = None
    group["group_overrides"] = None
    return group


def write(episodes: list[Episode], folder: Path) -> Path:
    """One line per group (episodes of one `group` id together, in first-seen order)."""
    groups: dict[str | None, list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(ep.group, []).append(ep)
    path = folder / "groups.jsonl"
    path.write_text("".join(json.dumps(group_line(eps)) + "\n" for eps in groups.values()))
    return path

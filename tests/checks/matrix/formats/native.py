"""Native `rollscope/1` JSONL (docs/trace-format.md): the message graph with delta token ids per
node, as a token-in/token-out collector writes it. Each request's full prompt becomes the delta on
the last environment message before it (a prompt that does not extend the previous one opens a new
branch with `extra.token_drift`, ingest/formats/_build.py `request`); calls with finish reason,
`sampling.max_tokens`, usage and time; tool messages stamped with the tool's end time."""
from __future__ import annotations

from pathlib import Path

from ingest.formats._build import RolloutBuilder
from ingest.formats.native import write_line
from ingest.schema import EndingInfo, GroupRef, Message, Rollout, RunRef, Span, Task, Usage
from tests.checks.matrix.episode import Episode, env_segments, tok_of

NAME = "native"
CARRIES = frozenset({"trailing_env_tokens", "ending", "token_ids", "prompt_ids", "env_tokens", "mask",
                     "logprobs", "trainer_logprobs", "finish_reason", "max_tokens", "usage", "reasoning",
                     "tool_calls", "tools", "timing", "group", "group_index", "group_size", "advantages",
                     "reward", "step", "token_bytes", "parallel_arrays"})
STOPS = {"completed": "submitted", "max_turns": "truncated", "error": "error"}


def native_message(m: dict) -> Message:
    """An OpenAI chat message in the native shape (tool calls flat: id, name, arguments)."""
    body = {k: v for k, v in m.items() if k != "tool_calls"}
    if m.get("tool_calls"):
        body["tool_calls"] = [{"id": c.get("id"), "name": c["function"]["name"],
                               "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
    return Message.model_validate(body)


def _spread_environment(nodes, tok) -> None:
    """Give each environment message between two requests its own tokens (the builder puts the
    whole delta on the last one)."""
    run: list = []
    for node in nodes:
        if node.sampled or node.extra.get("segment"):
            run = []
            continue
        run.append(node)
        if node.token_ids and len(run) > 1 and not any(n.token_ids for n in run[:-1]):
            parts = env_segments(node.token_ids, [n.message.text() for n in run], tok)
            for n, part in zip(run, parts):
                n.token_ids, n.mask, n.logprobs, n.is_content = part, [False] * len(part), [None] * len(part), []


def to_rollout(ep: Episode) -> Rollout:
    """The episode as the native model (the graph a correct native writer lays out)."""
    b = RolloutBuilder()
    for turn in ep.turns:
        msg = native_message(turn.message)
        req = turn.request
        if req is None:
            b.add(msg, timestamp=turn.end)
            continue
        node = b.request(msg, req.prompt_ids, req.completion_ids, req.logprobs, mask=req.mask, timestamp=req.end)
        # the arrays as the collector wrote them (a short one stays short: the reader records it)
        b.nodes[node].logprobs = list(req.logprobs)
        b.nodes[node].extra.pop("source_lengths", None)
        b.nodes[node].extra.pop("overflow", None)
        if req.trainer_logprobs is not None:
            b.nodes[node].extra["trainer_logprobs"] = list(req.trainer_logprobs)
        if req.token_bytes is not None:
            b.nodes[node].extra["token_bytes"] = list(req.token_bytes)
        b.call(node, req.finish_reason, Usage(input_tokens=len(req.prompt_ids), output_tokens=req.usage_output_tokens),
               sampling={"max_tokens": req.max_tokens} if req.max_tokens is not None else None,
               time=Span(start=req.start, end=req.end) if req.start is not None else None)
    _spread_environment(b.nodes, tok_of(ep))
    if ep.trailing_ids:  # the environment's last messages, tokenized into the sequence
        last = b.nodes[-1]
        if not last.sampled and not last.token_ids:
            last.token_ids, last.mask, last.logprobs = list(ep.trailing_ids), [False] * len(ep.trailing_ids), []
            last.is_content = []
    if not ep.content_recorded:  # capture off: what the model said is not in the trace
        for node in b.nodes:
            if node.sampled:
                node.message.content, node.message.tool_calls, node.message.reasoning_content = None, None, None
                node.token_ids, node.mask, node.logprobs, node.is_content = [], [], [], []
    for turn in ep.turns:
        if turn.env_mask:  # loss mask 1 on the environment tokens the collator put after this message
            for node in b.nodes:
                if node.message.role == turn.role and node.message.content == turn.message.get("content") \
                        and node.token_ids:
                    node.mask = [True] * len(node.token_ids)
    r = Rollout(id=ep.id, run=RunRef(id=ep.run), step=ep.step, reward=ep.reward, tools=ep.tools,
                task=Task(key=ep.task), ending=EndingInfo(type=STOPS[ep.stop], detail=ep.stop),
                group=GroupRef(id=ep.group, index=ep.index, size=ep.size) if ep.group else None)
    r.ending.evidence.max_turns = ep.max_turns
    if ep.advantage is not None:
        for node in b.nodes:
            if node.sampled:
                node.advantages = [ep.advantage if m else None for m in node.mask]
    b.finish(r)
    r.ending = EndingInfo(type=STOPS[ep.stop], detail=ep.stop, evidence=r.ending.evidence)  # the source's claim
    r.ending.evidence.max_turns = ep.max_turns
    return r


def write(episodes: list[Episode], folder: Path) -> Path:
    path = folder / "rollouts.jsonl"
    path.write_bytes(b"".join(write_line(to_rollout(ep)) for ep in episodes))
    return path

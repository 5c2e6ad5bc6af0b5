"""The neutral episode every format writer renders: what happened, independent of any format.

An `Episode` is one rollout: its messages (`Turn.message`, OpenAI chat shape), and for each
assistant message the `Request` that produced it: the full prompt ids the server received, the
completion ids it sampled, their behaviour logprobs, the finish reason (OpenAI spelling), the
`max_tokens` cap, usage and timing. Formats keep different parts of this (`FIELDS`); a writer
writes what its format can hold, in the format's own shape.

`clean_group(tok)` renders a clean group with a real tokenizer and chat template (tiny-qwen3,
ChatML with Qwen3 reasoning rules; or tok-llama3ish, which has a BOS), token in, token out: each
request's prompt is the previous prompt plus its completion plus the environment's tokens, as a
correct multi-turn collector sends it. A fault injector (faults.py) edits a deep copy.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ingest.chat_template import render
from ingest.checks.context import CheckContext, load_context
from tests.conftest import FIXTURES

# What a format may hold, by name: the `cannot (field)` of the generated table names these.
FIELDS = {
    "token_ids": "the token ids of each completion",
    "prompt_ids": "the full prompt ids of each request",
    "env_tokens": "token ids (and loss mask) of environment messages",
    "trailing_env_tokens": "token ids of environment messages after the last model call",
    "ending": "how each rollout ended (an error told apart from an answer)",
    "mask": "a loss mask per token",
    "logprobs": "behaviour logprobs per sampled token",
    "trainer_logprobs": "a second (trainer) logprob array",
    "finish_reason": "the finish reason of each model call",
    "max_tokens": "the max_tokens cap of each model call",
    "usage": "the output tokens a call reports (usage)",
    "reasoning": "the reasoning of an assistant message",
    "tool_calls": "structured tool calls with ids",
    "tools": "the tools offered to the model",
    "timing": "start and end of each model and tool call",
    "group": "the group id of each rollout",
    "advantages": "the advantage recorded per rollout",
    "reward": "a reward per rollout",
    "step": "the training step",
    "token_bytes": "the bytes of each token",
    "parallel_arrays": "per-token arrays kept apart from the ids (so their lengths can differ)",
    "group_index": "each rollout's index within its group",
    "group_size": "the declared group size",
}

T0 = 1_800_000_000.0  # 2027-01-15: timestamps of the clean episodes


@dataclass
class Request:
    """One model call: `prompt_ids` the full prompt sent, `completion_ids` what was sampled (EOS
    included), `logprobs` one per completion token, `mask` the loss mask over the completion (None:
    all 1), `trainer_logprobs` the trainer's recomputation (None: not recorded)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float | None]
    finish_reason: str = "stop"  # OpenAI spelling: stop, length, tool_calls
    max_tokens: int | None = 64
    output_tokens: int | None = None  # usage.completion_tokens; None: len(completion_ids)
    mask: list[int] | None = None
    trainer_logprobs: list[float | None] | None = None
    token_bytes: list[str] | None = None  # hex of each completion token's bytes
    start: float | None = None
    end: float | None = None

    @property
    def usage_output_tokens(self) -> int:
        return len(self.completion_ids) if self.output_tokens is None else self.output_tokens


@dataclass
class Turn:
    """One message. Assistant messages carry their `request`; a tool message may carry the tool
    execution's `start`/`end`; `env_mask` puts loss mask 1 on an environment message's tokens (a
    collator bug; only formats with per-token masks over the environment can write it)."""

    message: dict
    request: Request | None = None
    start: float | None = None
    end: float | None = None
    env_mask: bool = False

    @property
    def role(self) -> str:
        return self.message["role"]


@dataclass
class Episode:
    """One rollout: its id, turns, reward and envelope (step, group, task, how it stopped)."""

    id: str
    turns: list[Turn]
    reward: float | None = 1.0
    step: int = 3
    group: str | None = "g17"
    index: int | None = 0
    size: int | None = 2
    advantage: float | None = None
    task: str = "calc-17x23"
    tools: list[dict] = field(default_factory=list)
    stop: str = "completed"  # the source's own word: completed, max_turns, error
    max_turns: int = 8
    run: str = "matrix"
    tok: str = "tiny-qwen3"  # the tokenizer the ids come from (Tok.name)
    trailing_ids: list[int] | None = None  # tokens of the environment messages after the last request
    content_recorded: bool = True  # False: content capture off (the calls report tokens, no text)

    def requests(self) -> list[tuple[int, Request]]:
        return [(i, t.request) for i, t in enumerate(self.turns) if t.request is not None]

    def messages(self, upto: int | None = None) -> list[dict]:
        return [t.message for t in self.turns[:upto]]


@dataclass(frozen=True)
class Tok:
    """A tokenizer with its chat template, as the checks get it (`ctx`) and as writers need it."""

    name: str
    folder: Path

    @property
    def ctx(self) -> CheckContext:
        return _context(self.folder)

    def encode(self, text: str) -> list[int]:
        return self.ctx.encode(text)

    def render(self, messages: list[dict], *, generation: bool, tools: list | None = None) -> str:
        return render(self.ctx.chat_template, [_for_template(m) for m in messages], tools=tools,
                      add_generation_prompt=generation, **self.ctx.template_kwargs)

    @property
    def eos(self) -> str:
        return self.ctx.template_kwargs.get("eos_token") or "<|im_end|>"


def _for_template(m: dict) -> dict:
    """A message as HF chat templates take it: tool arguments as an object (they apply `tojson`)."""
    if not m.get("tool_calls"):
        return m
    calls = [{**c, "function": {**c["function"], "arguments": _arguments(c["function"]["arguments"])}}
             for c in m["tool_calls"]]
    return {**m, "tool_calls": calls}


def _arguments(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # malformed arguments reach the template as the string


@lru_cache(maxsize=None)
def _context(folder: Path) -> CheckContext:
    return load_context(folder)


QWEN = Tok("tiny-qwen3", FIXTURES / "tokenizers" / "tiny-qwen3")
LLAMA = Tok("tok-llama3ish", FIXTURES / "cases" / "tok-llama3ish")

CALC = {"type": "function", "function": {"name": "calc", "description": "Evaluate an arithmetic expression.",
                                         "parameters": {"type": "object", "properties": {"expr": {"type": "string"}},
                                                        "required": ["expr"]}}}


def _call(cid: str, expr: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": "calc", "arguments": json.dumps({"expr": expr})}}


def conversation(answer: str) -> list[dict]:
    """The clean conversation: a question, one assistant turn with reasoning and two parallel
    tool calls, their two results, and the final answer."""
    return [
        {"role": "system", "content": "You are a careful calculator agent."},
        {"role": "user", "content": "What is 17*23 + 17+23?"},
        {"role": "assistant", "content": "", "reasoning_content": "Two products to compute; call calc twice.",
         "tool_calls": [_call("call_a1", "17*23"), _call("call_b2", "17+23")]},
        {"role": "tool", "tool_call_id": "call_a1", "name": "calc", "content": "391"},
        {"role": "tool", "tool_call_id": "call_b2", "name": "calc", "content": "40"},
        {"role": "assistant", "content": f"The answer is <answer>{answer}</answer>."},
    ]


def _logprobs(n: int, seed: int) -> list[float]:
    return [round(-0.05 - ((k * 7 + seed * 3) % 11) * 0.04, 4) for k in range(n)]


def build(eid: str, messages: list[dict], tok: Tok, *, seed: int = 0, **envelope) -> Episode:
    """An episode whose every assistant message is a request rendered with `tok`: the prompt is
    the template's rendering of the messages before it (generation prompt added), the completion
    the template's rendering of the message itself up to and including the end-of-turn token."""
    turns, clock = [], T0 + seed * 100
    for k, m in enumerate(messages):
        turn = Turn(copy.deepcopy(m))
        if m["role"] == "assistant":
            prompt = tok.render(messages[:k], generation=True, tools=[CALC])
            full = tok.render(messages[:k + 1], generation=False, tools=[CALC])
            text = full[len(prompt):]
            text = text[:text.rindex(tok.eos) + len(tok.eos)]
            ids = tok.encode(text)
            turn.request = Request(tok.encode(prompt), ids, _logprobs(len(ids), seed + k),
                                   finish_reason="tool_calls" if m.get("tool_calls") else "stop",
                                   start=clock, end=clock + 1.5)
            clock += 2.0
        elif m["role"] == "tool":
            turn.start, turn.end = clock, clock + 0.25
            clock += 0.5
        turns.append(turn)
    ep = Episode(eid, turns, tools=[CALC], tok=tok.name, **envelope)
    k = max((i for i, t in enumerate(turns) if t.request is not None), default=None)
    if k is not None and k < len(turns) - 1:  # environment messages after the last request
        req = turns[k].request
        said = tok.ctx.decode(req.completion_ids)  # the last answer, as the template renders it
        full = tok.render(messages, generation=False, tools=[CALC])
        ep.trailing_ids = tok.encode(full[full.rindex(said) + len(said):])
    return ep


def clean_group(tok: Tok = QWEN) -> list[Episode]:
    """Two rollouts of one task in one group at step 3: one right (reward 1), one wrong
    (reward 0); GRPO advantages +1 and -1 (mean-centred, std-scaled). With a template that does
    not render tool calls (tok-llama3ish), the conversation is the question and the answer: a
    tool-call turn would render as an empty message."""
    def talk(answer: str) -> list[dict]:
        msgs = conversation(answer)
        return msgs if "tool_calls" in (tok.ctx.chat_template or "") else [msgs[0], msgs[1], msgs[-1]]

    return [build("ep-right", talk("431"), tok, seed=0, reward=1.0, index=0, advantage=1.0),
            build("ep-wrong", talk("430"), tok, seed=1, reward=0.0, index=1, advantage=-1.0)]

OPENINGS = ("<|im_start|>", "<tool_response>", "<|start_header_id|>")  # tokens that open a rendered message


def env_segments(ids: list[int], contents: list[str], tok: Tok) -> list[list[int]]:
    """Split the environment tokens between two requests among the messages they render, as a
    collector that tokenizes message by message would store them: each message's share ends
    where the next message's rendering opens (its first opening special token after this
    message's content). When a content cannot be found, everything goes to the last message."""
    opening = {tok.ctx.special_tokens[t] for t in OPENINGS if t in tok.ctx.special_tokens}
    cuts, cursor = [], 0
    for text in contents[:-1]:
        want = tok.encode(text)
        at = next((i for i in range(cursor, len(ids) - len(want) + 1) if want and ids[i:i + len(want)] == want), None)
        if at is None:
            return [[] for _ in contents[:-1]] + [list(ids)]
        end = at + len(want)
        while end < len(ids) and ids[end] not in opening:
            end += 1
        cuts.append(end)
        cursor = end
    bounds = [0, *cuts, len(ids)]
    return [list(ids[a:b]) for a, b in zip(bounds, bounds[1:])]


def tok_of(ep: Episode) -> Tok:
    """The tokenizer an episode's ids come from."""
    return {t.name: t for t in (QWEN, LLAMA)}[ep.tok]

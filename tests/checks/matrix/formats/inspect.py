"""Inspect AI eval logs, `.json` form, written by Inspect itself: the group becomes an `EvalLog` of
inspect_ai's own models (`inspect_ai.log`, `inspect_ai.event`, `inspect_ai.model`; the release in
.venv, 0.3.285) and `inspect_ai.log.write_eval_log(..., format="json")` writes it, so every key, the
nesting and what is left out (`exclude_none`) are what Inspect writes. No Rollscope writer on the path.

Shape (`log/_log.py`, `event/_model.py`, `event/_tool.py`, `model/_model_output.py`; the real logs in
tests/fixtures/realdata/inspect_ai; ingest/formats/inspect.py docstring): one `EvalSample` per
rollout, `id` = the sample (here the group), `epoch` = index + 1, `config.epochs` the group size;
`messages` (assistant content as `reasoning` and `text` parts, `tool_calls` `{id, function, arguments:
dict, parse_error}`; a tool message `{tool_call_id, function}`); a `model` event per model call
(`input`, `tools` (ToolInfo), `config.max_tokens`, `output.choices[0]` with `stop_reason` (stop,
max_tokens, tool_calls), `logprobs.content[]` `{token, logprob, bytes}`, `output.usage`, `timestamp`
= start, `completed` = end: absent when the end was not recorded, inspect_ai#4226); a `tool` event per
tool run (`id`, `function`, `arguments`, `result`, `timestamp`, `completed`, `message_id`); `scores`.

What Inspect has no place for: token ids (logprobs come as token strings with their bytes), prompt ids,
loss masks, a trainer logprob array, advantages, a training step. A limit hit goes in `sample.limit`
(`message`), an error in `sample.error`. Malformed tool arguments are what Inspect's `parse_tool_call`
(model/_call_tools.py) makes of them: `arguments` `{}` and the raw text in `parse_error`.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from tests.checks.matrix.episode import Episode, tok_of

NAME = "inspect"
CARRIES = frozenset({"ending", "logprobs", "token_bytes", "finish_reason", "max_tokens", "usage", "reasoning",
                     "tool_calls", "tools", "timing", "group", "group_index", "group_size", "reward"})
STOP_REASONS = {"stop": "stop", "length": "max_tokens", "tool_calls": "tool_calls"}
MODEL = "vllm/tiny-qwen3"


def _when(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, tz=timezone.utc)


def _tool_call(c: dict):
    from inspect_ai.model._call_tools import tool_parse_error_message
    from inspect_ai.tool import ToolCall

    raw = c["function"]["arguments"]
    try:
        return ToolCall(id=c["id"], function=c["function"]["name"], arguments=json.loads(raw))
    except ValueError as ex:  # what parse_tool_call records for arguments it cannot parse
        return ToolCall(id=c["id"], function=c["function"]["name"], arguments={},
                        parse_error=tool_parse_error_message(raw, ex))


def _message(m: dict, ep: Episode, k: int):
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentReasoning,
        ContentText,
    )

    mid = f"{ep.id}-m{k}"
    if m["role"] == "system":
        return ChatMessageSystem(id=mid, content=m["content"])
    if m["role"] == "user":
        return ChatMessageUser(id=mid, content=m["content"], source="input" if k <= 1 else None)
    if m["role"] == "tool":
        return ChatMessageTool(id=mid, content=m["content"], tool_call_id=m.get("tool_call_id"),
                               function=m.get("name"))
    if not ep.content_recorded:  # the provider returned no content, only usage
        return ChatMessageAssistant(id=mid, content="", source="generate", model=MODEL.split("/")[-1])
    parts = []
    if m.get("reasoning_content"):
        parts.append(ContentReasoning(reasoning=m["reasoning_content"]))
    parts.append(ContentText(text=m.get("content") or ""))
    calls = [_tool_call(c) for c in m.get("tool_calls") or []] or None
    return ChatMessageAssistant(id=mid, content=parts, source="generate", tool_calls=calls, model=MODEL.split("/")[-1])


def _logprobs(req, tok):
    from inspect_ai.model import Logprob, Logprobs

    out = []
    for n, (t, lp) in enumerate(zip(req.completion_ids, req.logprobs)):
        if lp is None:  # Inspect's Logprob.logprob is a float: a token without one is not written
            continue
        piece = tok.ctx.decode([t]) if t >= 0 else ""
        raw = bytes.fromhex(req.token_bytes[n]) if req.token_bytes is not None else piece.encode()
        out.append(Logprob(token=piece, logprob=lp, bytes=list(raw)))
    return Logprobs(content=out)


def _sample(ep: Episode):
    from inspect_ai.event import ModelEvent, ToolEvent
    from inspect_ai.log import EvalError, EvalSample, EvalSampleLimit
    from inspect_ai.model import ChatCompletionChoice, GenerateConfig, ModelOutput, ModelUsage
    from inspect_ai.scorer import Score
    from inspect_ai.tool import ToolInfo, ToolParam, ToolParams

    tok = tok_of(ep)
    tools = [ToolInfo(name=t["function"]["name"], description=t["function"]["description"],
                      parameters=ToolParams(properties={k: ToolParam(type=v["type"]) for k, v in
                                                        t["function"]["parameters"]["properties"].items()},
                                            required=t["function"]["parameters"]["required"]))
             for t in ep.tools]
    messages = [_message(t.message, ep, k) for k, t in enumerate(ep.turns)]
    calls = {c["id"]: c for t in ep.turns for c in t.message.get("tool_calls") or []}
    times = [t for turn in ep.turns for t in (turn.start, turn.end, *((turn.request.start, turn.request.end)
                                                                      if turn.request else ())) if t is not None]
    t0 = min(times)  # working_start counts seconds from the sample's start
    events, output = [], ModelOutput(model=MODEL.split("/")[-1])
    for k, turn in enumerate(ep.turns):
        req = turn.request
        if req is not None:
            choice = ChatCompletionChoice(message=messages[k], stop_reason=STOP_REASONS[req.finish_reason],
                                          logprobs=_logprobs(req, tok) if ep.content_recorded else None)
            usage = ModelUsage(input_tokens=len(req.prompt_ids), output_tokens=req.usage_output_tokens,
                               total_tokens=len(req.prompt_ids) + req.usage_output_tokens)
            output = ModelOutput(model=MODEL.split("/")[-1], choices=[choice], usage=usage,
                                 time=None if req.end is None else req.end - req.start)
            events.append(ModelEvent(
                timestamp=_when(req.start), working_start=req.start - t0,
                model=MODEL, input=messages[:k], tools=tools, tool_choice="auto",
                config=GenerateConfig(max_tokens=req.max_tokens), output=output,
                completed=_when(req.end), working_time=None if req.end is None else req.end - req.start))
        elif turn.role == "tool" and turn.message.get("tool_call_id") is not None:
            m = turn.message
            call = calls.get(m["tool_call_id"])
            args = json.loads(call["function"]["arguments"]) if call and _parses(call) else {}
            events.append(ToolEvent(
                timestamp=_when(turn.start), working_start=turn.start - t0, id=m["tool_call_id"],
                function=m.get("name") or "calc", arguments=args, result=m["content"],
                completed=_when(turn.end), working_time=None if turn.end is None else turn.end - turn.start,
                message_id=messages[k].id))
    first_user = next(t.message["content"] for t in ep.turns if t.role == "user")
    return EvalSample(
        id=ep.group or ep.task, epoch=(ep.index if ep.index is not None else 0) + 1, input=first_user,
        target="431", messages=messages, output=output, events=events,
        scores={"match": Score(value=ep.reward, answer=ep.turns[-1].message.get("content"))}
        if ep.reward is not None else None,
        metadata={"task": ep.task}, started_at=_when(min(times)), completed_at=_when(max(times)),
        total_time=round(max(times) - min(times), 3),
        limit=EvalSampleLimit(type="message", limit=ep.max_turns) if ep.stop == "max_turns" else None,
        error=EvalError(message="RuntimeError: sandbox died", traceback="Traceback ...\nRuntimeError: sandbox died",
                        traceback_ansi="") if ep.stop == "error" else None)


def _parses(call: dict) -> bool:
    try:
        json.loads(call["function"]["arguments"])
        return True
    except ValueError:
        return False


def write(episodes: list[Episode], folder: Path) -> Path:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSpec, write_eval_log

    sizes = [ep.size for ep in episodes if ep.size is not None]
    samples = [_sample(ep) for ep in episodes]
    spec = EvalSpec(created="2027-01-15T08:00:00+00:00", task="calc", run_id="matrix-run", eval_id="matrix-eval",
                    task_id="calc-task", dataset=EvalDataset(name="calc", samples=len({s.id for s in samples})),
                    model=MODEL, config=EvalConfig(epochs=max(sizes) if sizes else 1))
    path = folder / "calc.json"
    write_eval_log(EvalLog(status="success", eval=spec, samples=samples), str(path), format="json")
    return path

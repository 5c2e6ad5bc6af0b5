"""mini-swe-agent trajectories (SWE-agent/mini-swe-agent): the agent's message list, either bare
(`[{role, content}, ...]`, as its tests and `DefaultAgent.messages` hold it) or saved by
`run/utils/save.py` as `{info: {exit_status, submission, model_stats}, messages: [...],
trajectory_format: "mini-swe-agent-1"}`.

The model acts by writing exactly one fenced bash block (```` ```bash ```` or
```` ```mswea_bash_command ````) in its answer (`agents/default.py` `parse_action`); the harness
runs it and answers with a user message tagged `<returncode>N</returncode><output>...</output>`
(`config/default.yaml` `action_observation_template`). A command whose output begins with
`COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` (or the older `MINI_SWE_AGENT_FINAL_OUTPUT`) submits: the
rest of the output is the submission, sent back as the last user message.

Mapping (docs/formats.md, "mini-swe-agent"):
- one node per message; an assistant message with one bash block gets one tool call `bash`
  `{"command": ...}` (`extra.parsed_from_text`; no id was sampled); a message with none or
  several gets none (the harness answers with a format error, kept as a user message);
- the user message that answers a call (the tagged observation, or the submission that follows
  the submit command) becomes its tool result: role tool, `extra.source_role = "user"`, with
  `extra.returncode`;
- ending: the submit marker → submitted (detail `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`); else
  `info.exit_status` through the endings table (`ingest.endings.WORDS`: `Submitted` → submitted,
  `LimitsExceeded`, `FormatError`, `TimeoutError`, `ExecutionTimeoutError` → truncated); a name the
  table does not list is another exception → error;
  else unknown. `model_stats` (`instance_cost`, `api_calls`) are metrics.
- each assistant message is one model call; where it keeps the litellm response
  (`extra.response`, `models/litellm_model.py` `query`), the call gets the choice's
  `finish_reason` and the response's `usage`, and the message the choice's `reasoning_content`.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ingest.endings import from_reason
from ingest.errors import RecordError
from ingest.formats._harness import Chain, action_call, read_documents, usage_from
from ingest.formats._openai import call_for
from ingest.formats.base import ReadContext
from ingest.schema import Call, Ending, EndingInfo, Message, Rollout, RunRef
from ingest.source import Source

EXPECTS = ("mini-swe-agent message list (bash blocks in assistant text, <returncode> observations) "
           "or {info, messages, trajectory_format}")
NAME = "mini-swe-agent"
BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
OBSERVATION = re.compile(r"^\s*<returncode>(-?\d+)</returncode>")
SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")


def _messages(value: Any) -> list | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and isinstance(value.get("messages"), list) and (
            "trajectory_format" in value or "info" in value):
        return value["messages"]
    return None


def _response(m: dict) -> dict | None:
    """The litellm `ModelResponse.model_dump()` an assistant message keeps in `extra.response`
    (`models/litellm_model.py` `query`), else None."""
    extra = m.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    return response if isinstance(response, dict) else None


def _choice(response: dict) -> dict:
    choices = response.get("choices")
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}


def _reasoning(response: dict) -> str | None:
    """The reasoning the provider returned with the choice (litellm `message.reasoning_content`)."""
    message = _choice(response).get("message")
    text = message.get("reasoning_content") if isinstance(message, dict) else None
    return text if isinstance(text, str) and text else None


def _call(node: int, response: dict | None) -> Call:
    """The model call of an assistant message: its finish reason and usage from the litellm
    response kept with it (issue 20: the reader fills what the checks need), else a bare call."""
    if response is None:
        return Call(node=node)
    finish = _choice(response).get("finish_reason")
    model = response.get("model")
    return call_for(node, finish if isinstance(finish, str) else None, usage_from(response.get("usage")),
                    model=model if isinstance(model, str) else None)


def sniff(source: Source) -> bool:
    """A message list where an assistant writes a bash block and a user message carries the
    `<returncode>` tag (or the saved form naming `trajectory_format: mini-swe-agent-*`)."""
    if source.kind not in ("json", "jsonl"):
        return False
    d = source.first
    if isinstance(d, dict) and str(d.get("trajectory_format", "")).startswith("mini-swe-agent"):
        return True
    msgs = _messages(d)
    if not msgs or not all(isinstance(m, dict) and "role" in m for m in msgs):
        return False
    acts = any(m.get("role") == "assistant" and isinstance(m.get("content"), str) and BLOCK.search(m["content"])
               for m in msgs)
    obs = any(m.get("role") == "user" and isinstance(m.get("content"), str) and OBSERVATION.match(m["content"])
              for m in msgs)
    return acts and obs


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    return read_documents(source, ctx, recognise=_messages, what="a mini-swe-agent message list", read_one=_read_one)


def _read_one(doc: Any, source: Source, ctx: ReadContext, line: int | None) -> Iterator[Rollout | RecordError]:
    msgs = _messages(doc) or []
    info = doc.get("info") if isinstance(doc, dict) and isinstance(doc.get("info"), dict) else {}
    chain = Chain()
    responses: dict[int, dict] = {}  # assistant node → the litellm response it came from
    open_call: str | None = None  # the command of the call waiting for its result
    submitted = False
    for k, m in enumerate(msgs):
        if not isinstance(m, dict):
            yield RecordError(source.name, line, f"messages[{k}]", f"expected a message object, got {type(m).__name__}")
            return
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            yield RecordError(source.name, line, f"messages[{k}].role", f"unknown role {role!r}")
            return
        content = m.get("content")
        text = content if isinstance(content, str) else ""
        extra = {x: v for x, v in m.items() if x not in ("role", "content")}
        tool_calls = None
        name = None
        reasoning = None
        if role == "assistant":
            response = _response(m)
            if response is not None:
                reasoning = _reasoning(response)
                responses[len(chain.nodes)] = response
            blocks = BLOCK.findall(text)
            if len(blocks) == 1:
                tool_calls = [action_call(blocks[0], name="bash")]
                open_call = blocks[0]
            else:
                open_call = None
                if blocks:
                    extra["bash_blocks"] = len(blocks)
        elif role == "user" and open_call is not None:
            obs = OBSERVATION.match(text)
            is_submission = open_call.lstrip().startswith(tuple(f"echo {s}" for s in SUBMIT_MARKERS))
            if obs or is_submission:
                role, name = "tool", "bash"
                extra["source_role"] = "user"
                if obs:
                    extra["returncode"] = int(obs.group(1))
                if is_submission and not obs:
                    extra["submission"] = True
                    submitted = True
            open_call = None
        chain.add(Message(role=role,
                          content=content if isinstance(content, (str, list)) or content is None else str(content),
                          reasoning_content=reasoning, tool_calls=tool_calls, name=name, extra=extra))
    if open_call is not None and open_call.lstrip().startswith(tuple(f"echo {s}" for s in SUBMIT_MARKERS)):
        submitted = True  # the submit command was the last message
        chain.nodes[-1].message.tool_calls[0].extra["ends_rollout"] = True
    for i, n in enumerate(chain.nodes):
        if n.message.role == "assistant":
            chain.calls.append(_call(i, responses.get(i)))

    status = info.get("exit_status")
    if submitted:
        ending = EndingInfo(type=Ending.submitted, detail=str(status) if status else SUBMIT_MARKERS[0])
    elif isinstance(status, str) and status:
        # any name the endings table does not list is an exception that ended the loop
        ending = EndingInfo(type=from_reason(status, unlisted=Ending.error), detail=status)
    else:
        ending = EndingInfo(type=Ending.unknown, detail="no submit marker and no exit status")
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    metrics = {dst: float(stats[src]) for src, dst in (("instance_cost", "cost"), ("api_calls", "api_calls"))
               if isinstance(stats.get(src), (int, float)) and not isinstance(stats.get(src), bool)}
    extra: dict[str, Any] = {}
    if info:
        extra["info"] = {k: v for k, v in info.items() if k != "exit_status"}
    stem = ctx.source_key(source)
    try:
        yield chain.finish(Rollout(id=stem if line is None else f"{stem}#{line}",
                                   run=RunRef(id=ctx.run_for(source), type="eval"), nodes=chain.nodes,
                      calls=chain.calls, ending=ending, metrics=metrics, extra=extra,
                      source={"format": NAME, "file": source.name, "line": line}))
    except ValueError as exc:
        yield RecordError(source.name, line, None, str(exc))

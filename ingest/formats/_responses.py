"""Converters for the OpenAI Responses API item dialect, as NeMo Gym writes it
(NVIDIA-NeMo/Gym `nemo_gym/openai_utils.py`: `NeMoGymResponse.output` items, token fields added
to the items of each model call), shared by every reader whose records hold Responses items.

Items (https://platform.openai.com/docs/api-reference/responses/object):

- `message` `{role, content: str | [part]}`; parts `input_text` / `output_text` / `text` /
  `refusal` carry `text` (vLLM adds `output_text.logprobs`), `input_image` / `input_file` /
  `input_audio` carry media;
- `reasoning` `{summary: [{type: summary_text, text}], content?: [{type: reasoning_text, text}],
  encrypted_content?}`;
- `function_call` `{call_id, name, arguments: str}` and `function_call_output` `{call_id, output}`;
- other `*_call` items (web search, computer, MCP...) and their `*_output`.

Model calls: the items a model produced in one request are a run of model items (`reasoning`,
assistant `message`, `function_call`, other `*_call`) between environment items (outputs,
user/system messages). One run → one sampled assistant node (content from its message, reasoning
from its reasoning items, tool calls from its function calls; parallel calls stay on one node and
are paired to outputs by `call_id`); each environment item → one node. Token fields
(`prompt_token_ids`, `generation_token_ids`, `generation_log_probs`) found on any item of a run
are that request's tokens (NeMo Gym puts them on the run's last item), turned into per-node deltas
by `RolloutBuilder.request` (drift kept as a new branch). Empty token lists mean "not recorded".

Stable API (change only by adding):

- `add_input(builder, input, path) -> list[int]`: `responses_create_params.input` (a string or
  items), as context nodes (nothing sampled).
- `add_output(builder, items, path) -> list[ResponsesCall]`: `response.output`, one entry per
  model call (node index, items, whether tokens were recorded).
- `message_from_item(item, path) -> Message`, `content_from_parts(content, path) -> (content, notes)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ingest.fields import FieldError, floats, ints
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder, set_tokens
from ingest.formats.base import id_text
from ingest.schema import Message

TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
_MODEL_ROLES = frozenset({"assistant"})


def _kind(item: dict) -> str:
    t = item.get("type")
    if t is None and "role" in item:
        return "message"  # EasyInputMessage: {role, content}
    return str(t)


def is_model_item(item: dict) -> bool:
    """True for items a model produces in a request (reasoning, assistant messages, calls)."""
    kind = _kind(item)
    if kind == "message":
        return item.get("role") in _MODEL_ROLES
    if kind == "reasoning":
        return True
    return kind.endswith("_call") and not kind.endswith("_call_output")


def content_from_parts(content: Any, path: str) -> tuple[str | list[dict] | None, dict]:
    """A Responses message body: the same rules as OpenAI chat content (`_openai.content_from_openai`:
    text parts of any type, reasoning blocks, media placeholders); vLLM's `output_text.logprobs`
    come back in the notes (`logprobs`), to go on the node's tokens instead of the message."""
    return _openai.content_from_openai(content, path)


def message_from_item(item: dict, path: str, *, notes: dict | None = None) -> Message:
    """A `message` item (or EasyInputMessage) → Message; the role is mapped as for OpenAI chat
    (`developer` → system, unknown → user, original kept). Keys other than role/content/type go
    to `message.extra` (id, status...)."""
    role, source_role = _openai.role_from_openai(item.get("role"), path)
    content, got = content_from_parts(item.get("content"), f"{path}.content")
    if notes is not None:
        notes.update(got)
    extra = {k: v for k, v in item.items() if k not in ("role", "content", "type") and k not in TOKEN_FIELDS}
    reasoning = _openai.apply_notes(extra, got, None)
    if source_role is not None:
        extra["source_role"] = source_role
    return Message(role=role, content=content, reasoning_content=reasoning, extra=extra)


def _env_message(item: dict, path: str) -> Message:
    kind = _kind(item)
    if kind == "message":
        return message_from_item(item, path)
    if kind.endswith("_output"):
        call_id = id_text(item.get("call_id"), f"{path}.call_id")
        content, notes = content_from_parts(item.get("output"), f"{path}.output")
        extra = {k: v for k, v in item.items() if k not in ("call_id", "output", "type")}
        if kind != "function_call_output":
            extra["item_type"] = kind
        if notes.get("content_from"):
            extra["content_from"] = notes["content_from"]
        return Message(role="tool", tool_call_id=call_id, content=content, extra=extra)
    # Any other non-model item (mcp_list_tools, item_reference...): kept whole, shown as JSON.
    return Message(role="user", content=None, extra={"source_item": item, "source_role": kind})


def _texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


@dataclass
class ResponsesCall:
    """One model request found in `response.output`: its node, the items it produced (with
    their positions), and whether token ids were recorded for it."""

    node: int
    items: list[tuple[int, dict]] = field(default_factory=list)
    tokens: bool = False


def _assistant_message(run: list[tuple[int, dict]], path: str) -> tuple[Message, dict]:
    """The assistant message of one model call, and the call's token fields / logprob notes."""
    content: list[dict] | str | None = None
    reasoning: list[str] = []
    tool_calls = []
    extra: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    tokens: dict[str, Any] = {}
    others = []
    for pos, item in run:
        p = f"{path}[{pos}]"
        kind = _kind(item)
        for key in TOKEN_FIELDS:
            if item.get(key):  # NeMo Gym: on the run's last item; empty lists mean "not recorded"
                tokens[key] = (item[key], f"{p}.{key}")
        if kind == "message":
            msg = message_from_item(item, p, notes=notes)
            if msg.reasoning_content:
                reasoning.append(msg.reasoning_content)
            if content is None:
                content = msg.content
            elif isinstance(content, list) and isinstance(msg.content, list):
                content = content + msg.content
            else:
                content = (_openai_text(content) + _openai_text(msg.content))
            extra.setdefault("items", []).append({k: v for k, v in msg.extra.items()})
        elif kind == "reasoning":
            texts = _texts(item.get("content")) or _texts(item.get("summary"))
            reasoning.extend(texts)
            kept = {k: v for k, v in item.items() if k not in ("summary", "content", "type")}
            kept["from"] = "content" if _texts(item.get("content")) else "summary"
            extra.setdefault("reasoning_items", []).append(kept)
        elif kind == "function_call":
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise FieldError(f"{p}.name", "function call has no name")
            call_extra = {k: v for k, v in item.items()
                          if k not in ("call_id", "name", "arguments", "type") and k not in TOKEN_FIELDS}
            tool_calls.append(_openai.tool_call(id_text(item.get("call_id"), f"{p}.call_id"), name,
                                                item.get("arguments"), call_extra))
        else:
            others.append({k: v for k, v in item.items() if k not in TOKEN_FIELDS})
    if others:
        extra["other_items"] = others
    msg = Message(role="assistant", content=content, reasoning_content="\n".join(reasoning) if reasoning else None,
                  tool_calls=tool_calls or None, extra=extra)
    return msg, {"tokens": tokens, **notes}


def _openai_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(_texts(content))


def _runs(items: list, path: str) -> list[tuple[str, list[tuple[int, dict]]]]:
    """Split output items into ('call', [(pos, item)...]) runs and ('env', [(pos, item)]) items."""
    out: list[tuple[str, list[tuple[int, dict]]]] = []
    for pos, item in enumerate(items):
        if not isinstance(item, dict):
            raise FieldError(f"{path}[{pos}]", f"expected an item object, got {type(item).__name__}")
        if is_model_item(item):
            kind = _kind(item)
            new = not out or out[-1][0] != "call"
            if not new:
                cur = out[-1][1]
                has_message = any(_kind(i) == "message" for _, i in cur)
                has_tokens = any(i.get("generation_token_ids") for _, i in cur)
                has_calls = any(_kind(i) != "message" and _kind(i) != "reasoning" for _, i in cur)
                if (kind in ("message", "reasoning") and (has_message or has_calls)) or \
                        (has_tokens and item.get("generation_token_ids")):
                    new = True
            if new:
                out.append(("call", [(pos, item)]))
            else:
                out[-1][1].append((pos, item))
        else:
            out.append(("env", [(pos, item)]))
    return out


def add_input(builder: RolloutBuilder, value: Any, path: str) -> list[int]:
    """The request input (`responses_create_params.input`): a string (one user message) or a
    list of items, added as context nodes; nothing here was sampled by the rollout's policy."""
    if value is None:
        return []
    if isinstance(value, str):
        return [builder.add(Message(role="user", content=value))]
    if not isinstance(value, list):
        raise FieldError(path, f"expected a string or a list of items, got {type(value).__name__}")
    out = []
    for kind, run in _runs(value, path):
        if kind == "env":
            pos, item = run[0]
            out.append(builder.add(_env_message(item, f"{path}[{pos}]")))
        else:
            msg, _ = _assistant_message(run, path)
            msg.extra["context"] = "input"  # earlier turns given to the model, not sampled here
            out.append(builder.add(msg))
    return out


def add_output(builder: RolloutBuilder, items: Any, path: str) -> list[ResponsesCall]:
    """`response.output` items: one sampled node per model call, one node per environment item.
    Returns the calls in order."""
    if not isinstance(items, list):
        raise FieldError(path, f"expected a list of items, got {type(items).__name__}")
    calls: list[ResponsesCall] = []
    for kind, run in _runs(items, path):
        if kind == "env":
            pos, item = run[0]
            builder.add(_env_message(item, f"{path}[{pos}]"))
            continue
        msg, notes = _assistant_message(run, path)
        tokens = notes["tokens"]
        prompt = (ints(tokens["prompt_token_ids"][0], tokens["prompt_token_ids"][1])
                  if "prompt_token_ids" in tokens else None)
        gen = (ints(tokens["generation_token_ids"][0], tokens["generation_token_ids"][1])
               if "generation_token_ids" in tokens else None)
        lps = (floats(tokens["generation_log_probs"][0], tokens["generation_log_probs"][1])
               if "generation_log_probs" in tokens else None)
        if prompt is not None or gen is not None:
            idx = builder.request(msg, prompt, gen, lps)
        else:
            idx = builder.add(msg, sampled=True)
            if notes.get("logprobs"):  # vLLM output_text.logprobs: tokens without ids
                toks = _openai.tokens_from_openai_logprobs(notes["logprobs"], f"{path}.content.logprobs")
                node = builder.nodes[idx]
                set_tokens(node, toks.ids, sampled=True, logprobs=toks.logprobs, hexes=toks.hexes)
                node.extra["token_text"] = toks.texts
        if lps is not None and gen is None:
            builder.nodes[idx].extra["logprobs_without_tokens"] = lps
        calls.append(ResponsesCall(node=idx, items=run, tokens=gen is not None))
    return calls

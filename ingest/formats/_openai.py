"""Converters for the OpenAI chat-completions wire dialect, shared by every reader whose records
hold OpenAI-shaped messages (chat, tau-bench, Tunix, verifiers, Atropos, ...). Readers call these;
no reader re-parses a message, a tool call, a finish reason or a logprobs list itself.
(Pattern: UKGovernmentBEIS/inspect_ai `src/inspect_ai/model/_openai.py`.)

Stable API (other readers build on it; change only by adding):

- `message_from_openai(m, path) -> OpenAIMessage(message, timestamp, finish_reason)`
- `tool_calls_from_openai(m, path) -> list[ToolCall]`, `tool_call_from_openai(tc, path) -> ToolCall`
- `arguments_text(args) -> str` (the raw sampled string; an object is serialised) and
  `parse_arguments(raw) -> Arguments(value, shape)` (the parsed object and what shape it was)
- `tool_calls_from_text(text, result_ids) -> list[ToolCall] | None` (Hermes/Qwen `<tool_call>` blocks)
- `role_from_openai(role, path) -> (role, source_role | None)`
- `content_from_openai(content, path) -> (content, notes)`, `normalize_parts(parts, path)`,
  `apply_notes(extra, notes, reasoning)`: content in every shape (text parts of any type,
  thinking / redacted_thinking blocks → reasoning, images/audio → typed placeholders)
- `finish_reason(raw) -> FinishReason | None`, `call_for(node, raw, usage) -> Call`
- `piece_hex(piece)`, `pieces(value, path)`, `tokens_from_openai_logprobs(entries, path) -> LogprobTokens`

Field paths in the FieldErrors raised are relative to the record (`messages[3].tool_calls[0]...`).
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ingest.fields import FieldError, is_number_or_none
from ingest.formats.base import id_text
from ingest.schema import Call, Message, ToolCall, Usage
from ingest.tool_markup import hermes_blocks

CORE_ROLES = frozenset({"system", "user", "assistant", "tool"})
ROLE_MAP = {"developer": "system", "function": "tool"}

# Source finish / stop reasons → the OTel GenAI enum stored in `Call.finish_reason` (the raw value
# stays in `finish_reason_raw`). The ending each implies is in docs/formats.md ("Endings").
FINISH_REASONS: dict[str, str] = {
    "stop": "stop", "eos": "stop", "end_turn": "stop", "stop_sequence": "stop", "completed": "stop",
    "length": "length", "max_tokens": "length", "max_output_tokens": "length", "model_length": "length",
    "tool_calls": "tool_call", "tool_call": "tool_call", "function_call": "tool_call", "tool_use": "tool_call",
    "content_filter": "content_filter", "refusal": "content_filter",
    "error": "error", "abort": "error", "aborted": "error", "cancelled": "error", "canceled": "error",
    "failed": "error",
    "compaction": "compaction",
}

_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "function_call", "tool_call_id", "name",
                           "reasoning_content", "timestamp", "finish_reason"})
_HEX_ESCAPES = re.compile(r"(?:bytes:)?((?:\\x[0-9a-fA-F]{2})+)\Z")


# --- roles, content, finish reasons ---------------------------------------------------------

def role_from_openai(role: Any, path: str) -> tuple[str, str | None]:
    """(node role, the source's role when it differs). `developer` → system, `function` → tool,
    anything else that is not a core role → user (`environment`, `agent`, `ipython`, ...)."""
    if role is None:
        raise FieldError(f"{path}.role", "message has no role")
    if not isinstance(role, str):
        raise FieldError(f"{path}.role", f"role must be a string, got {type(role).__name__}")
    key = role.strip().lower()
    mapped = key if key in CORE_ROLES else ROLE_MAP.get(key, "user")
    return mapped, (None if mapped == role else role)


TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal", "summary_text", "reasoning_text"})
REASONING_PARTS = frozenset({"thinking", "redacted_thinking", "reasoning"})
MEDIA_PARTS = {"image_url": "image", "input_image": "image", "image": "image", "input_audio": "audio",
               "audio": "audio", "video": "video", "input_file": "file", "file": "file", "document": "file",
               "blob": "file", "uri": "file"}  # OTel GenAI `blob` / `uri` parts: the kind is their `modality`
MODALITIES = frozenset({"image", "audio", "video"})
# parts that hold content parts of their own (Anthropic `tool_result` blocks): normalised inside
NESTED_PARTS = frozenset({"tool_result"})
REDACTED = "[redacted thinking]"


def _data_url(url: Any) -> tuple[str, str] | None:
    """(media type, base64 payload) of a `data:` URL, else None."""
    if isinstance(url, str) and url.startswith("data:") and "," in url:
        head, payload = url[5:].split(",", 1)
        return head.split(";", 1)[0] or "application/octet-stream", payload
    return None


def decode_payload(payload: str) -> bytes:
    """The bytes of a base64 payload, decoded leniently (characters outside the alphabet are
    skipped); a payload that is not base64 at all (bad padding) is taken as its UTF-8 text."""
    try:
        return base64.b64decode(payload, validate=False)
    except (ValueError, TypeError):
        return payload.encode("utf-8", "replace")


def _media(part: dict, kind: str) -> tuple[dict, dict | None]:
    """A media part → a typed placeholder `{type: image|audio|video|file, media_type, bytes,
    sha256, source_type, placeholder: true}` (`media_type` as the part claims it; `bytes` the
    decoded size; `sha256` the lowercase hex of the decoded bytes), and `{sha256: the part as
    read}` to keep in `message.extra.media` (the store takes the bytes out of it into the `media`
    table, app/store/media.py; pages never inline them). The shapes read:

    - a `data:` URL in `image_url.url` (OpenAI chat), `image_url` (Responses `input_image`),
      `image` / `audio` / `video` / `document` (Inspect `ContentImage`, ...), `file.file_data`;
    - base64 in `data` (`input_audio {data, format}`; MCP `{type: image, data, mimeType}`), in
      `source.data` (Anthropic `{type: image, source: {type: base64, media_type, data}}`) or in
      `content` (OTel GenAI `{type: blob, modality, mime_type, content}`).

    A part that only links (an http URL, a file path, a file id: the bytes were not carried) is
    kept as it is, typed (`type` = kind, `source_type` = its type), and nothing is fetched."""
    ptype = part.get("type")
    payload = media_type = None
    inner = part.get(ptype) if isinstance(part.get(ptype), dict) else part
    url = inner.get("url") if isinstance(inner, dict) else None
    if url is None:
        for key in (ptype, "image_url", "file_data"):
            if isinstance(inner.get(key), str) or isinstance(part.get(key), str):
                url = inner.get(key) if isinstance(inner.get(key), str) else part[key]
                break
    got = _data_url(url)
    if got:
        media_type, payload = got
    elif isinstance(inner.get("file_data"), str) and not inner["file_data"].startswith(("http:", "https:")):
        payload, media_type = inner["file_data"], inner.get("mime_type")  # OpenAI `file.file_data`, bare base64
    elif isinstance(inner.get("data"), str):  # input_audio {data, format}; MCP {data, mimeType}
        payload = inner["data"]
        media_type = (inner.get("media_type") or inner.get("mimeType") or inner.get("mime_type")
                      or (f"audio/{inner['format']}" if inner.get("format") else None))
    elif isinstance(part.get("source"), dict) and isinstance(part["source"].get("data"), str):
        payload, media_type = part["source"]["data"], part["source"].get("media_type")
    elif ptype == "blob" and isinstance(part.get("content"), str):  # OTel GenAI {modality, mime_type, content}
        payload, media_type = part["content"], part.get("mime_type")
    if payload is None:
        out = dict(part)
        out["type"], out["source_type"] = kind, ptype
        if isinstance(part.get("source"), dict) and part["source"].get("media_type"):
            out["media_type"] = part["source"]["media_type"]
        return out, None
    raw = decode_payload(payload)
    digest = hashlib.sha256(raw).hexdigest()
    placeholder = {"type": kind, "media_type": media_type or "application/octet-stream", "bytes": len(raw),
                   "sha256": digest, "source_type": ptype, "placeholder": True}
    return placeholder, {digest: part}


def normalize_parts(content: list, path: str) -> tuple[list[dict], dict]:
    """Content parts in every shape the field writes → stored parts, and notes for the message:

    - text parts of any type (`text`, `input_text`, `output_text`, `refusal`...) →
      `{type: "text", text, source_type?}` (other keys kept);
    - reasoning blocks (`thinking` with its signature, `redacted_thinking`) are taken out: their
      text goes to `notes.reasoning` (a redacted block reads "[redacted thinking]") and the blocks
      themselves, without their text, to `notes.reasoning_blocks` (with their position);
    - images, audio, video and files → typed placeholders (`_media`), the parts carrying bytes in
      `notes.media` (sha256 → part);
    - an Anthropic `tool_result` block's own content list is normalised the same way (its images
      become placeholders too);
    - a bare string part is a text part; anything else that is an object is kept as it is.
    """
    parts: list[dict] = []
    notes: dict[str, Any] = {}
    for k, part in enumerate(content):
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict):
            raise FieldError(f"{path}[{k}]", f"expected a content part object, got {type(part).__name__}")
        ptype = part.get("type")
        if ptype in TEXT_PARTS:
            text = part.get("text", part.get("refusal"))
            if text is not None and not isinstance(text, str):
                raise FieldError(f"{path}[{k}].text", "expected a string")
            out = {"type": "text", "text": text or ""}
            if ptype != "text":
                out["source_type"] = ptype
            for key, v in part.items():
                if (key in ("type", "text") or (key == "refusal" and ptype == "refusal")
                        or (key == "annotations" and not v)):
                    continue
                if key == "logprobs":
                    if v:
                        notes.setdefault("logprobs", []).extend(v if isinstance(v, list) else [v])
                    continue
                out[key] = v
            parts.append(out)
        elif ptype in REASONING_PARTS:
            text = part.get("thinking", part.get("text"))
            if ptype == "redacted_thinking":
                text = REDACTED
            if isinstance(text, str):
                notes.setdefault("reasoning", []).append(text)
            block = {key: v for key, v in part.items() if key not in ("thinking", "text")}
            block["position"] = k
            notes.setdefault("reasoning_blocks", []).append(block)
        elif ptype in MEDIA_PARTS:
            kind = part["modality"] if part.get("modality") in MODALITIES else MEDIA_PARTS[ptype]
            out, media = _media(part, kind)
            parts.append(out)
            if media:
                notes.setdefault("media", {}).update(media)
        elif ptype in NESTED_PARTS and isinstance(part.get("content"), list):
            inner, inner_notes = normalize_parts(part["content"], f"{path}[{k}].content")
            parts.append({**part, "content": inner})
            if inner_notes.get("media"):
                notes.setdefault("media", {}).update(inner_notes["media"])
        else:
            parts.append(part)
    return parts, notes


def content_from_openai(content: Any, path: str) -> tuple[str | list[dict] | None, dict]:
    """A message body as stored: a string, null, or a list of part objects (`normalize_parts`).
    An object (a tool result written as JSON, not as text) is kept as its JSON text, and the
    notes say `content_from = "object"` so a writer can give the object back. A list whose only
    parts were reasoning blocks leaves no content (None). Anything else raises FieldError."""
    if content is None or isinstance(content, str):
        return content, {}
    if isinstance(content, list):
        parts, notes = normalize_parts(content, path)
        if not parts and content:
            return None, notes
        return parts, notes
    if isinstance(content, dict):
        return json.dumps(content, ensure_ascii=False), {"content_from": "object"}
    raise FieldError(path, f"expected a string, a list of parts or null, got {type(content).__name__}")


def finish_reason(raw: str | None) -> str | None:
    """The normalized finish reason (`FinishReason`) for a source's raw value, or None."""
    return FINISH_REASONS.get(raw.strip().lower()) if isinstance(raw, str) and raw.strip() else None


def call_for(node: int | None, raw: str | None = None, usage: Usage | None = None, **fields: Any) -> Call:
    """A `Call` for the model request that produced `node`, with its finish reason normalized and
    the raw value kept."""
    return Call(node=node, finish_reason=finish_reason(raw), finish_reason_raw=raw, usage=usage, **fields)


# --- messages -------------------------------------------------------------------------------

@dataclass
class OpenAIMessage:
    """One converted message and the per-message fields that belong on its node or call."""

    message: Message
    timestamp: float | None = None
    finish_reason: str | None = None
    extra: dict = field(default_factory=dict)  # notes for the node (content_from, ...)


def message_from_openai(m: Any, path: str) -> OpenAIMessage:
    """One OpenAI-shaped message `{role, content, tool_calls?, function_call?, tool_call_id?,
    name?, reasoning_content?, timestamp?, finish_reason?}` → Message. Unknown keys go to
    `message.extra`; a non-core role is mapped (`role_from_openai`) and kept as `source_role`."""
    if not isinstance(m, dict):
        raise FieldError(path, f"expected a message object, got {type(m).__name__}")
    role, source_role = role_from_openai(m.get("role"), path)
    extra = {k: v for k, v in m.items() if k not in _MESSAGE_KEYS}
    if source_role is not None:
        extra["source_role"] = source_role
    tool_calls = tool_calls_from_openai(m, path)
    tool_call_id = id_text(m.get("tool_call_id"), f"{path}.tool_call_id")
    name = m.get("name")
    if name is not None and not isinstance(name, str):
        raise FieldError(f"{path}.name", "expected a string")
    reasoning = m.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise FieldError(f"{path}.reasoning_content", "expected a string")
    if reasoning is None and isinstance(m.get("reasoning"), str):  # vLLM / OpenRouter name
        reasoning = m["reasoning"]
        extra.pop("reasoning", None)
        extra["reasoning_from"] = "reasoning"
    timestamp = m.get("timestamp")
    if not is_number_or_none(timestamp):
        extra["timestamp"] = timestamp
        timestamp = None
    finish = m.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        extra["finish_reason"] = finish
        finish = None
    content, notes = content_from_openai(m.get("content"), f"{path}.content")
    reasoning = apply_notes(extra, notes, reasoning)
    structured = extra.pop("structuredContent", None)
    if structured is not None:  # MCP: the real data beside (or instead of) a short text
        text = json.dumps(structured, ensure_ascii=False)
        part = {"type": "text", "text": text, "source_type": "structuredContent"}
        content = [part] if content is None else ([{"type": "text", "text": content}, part]
                                                  if isinstance(content, str) else content + [part])
    message = Message(role=role, content=content, reasoning_content=reasoning, tool_calls=tool_calls or None,
                      tool_call_id=tool_call_id, name=name, extra=extra)
    return OpenAIMessage(message, None if timestamp is None else float(timestamp), finish)


def apply_notes(extra: dict, notes: dict, reasoning: str | None) -> str | None:
    """Fold what `content_from_openai` took out of the content into the message: reasoning text
    (appended to `reasoning`, which is returned), reasoning blocks, media bytes, content_from."""
    if notes.get("reasoning"):
        text = "\n".join(notes["reasoning"])
        reasoning = text if not reasoning else reasoning + "\n" + text
        extra["reasoning_from"] = "content_blocks"
    for key in ("reasoning_blocks", "media", "content_from"):
        if notes.get(key):
            extra[key] = notes[key]
    return reasoning


# --- tool calls -----------------------------------------------------------------------------

def tool_calls_from_openai(m: dict, path: str) -> list[ToolCall]:
    """`tool_calls` (a list) and a legacy `function_call` of one message → ToolCalls, in order."""
    out: list[ToolCall] = []
    raw = m.get("tool_calls")
    if raw is not None:
        if not isinstance(raw, list):
            raise FieldError(f"{path}.tool_calls", f"expected a list, got {type(raw).__name__}")
        for j, tc in enumerate(raw):
            out.append(tool_call_from_openai(tc, f"{path}.tool_calls[{j}]"))
    legacy = m.get("function_call")
    if legacy is not None:
        if not isinstance(legacy, dict):
            raise FieldError(f"{path}.function_call", "expected an object")
        call = tool_call_from_openai({"function": legacy}, f"{path}.function_call",
                                     name_path=f"{path}.function_call.name")
        call.extra["source_field"] = "function_call"
        out.append(call)
    return out


def tool_call_from_openai(tc: Any, path: str, *, name_path: str | None = None) -> ToolCall:
    """`{id, type, function: {name, arguments}}` or flat `{id, name, arguments}` → ToolCall.
    The id is kept as written (an integer keeps every digit); `arguments` stays the raw string
    (`arguments_text`), and its shape when it is not a JSON object goes to
    `extra.arguments_shape` (`parse_arguments`)."""
    if not isinstance(tc, dict):
        raise FieldError(path, f"expected a tool call object, got {type(tc).__name__}")
    extra = {k: v for k, v in tc.items() if k not in ("id", "type", "function", "name", "arguments")}
    if tc.get("type") not in (None, "function"):
        extra["type"] = tc["type"]
    fn = tc.get("function")
    if fn is not None:
        if not isinstance(fn, dict):
            raise FieldError(f"{path}.function", f"expected an object, got {type(fn).__name__}")
        name, args = fn.get("name"), fn.get("arguments")
        name_path = name_path or f"{path}.function.name"
        extra.update({f"function.{k}": v for k, v in fn.items() if k not in ("name", "arguments")})
        if args is not None and not isinstance(args, str):
            # OpenAI's wire shape carries `function.arguments` as a JSON string; an object here is
            # the server's bug (ml-explore/mlx-lm#1065), reported by malformed_tool_arguments.
            extra["arguments_source_type"] = "object" if isinstance(args, dict) else type(args).__name__
    else:
        name, args = tc.get("name"), tc.get("arguments")
        name_path = name_path or f"{path}.name"
    if not isinstance(name, str) or not name:
        raise FieldError(name_path, "tool call has no function name")
    return tool_call(id_text(tc.get("id"), f"{path}.id"), name, args, extra)


def tool_call(call_id: str | None, name: str, args: Any, extra: dict | None = None) -> ToolCall:
    """A ToolCall from its parts, `args` as the source gave it (string, object or None)."""
    extra = dict(extra or {})
    raw = arguments_text(args)
    if args is not None and not isinstance(args, str):
        extra["arguments_from"] = "object"  # the source wrote an object; `arguments` is its JSON text
    shape = parse_arguments(raw).shape if args is not None else "missing"
    if shape != "object":
        extra["arguments_shape"] = shape
    return ToolCall(id=call_id, name=name, arguments=raw, extra=extra)


def arguments_text(args: Any) -> str:
    """The raw argument string as sampled; an object (Inspect, ATIF, Tunix) is serialised with
    every digit of its integers kept; None is ""; malformed JSON is kept as it is."""
    if args is None:
        return ""
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False)


@dataclass
class Arguments:
    """A tool call's arguments parsed. `shape`: `object` (a JSON object: the well-formed case),
    `double_encoded` (a JSON string holding an object), `scalar` (a JSON number, string, bool,
    null or list), `invalid_json` (cut off or not JSON), `missing` (empty)."""

    value: Any
    shape: str


def parse_arguments(raw: str) -> Arguments:
    """The parsed object of a raw argument string (integers keep every digit: the standard
    library parser, never a float conversion), and what shape it was (`Arguments`)."""
    if raw is None or not raw.strip():
        return Arguments(None, "missing")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return Arguments(None, "invalid_json")
    if isinstance(value, dict):
        return Arguments(value, "object")
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except (ValueError, RecursionError):
            return Arguments(value, "scalar")
        if isinstance(inner, dict):
            return Arguments(inner, "double_encoded")
    return Arguments(value, "scalar")


def tool_calls_from_text(text: Any, result_ids: list[str | None]) -> list[ToolCall] | None:
    """Tool calls written in the text as `<tool_call>{"name", "arguments"}</tool_call>` blocks
    (Hermes / Qwen templates; Tunix ToolAgent's default parser). Ids come from the tool results
    that follow, in order, only when their count matches; with no results the ids stay None. A
    count mismatch returns None: ids are never guessed. Unparseable blocks are skipped, as the
    agent skipped them. The blocks are found by the shared detector (ingest/tool_markup.py)."""
    calls = [tool_call(None, name, args) for name, args in hermes_blocks(text)]
    if result_ids:
        if len(result_ids) != len(calls):
            return None
        for call, call_id in zip(calls, result_ids):
            call.id = call_id
    return calls


# --- token text and logprobs ----------------------------------------------------------------

def piece_hex(piece: Any) -> str | None:
    """One token's source text as lowercase hex of its bytes. Text is UTF-8 encoded (lone
    surrogates via `surrogatepass`, so this never raises); a list of ints is taken as bytes;
    OpenAI-style `bytes:\\xf0\\x9f` / `\\xf0\\x9f` escape strings are decoded to those bytes."""
    if piece is None:
        return None
    if isinstance(piece, (bytes, bytearray)):
        return bytes(piece).hex()
    if isinstance(piece, list):
        if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in piece):
            raise ValueError("byte values must be integers 0-255")
        return bytes(piece).hex()
    if isinstance(piece, str):
        m = _HEX_ESCAPES.match(piece)
        if m:
            return m.group(1).replace("\\x", "").lower()
        return piece.encode("utf-8", "surrogatepass").hex()
    raise ValueError(f"expected text or a list of bytes, got {type(piece).__name__}")


def pieces(v: Any, path: str) -> list[str | None] | None:
    """A list of token pieces (text or byte lists) → hex strings; None when absent."""
    if v is None:
        return None
    if not isinstance(v, list):
        raise FieldError(path, f"expected a list of token pieces, got {type(v).__name__}")
    out = []
    for k, p in enumerate(v):
        try:
            out.append(piece_hex(p))
        except ValueError as exc:
            raise FieldError(f"{path}[{k}]", str(exc)) from None
    return out


@dataclass
class LogprobTokens:
    """An OpenAI `logprobs.content` list, per token: id (-1 = not recorded: OpenAI gives no
    ids, and none are invented, unless every entry carries an integer `token_id`), bytes as hex,
    logprob (None = missing), the token text, and top_logprobs when any entry has them."""

    ids: list[int]
    hexes: list[str | None]
    logprobs: list[float | None]
    texts: list[str | None]
    top: list[Any] | None


def tokens_from_openai_logprobs(entries: Any, path: str) -> LogprobTokens:
    """`[{token, logprob, bytes?, top_logprobs?, token_id?}]` → LogprobTokens."""
    if not isinstance(entries, list):
        raise FieldError(path, f"expected a list of token objects, got {type(entries).__name__}")
    texts, hexes, values, tops, ids = [], [], [], [], []
    for k, e in enumerate(entries):
        p = f"{path}[{k}]"
        if not isinstance(e, dict):
            raise FieldError(p, f"expected a token object, got {type(e).__name__}")
        token = e.get("token")
        if token is not None and not isinstance(token, str):
            raise FieldError(f"{p}.token", "expected a string")
        if not is_number_or_none(e.get("logprob")):
            raise FieldError(f"{p}.logprob", "expected a number or null")
        raw_bytes = e.get("bytes")
        try:
            hexes.append(piece_hex(raw_bytes) if raw_bytes is not None else piece_hex(token))
        except ValueError as exc:
            raise FieldError(f"{p}.bytes", str(exc)) from None
        texts.append(token)
        values.append(None if e.get("logprob") is None else float(e["logprob"]))
        tops.append(e.get("top_logprobs"))
        tid = e.get("token_id", e.get("id"))
        ids.append(tid if isinstance(tid, int) and not isinstance(tid, bool) else None)
    known = bool(entries) and all(i is not None for i in ids)
    return LogprobTokens(ids=ids if known else [-1] * len(entries), hexes=hexes, logprobs=values, texts=texts,
                         top=tops if any(t for t in tops) else None)


def add_messages(builder: Any, msgs: list, path: str) -> list[int]:
    """Append OpenAI messages to a `_build.RolloutBuilder` as a chain, one node each; assistant
    messages are sampled, and a message's `finish_reason` becomes a Call for its node. Returns the
    node indices. FieldErrors name `path[i]...`."""
    out = []
    for i, m in enumerate(msgs):
        conv = message_from_openai(m, f"{path}[{i}]")
        idx = builder.add(conv.message, sampled=conv.message.role == "assistant", timestamp=conv.timestamp,
                          extra=conv.extra or None)
        if conv.finish_reason is not None:
            builder.call(idx, conv.finish_reason)
        out.append(idx)
    return out

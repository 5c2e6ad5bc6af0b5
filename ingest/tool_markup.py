"""Tool-call markup in message text: the one detector the readers and the checks share.

A chat template renders a tool call as markup (`<tool_call>{...}</tool_call>`, ...) and a server's
tool parser turns that markup back into structured `tool_calls`. When the parser fails, the markup
stays in the assistant's content (vllm-project/vllm#18791), or one call is parsed and the next is
left as text (vllm-project/vllm#26345): the `unparsed_tool_call` check (ingest/checks/tools.py) and
the ending's evidence (ingest/endings.py) find it with `unparsed_call`. A harness whose protocol is
the text itself (Tunix ToolAgent, Atropos) is parsed with `hermes_blocks` (ingest/formats/_openai.py
`tool_calls_from_text`). Issue 20: one detector for all.

Dialects (`DIALECTS`; a message is named by the markup that comes first in its text):
- `Qwen3-Coder XML`: `<tool_call><function=NAME><parameter=...>...</function></tool_call>`;
- `Hermes`: `<tool_call>{"name": NAME, "arguments": {...}}</tool_call>` (also Qwen 2.5/3);
- `Llama 3 python_tag`: `<|python_tag|>{"name": NAME, "parameters": {...}}`;
- `Mistral`: `[TOOL_CALLS][{"name": NAME, "arguments": {...}}]` (or `[TOOL_CALLS]NAME[ARGS]{...}`).

Not markup (a model reasoning or explaining the format did not fail a parse): text inside an inline
reasoning block (`<think>`, `<thinking>`, `<reasoning>`, `REASONING_TAGS`; an unclosed one runs to
the end, a `</think>` with no opening closes reasoning that began in the prompt, as Qwen3 and
DeepSeek-R1 templates do) and inside fenced code (```` ``` ```` or `~~~` fences, CommonMark: an
unclosed fence runs to the end).

Linear in the text: openings are found with `str.find`; each is parsed only up to the next opening
(so the parsed bodies never overlap), the closing tag is looked up once per stretch, and the
patterns applied to a body are anchored or bounded (no `.*?` across the text). A message's markup is
scanned once (`message_markups` keeps the result beside the message), however many callers ask.
"""
from __future__ import annotations

import heapq
import json
import re
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator

HERMES_BEGIN, HERMES_END = "<tool_call>", "</tool_call>"
PYTHON_TAG, MISTRAL_BEGIN = "<|python_tag|>", "[TOOL_CALLS]"
DIALECTS = ("Qwen3-Coder XML", "Hermes", "Llama 3 python_tag", "Mistral")
REASONING_TAGS = ("think", "thinking", "reasoning")
MAX_KEPT = 1000  # markups kept per message: far more than any message has structured calls

_NAME_KEY = re.compile(r"\"name\"\s*:\s*\"([^\"\\\n]{1,200})\"")
_QWEN_FUNCTION = re.compile(r"<function=([^>\s]{1,200})>")
_MISTRAL_NAME = re.compile(r"([A-Za-z_][\w.-]{0,199})\[ARGS\]")
_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})([^\n]*)$", re.M)
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\r\n]*")
_MEMO: dict[int, tuple[weakref.ref, str, tuple[Markup, ...]]] = {}  # id(message) → (message, text, markups)


@dataclass(frozen=True)
class Markup:
    """Tool-call markup found in a text: its `dialect` (a name of DIALECTS), the `tool` it calls
    (None when the markup does not name one), `at`, the character offset where its opening starts,
    and `complete`: the markup is a whole call (JSON with a name, or a closed `<function=...>`), not a
    fragment. One `[TOOL_CALLS][...]` array with several calls gives one Markup per call."""

    dialect: str
    tool: str | None
    at: int
    complete: bool = False


def find_markup(text: Any) -> Markup | None:
    """The first tool-call markup in `text` outside reasoning blocks and fenced code, or None (also
    for a non-string). Linear in the text; never raises."""
    return next(iter(find_all(text)), None)


def find_all(text: Any, *, body: Callable[[str, int, int], str] | None = None) -> tuple[Markup, ...]:
    """Every tool-call markup in `text` (at most MAX_KEPT), in text order, outside reasoning blocks
    and fenced code; () for a non-string. Linear in the text: `body(text, start, end)` cuts out the
    stretch parsed after each opening (a slice; tests pass a counting one), and the stretches never
    overlap. Never raises."""
    if not isinstance(text, str) or not text:
        return ()
    cut = body or _slice
    skip = _Skipped(text)
    closes = _NextClose(text, HERMES_END)
    starts = heapq.merge(*(_positions(text, opening) for opening in (HERMES_BEGIN, PYTHON_TAG, MISTRAL_BEGIN)))
    out: list[Markup] = []
    current = next(starts, None)
    while current is not None and len(out) < MAX_KEPT:
        at, opening = current
        current = next(starts, None)
        if skip.covers(at):
            continue
        begin = at + len(opening)
        end = current[0] if current is not None else len(text)
        if opening == HERMES_BEGIN:
            close = closes.after(begin)
            out.extend(_tool_call_tag(cut(text, begin, min(end, close) if close >= 0 else end), at))
        elif opening == PYTHON_TAG:
            out.extend(_python_tag(cut(text, begin, end), at))
        else:
            out.extend(_mistral(cut(text, begin, end), at))
    return tuple(out[:MAX_KEPT])


def message_markups(message) -> tuple[Markup, ...]:
    """`find_all` of a message's text (`ingest.schema.Message.text()`), scanned once per message:
    the result is kept for as long as the message lives (`_MEMO`, by the message's identity, with
    the text it was found in, so an edited message is scanned again), so the check and the ending's
    evidence share one scan. Kept beside the message, not on it: a message compares and
    serialises as before."""
    text = message.text()
    if not _may_hold_markup(text):
        return ()  # no opening in the text: nothing to scan, nothing to keep
    memo = _MEMO.get(id(message))
    if memo is not None and memo[0]() is message and (memo[1] is text or memo[1] == text):
        return memo[2]
    found = find_all(text)
    key = id(message)
    try:
        ref = weakref.ref(message, lambda _, key=key: _MEMO.pop(key, None))
    except TypeError:  # an object that cannot be referred to weakly: not kept
        return found
    _MEMO[key] = (ref, text, found)
    return found


def _may_hold_markup(text: Any) -> bool:
    """Whether `text` holds an opening `find_all` looks for (three substring tests at C speed: most
    messages hold none, and then there is nothing to scan or keep)."""
    return isinstance(text, str) and (HERMES_BEGIN in text or PYTHON_TAG in text or MISTRAL_BEGIN in text)


def unparsed_call(message) -> Markup | None:
    """The tool-call markup left unparsed in an assistant message (`ingest.schema.Message`), or None
    (any other role). With no structured tool call: the first markup of its text. With structured
    calls: the first complete markup beyond them (a partial parse, vllm-project/vllm#26345: one call
    parsed, the next left as text); each complete markup naming a structured call's tool takes that
    call, so a text that repeats the structured calls' markup verbatim (Tunix ToolAgent's content) is
    not flagged, nor is a fragment."""
    if message.role != "assistant":
        return None
    found = message_markups(message)
    if not found:
        return None
    if not message.tool_calls:
        return found[0]
    left = Counter(tc.name for tc in message.tool_calls)
    for m in found:
        if not m.complete:
            continue
        if left[m.tool] > 0:
            left[m.tool] -= 1
            continue
        return m
    return None


def hermes_blocks(text: Any) -> list[tuple[str, Any]]:
    """The (name, arguments) of every well-formed Hermes `<tool_call>{"name", "arguments"}</tool_call>`
    block in `text`, in order; a block that is not JSON with both keys, or has no closing tag, is
    skipped (as an agent that parses them skips it). [] for a non-string. Linear: each block is read
    once, from its opening to the closing tag after it."""
    if not isinstance(text, str) or HERMES_BEGIN not in text:
        return []
    out: list[tuple[str, Any]] = []
    pos = 0
    while True:
        start = text.find(HERMES_BEGIN, pos)
        if start == -1:
            break
        start += len(HERMES_BEGIN)
        end = text.find(HERMES_END, start)
        if end == -1:
            break
        pos = end + len(HERMES_END)
        try:
            data = json.loads(text[start:end])
            out.append((str(data["name"]), data["arguments"]))
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
    return out


def uses_structured_calls(rollout) -> bool:
    """Whether a rollout (`ingest.schema.Rollout`) speaks structured tool calls: it declares
    `tools`, or some assistant turn carries a `tool_calls` entry the model sampled as one (not one a
    reader parsed out of the text, `extra.parsed_from_text`: mini-swe-agent, old SWE-agent). Only
    then is markup left in a message's text a failed parse; a harness whose protocol is the text
    itself is not one."""
    return bool(rollout.tools) or any(not tc.extra.get("parsed_from_text")
                                      for n in rollout.nodes for tc in n.message.tool_calls or ())


# --- the dialects, each reading the stretch after its opening -------------------------------------

def _tool_call_tag(body: str, at: int) -> list[Markup]:
    """After `<tool_call>`: Qwen3-Coder's `<function=NAME>` or Hermes JSON with a `"name"`."""
    i = _lstrip(body)
    if body.startswith("<function=", i):
        m = _QWEN_FUNCTION.match(body, i)
        return [Markup("Qwen3-Coder XML", m.group(1), at, "</function>" in body)] if m else []
    if body.startswith("{", i):
        name = _json_name(body, i)
        if name is not None:
            return [Markup("Hermes", name, at, True)]
        m = _NAME_KEY.search(body, i)
        return [Markup("Hermes", m.group(1), at)] if m else []
    return []


def _python_tag(body: str, at: int) -> list[Markup]:
    """After `<|python_tag|>`: JSON with a `"name"`, or anything else (a built-in tool's code)."""
    i = _lstrip(body)
    name = _json_name(body, i) if body.startswith("{", i) else None
    if name is not None:
        return [Markup("Llama 3 python_tag", name, at, True)]
    m = _NAME_KEY.search(body, i) if body.startswith("{", i) else None
    return [Markup("Llama 3 python_tag", m.group(1) if m else None, at)]


def _mistral(body: str, at: int) -> list[Markup]:
    """After `[TOOL_CALLS]`: a JSON array (or object) of calls, or `NAME[ARGS]{...}` (v11)."""
    i = _lstrip(body)
    if body.startswith(("[", "{"), i):
        value = _json(body, i)
        calls = value if isinstance(value, list) else [value]
        names = [c["name"] for c in calls if isinstance(c, dict) and isinstance(c.get("name"), str)]
        if names:
            return [Markup("Mistral", name, at, True) for name in names]
        m = _NAME_KEY.search(body, i)
        return [Markup("Mistral", m.group(1) if m else None, at)]
    m = _MISTRAL_NAME.match(body, i)
    if m:
        args = _lstrip(body, m.end())
        return [Markup("Mistral", m.group(1), at, body.startswith("{", args) and _json(body, args) is not None)]
    return [Markup("Mistral", None, at)]


def _json(body: str, i: int) -> Any:
    """The JSON value starting at `body[i]` (trailing text allowed), or None."""
    try:
        return _DECODER.raw_decode(body, i)[0]
    except (ValueError, RecursionError):
        return None


def _json_name(body: str, i: int) -> str | None:
    value = _json(body, i)
    return value["name"] if isinstance(value, dict) and isinstance(value.get("name"), str) else None


def _lstrip(body: str, i: int = 0) -> int:
    return _SPACE.match(body, i).end()


def _slice(text: str, start: int, end: int) -> str:
    return text[start:end]


def _positions(text: str, needle: str) -> Iterator[tuple[int, str]]:
    pos = text.find(needle)
    while pos != -1:
        yield pos, needle
        pos = text.find(needle, pos + len(needle))


class _NextClose:
    """The first `needle` at or after a position, for positions asked in increasing order: each
    part of the text is searched once."""

    def __init__(self, text: str, needle: str):
        self.text, self.needle, self.found, self.searched = text, needle, -1, False

    def after(self, pos: int) -> int:
        if self.searched and (self.found == -1 or self.found >= pos):
            return self.found  # none after an earlier position, or the first one after it is past pos
        self.searched, self.found = True, self.text.find(self.needle, pos)
        return self.found


class _Skipped:
    """The stretches of a text that are not a tool call's place: inline reasoning blocks and fenced
    code, merged into disjoint spans. `covers(pos)` for positions asked in increasing order."""

    def __init__(self, text: str):
        merged: list[list[int]] = []
        for start, end in sorted([*_reasoning_spans(text), *_fence_spans(text)]):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self.spans, self.k = merged, 0

    def covers(self, pos: int) -> bool:
        while self.k < len(self.spans) and self.spans[self.k][1] <= pos:
            self.k += 1
        return self.k < len(self.spans) and self.spans[self.k][0] <= pos


def _reasoning_spans(text: str) -> Iterator[tuple[int, int]]:
    for tag in REASONING_TAGS:
        opening, closing = f"<{tag}>", f"</{tag}>"
        if closing not in text and opening not in text:
            continue
        pos = 0
        first_open, first_close = text.find(opening), text.find(closing)
        if first_close != -1 and (first_open == -1 or first_close < first_open):
            pos = first_close + len(closing)  # the opening was in the prompt (Qwen3, DeepSeek-R1 templates)
            yield 0, pos
        while True:
            start = text.find(opening, pos)
            if start == -1:
                break
            end = text.find(closing, start + len(opening))
            if end == -1:
                yield start, len(text)  # reasoning cut off: the rest is still reasoning
                break
            pos = end + len(closing)
            yield start, pos


def _fence_spans(text: str) -> Iterator[tuple[int, int]]:
    if "```" not in text and "~~~" not in text:
        return
    open_at, fence = None, ""
    for m in _FENCE.finditer(text):
        mark, rest = m.group(1), m.group(2)
        if open_at is None:
            if mark[0] == "`" and "`" in rest:
                continue  # not a fence: a backtick fence's info string has no backtick
            open_at, fence = m.start(), mark
        elif mark[0] == fence[0] and len(mark) >= len(fence) and not rest.strip():
            yield open_at, m.end()
            open_at = None
    if open_at is not None:
        yield open_at, len(text)

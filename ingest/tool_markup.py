"""Tool-call markup in message text: the one detector the readers and the checks share.

A chat template renders a tool call as markup (`<tool_call>{...}</tool_call>`, ...) and a server's
tool parser turns that markup back into structured `tool_calls`. When the parser fails, the markup
stays in the assistant's content (vllm-project/vllm#18791, #26345): the `unparsed_tool_call` check
(ingest/checks/tools.py) and the ending's evidence (ingest/endings.py) find it with `find_markup`.
A harness whose protocol is the text itself (Tunix ToolAgent, Atropos) is parsed with
`hermes_blocks` (ingest/formats/_openai.py `tool_calls_from_text`). Issue 20: one detector for all.

Dialects (`DIALECTS`, checked in this order; the first that matches names the message):
- `Qwen3-Coder XML`: `<tool_call><function=NAME><parameter=...>...</function></tool_call>`;
- `Hermes`: `<tool_call>{"name": NAME, "arguments": {...}}</tool_call>` (also Qwen 2.5/3);
- `Llama 3 python_tag`: `<|python_tag|>{"name": NAME, "parameters": {...}}`;
- `Mistral`: `[TOOL_CALLS][{"name": NAME, "arguments": {...}}]` (or `[TOOL_CALLS]NAME[ARGS]{...}`).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

HERMES_BEGIN, HERMES_END = "<tool_call>", "</tool_call>"

# (dialect, pattern): group 1 is the tool's name where the markup names it.
DIALECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Qwen3-Coder XML", re.compile(r"<tool_call>\s*<function=([^>\s]+)>", re.S)),
    ("Hermes", re.compile(r"<tool_call>\s*\{.*?\"name\"\s*:\s*\"([^\"]+)\"", re.S)),
    ("Llama 3 python_tag", re.compile(r"<\|python_tag\|>\s*(?:\{.*?\"name\"\s*:\s*\"([^\"]+)\")?", re.S)),
    ("Mistral", re.compile(r"\[TOOL_CALLS\]\s*(?:\[?\s*\{.*?\"name\"\s*:\s*\"([^\"]+)\"|([A-Za-z_][\w.-]*)\[ARGS\])?",
                           re.S)),
)


@dataclass(frozen=True)
class Markup:
    """Tool-call markup found in a text: its `dialect` (a name of DIALECTS), the `tool` it calls
    (None when the markup does not name one) and `at`, the character offset where it starts."""

    dialect: str
    tool: str | None
    at: int


def find_markup(text: Any) -> Markup | None:
    """The first dialect of DIALECTS whose markup `text` holds, or None (also for a non-string).
    Linear in the text for each dialect; never raises."""
    if not isinstance(text, str) or not text:
        return None
    for dialect, pattern in DIALECTS:
        found = pattern.search(text)
        if found:
            tool = next((g for g in found.groups() if g), None)
            return Markup(dialect, tool, found.start())
    return None


def hermes_blocks(text: Any) -> list[tuple[str, Any]]:
    """The (name, arguments) of every well-formed Hermes `<tool_call>{"name", "arguments"}</tool_call>`
    block in `text`, in order; a block that is not JSON with both keys, or has no closing tag, is
    skipped (as an agent that parses them skips it). [] for a non-string."""
    if not isinstance(text, str) or HERMES_BEGIN not in text:
        return []
    out: list[tuple[str, Any]] = []
    rest = text
    while HERMES_BEGIN in rest:
        start = rest.find(HERMES_BEGIN) + len(HERMES_BEGIN)
        end = rest.find(HERMES_END, start)
        if end == -1:
            break
        body = rest[start:end].strip()
        rest = rest[end + len(HERMES_END):]
        try:
            data = json.loads(body)
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


def unparsed_call(message) -> Markup | None:
    """The tool-call markup left in an assistant message (`ingest.schema.Message`) that carries no
    structured tool call, or None (any other role, or a message with `tool_calls`)."""
    if message.role != "assistant" or message.tool_calls:
        return None
    return find_markup(message.text())

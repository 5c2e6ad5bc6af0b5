"""Google Tunix agentic rollouts (google-tunix 0.1.7, `tunix/rl/agentic/...`).

Tunix's `TrajectoryCollectEngine.collect(mode)` (`tunix/rl/agentic/trajectory/
trajectory_collect_engine.py`) returns one episode in one of four shapes, and the training
pipeline wraps them twice more. This reader recognises all six by content, never by file name:

Trajectory mode: the `Trajectory` dataclass (`tunix/rl/agentic/agents/agent_types.py`)::

    {task: {id, ...}, status: "SUCCEEDED" | "MAX_STEPS_REACHED" | ..., reward: float,
     prompt_tokens: [int] (left-padded with the pad id), env_time: {...}, reward_time: {...},
     steps: [{chat_completions: [{role, content, tool_call_id?}],   # the context of that turn
              model_response: str, thought: str,
              action: {action: [{id, type, function: {name, arguments: str | dict}}] | str},
              observation: {tool_outputs: {call_id: str}} | {} | str | null,
              info: {...}, reward: float, done: bool, mc_return: float,
              assistant_tokens: [int] | null, assistant_masks: [int] | null,
              env_tokens: [int] | null, env_masks: [int] | null, logprobs: [float] | null}]}

Steps mode: `[{assistant_text, env_text (the observation), done, assistant_tokens,
assistant_masks, env_tokens, env_masks, reward, mc_return, env_time, reward_time}]`: no status,
no prompt, no actions.

Token mode: the flat training dict::

    {conversation_text: [messages], prompt_tokens: [int], conversation_tokens: [int],
     conversation_masks: [int], old_logprobs: [float] | null (aligned with conversation_tokens,
     zeros where the sampler gave none and over env tokens), status, trajectory_reward,
     policy_version, original_input (the task), group_id, env_time, reward_time}

Conversation mode: the agent's bare message list `[{role, content, tool_call_id?}]` (Gemma
`<end_of_turn>` kept in assistant content).

RolloutOrchestrator output (`tunix/rl/agentic/pipeline/rollout_orchestrator.py`): a list of
batches, each a list of `TrajectoryItem` `{pair_index, group_id, start_step, traj, metadata}`
where `traj` is a Trajectory- or Token-mode dict. One batch is one GRPO group.

The GRPO learner's CSV trajectory log (`trajectory_log_*.csv`): the Token-mode dict's keys as
columns, each cell a Python repr (single-quoted dicts, lists), parsed with `ast.literal_eval`.

Mapping (docs/formats-tunix.md has the full table and the ending rules): one Rollout per
episode, a linear message chain: prompt messages (the prompt tokens, left padding stripped, on the
last of them, mask 0), then per turn an assistant node (sampled, assistant tokens / mask /
logprobs, per-turn `reward` and `mc_return` as node fields) and its observation as tool nodes
(env tokens on the last of them). ToolAgent's implicit `finish` call is the final answer, not a
tool call.
"""
from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ingest import endings
from ingest.fields import FieldError, floats, ints, is_number_or_none
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder, align_segments, mask_runs
from ingest.formats.base import ReadContext, guarded
from ingest.schema import Ending, EndingInfo, GroupRef, Message, Rollout, RunRef, Task, ToolCall
from ingest.errors import RecordError
from ingest.source import Source

NAME = "tunix"
EXPECTS = ("a Tunix Trajectory, Steps, Token or Conversation rollout (`<end_of_turn>` in assistant text), "
           "RolloutOrchestrator batches of TrajectoryItems, or the GRPO learner's CSV log")

# TrajectoryCollectEngine's default `filter_statuses`: with `overlong_filter=True` a rollout that
# ended this way gets an all-zero Token-mode mask (and no final reward).
FILTER_STATUSES = frozenset({"MAX_STEPS_REACHED", "MAX_CONTEXT_LIMIT_REACHED", "TIMEOUT", "ENV_TIMEOUT"})

# ToolAgent turns a response without tool calls into this call; it is the final answer.
FINISH = "finish"
END_OF_TURN = "<end_of_turn>"

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_TOKEN_KEYS = ("conversation_tokens", "conversation_masks")
_CSV_COLUMNS = frozenset({"conversation_text", "conversation_tokens", "conversation_masks", "status"})
# Columns whose cells are plain strings in the CSV log (pandas writes str(value), no quotes).
_CSV_STRING_COLUMNS = frozenset({"status"})
# Per-token arrays newer Tunix versions add (MoE routing); large and not modelled.
_DROPPED = frozenset({"routed_experts", "prompt_routed_experts", "assistant_routed_experts", "env_routed_experts"})


# --- detection ------------------------------------------------------------------------------

def _is_trajectory(d: dict) -> bool:
    steps = d.get("steps")
    if not isinstance(steps, list) or "status" not in d:
        return False
    if not steps:
        return "task" in d and "reward" in d
    head = steps[0]
    return isinstance(head, dict) and any(
        k in head for k in ("chat_completions", "model_response", "mc_return", "assistant_tokens"))


def _is_token(d: dict) -> bool:
    return all(k in d for k in _TOKEN_KEYS) and ("conversation_text" in d or "trajectory_reward" in d)


def _is_item(d: dict) -> bool:
    return "traj" in d and ("pair_index" in d or "group_id" in d) and isinstance(d["traj"], (dict, list))


def _is_steps(value: list) -> bool:
    head = value[0]
    return isinstance(head, dict) and "assistant_text" in head and (
        "env_text" in head or "assistant_tokens" in head)


def _is_conversation(value: list) -> bool:
    """A bare message list, claimed only when it carries Tunix's Gemma turn marker."""
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and m["role"] in _ROLES for m in value):
        return False
    return any(m["role"] == "assistant" and isinstance(m.get("content"), str) and END_OF_TURN in m["content"]
               for m in value)


def _shape(value: Any) -> str | None:
    """'trajectory', 'token', 'item', 'steps', 'conversation', 'batch', 'orchestrator' or None."""
    if isinstance(value, dict):
        if _is_item(value):
            return "item"
        if _is_trajectory(value):
            return "trajectory"
        if _is_token(value):
            return "token"
        return None
    if not isinstance(value, list) or not value:
        return None
    head = value[0]
    if isinstance(head, list):
        batches = [b for b in value if b]
        ok = batches and all(isinstance(b, list) and all(isinstance(i, dict) and _is_item(i) for i in b)
                             for b in batches)
        return "orchestrator" if ok else None
    if isinstance(head, dict) and _is_item(head):
        return "batch" if all(isinstance(i, dict) and _is_item(i) for i in value) else None
    if _is_steps(value):
        return "steps"
    if _is_conversation(value):
        return "conversation"
    return None


def sniff(source: Source) -> bool:
    if source.kind == "json":
        return _shape(source.document) is not None
    if source.kind == "jsonl":
        return _shape(source.first) in ("trajectory", "token", "item")
    if source.kind == "csv":
        return isinstance(source.first, dict) and _CSV_COLUMNS <= set(source.first)
    return False


# --- reading --------------------------------------------------------------------------------

@dataclass
class _Where:
    """Where a record sits: file, line, JSON path; and the envelope every rollout gets."""

    file: str
    stem: str
    run: str
    step: int | None
    line: int | None = None
    path: str = "$"


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    where = _Where(source.name, ctx.source_key(source), ctx.run_for(source), ctx.step)
    if source.kind == "csv":
        yield from _read_csv(source, where)
        return
    if source.kind == "jsonl":
        for line, value in source.lines():
            if isinstance(value, RecordError):
                yield value
                continue
            here = _Where(where.file, f"{where.stem}#L{line}", where.run, where.step, line)
            shape = _shape(value)
            if shape in ("trajectory", "token"):
                yield _convert(shape, value, here)
            elif shape == "item":
                yield _convert_item(value, here, group_size=None)
            else:
                yield RecordError(source.name, line, None, "not a Tunix Trajectory, Token or TrajectoryItem dict")
        return
    doc = source.document
    shape = _shape(doc)
    if shape in ("trajectory", "token", "steps", "conversation"):
        yield _convert(shape, doc, where)
    elif shape == "item":
        yield _convert_item(doc, where, group_size=None)
    elif shape == "batch":
        yield from _read_batch(doc, where, 0, prefix="$")
    elif shape == "orchestrator":
        for b, batch in enumerate(doc):
            yield from _read_batch(batch, where, b, prefix=f"$[{b}]")
    else:
        yield RecordError(source.name, None, None, "not a recognised Tunix rollout shape")


def _read_batch(batch: list, where: _Where, b: int, prefix: str) -> Iterator[Rollout | RecordError]:
    """One RolloutOrchestrator batch = one GRPO group, items in completion order.
    The learner's global step is not in the output, so `step` stays None."""
    for i, item in enumerate(batch):
        here = _Where(where.file, f"{where.stem}#{b}.{i}", where.run, None, None, f"{prefix}[{i}]")
        yield _convert_item(item, here, group_size=len(batch))


def _convert_item(item: dict, where: _Where, group_size: int | None) -> Rollout | RecordError:
    """A TrajectoryItem: `traj` is read by its own shape; group = (group_id, pair_index, batch
    size). The learner's global step is not in the item: `step` stays None."""
    traj = item.get("traj")
    shape = _shape(traj)
    if shape not in ("trajectory", "token", "steps", "conversation"):
        return RecordError(where.file, where.line, f"{where.path}.traj", "TrajectoryItem.traj is not a Tunix rollout")
    group_id = item.get("group_id")
    if group_id is None and isinstance(traj, dict):
        group_id = traj.get("group_id")
    group = None
    if group_id is not None:
        index = item.get("pair_index")
        group = GroupRef(id=str(group_id), index=index if isinstance(index, int) else None, size=group_size)
    extra = {k: v for k, v in item.items() if k not in ("traj", "group_id")}
    here = _Where(where.file, where.stem, where.run, None, where.line, f"{where.path}.traj")
    return _convert(shape, traj, here, group=group, item_extra=extra)


def _read_csv(source: Source, where: _Where) -> Iterator[Rollout | RecordError]:
    """The GRPO learner's trajectory log. Group = `group_id`; index = order of appearance
    within the group (the CSV does not keep `pair_index`); size = rows of that group."""
    parsed: list[tuple[int, int, dict]] = []
    for row_no, (line, row) in enumerate(source.csv_rows()):
        try:
            rec = _parse_csv_row(row)
        except FieldError as exc:
            yield RecordError(source.name, line, exc.field, exc.message)
            continue
        if not _is_token(rec):
            yield RecordError(source.name, line, None, "CSV row lacks the Token-mode columns")
            continue
        parsed.append((row_no, line, rec))
    sizes: dict[str, int] = {}
    for _, _, rec in parsed:
        gid = rec.get("group_id")
        if gid is not None:
            sizes[str(gid)] = sizes.get(str(gid), 0) + 1
    seen: dict[str, int] = {}
    for row_no, line, rec in parsed:
        group = None
        gid = rec.get("group_id")
        if gid is not None:
            key = str(gid)
            group = GroupRef(id=key, index=seen.get(key, 0), size=sizes[key])
            seen[key] = seen.get(key, 0) + 1
        here = _Where(where.file, f"{where.stem}#{row_no}", where.run, None, line, "$")
        yield _convert("token", rec, here, group=group)


_NP_SCALAR = re.compile(r"\bnp\.(?:float|int|uint|bool_)\w*\(([^()]*)\)")
_NP_ARRAY = re.compile(r"^\s*array\((.*?)(?:,\s*dtype=[\w.]+)?\)\s*$", re.S)


def _parse_csv_row(row: dict[str, str | None]) -> dict[str, Any]:
    """Each cell is `repr(value)`; parse with `ast.literal_eval` (never eval). NumPy 2 scalar
    reprs (`np.float64(0.5)`) and `array([...])` are unwrapped first when a cell needs it."""
    out: dict[str, Any] = {}
    for column, cell in row.items():
        if column is None or column == "" or column.startswith("Unnamed:"):
            continue  # pandas index column / overflow cells
        if cell is None or cell == "":
            out[column] = None
            continue
        try:
            out[column] = ast.literal_eval(cell)
            continue
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        if column in _CSV_STRING_COLUMNS:
            out[column] = cell
            continue
        unwrapped = _NP_SCALAR.sub(r"\1", cell)
        m = _NP_ARRAY.match(unwrapped)
        if m:
            unwrapped = m.group(1)
        try:
            out[column] = ast.literal_eval(unwrapped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
            raise FieldError(column, f"cell is not a Python literal: {exc}") from None
    return out


# --- one record → one Rollout ---------------------------------------------------------------

def _convert(shape: str, data: Any, where: _Where, group: GroupRef | None = None,
             item_extra: dict | None = None) -> Rollout | RecordError:
    def build() -> Rollout:
        head = dict(
            id=where.stem,
            run=RunRef(id=where.run),
            step=where.step,
            group=group,
            source={"format": NAME, "file": where.file, "line": where.line, "mode": _MODE_NAMES[shape],
                    **({"path": where.path} if where.path != "$" else {})},
        )
        rollout = _BUILDERS[shape](data, head)
        if item_extra:
            rollout.extra["item"] = item_extra
        return rollout

    return guarded(where.file, where.line, None if where.path == "$" else where.path, build)


# --- field helpers --------------------------------------------------------------------------

def _number(value: Any, field: str) -> float | None:
    """A scalar number (reward, per-step value) or None; booleans are rejected."""
    if not is_number_or_none(value):
        raise FieldError(field, f"expected a number, got {value!r}")
    return None if value is None else float(value)


def _status(value: Any) -> str | None:
    """The engine writes `status.name` ("SUCCEEDED"); tolerate the enum's str() form too."""
    if value is None:
        return None
    text = str(value).strip()
    return text.split(".", 1)[1] if text.startswith("TrajectoryStatus.") else text


def _strip_padding(tokens: list[int], prompt_length: Any = None) -> tuple[list[int], int]:
    """Remove the left padding of `prompt_tokens`: by `prompt_length` when the record has it
    (newer Tunix), else the leading run of one repeated id when that run is at least 2 long."""
    if isinstance(prompt_length, int) and not isinstance(prompt_length, bool) and 0 <= prompt_length <= len(tokens):
        pad = len(tokens) - prompt_length
        return tokens[pad:], pad
    if len(tokens) >= 2 and tokens[0] == tokens[1]:
        pad = 1
        while pad < len(tokens) and tokens[pad] == tokens[0]:
            pad += 1
        return tokens[pad:], pad
    return tokens, 0


def _action_calls(action: Any, field: str) -> tuple[list[ToolCall], str, dict]:
    """ToolCalls of one `Step.action` and what the action was: 'final_answer' (ToolAgent's
    implicit finish), 'single_turn' (ModelAgent: the action is the response text), 'tool_call'
    or 'none'. The finish call is not returned; its arguments go to the third value."""
    inner = action.get("action") if isinstance(action, dict) and "action" in action else action
    if inner is None or inner == []:
        return [], "none", {}
    if isinstance(inner, str):
        return [], "single_turn", {}
    if not isinstance(inner, list):
        raise FieldError(field, f"expected a list of tool calls or a string, got {type(inner).__name__}")
    calls: list[ToolCall] = []
    finish: dict = {}
    for i, c in enumerate(inner):
        call = _openai.tool_call_from_openai(c, f"{field}.action[{i}]")
        if call.name == FINISH:
            fn = c.get("function") if isinstance(c.get("function"), dict) else c
            finish = {"id": c.get("id"), "arguments": fn.get("arguments")}
            continue
        calls.append(call)
    if calls:
        return calls, "tool_call", finish
    return [], "final_answer" if finish else "none", finish


def _observation_messages(obs: Any) -> list[Message]:
    """Messages for an observation the conversation does not show (the terminal turn), as
    ToolAgent.update_from_env builds them; tool outputs are kept raw (the agent would prefix
    'Tool returned result: ')."""
    extra = {"content_from": "observation"}
    if isinstance(obs, dict):
        if isinstance(obs.get("tool_outputs"), dict):
            return [Message(role="tool", tool_call_id=str(cid), content=out if isinstance(out, str) else json.dumps(out),
                            extra=dict(extra)) for cid, out in obs["tool_outputs"].items()]
        if isinstance(obs.get("question"), str):
            return [Message(role="user", content=obs["question"], extra=dict(extra))]
        return []
    if isinstance(obs, str) and obs:
        return [Message(role="user", content=obs, extra=dict(extra))]
    return []


def _task(task: Any) -> Task | None:
    if task is None:
        return None
    key = task.get("id") if isinstance(task, dict) else None
    return Task(key=None if key is None else str(key), data=task)


def _policy_version(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- the message chain ----------------------------------------------------------------------

class _Chain(RolloutBuilder):
    """A Tunix message chain: a `RolloutBuilder` with one Call per assistant node, whose prompt
    tokens are left-padded (Tunix pads `prompt_tokens` to the batch's prompt length)."""

    def __init__(self, policy_version: int | None = None) -> None:
        super().__init__(policy_version=policy_version, auto_calls=True)

    def add(self, message: Message, tokens: Any = None, *, sampled: bool = False, mask: Any = None,
            logprobs: Any = None, extra: dict | None = None, **kw: Any) -> int:  # type: ignore[override]
        """As RolloutBuilder.add; a turn's `reward` / `mc_return` in `extra` become node fields."""
        extra = dict(extra or {})
        return super().add(message, tokens, sampled=sampled, mask=mask, logprobs=logprobs,
                           reward=extra.pop("reward", None), mc_return=extra.pop("mc_return", None),
                           extra=extra, **kw)

    def prompt(self, messages: list[Message], prompt_tokens: Any, prompt_length: Any = None,  # type: ignore[override]
               field_name: str = "prompt_tokens") -> None:
        """The system/user messages as the root chain; the prompt tokens (left padding
        stripped, recorded as `extra.left_padding`) on the last of them, mask 0."""
        tokens = ints(prompt_tokens, field_name)
        if tokens is None:
            super().prompt(messages, None)
            return
        body, pad = _strip_padding(tokens, prompt_length)
        super().prompt(messages, body, extra={"left_padding": pad})


def _split_prompt(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """(messages before the first assistant message, the rest)."""
    first = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    return messages[:first], messages[first:]


def _turns(rest: list[Message]) -> list[tuple[Message, list[Message]]]:
    """Split the conversation after the prompt (which starts at an assistant message) into
    (assistant message, the messages that follow it)."""
    out: list[tuple[Message, list[Message]]] = []
    for msg in rest:
        if msg.role == "assistant":
            out.append((msg, []))
        elif out:
            out[-1][1].append(msg)
    return out


# --- endings --------------------------------------------------------------------------------

_STATUS_ENDINGS: dict[str, tuple[Ending, str]] = {
    "MAX_STEPS_REACHED": (Ending.truncated, "the engine's step budget (env max_steps) ran out"),
    "MAX_CONTEXT_LIMIT_REACHED": (Ending.truncated, "the response token budget (max_response_length) ran out"),
    "TIMEOUT": (Ending.truncated, "the episode outlived its wall-clock budget"),
    "ENV_TIMEOUT": (Ending.error, "env.step did not return before the episode deadline and was cut off "
                                  "(also reported when slow generations left it no time)"),
}


def _ending(status: str | None, last: str) -> EndingInfo:
    """The documented table (docs/formats-tunix.md). `last` says what the final turn was:
    'final_answer', 'single_turn', 'tool_call' or 'none'."""
    if status is None:
        return EndingInfo(type=Ending.unknown, message="the record carries no status")
    if status == "SUCCEEDED":
        if last == "final_answer":
            return EndingInfo(type=Ending.submitted, detail=status, message="final answer (ToolAgent's implicit finish)")
        if last == "single_turn":
            return EndingInfo(type=Ending.submitted, detail=status,
                              message="single-turn answer (the environment is done after one response)")
        if last == "tool_call":
            return EndingInfo(type=Ending.truncated, detail=status,
                              message="the environment truncated itself: done after a tool call "
                                      "(BaseTaskEnv forces done at its max_steps), not a final answer")
        return EndingInfo(type=Ending.unknown, detail=status, message="SUCCEEDED, but the last turn is not recorded")
    if status in _STATUS_ENDINGS:
        _, why = _STATUS_ENDINGS[status]
        return EndingInfo(type=endings.from_reason(status), detail=status, message=why)  # the one table
    return EndingInfo(type=Ending.unknown, detail=status)


def _finish(rollout: Rollout, chain: _Chain, *, token_counts_known: bool = True) -> Rollout:
    """Attach the chain and fill the ending's evidence (`RolloutBuilder.finish`)."""
    return chain.finish(rollout, token_counts_known=token_counts_known)


def _turn_extra(step: dict, k: int, field: str) -> dict:
    out: dict[str, Any] = {"turn": k}
    for key in ("reward", "mc_return"):
        out[key] = _number(step.get(key), f"{field}.{key}")
    if "done" in step:
        out["done"] = step.get("done")
    return out


def _record_turn_rewards(rollout: Rollout, steps: list[dict]) -> None:
    rewards = [s.get("reward") for s in steps]
    returns = [s.get("mc_return") for s in steps]
    rollout.extra["turn_rewards"] = rewards
    rollout.extra["mc_returns"] = returns
    if returns and isinstance(returns[0], (int, float)) and not isinstance(returns[0], bool):
        rollout.metrics["mc_return"] = float(returns[0])


def _timing(d: dict) -> dict:
    return {k: d[k] for k in ("env_time", "reward_time") if d.get(k) is not None}


def _extra(d: dict, known: set[str]) -> dict:
    return {k: v for k, v in d.items() if k not in known and k not in _DROPPED}


# --- Trajectory mode ------------------------------------------------------------------------

_TRAJECTORY_KEYS = {"task", "steps", "reward", "status", "prompt_tokens", "prompt_length", "env_time", "reward_time"}


def _context(steps: list[dict], k: int) -> list[Message]:
    """The messages of `steps[k].chat_completions` (the context of that turn's request)."""
    context = steps[k].get("chat_completions")
    if context is not None and not isinstance(context, list):
        raise FieldError(f"steps[{k}].chat_completions", "expected a list of messages")
    return [_openai.message_from_openai(m, f"steps[{k}].chat_completions[{i}]").message for i, m in enumerate(context or [])]


def _from_trajectory(traj: dict, head: dict) -> Rollout:
    """Trajectory mode. Message texts come from the requests' own contexts
    (`chat_completions`: the first turn's for the prompt, the last turn's for every later
    message); the terminal turn's observation, which no request saw, from `observation`.
    When the contexts do not line up with the steps, `model_response` and `observation` are used
    and `extra.texts_from` says so."""
    steps = traj["steps"]
    status = _status(traj.get("status"))
    task = traj.get("task")
    chain = _Chain(policy_version=_policy_version(task.get("policy_version")) if isinstance(task, dict) else None)
    for k, step in enumerate(steps):
        if not isinstance(step, dict):
            raise FieldError(f"steps[{k}]", "expected a step object")
    # The prompt as the first request saw it (what `prompt_tokens` encode); the turns from the
    # last request's context, the only one that shows every earlier observation.
    prompt = _split_prompt(_context(steps, 0))[0] if steps else []
    turns = _turns(_split_prompt(_context(steps, len(steps) - 1))[1]) if steps else []
    use_context = len(turns) == len(steps)
    chain.prompt(prompt, traj.get("prompt_tokens"), traj.get("prompt_length"), "prompt_tokens")

    last_kind = "none"
    for k, step in enumerate(steps):
        f = f"steps[{k}]"
        calls, last_kind, finish = _action_calls(step.get("action"), f"{f}.action")
        if use_context:
            msg = turns[k][0].model_copy(deep=True)
        else:
            text = step.get("model_response")
            msg = Message(role="assistant", content=text if isinstance(text, str) else None)
        msg.tool_calls = calls or None
        extra = _turn_extra(step, k, f)
        if step.get("thought"):
            extra["thought"] = step["thought"]
        info = {key: v for key, v in (step.get("info") or {}).items() if key != "response"} \
            if isinstance(step.get("info"), dict) else step.get("info")
        if info:
            extra["info"] = info
        if finish and isinstance(finish.get("arguments"), dict) and \
                finish["arguments"].get("response") != step.get("model_response"):
            extra["finish_arguments"] = finish["arguments"]
        tokens = ints(step.get("assistant_tokens"), f"{f}.assistant_tokens")
        chain.add(msg, tokens, sampled=True, mask=ints(step.get("assistant_masks"), f"{f}.assistant_masks"),
                  logprobs=floats(step.get("logprobs"), f"{f}.logprobs"), extra=extra)

        terminal = k == len(steps) - 1
        if use_context and turns[k][1]:
            env_msgs = [m.model_copy(deep=True) for m in turns[k][1]]
        elif terminal and status == "ENV_TIMEOUT":
            env_msgs = []  # env.step never returned: any observation here is not this turn's
        else:
            env_msgs = _observation_messages(step.get("observation"))
        chain.env(env_msgs, ints(step.get("env_tokens"), f"{f}.env_tokens"),
                  ints(step.get("env_masks"), f"{f}.env_masks"))

    rollout = Rollout(**head, task=_task(task), reward=_number(traj.get("reward"), "reward"),
                      ending=_ending(status, last_kind), timing=_timing(traj),
                      extra={"status": status, **_extra(traj, _TRAJECTORY_KEYS)})
    _record_turn_rewards(rollout, steps)
    if not use_context and steps:
        rollout.extra["texts_from"] = "model_response"  # chat_completions did not line up with steps
    return _finish(rollout, chain)


# --- Steps mode -----------------------------------------------------------------------------

_STEP_KEYS = {"assistant_text", "env_text", "done", "assistant_tokens", "assistant_masks", "env_tokens",
              "env_masks", "reward", "mc_return", "env_time", "reward_time", "logprobs"}


def _from_steps(steps: list, head: dict) -> Rollout:
    """Steps mode: no status, prompt or actions. Ending: the last turn not done means the engine
    stopped on its step or token budget (truncated); done is ambiguous (SUCCEEDED, TIMEOUT or
    ENV_TIMEOUT all set it), so unknown. Reward = Σ turn rewards, the engine's own definition
    of the trajectory reward."""
    chain = _Chain()
    for k, step in enumerate(steps):
        f = f"[{k}]"
        if not isinstance(step, dict):
            raise FieldError(f, "expected a step object")
        obs = step.get("env_text")
        env_msgs = _observation_messages(obs)
        calls = _openai.tool_calls_from_text(step.get("assistant_text"), [m.tool_call_id for m in env_msgs if m.role == "tool"])
        text = step.get("assistant_text")
        msg = Message(role="assistant", content=text if isinstance(text, str) else None, tool_calls=calls or None)
        extra = _turn_extra(step, k, f)
        if calls:
            extra["tool_calls_from"] = "text"
        elif calls is None:
            extra["tool_calls_unpaired"] = "tool-call blocks and tool results differ in number"
        extra.update(_extra(step, _STEP_KEYS))
        chain.add(msg, ints(step.get("assistant_tokens"), f"{f}.assistant_tokens"), sampled=True,
                  mask=ints(step.get("assistant_masks"), f"{f}.assistant_masks"),
                  logprobs=floats(step.get("logprobs"), f"{f}.logprobs"), extra=extra)
        chain.env(env_msgs, ints(step.get("env_tokens"), f"{f}.env_tokens"),
                  ints(step.get("env_masks"), f"{f}.env_masks"))

    rewards = [_number(s.get("reward"), f"[{k}].reward") for k, s in enumerate(steps)]
    reward = math.fsum(rewards) if rewards and all(r is not None for r in rewards) else None  # type: ignore[arg-type]
    last_done = steps[-1].get("done") if steps else None
    if last_done is False:
        ending = EndingInfo(type=Ending.truncated,
                            message="Steps mode has no status; the last turn is not done, so the engine stopped on "
                                    "its step or token budget (MAX_STEPS_REACHED or MAX_CONTEXT_LIMIT_REACHED)")
    else:
        ending = EndingInfo(type=Ending.unknown,
                            message="Steps mode has no status; a done last turn fits SUCCEEDED, TIMEOUT and ENV_TIMEOUT")
    rollout = Rollout(**head, reward=reward, ending=ending, timing=_timing(steps[-1]) if steps else {},
                      extra={"reward_from": "sum of turn rewards"} if reward is not None else {})
    _record_turn_rewards(rollout, steps)
    return _finish(rollout, chain)


# --- Token mode -----------------------------------------------------------------------------

_TOKEN_DICT_KEYS = {"conversation_text", "prompt_tokens", "conversation_tokens", "conversation_masks", "status",
                    "trajectory_reward", "env_time", "reward_time", "old_logprobs", "policy_version",
                    "original_input", "group_id", "prompt_length"}


def _segments(rest: list[Message]) -> list[tuple[str, list[int]]]:
    """Group the messages after the prompt: each assistant message alone ('a'), each run of
    other messages together ('e', one observation)."""
    out: list[tuple[str, list[int]]] = []
    for i, m in enumerate(rest):
        kind = "a" if m.role == "assistant" else "e"
        if kind == "e" and out and out[-1][0] == "e":
            out[-1][1].append(i)
        else:
            out.append((kind, [i]))
    return out


def _from_token(d: dict, head: dict) -> Rollout:
    """Token mode: the conversation tokens are split into message nodes by mask runs when the
    runs line up with the messages; otherwise (e.g. an overlong-filtered, all-zero mask) all of
    them go on the first assistant node with `extra.token_span = "unsplit"`. Either way the
    branch is exactly prompt (unpadded) + conversation_tokens. `old_logprobs` are kept as given
    at every position (the engine fills zeros where the sampler gave none and over env tokens)."""
    status = _status(d.get("status"))
    pv = _policy_version(d.get("policy_version"))
    chain = _Chain(policy_version=pv)
    text = d.get("conversation_text")
    if text is not None and not isinstance(text, list):
        raise FieldError("conversation_text", "expected a list of messages")
    messages = [_openai.message_from_openai(m, f"conversation_text[{i}]").message for i, m in enumerate(text or [])]
    prompt, rest = _split_prompt(messages)
    tokens = ints(d.get("conversation_tokens"), "conversation_tokens") or []
    masks = ints(d.get("conversation_masks"), "conversation_masks") or []
    logprobs = floats(d.get("old_logprobs"), "old_logprobs")
    chain.prompt(prompt, d.get("prompt_tokens"), d.get("prompt_length"), "prompt_tokens")

    segments = _segments(rest)
    spans = align_segments(segments, mask_runs(masks)) if tokens and len(masks) == len(tokens) else None
    unsplit = bool(tokens) and spans is None
    if unsplit and not any(m.role == "assistant" for m in rest):
        rest = rest + [Message(role="assistant", content=None, extra={"synthetic": "tokens without an assistant message"})]
        segments = _segments(rest)
    # message index → token span; the span goes on the segment's last message (for an
    # observation: its last env message). The last tokenized message also takes any logprobs
    # beyond the tokens, so `fit` records the overflow instead of dropping it.
    span_of: dict[int, tuple[int, int | None]] = {}
    for (_, idxs), span in zip(segments, spans or []):
        if span[1] > span[0]:
            span_of[idxs[-1]] = span
    if span_of:
        last_idx = max(span_of)
        span_of[last_idx] = (span_of[last_idx][0], None)
    first_assistant = next((i for i, m in enumerate(rest) if m.role == "assistant"), None)

    for si, (_, idxs) in enumerate(segments):
        following = segments[si + 1][1] if si + 1 < len(segments) and segments[si + 1][0] == "e" else []
        for i in idxs:
            msg = rest[i]
            tok = msk = lps = None
            extra: dict[str, Any] = {}
            if unsplit and i == first_assistant:
                tok, msk, lps = tokens, masks, logprobs
                extra["token_span"] = "unsplit"
            elif i in span_of:
                s, e = span_of[i]
                tok, msk = tokens[s:e], masks[s:e]
                lps = logprobs[s:e] if logprobs is not None else None
            if msg.role == "assistant":
                calls = _openai.tool_calls_from_text(msg.content, [rest[j].tool_call_id for j in following
                                                       if rest[j].role == "tool"])
                if calls:
                    msg.tool_calls = calls
                    extra["tool_calls_from"] = "text"
                elif calls is None:
                    extra["tool_calls_unpaired"] = "tool-call blocks and tool results differ in number"
                chain.add(msg, tok, sampled=True, mask=msk, logprobs=lps, extra=extra)
            else:
                chain.add(msg, tok, mask=msk, logprobs=lps, extra=extra)

    last = "none"
    if rest:
        last = "final_answer" if rest[-1].role == "assistant" else "tool_call"
    rollout = Rollout(**head, task=_task(d.get("original_input")),
                      reward=_number(d.get("trajectory_reward"), "trajectory_reward"),
                      ending=_ending(status, last), timing=_timing(d),
                      extra={"status": status, **_extra(d, _TOKEN_DICT_KEYS)})
    if head.get("group") is None and d.get("group_id") is not None:
        rollout.extra["tunix_group_id"] = d["group_id"]
    if status in FILTER_STATUSES and tokens and not any(masks):
        rollout.extra["overlong_filtered"] = True
    return _finish(rollout, chain, token_counts_known=not unsplit)


# --- Conversation mode ----------------------------------------------------------------------

def _from_conversation(messages: list, head: dict) -> Rollout:
    """Conversation mode: messages only. No tokens, no reward, no status: ending unknown."""
    chain = _Chain()
    msgs = [_openai.message_from_openai(m, f"[{i}]").message for i, m in enumerate(messages)]
    segments = _segments(msgs)
    for si, (kind, idxs) in enumerate(segments):
        following = segments[si + 1][1] if si + 1 < len(segments) and segments[si + 1][0] == "e" else []
        for i in idxs:
            msg = msgs[i]
            if msg.role == "assistant":
                extra: dict[str, Any] = {}
                calls = _openai.tool_calls_from_text(msg.content, [msgs[j].tool_call_id for j in following if msgs[j].role == "tool"])
                if calls:
                    msg.tool_calls = calls
                    extra["tool_calls_from"] = "text"
                elif calls is None:
                    extra["tool_calls_unpaired"] = "tool-call blocks and tool results differ in number"
                chain.add(msg, sampled=True, extra=extra)
            else:
                chain.add(msg)
    rollout = Rollout(**head, reward=None,
                      ending=EndingInfo(type=Ending.unknown, message="Conversation mode carries no status"))
    return _finish(rollout, chain)


_BUILDERS = {
    "trajectory": _from_trajectory,
    "token": _from_token,
    "steps": _from_steps,
    "conversation": _from_conversation,
}
_MODE_NAMES = {"trajectory": "Trajectory", "token": "Token", "steps": "Steps", "conversation": "Conversation"}

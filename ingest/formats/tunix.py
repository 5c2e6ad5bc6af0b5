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
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ingest.errors import RecordError
from ingest.fields import FieldError
from ingest.formats._tunix_modes import BUILDERS, MODE_NAMES
from ingest.formats.base import ReadContext, guarded
from ingest.schema import GroupRef, Rollout, RunRef
from ingest.source import Source

NAME = "tunix"
EXPECTS = ("a Tunix Trajectory, Steps, Token or Conversation rollout (`<end_of_turn>` in assistant text), "
           "RolloutOrchestrator batches of TrajectoryItems, or the GRPO learner's CSV log")


END_OF_TURN = "<end_of_turn>"

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_TOKEN_KEYS = ("conversation_tokens", "conversation_masks")
_CSV_COLUMNS = frozenset({"conversation_text", "conversation_tokens", "conversation_masks", "status"})
# Columns whose cells are plain strings in the CSV log (pandas writes str(value), no quotes).
_CSV_STRING_COLUMNS = frozenset({"status"})


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
_NP_ARRAY = re.compile(r"\s*array\((.*?)(?:,\s*dtype=[\w.]+)?\)\s*\Z", re.S)


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


# --- the same episode in several modes -----------------------------------------------------

def episode_key(rollout: Rollout) -> str | None:
    """The same for every rendering of one episode (`ingest.files.RenderingWatch`): the text of its
    assistant messages in order, which all four modes keep verbatim (Gemma's `<end_of_turn>`
    included). Tool results are left out: the modes word them differently (`Tool returned result:
    425` in a request's context, `425` in a terminal observation); task, reward and status too:
    Steps and Conversation mode have none. The mode is `source.mode`."""
    from ingest.files import text_key

    return text_key(n.message.content if isinstance(n.message.content, str) else None
                    for n in rollout.nodes if n.message.role == "assistant")


# --- one record → one Rollout ---------------------------------------------------------------

def _convert(shape: str, data: Any, where: _Where, group: GroupRef | None = None,
             item_extra: dict | None = None) -> Rollout | RecordError:
    def build() -> Rollout:
        head = dict(
            id=where.stem,
            run=RunRef(id=where.run),
            step=where.step,
            group=group,
            source={"format": NAME, "file": where.file, "line": where.line, "mode": MODE_NAMES[shape],
                    **({"path": where.path} if where.path != "$" else {})},
        )
        rollout = BUILDERS[shape](data, head)
        if item_extra:
            rollout.extra["item"] = item_extra
        return rollout

    return guarded(where.file, where.line, None if where.path == "$" else where.path, build)

"""tau-bench results files (sierra-research/tau-bench `run.py`: the checkpoint JSON it writes,
also `historical_trajectories/*.json`): a JSON array of

    {task_id, trial, reward, info: {task, source, user_cost, reward_info} | {error, traceback},
     traj: [OpenAI chat messages]}

One rollout per element: id `task{task_id}-trial{trial}`, group = task_id (index = trial; the
size is left empty, because a cut-down file does not say how many trials ran), task key
`str(task_id)`, task data `info.task`, `info` and any other key kept in `extra`. Messages go
through `_openai` (tau-bench reuses one tool-call id for two sequential calls; ids are kept and
`ingest.graph` pairs by position). The ending comes from `info` and the last message
(`_tau_ending`). docs/formats-chat.md has the table.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ingest import endings
from ingest.errors import RecordError
from ingest.fields import FieldError
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder
from ingest.formats.base import ReadContext, guarded, id_text, shape_error
from ingest.schema import Ending, EndingInfo, Error, GroupRef, Rollout, RunRef, Task
from ingest.source import Source

NAME = "tau-bench"
EXPECTS = "a JSON array (or JSONL) of `{task_id, trial, reward, info, traj: [messages]}`"

# tau-bench: `Env.terminate_tools` of the airline and retail envs (envs/*/env.py).
TAU_TERMINATE_TOOLS = frozenset({"transfer_to_human_agents"})
TAU_STOP = "###STOP###"


def _is_tau(d: Any) -> bool:
    return isinstance(d, dict) and "task_id" in d and isinstance(d.get("traj"), list)


def sniff(source: Source) -> bool:
    first = source.first
    if source.kind == "json" and isinstance(first, list):
        return bool(first) and _is_tau(first[0])
    return source.kind in ("json", "jsonl") and _is_tau(first)


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    for line, prefix, _, value in source.entries():
        if isinstance(value, RecordError):
            yield value
        elif not _is_tau(value):
            yield shape_error(source.name, line, prefix, value, "tau-bench record",
                              (("task_id", "any"), ("traj", "array")))
        else:
            yield guarded(source.name, line, prefix, lambda: _record(source, ctx, value, line, prefix))


def _record(source: Source, ctx: ReadContext, rec: dict, line: int | None, prefix: str) -> Rollout:
    info = rec.get("info") or {}
    if not isinstance(info, dict):
        raise FieldError("info", "expected an object")
    traj = rec["traj"]
    b = RolloutBuilder()
    _openai.add_messages(b, traj, "traj")
    task_id = id_text(rec.get("task_id"), "task_id", required=True)
    trial = rec.get("trial")
    if trial is not None and (not isinstance(trial, int) or isinstance(trial, bool)):
        raise FieldError("trial", "expected an integer")
    reward = rec.get("reward")
    if reward is not None and (not isinstance(reward, (int, float))):
        raise FieldError("reward", f"expected a number or null, got {type(reward).__name__}")
    rid = f"task{task_id}-trial{trial}" if trial is not None else f"task{task_id}"
    extra = {k: v for k, v in rec.items() if k not in ("traj", "task_id", "trial", "reward")}
    source_info: dict[str, Any] = {"format": NAME, "file": source.name, "line": line}
    if prefix:
        source_info["path"] = prefix
    rollout = Rollout(
        id=rid, run=RunRef(id=ctx.run_for(source)), step=ctx.step,
        group=GroupRef(id=task_id, index=trial), task=Task(type="tau-bench", key=task_id, data=info.get("task")),
        reward=None if reward is None else float(reward), nodes=b.nodes, calls=b.calls, extra=extra,
        source=source_info)
    rollout.ending, errors = _tau_ending(info, traj)
    rollout.errors.extend(errors)
    return b.finish(rollout)


def _tau_ending(info: dict, traj: list) -> tuple[EndingInfo, list[Error]]:
    """tau-bench writes no ending; its code decides (envs/base.py `Env.step`, agents'
    `solve` loop, run.py):

    - `info.error` (run.py caught an exception; traj is empty) → error.
    - `info.source` is a terminate tool (`transfer_to_human_agents`: the env sets done) →
      submitted: the agent ended the episode itself; tau-bench scores it normally.
    - the last message is the user simulator's and contains `###STOP###` (the env sets
      `done = "###STOP###" in observation`, `info.source = "user"`) → task_detected: the
      simulated user, not the agent, ended the conversation, which is then scored normally
      (tau2 calls this `user_stop`; the endings table maps it to task_detected too).
    - otherwise, with a non-empty trajectory → truncated: the solve loop only stops on done or
      after `max_num_steps` (default 30), so without a done marker the step budget ran out.
    - an empty trajectory without an error → unknown.
    """
    if info.get("error") is not None:
        message = str(info["error"])
        tb = info.get("traceback")
        return (EndingInfo(type=Ending.error, detail="error", message=message),
                [Error(type="error", message=message, traceback=tb if isinstance(tb, str) else None)])
    source = info.get("source")
    if source in TAU_TERMINATE_TOOLS:
        return EndingInfo(type=Ending.submitted, detail=str(source),
                          message=f"the agent called the terminate tool {source}; tau-bench set done"), []
    last = traj[-1] if traj else None
    if isinstance(last, dict) and last.get("role") == "user":
        content = last.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if TAU_STOP in text:
            return EndingInfo(type=endings.from_reason("user_stop"), detail=TAU_STOP,
                              message=f"the user simulator ended the conversation (info.source={source})"), []
    if not traj:
        return EndingInfo(type=Ending.unknown, detail=None if source is None else f"info.source={source}"), []
    return EndingInfo(type=Ending.truncated, detail=f"not done (info.source={source})",
                      message="no ###STOP### and no terminate tool: tau-bench's solve loop ran out of "
                              "max_num_steps"), []


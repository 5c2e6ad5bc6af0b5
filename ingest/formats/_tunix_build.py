"""What the four Tunix modes share (`ingest/formats/_tunix_modes.py`): field readers, the message
chain a rollout is built on (`_Chain`), the status → ending table and the finishing touches."""
from __future__ import annotations

import json
from typing import Any

from ingest import endings
from ingest.fields import FieldError, ints, is_number_or_none
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder
from ingest.schema import Ending, EndingInfo, Message, Rollout, Task, ToolCall

# ToolAgent turns a response without tool calls into this call; it is the final answer.
FINISH = "finish"

# Per-token arrays newer Tunix versions add (MoE routing); large and not modelled.
_DROPPED = frozenset({"routed_experts", "prompt_routed_experts", "assistant_routed_experts", "env_routed_experts"})


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
            return [Message(role="tool", tool_call_id=str(cid),
                            content=out if isinstance(out, str) else json.dumps(out), extra=dict(extra))
                    for cid, out in obs["tool_outputs"].items()]
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
        extra = {"left_padding": pad}
        if pad:  # what was taken for padding: a doubled BOS looks the same without prompt_length
            extra["left_padding_id"] = tokens[0]
        super().prompt(messages, body, extra=extra)


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
            return EndingInfo(type=Ending.submitted, detail=status,
                              message="final answer (ToolAgent's implicit finish)")
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

"""One Tunix record → one rollout, per mode (`ingest/formats/tunix.py`'s docstring gives the
shapes): Trajectory, Steps, Token and Conversation; `BUILDERS` maps the shape `tunix.py` detected
to its builder."""
from __future__ import annotations

import math
from typing import Any

from ingest.fields import FieldError, floats, ints
from ingest.formats import _openai
from ingest.formats._build import align_segments, mask_runs
from ingest.formats._tunix_build import (
    _action_calls,
    _Chain,
    _ending,
    _extra,
    _finish,
    _number,
    _observation_messages,
    _policy_version,
    _record_turn_rewards,
    _split_prompt,
    _status,
    _task,
    _timing,
    _turn_extra,
    _turns,
)
from ingest.schema import Ending, EndingInfo, Message, Rollout

# TrajectoryCollectEngine's default `filter_statuses`: with `overlong_filter=True` a rollout that
# ended this way gets an all-zero Token-mode mask (and no final reward).
FILTER_STATUSES = frozenset({"MAX_STEPS_REACHED", "MAX_CONTEXT_LIMIT_REACHED", "TIMEOUT", "ENV_TIMEOUT"})


_TRAJECTORY_KEYS = {"task", "steps", "reward", "status", "prompt_tokens", "prompt_length", "env_time", "reward_time"}


def _context(steps: list[dict], k: int) -> list[Message]:
    """The messages of `steps[k].chat_completions` (the context of that turn's request)."""
    context = steps[k].get("chat_completions")
    if context is not None and not isinstance(context, list):
        raise FieldError(f"steps[{k}].chat_completions", "expected a list of messages")
    return [_openai.message_from_openai(m, f"steps[{k}].chat_completions[{i}]").message
            for i, m in enumerate(context or [])]


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
            if isinstance(step["thought"], str) and msg.reasoning_content is None:
                msg.reasoning_content = step["thought"]  # the step's reasoning (Trajectory `Step.thought`)
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
        calls = _openai.tool_calls_from_text(step.get("assistant_text"),
                                             [m.tool_call_id for m in env_msgs if m.role == "tool"])
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
                            message="Steps mode has no status; a done last turn fits SUCCEEDED, TIMEOUT and "
                                    "ENV_TIMEOUT")
    rollout = Rollout(**head, reward=reward, ending=ending, timing=_timing(steps[-1]) if steps else {},
                      extra={"reward_from": "sum of turn rewards"} if reward is not None else {})
    _record_turn_rewards(rollout, steps)
    return _finish(rollout, chain)


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
        rest = rest + [Message(role="assistant", content=None,
                               extra={"synthetic": "tokens without an assistant message"})]
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
                calls = _openai.tool_calls_from_text(
                    msg.content, [msgs[j].tool_call_id for j in following if msgs[j].role == "tool"])
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


BUILDERS = {
    "trajectory": _from_trajectory,
    "token": _from_token,
    "steps": _from_steps,
    "conversation": _from_conversation,
}


MODE_NAMES = {"trajectory": "Trajectory", "token": "Token", "steps": "Steps", "conversation": "Conversation"}

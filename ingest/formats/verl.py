"""verl rollout dumps (docs/formats.md), and flat training-sample JSONL.

Sources: verl-project/verl `verl/trainer/ppo/ray_trainer.py` (`_dump_generations` /
`_write_generations`: `trainer.rollout_data_dir/{global_steps}.jsonl`, also
`validation_data_dir`), `verl/trainer/ppo/v1/trainer_base.py` (`uid` lines), and
`verl/experimental/agent_loop/agent_loop.py` (`AgentLoopOutput`, which verl users dump themselves).

Two shapes, one rollout per line:

- text (`rollout_data_dir`): `{input, output, gts, score, step, uid? | request_id?, ...reward extras}`
  with decoded text only. → a user node (`input`) and a sampled assistant node (`output`); reward =
  `score`; task data = `gts`; numeric extras (`reward_extra_infos`, e.g. `acc`) → metrics and
  reward components of weight 0 (beside the reward, not summed: `score` stays the reward);
  training step = `step`, else the file name (`12.jsonl`); group from a v1 `uid`
  `"{sample}_{rollout}_{output}"` (group = sample, index = rollout). verl writes no ending: `unknown`.
- tokens (`AgentLoopOutput`-shaped): `{prompt_ids, response_ids, response_mask (1 = LLM token,
  0 = tool/user token), response_logprobs?, reward_score?, num_turns?, metrics?, extra_fields?}`;
  the numbers of `extra_fields.reward_extra_info` (or a top-level `reward_extra_info`) → reward
  components of weight 0, as the text shape's extras.
  → the prompt node (mask 0), then the response split by mask runs: a run of 1s is an assistant
  node (sampled), a run of 0s an environment node. Rollscope's own training-sample export
  (`ingest.formats.samples.training_samples`: `advantages`, `reward`, `step`, `group_id`, `sample_index`,
  `ending`, `rollout_id`) is the same shape and is read back the same way, from JSONL or from
  the Parquet file `rollscope export --format parquet` writes (one row per sample). A sample with
  `segments` (Rollscope's, ingest/formats/samples.py) is cut at its nodes instead of at mask runs:
  one node per segment with its message as written (roles, tool calls and their ids; the whole
  message of a node without tokens), so the branch ends where the source's did and tool calls
  pair as they did.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ingest import endings
from ingest.errors import RecordError
from ingest.fields import FieldError, floats, ints, is_number_or_none
from ingest.formats._build import RolloutBuilder, mask_runs
from ingest.formats.base import ReadContext, guarded, id_text, shape_error
from ingest.schema import Ending, EndingInfo, GroupRef, Message, Reward, Rollout, RunRef, Task
from ingest.source import Source

NAME = "verl"
EXPECTS = ("verl JSONL: rollout_data_dir lines `{input, output, score, step}`, or token lines "
           "`{prompt_ids, response_ids, response_mask}` (AgentLoopOutput, training samples)")

_UID = re.compile(r"(.+)_(\d+)_(\d+)\Z")
_TEXT_KEYS = frozenset({"input", "output", "gts", "score", "step", "uid", "request_id"})
_TOKEN_KEYS = frozenset({"prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score",
                         "reward", "advantages", "step", "group_id", "sample_index", "ending", "rollout_id",
                         "run_id", "attempt", "branch", "num_turns", "segments"})


def _is_text(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("input"), str) and isinstance(d.get("output"), str) and (
        "score" in d or "gts" in d)


def _is_tokens(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("prompt_ids"), list) and isinstance(d.get("response_ids"), list)


def _not_a_line(d: Any, file: str, line: int | None) -> RecordError:
    """Why `d` is not a verl line, at the field at fault: token lines have prompt_ids and
    response_ids, text dumps input, output and score or gts."""
    if isinstance(d, dict) and ("prompt_ids" in d or "response_ids" in d):
        return shape_error(file, line, None, d, "verl token line", (("prompt_ids", "array"), ("response_ids", "array")))
    return shape_error(file, line, None, d, "verl line", (("input", "string"), ("output", "string")),
                       otherwise=": expected score or gts beside input and output (or prompt_ids/response_ids)")


def sniff(source: Source) -> bool:
    if source.kind == "parquet":  # Rollscope's Parquet training samples (`rollscope export --format parquet`)
        return _is_tokens(source.first)
    return source.kind == "jsonl" and (_is_text(source.first) or _is_tokens(source.first))


def _file_step(source: Source) -> int | None:
    stem = source.path.stem
    return int(stem) if stem.isdigit() and len(stem) < 10 else None


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    stem = ctx.source_key(source)
    for line, value in (source.parquet_rows() if source.kind == "parquet" else source.lines()):
        if isinstance(value, RecordError):
            yield value
        elif _is_tokens(value):
            yield guarded(source.name, line, None, lambda: _tokens(source, ctx, value, line, f"{stem}#{line - 1}"))
        elif _is_text(value):
            yield guarded(source.name, line, None, lambda: _text(source, ctx, value, line, f"{stem}#{line - 1}"))
        else:
            yield _not_a_line(value, source.name, line)


def _step(value: Any, source: Source, ctx: ReadContext) -> int | None:
    if value is not None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise FieldError("step", "expected a training step (a non-negative integer)")
        return value
    fs = _file_step(source)
    return fs if fs is not None else ctx.step


def reward_extras(values: Any) -> dict[str, Reward]:
    """verl's reward extras (`reward_extra_infos_dict` in the `rollout_data_dir` lines, the
    `reward_extra_info` a reward function's dict result fills: every key but `score`, e.g. `acc`)
    as reward components of weight 0 (`extra.metric: true`): shown and filterable, never summed
    (verl's reward is `score` / `reward_score`). Finite numbers only; text (`pred`) is left out."""
    if not isinstance(values, dict):
        return {}
    return {str(k): Reward(score=float(v), weight=0.0, extra={"metric": True}) for k, v in values.items()
            if k not in ("score", "reward_score") and is_number_or_none(v) and v is not None
            and float(v) - float(v) == 0}


def _text(source: Source, ctx: ReadContext, d: dict, line: int, default_id: str) -> Rollout:
    b = RolloutBuilder()
    b.add(Message(role="user", content=d["input"]))
    b.add(Message(role="assistant", content=d["output"]), sampled=True)
    score = d.get("score")
    if not is_number_or_none(score):
        raise FieldError("score", "expected a number")
    uid = id_text(d.get("uid"), "uid")
    rid = uid or id_text(d.get("request_id"), "request_id") or default_id
    group = None
    m = _UID.match(uid) if uid else None
    if m:
        group = GroupRef(id=m.group(1), index=int(m.group(2)))
    extras = {k: v for k, v in d.items() if k not in _TEXT_KEYS}
    metrics = {k: float(v) for k, v in extras.items() if is_number_or_none(v) and v is not None}
    rollout = Rollout(
        id=rid, run=RunRef(id=ctx.run_for(source)), step=_step(d.get("step"), source, ctx), group=group,
        task=Task(data=d.get("gts")) if d.get("gts") is not None else None, nodes=b.nodes, calls=b.calls,
        reward=None if score is None else float(score), metrics=metrics, rewards=reward_extras(extras),
        extra={k: v for k, v in extras.items() if k not in metrics} | (
            {"request_id": d["request_id"]} if uid and d.get("request_id") is not None else {}),
        ending=EndingInfo(type=Ending.unknown, message="verl's rollout dump writes no ending"),
        source={"format": NAME, "file": source.name, "line": line, "shape": "text"},
    )
    return b.finish(rollout)


def _segments(b: RolloutBuilder, segments: Any, prompt: list[int], response: list[int], mask: list[int],
              logprobs: list[float | None] | None, advantages: list[float | None] | None) -> None:
    """The nodes of a Rollscope training sample, one per `segments` entry (module docstring):
    each takes its `tokens` of prompt + response in order, with the mask (0 over the prompt), the
    logprobs and advantages of its response part (null over the prompt)."""
    if not isinstance(segments, list) or not all(
            isinstance(s, dict) and isinstance(s.get("role"), str) and isinstance(s.get("tokens"), int)
            and not isinstance(s.get("tokens"), bool) and s["tokens"] >= 0 for s in segments):
        raise FieldError("segments", "expected a list of {role, tokens, message?}")
    total = len(prompt) + len(response)
    if sum(s["tokens"] for s in segments) != total:
        raise FieldError("segments", f"{sum(s['tokens'] for s in segments)} segment tokens for {total} sample tokens")
    ids = prompt + response
    full_mask = [0] * len(prompt) + list(mask)
    lp = [None] * len(prompt) + (list(logprobs) + [None] * (len(response) - len(logprobs)) if logprobs is not None
                                 else [None] * len(response))
    adv = None if advantages is None else [None] * len(prompt) + list(advantages) + [None] * max(
        0, len(response) - len(advantages))
    pos = 0
    for i, s in enumerate(segments):
        k, raw = s["tokens"], s.get("message")
        try:
            msg = Message.model_validate(json.loads(raw) if isinstance(raw, str) else raw or {"role": s["role"]})
        except ValueError as e:
            raise FieldError(f"segments[{i}].message", f"not a message: {e}") from None
        span = slice(pos, pos + k)
        idx = b.add(msg, ids[span], sampled=msg.role == "assistant", mask=full_mask[span] if k else None,
                    logprobs=lp[span] if k and logprobs is not None else None)
        if adv is not None and k:
            b.nodes[idx].advantages = adv[span]
        pos += k


def _tokens(source: Source, ctx: ReadContext, d: dict, line: int, default_id: str) -> Rollout:
    prompt = ints(d["prompt_ids"], "prompt_ids") or []
    response = ints(d["response_ids"], "response_ids") or []
    mask = ints(d.get("response_mask"), "response_mask")
    if mask is None:
        mask = [1] * len(response)
    if len(mask) != len(response):
        raise FieldError("response_mask", f"{len(mask)} mask values for {len(response)} response tokens")
    logprobs = floats(d.get("response_logprobs"), "response_logprobs")
    advantages = floats(d.get("advantages"), "advantages")
    b = RolloutBuilder()
    if d.get("segments") is not None:
        _segments(b, d["segments"], prompt, response, mask, logprobs, advantages)
    else:
        b.add(Message(role="user", content=d.get("prompt_text") if isinstance(d.get("prompt_text"), str) else None),
              prompt, mask=[0] * len(prompt), extra={"segment": "prompt"})
        for value, start, end in mask_runs(mask):
            sampled = value == 1
            msg = Message(role="assistant" if sampled else "user",
                          extra={} if sampled else {"source_role": "environment tokens"})
            idx = b.add(msg, response[start:end], sampled=sampled, mask=mask[start:end],
                        logprobs=logprobs[start:end] if logprobs is not None else None)
            if advantages is not None:
                b.nodes[idx].advantages = list(advantages[start:end]) + [None] * max(
                    0, end - start - len(advantages[start:end]))
    if logprobs is not None and len(logprobs) != len(response):
        b.extra["source_lengths"] = {"response_logprobs": len(logprobs), "response_ids": len(response)}
    if advantages is not None and len(advantages) != len(response):
        b.extra.setdefault("source_lengths", {})["advantages"] = len(advantages)
    reward = d.get("reward_score", d.get("reward"))
    if not is_number_or_none(reward):
        raise FieldError("reward_score", "expected a number")
    group = None
    if d.get("group_id") is not None:
        index = d.get("sample_index")
        group = GroupRef(id=id_text(d["group_id"], "group_id") or "",
                         index=index if isinstance(index, int) and not isinstance(index, bool) else None)
    ending = EndingInfo(type=Ending.unknown, message="an AgentLoopOutput carries no ending")
    if isinstance(d.get("ending"), str):
        word = d["ending"]
        ending = EndingInfo(type=Ending(word) if word in Ending.__members__ else endings.from_reason(word), detail=word)
    rid = id_text(d.get("rollout_id"), "rollout_id") or default_id
    if isinstance(d.get("branch"), int) and d["branch"] > 0:
        rid = f"{rid}.b{d['branch']}"
    extra = {k: v for k, v in d.items() if k not in _TOKEN_KEYS and k not in ("prompt_text",)}
    if isinstance(d.get("num_turns"), int):
        extra["num_turns"] = d["num_turns"]
    rollout = Rollout(
        id=rid, run=RunRef(id=ctx.run_id or (d["run_id"] if isinstance(d.get("run_id"), str) and d["run_id"] else None)
                           or ctx.run_for(source)),
        step=_step(d.get("step"), source, ctx), group=group,
        attempt=d["attempt"] if isinstance(d.get("attempt"), int) and not isinstance(d.get("attempt"), bool) else 0,
        nodes=b.nodes, calls=b.calls, reward=None if reward is None else float(reward), ending=ending, extra=extra,
        rewards=reward_extras((d.get("extra_fields") or {}).get("reward_extra_info")
                              if isinstance(d.get("extra_fields"), dict) else d.get("reward_extra_info"))
        or reward_extras(d.get("reward_extra_info")),
        source={"format": NAME, "file": source.name, "line": line, "shape": "tokens"},
    )
    return b.finish(rollout)

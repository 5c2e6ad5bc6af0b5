"""The Rollscope fields a foreign format has no place for, carried under a `rollscope` key
(`extra.rollscope` in ATIF, `info.rollscope` in a verifiers trace) so that exporting and reading
back loses nothing. One shape for every writer and reader:

    {id, run, step, policy, group, attempt, episode, task, rewards, reward, metrics,
     stop_condition, ending, errors, timing, extra, source}            (rollout level)
    nodes: [{parent, sampled, token_ids, mask, is_content, logprobs, advantages,
             reference_logprobs, loss_weights, policy_version, reward, mc_return,
             node_extra, message_extra, tool_call_extras}]             (per node, when asked)
"""
from __future__ import annotations

from typing import Any

from ingest.fields import is_number_or_none
from ingest.schema import Call, EndingInfo, EpisodeRef, Error, GroupRef, Node, PolicySpan, Reward, Rollout, Task

ENVELOPE = ("id", "run", "step", "policy", "group", "attempt", "episode", "task", "rewards", "reward", "metrics",
            "stop_condition", "ending", "errors", "timing", "extra", "source")
NODE = ("parent", "sampled", "timestamp", "token_ids", "mask", "is_content", "logprobs", "advantages",
        "reference_logprobs", "loss_weights", "policy_version", "reward", "mc_return")


def envelope(r: Rollout, *, calls: bool = False) -> dict[str, Any]:
    """The rollout-level fields, as native JSON (and the calls, for formats without a place for
    every call field)."""
    body = r.to_json_dict()
    out = {k: body[k] for k in ENVELOPE if k in body}
    if "reward_non_finite" in body:
        out["reward_non_finite"] = body["reward_non_finite"]
    if calls:
        out["calls"] = body.get("calls", [])
    return out


def node_fields(n: Node) -> dict[str, Any]:
    """One node's fields other than its message, as native JSON."""
    body = n.to_json_dict()
    out = {k: body[k] for k in NODE if k in body}
    out["parent"] = n.parent
    if n.extra:
        out["node_extra"] = n.extra
    if n.message.extra:
        out["message_extra"] = n.message.extra
    return out


def apply_envelope(rollout: Rollout, rl: dict, run_id: str | None = None) -> None:
    """Restore the rollout-level fields written by `envelope`; `run_id` (the caller's `--run`)
    wins over the exported run's id."""
    if not isinstance(rl, dict) or not rl:
        return
    simple = {"id": str, "step": int, "attempt": int, "stop_condition": str}
    for key, typ in simple.items():
        if isinstance(rl.get(key), typ) and not isinstance(rl.get(key), bool):
            setattr(rollout, key, rl[key])
    if isinstance(rl.get("run"), dict):
        rollout.run = type(rollout.run).model_validate(rl["run"])
    if run_id:
        rollout.run.id = run_id
    models = {"policy": PolicySpan, "group": GroupRef, "episode": EpisodeRef, "task": Task}
    for key, model in models.items():  # absent = None, as written
        setattr(rollout, key, model.model_validate(rl[key]) if isinstance(rl.get(key), dict) else None)
    if isinstance(rl.get("ending"), dict):
        rollout.ending = EndingInfo.model_validate(rl["ending"])
    rewards = rl.get("rewards") if isinstance(rl.get("rewards"), dict) else {}
    rollout.rewards = {k: (None if v is None else Reward.model_validate(v)) for k, v in rewards.items()}
    rollout.reward = rl.get("reward") if is_number_or_none(rl.get("reward")) else None
    rollout.reward_non_finite = rl.get("reward_non_finite")
    for key in ("metrics", "timing", "extra"):  # absent = empty, as written
        setattr(rollout, key, dict(rl[key]) if isinstance(rl.get(key), dict) else {})
    rollout.stop_condition = rl.get("stop_condition") if isinstance(rl.get("stop_condition"), str) else None
    errors = rl.get("errors") if isinstance(rl.get("errors"), list) else []
    rollout.errors = [Error.model_validate(e) for e in errors if isinstance(e, dict)]
    if isinstance(rl.get("calls"), list):
        rollout.calls = [Call.model_validate(c) for c in rl["calls"] if isinstance(c, dict)]
    if isinstance(rl.get("source"), dict):
        rollout.source["exported_from"] = rl["source"]


def apply_node(node: Node, fields: dict) -> None:
    """Restore one node's fields written by `node_fields` (token arrays fitted to the tokens)."""
    from ingest.align import fill_node

    if not isinstance(fields, dict) or not fields:
        return
    if isinstance(fields.get("token_ids"), list):
        node.token_ids = fields["token_ids"]
        node.mark_placeholders()
    def given(name: str) -> Any:
        v = fields.get(name)
        return v if v else None  # an empty array means "not given"

    if "token_ids" in fields:  # the arrays travel with their tokens
        node.mask, node.is_content, node.logprobs = [], [], []
    fill_node(node, mask=given("mask"), logprobs=given("logprobs"), is_content=given("is_content"),
              advantages=fields.get("advantages"), reference_logprobs=fields.get("reference_logprobs"))
    for key in ("loss_weights", "policy_version", "reward", "mc_return", "sampled", "timestamp"):
        if key in fields:
            setattr(node, key, fields[key])
    if "parent" in fields:
        node.parent = fields["parent"]
    node.extra = dict(fields["node_extra"]) if isinstance(fields.get("node_extra"), dict) else {}
    node.message.extra = dict(fields["message_extra"]) if isinstance(fields.get("message_extra"), dict) else {}
    extras = fields.get("tool_call_extras")
    if isinstance(extras, list) and node.message.tool_calls:
        for tc, e in zip(node.message.tool_calls, extras):
            tc.extra = dict(e) if isinstance(e, dict) else {}

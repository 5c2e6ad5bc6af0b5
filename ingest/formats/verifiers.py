"""verifiers v1 Episodes, as prime-rl writes them (docs/formats.md).

Sources: PrimeIntellect-ai/verifiers `verifiers/v1/episode.py` (`Episode.to_record()`),
`verifiers/v1/trace.py` (`Trace`, `ModelCall`, `Reward`, `Timing`, `Error`), `verifiers/v1/graph.py`
(`MessageNode`); prime-rl `src/prime_rl/monitors/file.py` (the writer, one Episode per line of
`rollouts/step_{N}/{train,eval}/{all,effective}/traces.jsonl`).

The native format is this graph field for field, so the import is lossless: one rollout per
Trace (one per agent), nodes with their delta token ids, mask, is_content, behaviour logprobs,
advantages and reference logprobs, calls, rewards `{name: {score, weight}}` (total = Σ score·weight),
metrics, stop_condition, errors, timing. Two conversions at the edge:

- verifiers stores `logprobs`, `advantages` and `reference_logprobs` only over mask-true tokens;
  the native node aligns them to every token (None where the mask is 0). `expand` and `compact`
  (`_verifiers_arrays.py`) convert; a compact array of the wrong length is fitted and its length
  recorded.
- verifiers `usage.prompt_tokens` excludes cache reads; native `input_tokens` (OTel) includes them:
  `input_tokens = prompt_tokens + cached_input_tokens`.

Envelope: run = `episode.run` (`--run` wins), type train/eval; training step = `run.work.step`,
else the `step_N` folder of the path; policy span = `run.work.policy`; group = `episode.group.id`
(verifiers has no index within the group: left empty), else, with no group recorded (a `vf-eval
-r N` run folder), the rollouts of one task by `task.hash` within the run and step (`task_group`,
`source.group_from = "task.hash"`); episode = `{id, agent, trainable}`.
An Episode without traces (a provider error before any agent ran) is still one rollout, ending
`error`, reward missing (not 0).

prime-rl logs the same episode in `all` (usually without advantages) and in `effective` (after
`assign_advantages`). Reading an `all/traces.jsonl` whose sibling `effective/traces.jsonl` holds
the same trace ids skips those records, so the copy with advantages is the one kept in whatever
order the files are read; `read` counts them in `ReadContext.extra["skipped_duplicates"]`.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ingest import endings
from ingest.align import fit
from ingest.errors import RecordError
from ingest.fields import FieldError, floats, ints, is_number_or_none
from ingest.formats import _openai, _rl
from ingest.formats._build import RolloutBuilder, mark_restated_branches
from ingest.formats._verifiers_arrays import COMPACT, expand
from ingest.formats._verifiers_write import to_episode
from ingest.formats.base import ReadContext, guarded, id_text, json_line, shape_error
from ingest.jsonio import loads
from ingest.schema import (
    EndingInfo,
    EpisodeRef,
    Error,
    GroupRef,
    Node,
    PolicySpan,
    Reward,
    Rollout,
    RunRef,
    Span,
    Task,
    Usage,
)
from ingest.source import Source

NAME = "verifiers"
EXPECTS = "JSONL of verifiers Episodes (`traces: [{nodes, calls, rewards, ...}]`), e.g. prime-rl's traces.jsonl"

STEP_DIR = re.compile(r"step_(\d+)\Z")
_NODE_KEYS = frozenset({"parent", "message", "sampled", "timestamp", "token_ids", "mask", "is_content", "logprobs",
                        "advantages", "reference_logprobs", "loss_weights"})
_TRACE_KEYS = frozenset({"id", "task", "agent", "tools", "nodes", "calls", "rewards", "metrics", "stop_condition",
                         "errors", "timing", "version", "verifiers"})
_EPISODE_KEYS = frozenset({"id", "env", "task", "group", "run", "traces", "errors"})
_CALL_KEYS = frozenset({"node", "model", "endpoint", "sampling", "finish_reason", "usage", "time", "error"})


def _is_episode(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("traces"), list) and "id" in d and (
        "env" in d or "ok" in d or "run" in d)


def _is_trace(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("nodes"), list) and isinstance(d.get("calls"), list) and (
        "rewards" in d or "verifiers" in d)


def sniff(source: Source) -> bool:
    first = source.first
    if source.kind == "json" and isinstance(first, list) and first:
        first = first[0]
    return source.kind in ("json", "jsonl") and (_is_episode(first) or _is_trace(first))


# --- path conventions -----------------------------------------------------------------------

def path_facts(path: Path) -> dict[str, Any]:
    """What prime-rl's layout `rollouts/step_N/{train,eval}/{all,effective}/traces.jsonl` says:
    `step`, `split` (train/eval) and `subset` (all/effective), each only when present."""
    out: dict[str, Any] = {}
    parts = path.resolve().parts
    for i, part in enumerate(parts[:-1]):
        m = STEP_DIR.match(part)
        if m:
            out["step"] = int(m.group(1))
            rest = parts[i + 1:-1]
            if rest and rest[0] in ("train", "eval"):
                out["split"] = rest[0]
            if len(rest) > 1 and rest[1] in ("all", "effective"):
                out["subset"] = rest[1]
    return out


def _effective_ids(path: Path) -> set[str]:
    """Trace ids in the sibling `effective/traces.jsonl` of an `all/traces.jsonl` (empty if none)."""
    sibling = path.resolve().parent.parent / "effective" / path.name
    ids: set[str] = set()
    if not sibling.is_file():
        return ids
    with sibling.open("rb") as f:
        for raw in f:
            try:
                ep = loads(raw)
            except ValueError:
                continue
            for t in ep.get("traces") or [] if isinstance(ep, dict) else []:
                if isinstance(t, dict) and t.get("id") is not None:
                    ids.add(str(t["id"]))
    return ids


# --- reading --------------------------------------------------------------------------------

def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    facts = path_facts(source.path) if source.member is None else {}
    skip = _effective_ids(source.path) if facts.get("subset") == "all" else set()
    for line, prefix, _, value in source.entries():
        if isinstance(value, RecordError):
            yield value
            continue
        if _is_trace(value) and not _is_episode(value):
            value = {"id": value.get("id"), "traces": [value], "task": value.get("task")}
        if not _is_episode(value):
            yield shape_error(source.name, line, prefix, value, "verifiers Episode",
                              (("id", "id"), ("traces", "array")),
                              otherwise=": expected env, ok or run beside id and traces")
            continue
        traces = value["traces"]
        if not traces:
            yield guarded(source.name, line, prefix, lambda: _traceless(source, ctx, value, line, prefix, facts))
            continue
        for k, trace in enumerate(traces):
            tpath = f"{prefix}traces[{k}]" if not prefix else f"{prefix}.traces[{k}]"
            if isinstance(trace, dict) and skip and str(trace.get("id")) in skip:
                ctx.extra["skipped_duplicates"] = ctx.extra.get("skipped_duplicates", 0) + 1
                continue
            yield guarded(source.name, line, tpath,
                          lambda: _rollout(source, ctx, value, trace, k, line, prefix, facts))


def _envelope(source: Source, ctx: ReadContext, ep: dict, line: int | None, prefix: str,
              facts: dict) -> dict[str, Any]:
    """Run, step, policy, group and source of an Episode (shared by its traces)."""
    run = ep.get("run")
    run_id = run_type = run_name = None
    step = facts.get("step")
    policy = None
    if run is not None:
        if not isinstance(run, dict):
            raise FieldError("run", "expected an object")
        run_id = id_text(run.get("id"), "run.id")
        run_type = run.get("type") if run.get("type") in ("train", "eval") else None
        run_name = run.get("name") if isinstance(run.get("name"), str) else None
        work = run.get("work")
        if isinstance(work, dict):
            if isinstance(work.get("step"), int) and not isinstance(work.get("step"), bool):
                step = work["step"]
            if work.get("type") in ("train", "eval"):
                run_type = work["type"]
            pol = work.get("policy")
            if isinstance(pol, dict):
                policy = PolicySpan(start=pol.get("start"), end=pol.get("end"))
    if facts.get("split") in ("train", "eval") and run_type is None:
        run_type = facts["split"]
    group = ep.get("group")
    gref = None
    step = step if step is not None else ctx.step
    info: dict[str, Any] = {"format": NAME, "file": source.name, "line": line}
    if group is not None:
        if not isinstance(group, dict):
            raise FieldError("group", "expected an object")
        gref = GroupRef(id=id_text(group.get("id"), "group.id", required=True))
    else:
        gref = task_group(ep.get("task"), step)
        if gref is not None:
            info["group_from"] = "task.hash"
    if prefix:
        info["path"] = prefix
    info.update({k: v for k, v in facts.items() if k in ("split", "subset")})
    return dict(
        run=RunRef(id=ctx.run_id or run_id or ctx.run_for(source), name=run_name, type=run_type or "train"),
        step=step,
        policy=policy,
        group=gref,
        source=info,
    )


def task_group(task: Any, step: int | None) -> GroupRef | None:
    """The group of an Episode that names none: the rollouts of one task within the run and step.
    `vf-eval -r N` samples each task N times ("the trainer's group size", verifiers
    `configs/cli/eval.py`) and writes no `group`; verifiers' own planner (`utils/eval.py`
    `plan_rollouts`) tells the episodes of a task apart by `task.hash`, the content hash of its data.
    Id `task:<hash>`, `step<N>:task:<hash>` when the step is known (a group never spans steps);
    no hash, no group."""
    h = task.get("hash") if isinstance(task, dict) else None
    if not isinstance(h, str) or not h:
        return None
    return GroupRef(id=f"task:{h}" if step is None else f"step{step}:task:{h}")


def _errors(value: Any, path: str) -> list[Error]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise FieldError(path, "expected a list of errors")
    out = []
    for i, e in enumerate(value):
        if not isinstance(e, dict):
            raise FieldError(f"{path}[{i}]", "expected an error object")
        out.append(Error.model_validate({"type": str(e.get("type") or "error"), "message": str(e.get("message") or ""),
                                         **{k: v for k, v in e.items() if k not in ("type", "message")}}))
    return out


def _task(value: Any) -> Task | None:
    if not isinstance(value, dict):
        return None
    return Task(type=value.get("type"), key=None if value.get("key") is None else str(value["key"]),
                data=value.get("data"), hash=value.get("hash") if isinstance(value.get("hash"), str) else None,
                extra={k: v for k, v in value.items() if k not in ("type", "key", "data", "hash")})


def _traceless(source: Source, ctx: ReadContext, ep: dict, line: int | None, prefix: str, facts: dict) -> Rollout:
    """An Episode with no traces (the provider failed before any agent ran): one rollout, ending
    `error`, reward missing."""
    env = _envelope(source, ctx, ep, line, prefix, facts)
    errs = _errors(ep.get("errors"), "errors")
    rid = id_text(ep.get("id"), "id", required=True)
    last = errs[-1] if errs else None
    rollout = Rollout(id=rid, **env, episode=EpisodeRef(id=rid), task=_task(ep.get("task")), errors=errs,
                      ending=EndingInfo(type=endings.Ending.error, detail=last.type if last else "no traces",
                                        message=last.message if last else "the episode recorded no trace"),
                      extra={k: v for k, v in ep.items() if k not in _EPISODE_KEYS})
    return RolloutBuilder().finish(rollout)


def _node(raw: Any, i: int, policy_version: int | None) -> Node:
    p = f"nodes[{i}]"
    if not isinstance(raw, dict):
        raise FieldError(p, f"expected a node object, got {type(raw).__name__}")
    conv = _openai.message_from_openai(raw.get("message"), f"{p}.message")
    parent = raw.get("parent")
    if parent is not None and (not isinstance(parent, int) or isinstance(parent, bool)):
        raise FieldError(f"{p}.parent", "expected a node index")
    ts = raw.get("timestamp")
    if not is_number_or_none(ts):
        raise FieldError(f"{p}.timestamp", "expected epoch seconds")
    node = Node(parent=parent, message=conv.message, sampled=bool(raw.get("sampled", False)),
                timestamp=None if ts is None else float(ts),
                extra={k: v for k, v in raw.items() if k not in _NODE_KEYS})
    node.token_ids = ints(raw.get("token_ids"), f"{p}.token_ids") or []
    node.mark_placeholders()
    mask = raw.get("mask")
    if mask is not None:
        if not isinstance(mask, list):
            raise FieldError(f"{p}.mask", "expected a list of booleans")
        node.mask = [bool(m) for m in fit(node, "mask", mask, False)]  # type: ignore[union-attr]
    is_content = raw.get("is_content")
    if is_content:
        node.is_content = [bool(m) for m in fit(node, "is_content", is_content, False)]  # type: ignore[union-attr]
    for name in COMPACT:
        values = floats(raw.get(name), f"{p}.{name}")
        if not values:  # absent or empty: not given
            continue
        expanded = expand(node, name, values)
        setattr(node, name, expanded)
    lw = raw.get("loss_weights")
    if lw is not None:
        if not isinstance(lw, dict):
            raise FieldError(f"{p}.loss_weights", "expected {name: [float]}")
        node.loss_weights = {str(k): floats(v, f"{p}.loss_weights.{k}") or [] for k, v in lw.items()}
    if node.sampled:
        node.policy_version = policy_version
    return node


def _usage(value: Any, path: str) -> Usage | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise FieldError(path, "expected an object")
    prompt, cached = value.get("prompt_tokens"), value.get("cached_input_tokens")
    extra = {k: v for k, v in value.items() if k not in (
        "prompt_tokens", "completion_tokens", "cached_input_tokens", "reasoning_tokens", "cost")}
    return Usage(input_tokens=None if prompt is None else int(prompt) + int(cached or 0),
                 output_tokens=value.get("completion_tokens"), cache_read_input_tokens=cached,
                 reasoning_output_tokens=value.get("reasoning_tokens"), cost=value.get("cost"), extra=extra)


def _calls(value: Any, b: RolloutBuilder, n_nodes: int) -> None:
    if not isinstance(value, list):
        raise FieldError("calls", "expected a list")
    for k, c in enumerate(value):
        p = f"calls[{k}]"
        if not isinstance(c, dict):
            raise FieldError(p, "expected a call object")
        node = c.get("node")
        if node is not None and (not isinstance(node, int) or isinstance(node, bool) or not 0 <= node < n_nodes):
            raise FieldError(f"{p}.node", f"no such node ({n_nodes} nodes)")
        finish = c.get("finish_reason")
        t = c.get("time")
        err = c.get("error")
        b.call(node, finish if isinstance(finish, str) else None, _usage(c.get("usage"), f"{p}.usage"),
               model=c.get("model"), endpoint=c.get("endpoint"),
               sampling=c.get("sampling") if isinstance(c.get("sampling"), dict) else None,
               time=Span.model_validate(t) if isinstance(t, dict) else None,
               error=_errors([err], f"{p}.error")[0] if isinstance(err, dict) else None,
               extra={k: v for k, v in c.items() if k not in _CALL_KEYS})


def _rewards(value: Any) -> dict[str, Reward | None]:
    """verifiers `Trace.rewards` ({name: {score, weight} | null}, `verifiers/v1/trace.py`
    `Reward`; each `record_reward(name, value, weight)` of a task's reward functions and judges,
    with the rubric weight): the reward's components as written. An `explanation` string (ours,
    written back by `to_episode`) is the component's explanation; other keys stay in `extra`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FieldError("rewards", "expected {name: {score, weight} | null}")
    out: dict[str, Reward | None] = {}
    for name, r in value.items():
        if r is None:
            out[str(name)] = None
        elif isinstance(r, dict):
            score = r.get("score")
            if not is_number_or_none(score):
                raise FieldError(f"rewards.{name}.score", "expected a number or null")
            weight = r.get("weight", 1.0)
            if not is_number_or_none(weight) or weight is None:
                raise FieldError(f"rewards.{name}.weight", "expected a number")
            expl = r.get("explanation") if isinstance(r.get("explanation"), str) else None
            out[str(name)] = Reward(score=None if score is None else float(score), weight=float(weight),
                                    explanation=expl,
                                    extra={k: v for k, v in r.items()
                                           if k not in ("score", "weight") and not (k == "explanation" and expl)})
        else:
            raise FieldError(f"rewards.{name}", "expected {score, weight} or null")
    return out


METRIC = "metric"  # `Reward.extra[METRIC] = True`: a verifiers metric kept as a component of weight 0


def metric_components(rewards: dict[str, Reward | None], metrics: dict[str, float | None]) -> None:
    """verifiers `Trace.metrics` ({name: float | null}: unweighted, named metrics,
    `record_metric`, e.g. a rubric's metric functions or `judge/<criterion>` scores) added to
    `rewards` as components of weight 0 (`extra.metric: true`), so the breakdown, the chart and
    the list's component filter see them; weight 0 keeps them out of Σ score·weight. A metric
    named like a reward is left to the reward. In place."""
    for name, v in metrics.items():
        if name not in rewards:
            rewards[name] = Reward(score=v, weight=0.0, extra={METRIC: True})


def judge_explanations(rewards: dict[str, Reward | None], info: Any) -> None:
    """A judge's own words as its reward's explanation: verifiers `Trace.record_judge_call`
    appends `{name, request, response: {message: {content}, ...}}` to `trace.info.judge_calls`,
    `name` being the judge's reward name. The last call of each name wins; a reward with an
    explanation already keeps it. In place."""
    calls = info.get("judge_calls") if isinstance(info, dict) else None
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        resp = call.get("response") if isinstance(call.get("response"), dict) else {}
        msg = resp.get("message") if isinstance(resp.get("message"), dict) else {}
        text = msg.get("content")
        r = rewards.get(str(call.get("name")))
        if r is not None and isinstance(text, str) and text and r.explanation is None:
            r.explanation = text


def _rollout(source: Source, ctx: ReadContext, ep: dict, trace: Any, k: int, line: int | None, prefix: str,
             facts: dict) -> Rollout:
    if not isinstance(trace, dict):
        raise FieldError("", f"expected a trace object, got {type(trace).__name__}")
    env = _envelope(source, ctx, ep, line, prefix, facts)
    if env["group"] is None and ep.get("group") is None:  # the episode's task has no hash: the trace's
        env["group"] = task_group(trace.get("task"), env["step"])
        if env["group"] is not None:
            env["source"]["group_from"] = "task.hash"
    policy = env["policy"]
    pv = policy.end if policy is not None else None
    raw_nodes = trace.get("nodes")
    if not isinstance(raw_nodes, list):
        raise FieldError("nodes", "expected a list")
    b = RolloutBuilder(policy_version=pv)
    b.nodes = [_node(n, i, pv) for i, n in enumerate(raw_nodes)]
    _calls(trace.get("calls") or [], b, len(b.nodes))
    if mark_restated_branches(b.nodes):
        b.extra["token_drift"] = True
    agent = trace.get("agent") if isinstance(trace.get("agent"), dict) else {}
    ep_id = id_text(ep.get("id"), "id") or id_text(trace.get("id"), "traces.id", required=True)
    metrics = trace.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise FieldError("metrics", "expected an object")
    stop = trace.get("stop_condition")
    if stop is not None and not isinstance(stop, str):
        raise FieldError("stop_condition", "expected a string")
    tools = trace.get("tools") or []
    errs = _errors(trace.get("errors"), "errors")
    rollout = Rollout(
        id=id_text(trace.get("id"), "id", required=True),
        **env,
        episode=EpisodeRef(id=ep_id, agent=str(agent.get("name") or "agent"), trainable=agent.get("trainable", True)
                           is not False),
        task=_task(trace.get("task") if trace.get("task") is not None else ep.get("task")),
        tools=tools if isinstance(tools, list) and all(isinstance(t, dict) for t in tools) else [],
        nodes=b.nodes, calls=b.calls,
        rewards=_rewards(trace.get("rewards")),
        metrics={str(m): (None if v is None else float(v)) for m, v in metrics.items() if is_number_or_none(v)},
        stop_condition=stop,
        errors=errs,
        timing=trace.get("timing") if isinstance(trace.get("timing"), dict) else {},
        extra={
            **{k2: v for k2, v in trace.items() if k2 not in _TRACE_KEYS},
            **({"agent": agent} if agent else {}),
            **({"verifiers": trace["verifiers"]} if "verifiers" in trace else {}),
            **({"trace_version": trace["version"]} if "version" in trace else {}),
            "episode": {key: v for key, v in ep.items() if key not in ("traces", "task")},
        },
    )
    metric_components(rollout.rewards, rollout.metrics)
    judge_explanations(rollout.rewards, trace.get("info"))
    _ending(rollout, trace, agent)
    info = trace.get("info")
    rl = info.get("rollscope") if isinstance(info, dict) else None
    if isinstance(rl, dict):  # written by `to_episode`: restore what verifiers has no field for

        _rl.apply_envelope(rollout, rl, ctx.run_id)
        for node, fields in zip(rollout.nodes, rl.get("nodes") or []):
            _rl.apply_node(node, fields)
    return b.finish(rollout)


def _ending(rollout: Rollout, trace: dict, agent: dict) -> None:
    """`stop_condition` through the endings table (docs/formats.md); no stop condition: an error
    when errors were recorded, a timeout when `is_timeout`; evidence from the agent config."""
    info = rollout.ending
    if rollout.stop_condition:
        info.type = endings.from_reason(rollout.stop_condition)
        info.detail = rollout.stop_condition
    elif rollout.errors:
        info.type = endings.Ending.error
        info.detail = rollout.errors[-1].type
        info.message = rollout.errors[-1].message
    elif trace.get("is_timeout"):
        info.type, info.detail = endings.Ending.truncated, "is_timeout"
    config = agent.get("config") if isinstance(agent.get("config"), dict) else {}
    harness = config.get("harness") if isinstance(config.get("harness"), dict) else {}
    for src in (config, harness):
        if isinstance(src.get("max_turns"), int) and info.evidence.max_turns is None:
            info.evidence.max_turns = src["max_turns"]
        if isinstance(src.get("max_output_tokens"), int) and info.evidence.last_output_token_cap is None:
            info.evidence.last_output_token_cap = src["max_output_tokens"]


# --- writing --------------------------------------------------------------------------------

def write(rollouts: Iterable[Rollout]) -> Iterator[tuple[bytes, int]]:
    """verifiers v1 Episode JSONL, one line a rollout (`to_episode`), prime-rl's traces.jsonl shape."""
    for r in rollouts:
        yield json_line(to_episode(r)), 1

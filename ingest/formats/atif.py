"""ATIF, the Agent Trajectory Interchange Format v1.0–v1.7 (docs/formats.md).

Sources: harbor-framework/harbor `rfcs/0001-trajectory-format.md` (the spec, v1.7) and its
models `src/harbor/models/trajectories/*.py`; Google Tunix's RL extension
`tunix/experimental/trajectory/trajectory.py` (`TunixAgentStep`, `TunixEnvStep`,
`TunixTrajectoryMetadata`) and its store `file_store.py` (`traj_<id>/metadata.json` +
`step_000001.json`...). One `trajectory.json` is one rollout:

- steps → nodes: `system`/`user` steps are messages; an `agent` step is one sampled assistant
  node (its `tool_calls` with the arguments object kept as JSON text), followed by one tool node
  per `observation.results[]` entry (`source_call_id` → `tool_call_id`); an agent step with
  `llm_call_count: 0` was no model call and is not sampled;
- tokens: `metrics.prompt_token_ids` (the full prompt of that request) and
  `completion_token_ids` / `logprobs` become per-node deltas (`RolloutBuilder.request`): where a
  later prompt does not extend the earlier prompt + completion, a new branch holds it and the
  drift is recorded, never merged. Tunix steps' `assistant_tokens/masks` and
  `env_tokens/masks` are deltas already;
- `continued_trajectory_ref` (a file beside this one, or a trajectory id) is followed and its
  steps appended; a file that is the continuation of another file in the same folder is read as
  part of that one, not on its own: merged (a note in the summary) when that file is in the same
  ingest, else the whole trajectory is read from its first part;
- embedded `subagent_trajectories` become branches hanging under the agent step whose
  observation refers to them (`subagent_trajectory_ref.trajectory_id`), else under the root;
- rewards: Harbor's `result.json` (`verifier_result.rewards`) beside the trajectory or one folder
  up, Tunix `total_reward` / step `reward`, or Rollscope's own `extra.rollscope`;
- Rollscope's ATIF export puts what ATIF has no field for (run, step, group, mask, advantages,
  ending...) under `extra.rollscope` at trajectory and step level; it is read back exactly.

A document that fails the ATIF schema (`ATIFTrajectory` below) is rejected with the field.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ingest import endings, timestamps
from ingest.fields import FieldError, is_number_or_none
from ingest.formats import _openai, _rl
from ingest.formats._build import RolloutBuilder
from ingest.formats.base import ReadContext, guarded, shape_error
from ingest.schema import (
    Ending,
    EndingInfo,
    EpisodeRef,
    GroupRef,
    Message,
    Reward,
    Rollout,
    RunRef,
    Usage,
)
from ingest.source import RecordError, Source, loads, open_source

NAME = "atif"
EXPECTS = 'an ATIF trajectory (`schema_version: "ATIF-v1.x"`, `agent`, `steps`), or Tunix traj_*/metadata.json'
MAX_SEGMENTS = 1000  # continued_trajectory_ref hops followed before giving up (a cycle is refused)


# --- the schema (Harbor's pydantic models, loosened to accept v1.0–v1.7 and extensions) ---------

class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ATIFToolCall(_Open):
    tool_call_id: str
    function_name: str
    arguments: Any = None


class ATIFResult(_Open):
    source_call_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | dict[str, Any] | None = None


class ATIFObservation(_Open):
    results: list[ATIFResult] = Field(default_factory=list)


class ATIFMetrics(_Open):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float | None] | None = None


class ATIFStep(_Open):
    step_id: int
    timestamp: str | float | None = None
    source: Literal["system", "user", "agent"]
    message: str | list[dict[str, Any]] = ""
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    reasoning_content: str | None = None
    tool_calls: list[ATIFToolCall] | None = None
    observation: ATIFObservation | None = None
    metrics: ATIFMetrics | None = None
    llm_call_count: int | None = None
    is_copied_context: bool | None = None


class ATIFAgent(_Open):
    name: str
    version: str | None = None
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None


class ATIFTrajectory(_Open):
    schema_version: str
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: ATIFAgent
    steps: list[ATIFStep]
    notes: str | None = None
    final_metrics: dict[str, Any] | None = None
    continued_trajectory_ref: str | None = None
    subagent_trajectories: list["ATIFTrajectory"] | None = None

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not v.startswith("ATIF-v1."):
            raise ValueError(f"unsupported schema_version {v!r}: this reader knows ATIF-v1.0 to ATIF-v1.7")
        return v

    @field_validator("steps")
    @classmethod
    def _sequential(cls, steps: list[ATIFStep]) -> list[ATIFStep]:
        if steps:
            first = steps[0].step_id
            if first not in (0, 1):  # ATIF counts from 1; Tunix's TunixTrajectory from 0
                raise ValueError(f"step_id must start at 1 (or 0 for Tunix), got {first}")
            for k, s in enumerate(steps):
                if s.step_id != first + k:
                    raise ValueError(f"[{k}].step_id = {s.step_id}: step ids must be sequential "
                                     f"(expected {first + k})")
        return steps


# --- detection ------------------------------------------------------------------------------

def _is_atif(d: Any) -> bool:
    return isinstance(d, dict) and str(d.get("schema_version", "")).startswith("ATIF-")


def _is_tunix_store(source: Source) -> bool:
    p = source.path
    return (source.member is None and p.name == "metadata.json" and p.parent.name.startswith("traj_")
            and isinstance(source.first, dict) and any(p.parent.glob("step_*.json")))


def _is_export_row(d: Any) -> bool:
    """A `harbor traces export` row: `{trial_name, task_name, ..., trajectory: ATIF, reward}`."""
    return isinstance(d, dict) and _is_atif(d.get("trajectory"))


def sniff(source: Source) -> bool:
    first = source.first
    if source.kind == "json" and isinstance(first, list) and first:
        first = first[0]
    if source.kind not in ("json", "jsonl"):
        return False
    return _is_atif(first) or _is_export_row(first) or _is_tunix_store(source)


@functools.lru_cache(maxsize=64)
def _continuations(folder: str, stamp: float) -> dict[str, str]:
    """{name of a file in `folder` that another ATIF file there continues into: that file's name}."""
    out: dict[str, str] = {}
    for f in Path(folder).glob("*.json"):
        try:
            if f.stat().st_size > 64 << 20:
                continue
            doc = loads(f.read_bytes())
        except (OSError, ValueError):
            continue
        ref = doc.get("continued_trajectory_ref") if isinstance(doc, dict) and _is_atif(doc) else None
        if isinstance(ref, str) and Path(ref).name != f.name:
            out.setdefault(Path(ref).name, f.name)
    return out


def _first_part(path: Path) -> Path | None:
    """The file whose `continued_trajectory_ref` chain reaches `path` first (part 1 of part 3), or
    None when no ATIF file beside `path` continues into it."""
    folder = path.resolve().parent
    try:
        stamp = folder.stat().st_mtime
    except OSError:
        return None
    into = _continuations(str(folder), stamp)
    name, seen = path.name, {path.name}
    while name in into and into[name] not in seen and len(seen) <= MAX_SEGMENTS:
        name = into[name]
        seen.add(name)
    return None if name == path.name else path.parent / name


def _continuation(source: Source, ctx: ReadContext, first: Path) -> Iterator[Rollout | RecordError]:
    """A file another file continues into. When its first part is read in the same ingest (or
    the caller cannot say: the spool worker reads each file as it lands), it is merged there and
    this file gives nothing but a note. Given without its first part, the whole trajectory is read
    from the first part, so the rollout is the one a folder ingest stores (same id, every step)."""
    try:
        doc = loads(first.read_bytes())
    except (OSError, ValueError) as exc:
        yield RecordError(source.name, None, None, f"continuation of {first.name}, which cannot be read: {exc}")
        return
    rid = _rl_of(doc).get("id") or doc.get("trajectory_id") or doc.get("session_id")
    named = f"rollout {rid!r}" if isinstance(rid, str) else "its rollout"
    if ctx.files is None or first.resolve() in ctx.files:
        ctx.extra["atif_continuations"] = ctx.extra.get("atif_continuations", 0) + 1
        ctx.notes[source.name] = f"continuation of {first.name}: merged into {named}"
        return
    head = open_source(first)
    ctx.notes[source.name] = (f"continuation of {first.name}, not given in this ingest: stored {named} "
                              f"read from it, every part included")
    yield guarded(source.name, None, None, lambda: _from_documents(head, ctx, _segments(doc, head)))


# --- reading --------------------------------------------------------------------------------

def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    if _is_tunix_store(source):
        yield guarded(source.name, None, None, lambda: _tunix_store(source, ctx))
        return
    single = source.kind == "json" and isinstance(source.document, dict)
    first = _first_part(source.path) if source.member is None else None
    if first is not None:
        yield from _continuation(source, ctx, first)
        return
    if single and _is_atif(source.document):
        yield guarded(source.name, None, None, lambda: _from_documents(source, ctx, _segments(source.document, source)))
        return
    # JSONL or a JSON array: one trajectory (or one Harbor export row) per record.
    for line, prefix, _, value in source.entries():
        if isinstance(value, RecordError):
            yield value
        elif _is_export_row(value):
            yield guarded(source.name, line, prefix, lambda: _export_row(source, ctx, value, line))
        elif _is_atif(value):
            yield guarded(source.name, line, prefix,
                          lambda: _from_documents(source, ctx, _segments(value, source), line=line))
        else:
            yield shape_error(source.name, line, prefix, value, "ATIF trajectory", (("schema_version", "string"),),
                              otherwise=': schema_version must start with "ATIF-"')


def _export_row(source: Source, ctx: ReadContext, row: dict, line: int | None) -> Rollout:
    """`harbor traces export` rows: the trajectory plus `reward` and the trial's names."""
    r = _from_documents(source, ctx, _segments(row["trajectory"], source), line=line)
    reward = row.get("reward")
    if is_number_or_none(reward) and reward is not None and not r.rewards and r.reward is None:
        r.reward = float(reward)
    r.extra["harbor"] = {k: v for k, v in row.items() if k != "trajectory"}
    if isinstance(row.get("trial_name"), str) and not _rl_of(row["trajectory"]).get("id"):
        r.id = row["trial_name"]
    return r


def _segments(first: dict, source: Source) -> list[dict]:
    """This document and every segment its `continued_trajectory_ref` chain names (files beside
    `source`)."""
    docs = [first]
    seen = {str(source.path.resolve())}
    folder = source.path.resolve().parent
    while True:
        ref = docs[-1].get("continued_trajectory_ref") if isinstance(docs[-1], dict) else None
        if not isinstance(ref, str) or not ref:
            return docs
        target = (folder / ref).resolve()
        if not target.is_file() or source.member is not None:
            docs[-1] = {**docs[-1], "_continuation_missing": ref}
            return docs
        if str(target) in seen or len(docs) >= MAX_SEGMENTS:
            raise FieldError("continued_trajectory_ref", f"{ref!r} loops back to a segment already read")
        seen.add(str(target))
        try:
            doc = loads(target.read_bytes())
        except (OSError, ValueError) as exc:
            raise FieldError("continued_trajectory_ref", f"cannot read {ref!r}: {exc}") from None
        if not _is_atif(doc):
            raise FieldError("continued_trajectory_ref", f"{ref!r} is not an ATIF trajectory")
        docs.append(doc)


def _from_documents(source: Source, ctx: ReadContext, docs: list[dict], line: int | None = None) -> Rollout:
    trajs = []
    for k, doc in enumerate(docs):
        try:
            trajs.append(ATIFTrajectory.model_validate(doc))
        except Exception as exc:  # noqa: BLE001 - re-raised with the segment named
            if k == 0:
                raise
            raise FieldError("continued_trajectory_ref", f"segment {k + 1} fails the ATIF schema: {exc}") from None
    head, raw = trajs[0], docs[0]
    b = RolloutBuilder()
    rl = _rl_of(raw)
    for k, (t, doc) in enumerate(zip(trajs, docs)):
        _steps(b, t, doc, segment=k)
    rollout = Rollout(
        id=str(rl.get("id") or head.trajectory_id or head.session_id or ctx.source_key(source)),
        run=RunRef(id=ctx.run_id or _rl_run(rl) or ctx.run_for(source), type=(rl.get("run") or {}).get("type", "train")
                   if isinstance(rl.get("run"), dict) else "train"),
        step=rl.get("step") if isinstance(rl.get("step"), int) else ctx.step,
        episode=EpisodeRef(id=head.session_id, agent=head.agent.name) if head.session_id else None,
        tools=list(head.agent.tool_definitions or []),
        nodes=b.nodes, calls=b.calls,
        source={"format": NAME, "file": source.name, "line": line, "schema_version": head.schema_version,
                **({"segments": len(trajs)} if len(trajs) > 1 else {})},
        extra=_trajectory_extra(head, raw, docs),
    )
    if rl:  # written by `to_trajectory`: Rollscope's own fields, exactly
        _rl.apply_envelope(rollout, rl, ctx.run_id)
        b.calls = rollout.calls
    else:
        _rewards_from_harbor(rollout, source, trajs)
        rollout.ending = _ending(trajs, docs)
    return b.finish(rollout)


def _rl_of(doc: dict) -> dict:
    extra = doc.get("extra")
    rl = extra.get("rollscope") if isinstance(extra, dict) else None
    return rl if isinstance(rl, dict) else {}


def _rl_run(rl: dict) -> str | None:
    run = rl.get("run")
    return str(run["id"]) if isinstance(run, dict) and run.get("id") is not None else None


def _trajectory_extra(head: ATIFTrajectory, raw: dict, docs: list[dict]) -> dict:
    keep = {k: v for k, v in raw.items() if k not in ("steps", "subagent_trajectories", "agent")}
    extra = keep.pop("extra", None)
    if isinstance(extra, dict):
        extra = {k: v for k, v in extra.items() if k != "rollscope"}
        if extra:
            keep["extra"] = extra
    keep["agent"] = {k: v for k, v in raw.get("agent", {}).items() if k != "tool_definitions"}
    if len(docs) > 1:
        keep["segments"] = [{k: v for k, v in d.items() if k not in ("steps", "subagent_trajectories")}
                            for d in docs[1:]]
    return keep


def _content(message: Any) -> str | list[dict] | None:
    """ATIF `message`: a string, or ContentParts (`text`, `image` with `source{media_type, path}`)."""
    if isinstance(message, list):
        return [dict(p) for p in message]
    return message


def _steps(b: RolloutBuilder, t: ATIFTrajectory, raw: dict, *, segment: int, parent: Any = None) -> None:
    """Append one trajectory's steps (and its embedded subagents, as branches) to `b`."""
    subagents = {s.trajectory_id: (s, r) for s, r in zip(t.subagent_trajectories or [],
                                                          raw.get("subagent_trajectories") or [])}
    placed: set[str | None] = set()
    if parent is not None:
        b._last = parent
    for k, (step, sraw) in enumerate(zip(t.steps, raw.get("steps") or [])):
        path = f"steps[{k}]"
        srl = sraw.get("extra", {}).get("rollscope") if isinstance(sraw.get("extra"), dict) else None
        srl = srl if isinstance(srl, dict) else {}
        node_extra: dict[str, Any] = {"step_id": step.step_id}
        if segment:
            node_extra["segment"] = segment
        step_extra = {key: v for key, v in sraw.items() if key not in (
            "step_id", "timestamp", "source", "message", "model_name", "reasoning_effort", "reasoning_content",
            "tool_calls", "observation", "metrics", "llm_call_count", "assistant_tokens", "assistant_masks",
            "logprobs", "env_tokens", "env_masks", "reward", "mc_return", "policy_version")}
        if isinstance(step_extra.get("extra"), dict):
            cm = step_extra["extra"].get("context_management")
            if isinstance(cm, dict):  # compaction / pruning / injection: the graph's node kind reads it here
                node_extra["context_management"] = cm
            step_extra["extra"] = {kk: v for kk, v in step_extra["extra"].items()
                                   if kk not in ("rollscope", "context_management")} or None
            if step_extra["extra"] is None:
                del step_extra["extra"]
        if step_extra:
            node_extra["step"] = step_extra
        ts = None
        if step.timestamp is not None:
            stamp = timestamps.to_epoch(step.timestamp, f"{path}.timestamp")
            ts = stamp.epoch
            if stamp.assumed_utc:
                node_extra["timestamp_assumed_utc"] = True
        reward = sraw.get("reward") if is_number_or_none(sraw.get("reward")) else None
        mc_return = sraw.get("mc_return") if is_number_or_none(sraw.get("mc_return")) else None
        pv = sraw.get("policy_version") if isinstance(sraw.get("policy_version"), int) else None
        if step.source == "agent":
            calls = [_tool_call(tc) for tc in step.tool_calls or []]
            msg = Message(role="assistant", content=_content(step.message) if step.message != "" or not calls else None,
                          reasoning_content=step.reasoning_content, tool_calls=calls or None)
            if step.message == "" and not calls:
                msg.content = ""
            sampled = step.llm_call_count != 0
            m = step.metrics
            tunix_tokens = sraw.get("assistant_tokens")
            if srl:
                idx = b.add(msg, sampled=sampled, timestamp=ts, extra=node_extra)
            elif sampled and m is not None and (m.prompt_token_ids or m.completion_token_ids is not None):
                idx = b.request(msg, m.prompt_token_ids, m.completion_token_ids, m.logprobs, timestamp=ts,
                                extra=node_extra)
            else:
                idx = b.add(msg, tunix_tokens if isinstance(tunix_tokens, list) else None, sampled=sampled,
                            mask=sraw.get("assistant_masks") if isinstance(tunix_tokens, list) else None,
                            logprobs=sraw.get("logprobs") if isinstance(tunix_tokens, list) else None,
                            timestamp=ts, extra=node_extra)
            node = b.nodes[idx]
            node.reward, node.mc_return = reward, mc_return
            if pv is not None:
                node.policy_version = pv
            _apply_node_rl(node, srl)
            if step.is_copied_context:
                node.mask = [False] * len(node.token_ids)
            if sampled and not srl:
                usage = None
                if m is not None and (m.prompt_tokens is not None or m.completion_tokens is not None):
                    usage = Usage(input_tokens=m.prompt_tokens, output_tokens=m.completion_tokens,
                                  cache_read_input_tokens=m.cached_tokens, cost=m.cost_usd)
                finish = (m.model_extra or {}).get("extra", {}).get("finish_reason") if m is not None else None
                sampling = {"reasoning_effort": step.reasoning_effort} if step.reasoning_effort is not None else None
                call_rl = srl.get("call") if isinstance(srl.get("call"), dict) else {}
                b.call(idx, finish if isinstance(finish, str) else call_rl.get("finish_reason_raw"), usage,
                       model=step.model_name, sampling=sampling or call_rl.get("sampling"),
                       **{k2: v for k2, v in call_rl.items() if k2 in ("endpoint", "policy_version")})
            for j, res in enumerate(step.observation.results if step.observation else []):
                _result(b, res, f"{path}.observation.results[{j}]", subagents, placed, segment)
        elif srl.get("carrier"):  # a step written only to carry a tool result (see to_trajectory)
            for j, res in enumerate(step.observation.results if step.observation else []):
                _result(b, res, f"{path}.observation.results[{j}]", subagents, placed, segment)
        else:
            role = "system" if step.source == "system" else "user"
            env_tokens = sraw.get("env_tokens")
            idx = b.add(Message(role=role, content=_content(step.message)),
                        env_tokens if isinstance(env_tokens, list) else None,
                        mask=sraw.get("env_masks") if isinstance(env_tokens, list) else None,
                        timestamp=ts, extra=node_extra)
            b.nodes[idx].reward, b.nodes[idx].mc_return = reward, mc_return
            _apply_node_rl(b.nodes[idx], srl)
            for j, res in enumerate(step.observation.results if step.observation else []):
                _result(b, res, f"{path}.observation.results[{j}]", subagents, placed, segment)
    for tid, (sub, sraw) in subagents.items():
        if tid not in placed:  # not referred to by any step: a branch from the root
            saved = b.last
            _steps(b, sub, sraw, segment=segment, parent=None)
            b.nodes[len(b.nodes) - len(sub.steps)].extra["subagent"] = tid
            b._last = saved


def _apply_node_rl(node: Any, srl: dict) -> None:
    """Per-step `extra.rollscope` from Rollscope's ATIF export: the node's own fields, exactly."""
    _rl.apply_node(node, srl)
    if srl.get("content_null"):
        node.message.content = None
    if isinstance(srl.get("message_name"), str):
        node.message.name = srl["message_name"]
    if isinstance(srl.get("reasoning_content"), str):
        node.message.reasoning_content = srl["reasoning_content"]
    if srl.get("message_role") == "tool":
        node.message.role = "tool"


def _tool_call(tc: ATIFToolCall) -> Any:
    """An ATIF tool call; the raw argument string and id Rollscope wrote under
    `extra.rollscope` (when the sampled text was not a JSON object) win over `arguments`."""
    extra = dict(tc.model_extra or {})
    inner = extra.get("extra") if isinstance(extra.get("extra"), dict) else {}
    rl = inner.get("rollscope") if isinstance(inner.get("rollscope"), dict) else None
    if rl is not None:
        call = _openai.tool_call(rl.get("id"), tc.function_name, rl.get("arguments", tc.arguments), {})
        call.extra = rl.get("tool_call_extra", {})
        return call
    return _openai.tool_call(tc.tool_call_id, tc.function_name, tc.arguments, extra)


def _result(b: RolloutBuilder, res: ATIFResult, path: str, subagents: dict, placed: set, segment: int) -> None:
    refs = res.subagent_trajectory_ref
    refs = [refs] if isinstance(refs, dict) else (refs or [])
    extra = dict(res.model_extra or {})
    if refs:
        extra["subagent_trajectory_ref"] = refs
    srl = extra.get("extra", {}).get("rollscope") if isinstance(extra.get("extra"), dict) else None
    if isinstance(extra.get("extra"), dict):
        extra["extra"] = {k: v for k, v in extra["extra"].items() if k != "rollscope"}
        if not extra["extra"]:
            del extra["extra"]
    content = _content(res.content)
    role = "tool" if res.source_call_id is not None else "user"
    calling = b.last
    idx = b.add(Message(role=role, tool_call_id=res.source_call_id, content=content, extra=extra),
                extra={"segment": segment} if segment else None)
    if isinstance(srl, dict):
        _apply_node_rl(b.nodes[idx], srl)
    for ref in refs:
        tid = ref.get("trajectory_id") if isinstance(ref, dict) else None
        if tid in subagents and tid not in placed:
            placed.add(tid)
            sub, sraw = subagents[tid]
            saved = b.last
            start = len(b.nodes)
            _steps(b, sub, sraw, segment=segment, parent=calling)
            if start < len(b.nodes):
                b.nodes[start].extra["subagent"] = tid
            b._last = saved


def _rewards_from_harbor(rollout: Rollout, source: Source, trajs: list[ATIFTrajectory]) -> None:
    """Harbor keeps the reward outside ATIF: the trial's `result.json` →
    `verifier_result.rewards {name: number}` (trajectory at `<trial>/agent/trajectory.json`).
    Verifiers-built files carry `final_metrics.extra.rewards`. Each reward has weight 1."""
    if rollout.rewards or rollout.reward is not None:
        return
    last = trajs[-1].final_metrics or {}
    fm_extra = last.get("extra") if isinstance(last.get("extra"), dict) else {}
    if isinstance(fm_extra.get("rewards"), dict):
        rollout.rewards = {k: (None if v is None else Reward.model_validate(v if isinstance(v, dict) else {"score": v}))
                           for k, v in fm_extra["rewards"].items()}
        return
    if source.member is not None:
        return
    here = source.path.resolve().parent
    for folder in (here, here.parent):
        result = folder / "result.json"
        if not result.is_file():
            continue
        try:
            doc = loads(result.read_bytes())
        except (OSError, ValueError):
            return
        vr = doc.get("verifier_result") if isinstance(doc, dict) else None
        rewards = vr.get("rewards") if isinstance(vr, dict) else None
        if isinstance(rewards, dict):
            rollout.rewards = {str(k): Reward(score=float(v)) for k, v in rewards.items() if is_number_or_none(v)
                               and v is not None}
            rollout.extra["rewards_from"] = str(result)
        return


def _ending(trajs: list[ATIFTrajectory], docs: list[dict]) -> EndingInfo:
    """ATIF core has no ending field. In order: `final_metrics.extra.stop_condition` (verifiers
    files) or Tunix `status`/`done` through the endings table; then the last step: an agent step
    without tool calls → submitted (it answered); anything else → unknown."""
    last_fm = trajs[-1].final_metrics or {}
    fm_extra = last_fm.get("extra") if isinstance(last_fm.get("extra"), dict) else {}
    doc_extra = docs[-1].get("extra") if isinstance(docs[-1].get("extra"), dict) else {}
    for key in ("stop_condition", "status", "termination_reason"):
        word = fm_extra.get(key) or doc_extra.get(key)
        if isinstance(word, str):
            return EndingInfo(type=endings.from_reason(word), detail=word)
    steps = [s for t in trajs for s in t.steps]
    if not steps:
        return EndingInfo(type=Ending.unknown, message="no steps")
    last = steps[-1]
    if last.source == "agent" and not last.tool_calls:
        return EndingInfo(type=Ending.submitted, detail="final agent message",
                          message="the last step is the agent's message with no tool call")
    return EndingInfo(type=Ending.unknown, message=f"ATIF has no ending field; the last step is a {last.source} step"
                      + (" with tool calls" if last.tool_calls else ""))


# --- Tunix file store -------------------------------------------------------------------------

def _tunix_store(source: Source, ctx: ReadContext) -> Rollout:
    """`traj_<id>/metadata.json` + `step_000001.json`...: the metadata is the trajectory without
    its steps (plus `TunixTrajectoryMetadata`), each step file one step."""
    meta = dict(source.document if source.document is not None else source.first)
    steps = []
    for f in sorted(source.path.parent.glob("step_*.json")):
        try:
            steps.append(loads(f.read_bytes()))
        except (OSError, ValueError) as exc:
            raise FieldError(f.name, f"cannot read step file: {exc}") from None
    doc = dict(meta.get("trajectory") or meta)
    doc.setdefault("schema_version", "ATIF-v1.7")
    doc.setdefault("agent", {"name": "tunix"})
    doc.setdefault("trajectory_id", source.path.parent.name.removeprefix("traj_"))
    doc["steps"] = steps
    rollout = _from_documents(source, ctx, [doc])
    md = meta.get("metadata") if isinstance(meta.get("metadata"), dict) else meta
    status = md.get("status")
    if isinstance(status, str):
        rollout.ending = EndingInfo(type=endings.from_reason(status), detail=status)
    if is_number_or_none(md.get("total_reward")) and md.get("total_reward") is not None:
        rollout.reward = float(md["total_reward"])
    if md.get("prompt_id") is not None:
        rollout.group = GroupRef(id=str(md["prompt_id"]),
                                 index=md["group_offset_id"] if isinstance(md.get("group_offset_id"), int) else None)
    rollout.source["layout"] = "tunix file store"
    return rollout


# --- writing --------------------------------------------------------------------------------

def _iso(ts: float | None) -> str | None:
    from datetime import datetime, timezone

    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _atif_tool_call(tc: Any, i: int, k: int) -> dict:
    """ATIF wants an arguments object: a raw string that is one is parsed; otherwise `{}` with
    the raw text (and the id, when the source had none) under `extra.rollscope`."""
    parsed = _openai.parse_arguments(tc.arguments)
    out: dict[str, Any] = {"tool_call_id": tc.id if tc.id is not None else f"call_{i}_{k}", "function_name": tc.name,
                           "arguments": parsed.value if parsed.shape == "object" else {}}
    out["extra"] = {"rollscope": {"arguments": tc.arguments, "id": tc.id, "tool_call_extra": tc.extra}}
    return out


def _step_rl(n: Any) -> dict:
    rl = _rl.node_fields(n)
    if n.message.content is None:
        rl["content_null"] = True
    if n.message.name is not None:
        rl["message_name"] = n.message.name
    if n.message.reasoning_content is not None and n.message.role != "assistant":
        rl["reasoning_content"] = n.message.reasoning_content
    if n.message.role == "tool" and n.message.tool_call_id is None:
        # A result that names no call (text-action agents: SWE-agent, mini-swe-agent): ATIF's
        # `source_call_id` is null, which reads as a user message; keep it a tool result.
        rl["message_role"] = "tool"
    return rl


def to_trajectory(r: Rollout) -> dict[str, Any]:
    """One rollout as an ATIF-v1.7 trajectory (Harbor RFC 0001): one agent step per assistant
    node with its tool calls, the tool results that follow it folded into its observation, and
    `metrics.prompt_token_ids` (the full prompt: the tokens of the path before the node) /
    `completion_token_ids` / `logprobs`; system and user nodes as their own steps. What ATIF has
    no field for (run, step, group, mask, advantages, ending, the exact raw tool-call text, branch
    parents...) goes under `extra.rollscope` (ingest/formats/_rl.py) at trajectory, step and
    result level, so reading the file back loses nothing."""
    nodes = r.nodes
    prefix: list[list[int]] = []
    for n in nodes:  # tokens of the path before each node
        before = prefix[n.parent] + nodes[n.parent].token_ids if n.parent is not None else []
        prefix.append(before)
    calls_by_node = {c.node: c for c in r.calls if c.node is not None}
    steps: list[dict] = []
    folded: set[int] = set()
    for i, n in enumerate(nodes):
        if i in folded:
            continue
        m = n.message
        step: dict[str, Any] = {"step_id": len(steps) + 1}
        if n.timestamp is not None:
            step["timestamp"] = _iso(n.timestamp)
        text = m.content if m.content is not None else ""
        if m.role == "assistant":
            step.update(source="agent", message=text)
            call = calls_by_node.get(i)
            if call is not None and call.model:
                step["model_name"] = call.model
            if m.reasoning_content is not None:
                step["reasoning_content"] = m.reasoning_content
            if m.tool_calls:
                step["tool_calls"] = [_atif_tool_call(tc, i, k) for k, tc in enumerate(m.tool_calls)]
            metrics: dict[str, Any] = {}
            if call is not None and call.usage is not None:
                if call.usage.input_tokens is not None:
                    metrics["prompt_tokens"] = call.usage.input_tokens
                if call.usage.output_tokens is not None:
                    metrics["completion_tokens"] = call.usage.output_tokens
                if call.usage.cache_read_input_tokens is not None:
                    metrics["cached_tokens"] = call.usage.cache_read_input_tokens
            if n.token_ids and n.sampled:
                metrics["prompt_token_ids"] = prefix[i]
                metrics["completion_token_ids"] = list(n.token_ids)
                if n.logprobs:
                    metrics["logprobs"] = list(n.logprobs)
            if metrics:
                step["metrics"] = metrics
            step["llm_call_count"] = 1 if n.sampled else 0
            results = []
            j = i + 1
            while j < len(nodes) and nodes[j].message.role == "tool" and nodes[j].parent == j - 1:
                results.append(_atif_result(nodes[j]))
                folded.add(j)
                j += 1
            if results:
                step["observation"] = {"results": results}
        elif m.role == "tool":  # a tool result not right after its call: carried by a system step
            step.update(source="system", message="", observation={"results": [_atif_result(n)]})
            step["extra"] = {"rollscope": {"carrier": True}}
            steps.append(step)
            continue
        else:
            step.update(source="system" if m.role == "system" else "user", message=text)
        step["extra"] = {"rollscope": _step_rl(n)}
        steps.append(step)
    model = next((c.model for c in r.calls if c.model), None)
    agent: dict[str, Any] = {"name": r.episode.agent if r.episode else "agent", "version": "rollscope/1"}
    if model:
        agent["model_name"] = model
    if r.tools:
        agent["tool_definitions"] = r.tools
    usage = [c.usage for c in r.calls if c.usage is not None]
    final: dict[str, Any] = {"total_steps": len(steps)}
    if usage and all(u.input_tokens is not None for u in usage):
        final["total_prompt_tokens"] = sum(u.input_tokens for u in usage)  # type: ignore[misc]
    if usage and all(u.output_tokens is not None for u in usage):
        final["total_completion_tokens"] = sum(u.output_tokens for u in usage)  # type: ignore[misc]
    return {
        "schema_version": "ATIF-v1.7",
        "session_id": r.episode.id if r.episode else r.id,
        "trajectory_id": r.id,
        "agent": agent,
        "steps": steps,
        "final_metrics": final,
        "extra": {"rollscope": _rl.envelope(r, calls=True)},
    }


def _atif_result(n: Any) -> dict:
    out: dict[str, Any] = {"source_call_id": n.message.tool_call_id,
                           "content": n.message.content if n.message.content is not None else ""}
    out["extra"] = {"rollscope": _step_rl(n)}
    return out

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

A document that fails the ATIF schema (`ATIFTrajectory`, ingest/formats/_atif_schema.py) is rejected with the field.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ingest import endings
from ingest.errors import RecordError
from ingest.fields import FieldError, is_number_or_none
from ingest.formats import _rl
from ingest.formats._atif_schema import ATIFTrajectory
from ingest.formats._atif_steps import add_steps
from ingest.formats._atif_write import to_trajectory
from ingest.formats._build import RolloutBuilder
from ingest.formats.base import ReadContext, guarded, json_line, shape_error
from ingest.jsonio import loads
from ingest.schema import (
    Ending,
    EndingInfo,
    EpisodeRef,
    GroupRef,
    Reward,
    Rollout,
    RunRef,
)
from ingest.source import Source, open_source

NAME = "atif"
EXPECTS = 'an ATIF trajectory (`schema_version: "ATIF-v1.x"`, `agent`, `steps`), or Tunix traj_*/metadata.json'
MAX_SEGMENTS = 1000  # continued_trajectory_ref hops followed before giving up (a cycle is refused)


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
        add_steps(b, t, doc, segment=k)
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

def write(rollouts: Iterable[Rollout]) -> Iterator[tuple[bytes, int]]:
    """ATIF-v1.7 trajectories as JSONL, one line a rollout (`to_trajectory`)."""
    for r in rollouts:
        yield json_line(to_trajectory(r)), 1

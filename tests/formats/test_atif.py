"""The ATIF reader (ingest/formats/atif.py): the real ATIF-v1.7 files (Tunix's fixture, and the ones
built from verifiers traces with Harbor 0.25's own models), and fixtures built from the spec
(harbor rfcs/0001-trajectory-format.md, Tunix trajectory.py) for what no real file here shows:
subagents, drift, versions 1.0-1.6, Harbor result.json, the Tunix file store, schema failures."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ingest.errors import RecordError
from ingest.formats import atif, registry
from ingest.formats.base import ReadContext
from ingest.graph import branches, pair_tool_calls
from ingest.schema import Ending, Rollout
from ingest.source import open_source
from tests.conftest import FIXTURES

DATA = FIXTURES / "realdata" / "atif"


def read(path: Path, ctx: ReadContext | None = None) -> list[Rollout | RecordError]:
    return list(atif.read(open_source(path), ctx or ReadContext()))


def one(path: Path) -> Rollout:
    (r,) = read(path)
    assert isinstance(r, Rollout), str(r)
    return r


def write(tmp_path: Path, name: str, doc: dict) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(doc))
    return p


def test_multi_tool_matches_the_verifiers_trace_it_was_built_from():
    r = one(DATA / "multi_tool.trajectory.json")
    # the same trace as realdata/verifiers/train_multi_tool.jsonl: 552 tokens, 131 sampled
    assert "".join(n.message.role[0] for n in r.nodes) == "uatatata"
    assert sum(len(n.token_ids) for n in r.nodes) == 552 and sum(sum(n.mask) for n in r.nodes) == 131
    assert len(branches(r.nodes)) == 1 and "token_drift" not in r.extra  # every prompt extends the last
    assert sum(len(n.message.tool_calls or []) for n in r.nodes) == 3
    tc = r.nodes[1].message.tool_calls[0]
    assert tc.arguments == "{}" and tc.extra["arguments_from"] == "object"
    assert r.total_reward() == 1.5 and (r.ending.type, r.ending.detail) == (Ending.submitted, "agent_completed")
    assert [c.usage.input_tokens for c in r.calls] == [364, 416, 468, 520]
    assert r.nodes[0].timestamp == pytest.approx(1795945563.028938)
    assert r.id == "traj-multi-tool" and r.episode.id == "6697527049584c59bb3ff627a26579d0"


def test_continued_trajectory_ref_is_followed_and_the_continuation_not_read_twice():
    ctx = ReadContext()
    r = one(DATA / "max_turns.part1.trajectory.json")
    assert "".join(n.message.role[0] for n in r.nodes) == "uatatata" and r.source["segments"] == 2
    assert sum(len(n.token_ids) for n in r.nodes) == 554 and sum(sum(n.mask) for n in r.nodes) == 132
    assert (r.ending.type, r.ending.detail) == (Ending.truncated, "max_turns")
    assert read(DATA / "max_turns.part2.trajectory.json", ctx) == [] and ctx.extra["atif_continuations"] == 1
    (path,) = branches(r.nodes)
    pairs = pair_tool_calls(path, [n.message.model_dump() for n in r.nodes])
    assert [p.result_node is None for p in pairs] == [False, False, False, True]


def test_tunix_sample_v1_7():
    r = one(DATA / "tunix_sample_atif_v1_7.json")
    assert [n.message.role for n in r.nodes] == ["user", "assistant", "tool"]
    a = r.nodes[1]
    assert a.message.reasoning_content == "User wants to list files" and a.message.content == "Running ls command"
    assert json.loads(a.message.tool_calls[0].arguments) == {"command": "ls -la"}
    assert r.nodes[2].message.tool_call_id == "call-1" and r.nodes[2].message.content == "file1.txt\nfile2.txt"
    u = r.calls[0].usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_input_tokens, u.cost) == (100, 20, 10, 0.001)
    assert r.calls[0].sampling == {"reasoning_effort": 1.0}
    assert r.extra["_continuation_missing"] == "traj-455"  # a trajectory id, not a file here


def _base() -> dict:
    return json.loads((DATA / "multi_tool.trajectory.json").read_text())


def test_prompt_that_does_not_extend_is_kept_as_drift(tmp_path):
    doc = _base()
    for k in (3, 4):  # from the third request on, the prompt was re-tokenized at position 5
        ids = doc["steps"][k]["metrics"]["prompt_token_ids"]
        ids[5] = ids[5] + 1
    r = one(write(tmp_path, "t.json", doc))
    assert r.extra["token_drift"] is True and len(branches(r.nodes)) == 2
    root = next(n for n in r.nodes if n.extra.get("token_drift"))
    assert root.parent is None and root.extra["token_drift"]["index"] == 5 and len(root.token_ids) == 468


def test_subagents_become_branches(tmp_path):
    sub = {"schema_version": "ATIF-v1.7", "trajectory_id": "sub-1", "agent": {"name": "searcher", "version": "1"},
           "steps": [{"step_id": 1, "source": "user", "message": "find x"},
                     {"step_id": 2, "source": "agent", "message": "x is 4"}]}
    doc = {"schema_version": "ATIF-v1.7", "trajectory_id": "main", "agent": {"name": "lead", "version": "1"},
           "steps": [{"step_id": 1, "source": "user", "message": "what is x?"},
                     {"step_id": 2, "source": "agent", "message": "",
                      "tool_calls": [{"tool_call_id": "c1", "function_name": "delegate", "arguments": {"q": "x"}}],
                      "observation": {"results": [{"source_call_id": "c1", "content": "x is 4",
                                                   "subagent_trajectory_ref": [{"trajectory_id": "sub-1"}]}]}},
                     {"step_id": 3, "source": "agent", "message": "4"}],
           "subagent_trajectories": [sub]}
    r = one(write(tmp_path, "t.json", doc))
    paths = branches(r.nodes)
    assert len(paths) == 2
    texts = [[r.nodes[i].message.content for i in p] for p in paths]
    assert ["what is x?", None, "find x", "x is 4"] in texts
    assert ["what is x?", None, "x is 4", "4"] in texts
    assert any(n.extra.get("subagent") == "sub-1" for n in r.nodes)


@pytest.mark.parametrize("version", ["ATIF-v1.0", "ATIF-v1.3", "ATIF-v1.6"])
def test_older_versions_and_content_parts(tmp_path, version):
    doc = {"schema_version": version, "session_id": "s", "agent": {"name": "a", "version": "1"},
           "steps": [{"step_id": 1, "source": "user",
                      "message": [{"type": "text", "text": "look"},
                                  {"type": "image", "source": {"media_type": "image/png", "path": "img/1.png"}}]},
                     {"step_id": 2, "source": "agent", "message": "a cat",
                      "metrics": {"prompt_tokens": 10, "completion_tokens": 2, "completion_token_ids": [5, 6]}}]}
    r = one(write(tmp_path, "t.json", doc))
    assert r.id == "s" and r.nodes[0].message.content[1]["source"]["media_type"] == "image/png"
    assert r.nodes[1].token_ids == [5, 6] and all(r.nodes[1].mask)
    assert r.ending.type == Ending.submitted


def test_harbor_result_json_rewards(tmp_path):
    trial = tmp_path / "trial-1"
    write(trial, "agent/trajectory.json", {k: v for k, v in _base().items() if k != "final_metrics"})
    (trial / "result.json").write_text(json.dumps({"verifier_result": {"rewards": {"reward": 1, "partial": 0.5}}}))
    r = one(trial / "agent" / "trajectory.json")
    assert r.total_reward() == 1.5 and r.rewards["reward"].score == 1.0


def test_final_metrics_reward_components_keep_weights_and_explanations(tmp_path):
    """ATIF core (v1.0-v1.7) has no reward field: components come from `final_metrics.extra.rewards`
    (the real verifiers-built file: weights 0.5 and 1) with an explanation where one is written."""
    doc = _base()
    doc["final_metrics"]["extra"]["rewards"]["answered"]["explanation"] = "the answer tag is there"
    r = one(write(tmp_path, "t.json", doc))
    assert {k: (v.score, v.weight) for k, v in r.rewards.items()} == {"answered": (1.0, 0.5), "counted": (1.0, 1.0)}
    assert r.rewards["answered"].explanation == "the answer tag is there" and r.total_reward() == 1.5


def test_tunix_rl_extension_fields(tmp_path):
    doc = {"schema_version": "ATIF-v1.7", "trajectory_id": "t", "agent": {"name": "tunix", "version": "1"},
           "steps": [{"step_id": 0, "source": "user", "message": "2+2?", "env_tokens": [1, 2], "env_masks": [0, 0]},
                     {"step_id": 1, "source": "agent", "message": "4", "assistant_tokens": [3, 4],
                      "assistant_masks": [1, 1], "logprobs": [-0.1, -0.2], "mc_return": 1.0, "policy_version": 3},
                     {"step_id": 2, "source": "user", "message": "ok", "reward": 1.0, "done": True}]}
    r = one(write(tmp_path, "t.json", doc))
    assert [n.token_ids for n in r.nodes] == [[1, 2], [3, 4], []]
    assert r.nodes[1].logprobs == [-0.1, -0.2] and r.nodes[1].mc_return == 1.0 and r.nodes[1].policy_version == 3
    assert r.nodes[2].reward == 1.0 and r.nodes[2].extra["step"]["done"] is True


def test_tunix_file_store_layout(tmp_path):
    folder = tmp_path / "run1" / "traj_abc"
    write(folder, "metadata.json", {"schema_version": "ATIF-v1.7", "agent": {"name": "tunix", "version": "1"},
                                    "metadata": {"prompt_id": "p1", "group_offset_id": 2, "status": "COMPLETED",
                                                 "total_reward": 0.5}})
    write(folder, "step_000001.json", {"step_id": 1, "source": "user", "message": "hi"})
    write(folder, "step_000002.json", {"step_id": 2, "source": "agent", "message": "hello"})
    src = open_source(folder / "metadata.json")
    assert registry.detect(src).NAME == "atif"
    (r,) = read(folder / "metadata.json")
    assert r.id == "abc" and r.reward == 0.5 and (r.group.id, r.group.index) == ("p1", 2)
    assert r.ending.type == Ending.submitted and r.ending.detail == "COMPLETED" and len(r.nodes) == 2


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d["steps"][1].update(source="robot"), "steps[1].source"),
    (lambda d: d["steps"][2].update(step_id=9), "steps[2].step_id"),
    (lambda d: d.pop("agent"), "agent"),
    (lambda d: d["steps"][1]["tool_calls"][0].pop("function_name"), "steps[1].tool_calls[0].function_name"),
    (lambda d: d.update(schema_version="ATIF-v2.0"), "schema_version"),
])
def test_schema_failures_name_the_field(tmp_path, mutate, field):
    doc = copy.deepcopy(_base())
    mutate(doc)
    (err,) = read(write(tmp_path, "bad.json", doc))
    assert isinstance(err, RecordError) and err.field == field, (err.field, err.message)


def _parallel(tmp_path: Path, between: list[int], *, source_ids=("c1", "c2")) -> Rollout:
    """A v1.7 trajectory: one agent step with two parallel calls and their results, then an answer
    whose prompt is the first prompt + completion + `between` (ids: 9 opens a turn, 8 closes one)."""
    first, done = [9, 1, 2, 9, 3, 4, 9, 5], [6, 7, 8]
    calls = [{"tool_call_id": c, "function_name": "calc", "arguments": {"expr": e}}
             for c, e in zip(("c1", "c2"), ("1+1", "2+2"))]
    results = [{"source_call_id": s, "content": v} for s, v in zip(source_ids, ("2", "4"))]
    doc = {"schema_version": "ATIF-v1.7", "trajectory_id": "t", "agent": {"name": "a", "version": "1"}, "steps": [
        {"step_id": 1, "source": "user", "message": "q"},
        {"step_id": 2, "source": "agent", "message": "", "tool_calls": calls, "observation": {"results": results},
         "metrics": {"prompt_token_ids": first, "completion_token_ids": done, "logprobs": [-0.1] * 3}},
        {"step_id": 3, "source": "agent", "message": "6",
         "metrics": {"prompt_token_ids": first + done + between, "completion_token_ids": [11, 12],
                     "logprobs": [-0.2, -0.3]}}]}
    return one(write(tmp_path, "t.json", doc))


def test_results_rendered_as_separate_turns_keep_their_own_tokens(tmp_path):
    """Issue 20 (tool_results_split in ATIF): a prompt delta holding one turn per result (9 opens
    a turn, as the first prompt shows) is shared among the results, each from its turn's start."""
    r = _parallel(tmp_path, [0, 9, 20, 2, 8, 0, 9, 20, 4, 8, 0, 9, 5])
    tools = [n for n in r.nodes if n.message.role == "tool"]
    assert [n.token_ids for n in tools] == [[0, 9, 20, 2, 8, 0], [9, 20, 4, 8, 0, 9, 5]]
    assert all(not any(n.mask) for n in tools)


def test_results_grouped_in_one_turn_stay_on_the_last_result(tmp_path):
    r = _parallel(tmp_path, [0, 9, 20, 2, 21, 4, 8, 0, 9, 5])
    assert [n.token_ids for n in r.nodes if n.message.role == "tool"] == [[], [0, 9, 20, 2, 21, 4, 8, 0, 9, 5]]


def test_a_result_without_source_call_id_in_a_calling_step_is_a_tool_result(tmp_path):
    """ATIF's `source_call_id` is optional: in a step that issued tool calls the result is one of
    theirs (which one is not said), so it is a tool message, left for pairing to call ambiguous."""
    r = _parallel(tmp_path, [0, 9, 20, 2, 21, 4, 8, 0, 9, 5], source_ids=(None, "c2"))
    roles = [(n.message.role, n.message.tool_call_id) for n in r.nodes if n.message.content in ("2", "4")]
    assert roles == [("tool", None), ("tool", "c2")]

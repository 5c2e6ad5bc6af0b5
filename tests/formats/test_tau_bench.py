"""The tau-bench reader (ingest/formats/tau_bench.py): tau-bench's real results file (moved from
test_chat.py when tau-bench got its own reader)."""
from __future__ import annotations

import json
from pathlib import Path

from ingest import graph
from ingest.errors import RecordError
from ingest.formats import tau_bench
from ingest.formats.base import ReadContext
from ingest.schema import Ending, Rollout
from ingest.source import open_source
from tests.formats.reading import data, only_branch_pairs, read_with, rollouts_with, write


def read(path: Path, ctx: ReadContext | None = None) -> list[Rollout | RecordError]:
    return read_with(tau_bench, path, ctx)


def rollouts(path: Path, ctx: ReadContext | None = None) -> list[Rollout]:
    return rollouts_with(tau_bench, path, ctx)


# --- tau-bench -----------------------------------------------------------------------------

TAU = "realdata/tau-bench/gpt-4o-airline.sample.json"


def test_tau_bench_file_is_detected_and_gives_three_rollouts():
    src = open_source(data(TAU))
    assert tau_bench.sniff(src)
    rs = rollouts(data(TAU))
    assert [r.id for r in rs] == ["task0-trial0", "task6-trial0", "task4-trial0"]
    assert [r.reward for r in rs] == [0.0, 1.0, 0.0]
    for r in rs:
        assert r.group is not None and r.group.id == r.task.key and r.group.index == 0
        assert r.task.data["user_id"] and "instruction" in r.task.data
        assert r.extra["info"]["source"] in ("user", "transfer_to_human_agents")
        assert r.source["format"] == "tau-bench"
        assert len(graph.branches(r.nodes)) == 1  # a linear tool loop is one branch
        assert all(n.sampled == (n.message.role == "assistant") for n in r.nodes)
        assert all(not n.token_ids for n in r.nodes)  # no token data in the source
        assert r.ending.evidence.turns == sum(n.message.role == "assistant" for n in r.nodes)
    assert rs[0].run.id == "tau-bench"  # ctx.run_for: the folder name


def test_tau_bench_reused_tool_call_id_kept_on_both_calls():
    r = rollouts(data(TAU))[0]
    reused = "call_HGn16KZh9oNCruxsMJ4gYXan"
    holders = [(i, tc.name) for i, n in enumerate(r.nodes) for tc in (n.message.tool_calls or []) if tc.id == reused]
    assert holders == [(8, "search_direct_flight"), (12, "search_onestop_flight")]
    tc = r.nodes[8].message.tool_calls[0]
    assert isinstance(tc.arguments, str) and json.loads(tc.arguments)["origin"] == "JFK"
    pairs = {(c.node, c.name): c.result_node for c in only_branch_pairs(r)}
    assert pairs[(8, "search_direct_flight")] == 9
    assert pairs[(12, "search_onestop_flight")] == 13
    assert all(v is not None for v in pairs.values())


def test_tau_bench_endings():
    rs = {r.id: r for r in rollouts(data(TAU))}
    stop = rs["task0-trial0"].ending
    # the user simulator ended it (tau2 `user_stop`): task_detected, not the agent's submission
    assert stop.type == Ending.task_detected and stop.detail == "###STOP###"
    assert rs["task6-trial0"].ending.type == Ending.task_detected
    transfer = rs["task4-trial0"].ending
    assert transfer.type == Ending.submitted and transfer.detail == "transfer_to_human_agents"


def test_tau_bench_error_and_not_done_records(tmp_path):
    doc = [
        {"task_id": 3, "trial": 1, "reward": 0.0, "traj": [],
         "info": {"error": "litellm.RateLimitError", "traceback": "Traceback ..."}},
        {"task_id": 3, "trial": 2, "reward": 0.0, "info": {"source": "get_user_details", "task": {"user_id": "u"}},
         "traj": [{"role": "system", "content": "policy"}, {"role": "user", "content": "hi"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"id": "c", "type": "function",
                                   "function": {"name": "get_user_details", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c", "name": "get_user_details", "content": "{}"}]},
        {"task_id": 3, "trial": 3, "reward": 0.0, "info": {"source": "user"},
         "traj": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                  {"role": "user", "content": "still there?"}]},
    ]
    rs = rollouts(write(tmp_path, "tau.json", json.dumps(doc)))
    assert [r.id for r in rs] == ["task3-trial1", "task3-trial2", "task3-trial3"]
    assert rs[0].ending.type == Ending.error and rs[0].ending.message == "litellm.RateLimitError"
    assert rs[0].errors and rs[0].errors[0].traceback == "Traceback ..."
    assert rs[1].ending.type == Ending.truncated and "get_user_details" in rs[1].ending.detail
    assert rs[2].ending.type == Ending.truncated
    assert {r.group.id for r in rs} == {"3"} and [r.group.index for r in rs] == [1, 2, 3]



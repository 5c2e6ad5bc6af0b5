"""The pairing checks `ambiguous_tool_result` and `unpaired_tool_result` (rule in ingest/graph.py
and docs/formats.md): each fires on the input it names and stays quiet on a decidable one."""
from __future__ import annotations

from ingest.checks import run_rollout_checks
from ingest.schema import Rollout


def rollout(messages: list[dict]) -> Rollout:
    nodes = [{"parent": i - 1 if i else None, "message": m, "sampled": m["role"] == "assistant"}
             for i, m in enumerate(messages)]
    return Rollout.model_validate({"id": "r", "run": {"id": "x"}, "nodes": nodes})


def kinds(r: Rollout) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in run_rollout_checks(r).findings:
        out.setdefault(f.kind, []).append(f)
    return out


CALLS = [{"id": None, "name": "ls", "arguments": "{\"d\": \"a\"}"},
         {"id": None, "name": "ls", "arguments": "{\"d\": \"b\"}"}]


def test_ambiguous_tool_result_fires_when_the_data_cannot_decide():
    r = rollout([{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": CALLS},
                 {"role": "tool", "name": "ls", "content": "b-files"},
                 {"role": "tool", "name": "ls", "content": "a-files"}])
    f = kinds(r)["ambiguous_tool_result"]
    assert [x.node_idx for x in f] == [2, 3] and f[0].detail["candidates"] == [[1, 0], [1, 1]]
    assert "unanswered_tool_call" not in kinds(r)


def test_ambiguous_tool_result_quiet_when_names_or_ids_decide():
    calls = [{"id": None, "name": "read", "arguments": "{}"}, {"id": None, "name": "write", "arguments": "{}"}]
    r = rollout([{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": calls},
                 {"role": "tool", "name": "write", "content": "w"}, {"role": "tool", "name": "read", "content": "r"}])
    assert "ambiguous_tool_result" not in kinds(r)
    with_ids = [dict(c, id=f"c{k}") for k, c in enumerate(CALLS)]
    r = rollout([{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": with_ids},
                 {"role": "tool", "tool_call_id": "c1", "content": "b"},
                 {"role": "tool", "tool_call_id": "c0", "content": "a"}])
    assert not {"ambiguous_tool_result", "unanswered_tool_call", "unpaired_tool_result"} & set(kinds(r))


def test_unpaired_tool_result_fires_for_a_result_no_call_waits_for():
    r = rollout([{"role": "user", "content": "go"}, {"role": "tool", "tool_call_id": "bash_1", "content": "x"}])
    [f] = kinds(r)["unpaired_tool_result"]
    assert f.node_idx == 1 and f.detail["id"] == "bash_1"
    r = rollout([{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [dict(CALLS[0], id="c0")]},
                 {"role": "tool", "tool_call_id": "zz", "content": "x"}])
    assert [f.node_idx for f in kinds(r)["unpaired_tool_result"]] == [2]


def test_unpaired_tool_result_quiet_when_every_result_has_its_call():
    r = rollout([{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [dict(CALLS[0], id="c0")]},
                 {"role": "tool", "tool_call_id": "c0", "content": "x"}])
    assert "unpaired_tool_result" not in kinds(r)

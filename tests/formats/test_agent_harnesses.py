"""Agent-harness readers on the real files (tests/fixtures/realdata, MANIFEST.md): Inspect,
SWE-agent, mini-swe-agent, OpenHands. Expected counts were read from the source files by hand
(noted beside each), not from the reader."""
from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from ingest.checks import run_rollout_checks
from ingest.formats.base import ReadContext
from ingest.formats.inspect import value_to_float
from ingest.formats.registry import detect
from ingest.metrics import tool_errors
from ingest.schema import Rollout
from ingest.source import Source, open_source
from tests.conftest import data_path
from tests.helpers import ingest


def run_checks(r):
    return run_rollout_checks(r).findings

REAL = data_path("realdata")


def read(path: Path, fmt: str) -> list[Rollout]:
    src = open_source(path)
    reader = detect(src)
    assert reader is not None and reader.NAME == fmt
    out = list(reader.read(src, ReadContext()))
    assert all(isinstance(r, Rollout) for r in out), out
    return out


def roles(r: Rollout) -> list[str]:
    return [n.message.role for n in r.nodes]


def n_calls(r: Rollout) -> int:
    return sum(len(n.message.tool_calls or []) for n in r.nodes)


def kinds(r: Rollout) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in run_checks(r):
        out.setdefault(f.kind, []).append(f)
    return out


# --- Inspect -------------------------------------------------------------------------------

def test_inspect_eval_zip_sample_by_sample():
    # samples/1_epoch_1.json: system, user (input), assistant "Yes\n"; score match = "C";
    # one model event 09:59:48.958317-04:00 → 13:59:48.958317 UTC, completed 09:59:49.353991-04:00;
    # usage 66 in / 3 out; stop_reason "stop".
    [r] = read(REAL / "inspect_ai" / "log_read_sample.eval", "inspect")
    assert r.id == "popularity:1:1" and r.run.id == "X3kuys5egBfmBhaXyCtp4X"
    assert roles(r) == ["system", "user", "assistant"] and n_calls(r) == 0
    assert r.nodes[1].message.content.startswith("Is the following statement")  # attachment resolved
    assert r.rewards["match"].score == 1.0 and r.rewards["match"].extra["label"] == "C" and r.reward == 1.0
    assert r.rewards["match"].explanation == "Yes\n" and r.rewards["match"].extra["answer"] == "Yes"
    assert r.ending.type == "submitted" and r.ending.detail == "stop_reason=stop"
    assert r.group.id == "popularity:1" and r.group.index == 0 and r.group.size == 1 and r.extra["epoch"] == 1
    [call] = r.calls
    assert call.node == 2 and call.usage.input_tokens == 66 and call.usage.output_tokens == 3
    assert call.time.start == pytest.approx(1751723988.958317)  # 2025-07-05T13:59:48.958317Z
    assert call.time.end == pytest.approx(1751723989.353991)
    assert r.timing["start"] == pytest.approx(1751723988.945242)
    assert "attachment://" not in json.dumps(r.to_json_dict())


def test_inspect_json_log_tool_errors_without_calls():
    # one sample, id 1, epoch 4: eleven tool messages (bash_1..bash_11), each with an error
    # type; no assistant turn, no output, no scores.
    [r] = read(REAL / "inspect_ai" / "log_tool_call_error.json", "inspect")
    assert r.id == "...:1:4" and r.group.index == 3 and r.extra["epoch"] == 4
    assert roles(r) == ["tool"] * 11 and n_calls(r) == 0
    assert [n.message.extra["error"]["type"] for n in r.nodes][:3] == ["parsing", "timeout", "parsing"]
    assert r.reward is None and r.rewards == {}
    assert r.ending.type == "unknown"
    f = kinds(r)
    assert len(f["unpaired_tool_result"]) == 11  # results with no call are flagged, never dropped
    assert "unanswered_tool_call" not in f
    assert tool_errors(r) == 11  # each result carries Inspect's ToolCallError (extra.error)


def test_inspect_tool_errors_reach_the_rollout_summary(engine):
    from sqlalchemy import text
    assert ingest(engine, REAL / "inspect_ai" / "log_tool_call_error.json", run="te").ok
    with engine.connect() as c:
        assert c.execute(text("SELECT n_tool_errors FROM rollout WHERE run_id = 'te'")).scalars().all() == [11]


def test_openhands_error_observation_is_a_tool_error(tmp_path):
    events = [
        {"id": 0, "source": "user", "action": "message", "message": "list files", "args": {"content": "list files"}},
        {"id": 1, "source": "agent", "action": "run", "message": "ls", "args": {"command": "ls"},
         "tool_call_metadata": {"tool_call_id": "c1", "function_name": "execute_bash"}},
        {"id": 2, "source": "agent", "observation": "error", "cause": 1, "content": "bash: ls: command not found",
         "message": "", "tool_call_metadata": {"tool_call_id": "c1", "function_name": "execute_bash"}},
    ]
    p = tmp_path / "oh.json"
    p.write_text(json.dumps(events))
    [r] = read(p, "openhands")
    tools = [n.message for n in r.nodes if n.message.role == "tool"]
    assert [m.extra["observation"] for m in tools] == ["error"]
    assert tool_errors(r) == 1


def test_openhands_error_then_reexecuted_observation_keeps_both_and_supersedes_the_error(tmp_path):
    """OpenHands/software-agent-sdk#1782: a recovery error observation, then the re-executed
    call's observation, both caused by one action (one tool_call_id). The reader keeps both; the
    call is answered twice (`tool_answered_twice`), the error is superseded (not a tool error of
    the rollout) and the second observation is no orphan."""
    meta = {"tool_call_id": "c1", "function_name": "execute_bash"}
    events = [
        {"id": 0, "source": "user", "action": "message", "message": "list files", "args": {"content": "list files"}},
        {"id": 1, "source": "agent", "action": "run", "message": "ls", "args": {"command": "ls"},
         "tool_call_metadata": meta},
        {"id": 2, "source": "agent", "observation": "error", "cause": 1, "message": "",
         "content": "RuntimeError: the sandbox restarted; the action will be re-executed", "tool_call_metadata": meta},
        {"id": 3, "source": "agent", "observation": "run", "cause": 1, "content": "a.txt", "message": "",
         "tool_call_metadata": meta},
    ]
    p = tmp_path / "oh.json"
    p.write_text(json.dumps(events))
    [r] = read(p, "openhands")
    tools = [(i, n.message) for i, n in enumerate(r.nodes) if n.message.role == "tool"]
    assert [(m.tool_call_id, m.extra["observation"]) for _, m in tools] == [("c1", "error"), ("c1", "run")]
    assert tool_errors(r) == 0
    kinds = {f.kind: f for f in run_checks(r)}
    assert "unpaired_tool_result" not in kinds
    twice = kinds["tool_answered_twice"]
    call_node = next(i for i, n in enumerate(r.nodes) if n.message.tool_calls)
    assert twice.detail["call_node"] == call_node and twice.detail["id"] == "c1"
    assert twice.detail["result_nodes"] == [i for i, _ in tools] and twice.detail["first_error"] == "error observation"


def test_openhands_system_action_tools_are_the_tools_offered(tmp_path):
    """Issue 20: the `system` action's `args.tools` are the rollout's tools (tool_call_markup_unparsed
    needs to know structured calls were offered)."""
    bash = {"type": "function", "function": {"name": "execute_bash", "parameters": {"type": "object"}}}
    events = [{"id": 0, "source": "agent", "action": "system", "message": "sys", "args": {"content": "sys",
                                                                                       "tools": [bash]}},
              {"id": 1, "source": "user", "action": "message", "message": "hi", "args": {"content": "hi"}}]
    p = tmp_path / "oh.json"
    p.write_text(json.dumps(events))
    [r] = read(p, "openhands")
    assert r.tools == [bash]
    assert r.nodes[0].message.role == "system"


def test_openhands_model_response_reasoning(tmp_path):
    """The litellm response's `reasoning_content` is the assistant node's reasoning (issue 20)."""
    call = {"id": "c1", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}}
    response = {"id": "r1", "model": "m", "choices": [{"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Listing.", "reasoning_content": "I should look first.",
        "tool_calls": [call]}}]}
    events = [{"id": 0, "source": "user", "action": "message", "message": "hi", "args": {"content": "hi"}},
              {"id": 1, "source": "agent", "action": "run", "message": "ls", "args": {"command": "ls"},
               "tool_call_metadata": {"tool_call_id": "c1", "function_name": "execute_bash",
                                      "model_response": response}}]
    p = tmp_path / "oh.json"
    p.write_text(json.dumps(events))
    [r] = read(p, "openhands")
    assert r.nodes[1].message.reasoning_content == "I should look first."
    assert r.nodes[1].message.content == "Listing."


@pytest.mark.parametrize("value,expected", [
    ("C", 1.0), ("P", 0.5), ("I", 0.0), ("N", 0.0), ("yes", 1.0), ("False", 0.0), ("0.25", 0.25),
    (3, 3.0), (True, 1.0), ("maybe", None), ([1], None),
])
def test_inspect_value_to_float(value, expected):
    assert value_to_float(value) == expected


def _eval_zip(tmp_path: Path, sample: dict, header_extra: dict | None = None) -> Path:
    src = REAL / "inspect_ai" / "log_read_sample.eval"
    out = tmp_path / "x.eval"
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(out, "w") as w:
        header = json.loads(z.read("header.json"))
        header["eval"]["config"]["epochs"] = 3
        header.update(header_extra or {})
        w.writestr("header.json", json.dumps(header))
        base = json.loads(z.read("samples/1_epoch_1.json"))
        for epoch, patch in enumerate(sample["epochs"], start=1):
            s = dict(base, epoch=epoch, **patch)
            w.writestr(f"samples/1_epoch_{epoch}.json", json.dumps(s))
    return out


def test_inspect_limits_errors_and_letters(tmp_path):
    path = _eval_zip(tmp_path, {"epochs": [
        {"limit": {"type": "message", "limit": 10}, "scores": {"match": {"value": "I"}}},
        {"error": {"message": "sandbox died", "traceback": "tb"}, "scores": {}},
        {"limit": {"type": "working", "limit": 60}, "scores": {"match": {"value": "P"}}},
    ]})
    rs = {r.extra["epoch"]: r for r in read(path, "inspect")}
    assert rs[1].ending.type == "truncated" and rs[1].ending.detail == "message_limit" and rs[1].reward == 0.0
    # several scorers, one of them scoring several things (a dict value) with a judge's explanation
    (tmp_path / "m").mkdir()
    multi = _eval_zip(tmp_path / "m", {"epochs": [{"scores": {
        "judge": {"value": {"accuracy": "C", "style": 0.25}, "explanation": "<b>right</b>"},
        "listed": {"value": [1, 0]}, "match": {"value": "I"}}}]})
    [m] = read(multi, "inspect")
    assert {k: (v.score, v.explanation) for k, v in m.rewards.items()} == {
        "judge.accuracy": (1.0, "<b>right</b>"), "judge.style": (0.25, "<b>right</b>"),
        "listed[0]": (1.0, None), "listed[1]": (0.0, None), "match": (0.0, None)}
    assert m.reward == 1.0  # the first scorer's first value, as before
    assert rs[2].ending.type == "error" and rs[2].ending.message == "sandbox died" and rs[2].reward is None
    assert rs[3].ending.detail == "working_limit" and rs[3].reward == 0.5
    assert {r.group.size for r in rs.values()} == {3}


# --- SWE-agent -----------------------------------------------------------------------------

def test_swe_agent_old_generation_text_actions():
    # history: 26 messages (system, demonstration user message with is_demo, issue, then 12
    # assistant actions and 11 observations; the last action `submit` has no observation);
    # info.exit_status "submitted"; model_stats: tokens_sent 122612, tokens_received 1369,
    # instance_cost 1.26719, api_calls 12; trajectory: 12 steps, state as a JSON string.
    [r] = read(REAL / "swe-agent" / "pydicom__pydicom-1458.traj", "swe-agent")
    assert len(r.nodes) == 26 and roles(r).count("assistant") == 12 and roles(r).count("tool") == 11
    assert n_calls(r) == 12
    assert r.nodes[1].message.extra["demonstration"] is True
    assert r.nodes[4].message.extra["source_role"] == "user"
    assert r.nodes[4].message.extra["state"] == {"open_file": "n/a", "working_dir": "/pydicom__pydicom"}
    assert r.nodes[3].message.tool_calls[0].name == "create"
    assert json.loads(r.nodes[3].message.tool_calls[0].arguments) == {"command": "create reproduce_bug.py"}
    assert r.ending.type == "submitted" and r.ending.detail == "submitted"
    assert r.metrics == {"input_tokens": 122612, "output_tokens": 1369, "cost": 1.26719, "api_calls": 12}
    assert r.extra["generation"] == 1
    f = kinds(r)
    assert "unanswered_tool_call" not in f  # `submit` ended the run: no observation follows it
    assert r.nodes[25].message.tool_calls[0].extra["ends_rollout"] is True
    assert "ambiguous_tool_result" not in f


def test_swe_agent_new_generation_tool_calls_with_reused_ids():
    # history: 24 messages: system, issue, then 11 assistant tool calls each answered by one
    # tool message (tool_call_ids). Ids are reused: call_5iDdbOYybq7L19vqXmR0DPaU by 4 calls,
    # call_ahToD2vM0aQWJPkRmy5cumru by 2, call_q3VsBszvsntfyPkxeHq4i5N1 by 2. exit "submitted";
    # model_stats api_calls 11, costs 0; state is a dict.
    [r] = read(REAL / "swe-agent" / "marshmallow-code__marshmallow-1867.function_calling_replace.traj", "swe-agent")
    assert len(r.nodes) == 24 and n_calls(r) == 11 and roles(r).count("tool") == 11
    assert r.extra["generation"] == 2 and r.ending.type == "submitted"
    assert r.metrics["api_calls"] == 11
    assert r.nodes[3].message.extra["state"] == {"open_file": "/testbed/reproduce.py", "working_dir": "/testbed"}
    f = kinds(r)
    assert sorted(x.detail["id"] for x in f["duplicate_tool_call_id"]) == [
        "call_5iDdbOYybq7L19vqXmR0DPaU", "call_ahToD2vM0aQWJPkRmy5cumru", "call_q3VsBszvsntfyPkxeHq4i5N1"]
    assert "unanswered_tool_call" not in f and "unpaired_tool_result" not in f


@pytest.mark.parametrize("status,ending", [
    ("submitted", "submitted"), ("submitted (exit_cost)", "truncated"), ("exit_context", "truncated"),
    ("exit_format", "truncated"), ("exit_api", "error"), ("submitted (exit_error)", "error"),
    ("exit_forfeit", "submitted"), ("early_exit", "unknown"),
])
def test_swe_agent_exit_status(status, ending):
    from ingest.formats.swe_agent import exit_ending

    assert exit_ending(status) == ending


def test_swe_agent_thinking_blocks_are_the_reasoning(tmp_path):
    # SWE-agent 1.x keeps litellm's thinking blocks on a history item (`sweagent/types.py`
    # `HistoryItem.thinking_blocks`, Anthropic extended thinking).
    doc = {"environment": "swe_main", "trajectory": [], "info": {"exit_status": "submitted"},
           "history": [{"role": "system", "content": "SETTING", "agent": "main", "message_type": "system_prompt"},
                       {"role": "user", "content": "Fix it", "agent": "main", "message_type": "observation"},
                       {"role": "assistant", "content": "", "agent": "main", "message_type": "action",
                        "thought": "", "action": "submit",
                        "thinking_blocks": [{"type": "thinking", "thinking": "All tests pass.", "signature": "c2ln"}],
                        "tool_calls": [{"function": {"arguments": "{}", "name": "submit"}, "id": "call_1",
                                        "type": "function"}]}]}
    path = tmp_path / "inst.traj"
    path.write_text(json.dumps(doc))
    [r] = read(path, "swe-agent")
    m = r.nodes[2].message
    assert m.reasoning_content == "All tests pass."
    assert m.extra["reasoning_blocks"] == [{"type": "thinking", "signature": "c2ln", "position": 0}]
    assert "thinking_blocks" not in m.extra
    assert "empty_reasoning_only" not in kinds(r)  # it called submit: not an empty answer


# --- mini-swe-agent ------------------------------------------------------------------------

def test_mini_swe_agent_messages():
    # 22 messages: system, task, then 10 assistant turns each with one ```mswea_bash_command
    # block, answered by 9 <returncode> observations and, after
    # `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached`, the diff.
    [r] = read(REAL / "mini-swe-agent" / "github_issue.traj.json", "mini-swe-agent")
    assert len(r.nodes) == 22 and n_calls(r) == 10 and roles(r).count("tool") == 10
    assert r.nodes[3].message.extra == {"source_role": "user", "returncode": 1}
    assert r.nodes[21].message.extra["submission"] is True
    assert json.loads(r.nodes[2].message.tool_calls[0].arguments)["command"].startswith("cat /Users/fuchur")
    assert r.ending.type == "submitted"
    assert not {"unanswered_tool_call", "ambiguous_tool_result", "unpaired_tool_result"} & set(kinds(r))


def test_mini_swe_agent_call_from_the_kept_litellm_response(tmp_path):
    # mini-swe-agent keeps the litellm response on each assistant message (`extra.response`,
    # models/litellm_model.py `query`): the choice's finish reason and reasoning, and the usage.
    response = {"id": "chatcmpl-1", "model": "qwen3-8b", "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "length",
                             "message": {"role": "assistant", "content": "cut", "reasoning_content": "First, ls."}}],
                "usage": {"prompt_tokens": 812, "completion_tokens": 64, "total_tokens": 876}}
    doc = {"info": {"exit_status": "Submitted", "submission": "", "model_stats": {"api_calls": 2}},
           "trajectory_format": "mini-swe-agent-1",
           "messages": [{"role": "system", "content": "You run bash."}, {"role": "user", "content": "Fix it."},
                        {"role": "assistant", "content": "THOUGHT: look.\n\n```bash\nls\n```",
                         "extra": {"response": response}},
                        {"role": "user", "content": "<returncode>0</returncode>\n<output>\na.py\n</output>"},
                        {"role": "assistant", "content": "Done."}]}
    path = tmp_path / "inst.traj.json"
    path.write_text(json.dumps(doc))
    [r] = read(path, "mini-swe-agent")
    first, second = r.calls
    assert (first.node, first.finish_reason, first.finish_reason_raw) == (2, "length", "length")
    assert (first.usage.input_tokens, first.usage.output_tokens, first.model) == (812, 64, "qwen3-8b")
    assert r.nodes[2].message.reasoning_content == "First, ls."
    assert (second.node, second.finish_reason, second.usage) == (4, None, None)  # nothing kept: a bare call
    assert "silent_truncation" in kinds(r)  # a length cut while the agent says it submitted


# --- OpenHands -----------------------------------------------------------------------------

def test_openhands_events():
    # 4 events: user message (id 0), agent edit (id 3, str_replace_editor,
    # toolu_017nBp7UfiGqyrA7j77HgtFP; usage 3486 prompt / 1135 completion), edit observation
    # (id 4, cause 3), finish (id 5; usage 4646 / 177, cache read 3482). Naive timestamps.
    [r] = read(REAL / "openhands" / "basic.json", "openhands")
    assert roles(r) == ["user", "assistant", "tool", "assistant"] and n_calls(r) == 2
    assert r.nodes[2].message.tool_call_id == "toolu_017nBp7UfiGqyrA7j77HgtFP"
    assert r.nodes[1].message.content.startswith("I'll help you create a simple 2048 game")
    assert [c.usage.output_tokens for c in r.calls] == [1135, 177]
    assert r.calls[1].usage.cache_read_input_tokens == 3482
    assert r.calls[0].extra["model_response"]["id"] == "chatcmpl-6814daca-5c62-431d-8c88-9dafead244f1"
    assert r.ending.type == "submitted" and r.ending.detail == "finish"
    assert r.extra["timestamps_assumed_utc"] is True
    assert r.nodes[0].timestamp == pytest.approx(1738017896.900854)  # 2025-01-27T22:44:56.900854, as UTC
    assert not {"unanswered_tool_call", "unpaired_tool_result"} & set(kinds(r))


def test_real_files_through_store_and_pages(client, engine, tmp_path):
    for sub in ("inspect_ai", "swe-agent", "mini-swe-agent", "openhands"):
        shutil.copytree(REAL / sub, tmp_path / "data" / sub)
    report = ingest(engine, tmp_path / "data", run="agents")
    assert report.ok, [str(e) for e in report.errors]
    assert {f.format for f in report.files} == {"inspect", "swe-agent", "mini-swe-agent", "openhands"}
    assert report.total.inserted == 6, report.skipped
    d = client.get("/runs/agents/rollouts/openhands/basic.json").json()  # the id keeps its folder
    assert d["ending"]["type"] == "submitted"
    calls = [c for m in d["messages"] for c in m["tool_calls"]]
    assert [c["result_node"] for c in calls] == [2, None]
    again = ingest(engine, tmp_path / "data", run="agents")
    assert again.total.inserted == 0 and again.total.unchanged == 6


# --- the cases through every format with tool calls ------------------------------------------

CASES = data_path("cases")


def _case(name: str) -> dict:
    return json.loads((CASES / name).read_text())


def _inspect_doc(msgs: list[dict]) -> dict:
    out = []
    for m in msgs:
        m2 = {k: v for k, v in m.items() if k != "tool_calls"}
        if m.get("tool_calls"):
            m2["tool_calls"] = [{"id": tc["id"], "function": tc["function"]["name"],
                                 "arguments": json.loads(tc["function"]["arguments"])} for tc in m["tool_calls"]]
        if m["role"] == "tool" and "name" in m:
            m2["function"] = m2.pop("name")
        if m2.get("content") is None:
            m2["content"] = ""
        out.append(m2)
    return {"version": 2, "status": "success", "eval": {"task": "case", "run_id": "r", "config": {}},
            "samples": [{"id": 1, "epoch": 1, "input": "x", "target": "", "messages": out}]}


def _swe_doc(msgs: list[dict]) -> dict:
    hist = []
    for m in msgs:
        h = {"role": m["role"], "content": m.get("content") or "", "agent": "main"}
        if m.get("tool_calls"):
            h["tool_calls"] = m["tool_calls"]
            h["message_type"] = "action"
        if m["role"] == "tool":
            h["tool_call_ids"] = [m["tool_call_id"]]
            h["message_type"] = "observation"
        hist.append(h)
    return {"environment": "main", "trajectory": [], "history": hist, "info": {"exit_status": "exit_error"}}


def _openhands_doc(msgs: list[dict]) -> list[dict]:
    events, eid, action_of = [], 0, {}
    for k, m in enumerate(msgs):
        if m["role"] == "user":
            events.append({"id": eid, "timestamp": "2025-01-01T00:00:00", "source": "user", "action": "message",
                           "args": {"content": m["content"]}})
        elif m["role"] == "assistant":
            response = {"id": f"resp{k}", "model": "m", "choices": [{"finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": m.get("content"), "tool_calls": m["tool_calls"]}}]}
            for pos, tc in enumerate(m["tool_calls"]):
                events.append({"id": eid, "timestamp": "2025-01-01T00:00:01", "source": "agent", "action": "run",
                               "args": {"command": "x"}, "tool_call_metadata": {
                                   "function_name": tc["function"]["name"], "tool_call_id": tc["id"],
                                   "model_response": response, "total_calls_in_response": len(m["tool_calls"])}})
                action_of.setdefault(tc["id"], []).append(eid)
                eid += 1
            continue
        else:  # tool: the cause is the earliest action with this id not yet answered
            cause = action_of[m["tool_call_id"]].pop(0)
            events.append({"id": eid, "timestamp": "2025-01-01T00:00:02", "source": "agent", "observation": "run",
                           "cause": cause, "content": m["content"], "extras": {}})
        eid += 1
    return events


FORMATS = {"inspect": _inspect_doc, "swe-agent": _swe_doc, "openhands": _openhands_doc}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_case05_duplicate_ids_in_every_format(fmt, tmp_path):
    msgs = _case("05-duplicate-tool-call-ids.json")["messages"]
    path = tmp_path / "case05.json"
    path.write_text(json.dumps(FORMATS[fmt](msgs)))
    [r] = read(path, fmt)
    f = kinds(r)
    assert {x.detail["id"] for x in f["duplicate_tool_call_id"]} == {"call_X", "call_Y"}
    from ingest.graph import pair_tool_calls

    msgs_ = [n.message.model_dump() for n in r.nodes]
    pairs = {(c.name, json.loads(r.nodes[c.node].message.tool_calls[c.position].arguments).get("n")):
             r.nodes[c.result_node].message.text() for c in pair_tool_calls(range(len(r.nodes)), msgs_)}
    assert pairs[("search_direct_flight", None)] == "[]"
    assert pairs[("search_onestop_flight", None)].startswith("[[")
    assert "HAT136" in pairs[("get_flight", "HAT136")] and "HAT039" in pairs[("get_flight", "HAT039")]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_case07_unanswered_call_in_every_format(fmt, tmp_path):
    msgs = _case("07-unanswered-tool-call.json")["messages"]
    path = tmp_path / "case07.json"
    path.write_text(json.dumps(FORMATS[fmt](msgs)))
    [r] = read(path, fmt)
    [f] = kinds(r)["unanswered_tool_call"]
    assert f.detail["id"] == "call_a"


def test_case07_mini_swe_agent_unanswered_action(tmp_path):
    # mini-swe-agent writes no ids: a bash action whose observation never came.
    msgs = json.loads((REAL / "mini-swe-agent" / "github_issue.traj.json").read_text())[:5]
    path = tmp_path / "cut.traj.json"
    path.write_text(json.dumps(msgs))
    [r] = read(path, "mini-swe-agent")
    [f] = kinds(r)["unanswered_tool_call"]
    assert f.node_idx == 4 and r.ending.type == "unknown"


def test_results_by_tool_name_and_out_of_order(tmp_path):
    """SWE-agent-style results that name only their tool; one pairing the data cannot decide."""
    hist = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": None, "function": {"name": "read", "arguments": "{\"f\": 1}"}},
            {"id": None, "function": {"name": "write", "arguments": "{\"f\": 2}"}}]},
        {"role": "tool", "content": "wrote", "name": "write"},  # out of order, named → certain
        {"role": "tool", "content": "read", "name": "read"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": None, "function": {"name": "ls", "arguments": "{\"d\": \"a\"}"}},
            {"id": None, "function": {"name": "ls", "arguments": "{\"d\": \"b\"}"}}]},
        {"role": "tool", "content": "b-files", "name": "ls"},  # two ls calls wait: undecidable
        {"role": "tool", "content": "a-files", "name": "ls"},
    ]
    from ingest.graph import pair

    doc = {"environment": "main", "trajectory": [], "info": {"exit_status": "submitted"},
           "history": [dict(m, agent="main", message_type="x") for m in hist]}
    path = tmp_path / "named.traj"
    path.write_text(json.dumps(doc))
    [r] = read(path, "swe-agent")
    p = pair(range(len(r.nodes)), [n.message.model_dump() for n in r.nodes])
    got = {(c.node, c.position): (c.result_node, bool(c.ambiguous)) for c in p.calls}
    assert got[(1, 0)] == (3, False) and got[(1, 1)] == (2, False)  # out of order, paired by name
    assert got[(4, 0)] == (5, True) and got[(4, 1)] == (6, True)  # undecidable: in order, flagged
    amb = kinds(r)["ambiguous_tool_result"]
    assert [a.node_idx for a in amb] == [5, 6]
    assert amb[0].detail["candidates"] == [[4, 0], [4, 1]]


def test_inspect_json_log_streams_samples_when_not_parsed(tmp_path):
    """A large `.json` log the source leaves unparsed is read sample by sample (ijson)."""
    doc = json.loads((REAL / "inspect_ai" / "log_tool_call_error.json").read_text())
    doc["samples"] = [dict(doc["samples"][0], epoch=e) for e in (1, 2, 3)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    from ingest.formats import inspect

    src = Source(path, "json", {k: v for k, v in doc.items() if k != "samples"}, document=None)
    assert inspect.sniff(src)
    gen = inspect.read(src, ReadContext())
    first = next(gen)  # a generator: one sample parsed, not the whole list
    assert isinstance(first, Rollout) and first.extra["epoch"] == 1
    rest = list(gen)
    assert [r.group.index for r in rest] == [1, 2] and len(rest[0].nodes) == 11


# --- robustness: any input lands or is rejected with a reason; nothing raises ------------------

def _mutate(value, rng, depth=0):
    """A copy of `value` with random damage: keys dropped, values replaced by odd types."""
    odd = [None, 0, -1, 2**64, 1.5, "", "x", [], {}, True, [None], {"a": None}]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            r = rng.random()
            if r < 0.08:
                continue
            out[k] = rng.choice(odd) if r < 0.16 else _mutate(v, rng, depth + 1)
        return out
    if isinstance(value, list):
        return [rng.choice(odd) if rng.random() < 0.08 else _mutate(v, rng, depth + 1) for v in value]
    return value


@pytest.mark.parametrize("rel", ["swe-agent/pydicom__pydicom-1458.traj",
                                 "swe-agent/marshmallow-code__marshmallow-1867.function_calling_replace.traj",
                                 "mini-swe-agent/github_issue.traj.json", "openhands/basic.json",
                                 "inspect_ai/log_tool_call_error.json"])
def test_damaged_real_files_never_raise(rel, tmp_path):
    import random

    from ingest.formats import registry

    doc = json.loads((REAL / rel).read_text())
    fmt = detect(open_source(REAL / rel)).NAME
    reader = registry.get(fmt)
    rng = random.Random(8)
    for k in range(60):
        p = tmp_path / f"m{k}.json"
        p.write_text(json.dumps(_mutate(doc, rng)))
        src = open_source(p)
        if not reader.sniff(src):
            continue
        for item in reader.read(src, ReadContext()):  # must not raise
            assert isinstance(item, Rollout) or (item.message and item.file)


def test_swe_agent_demonstration_is_read():
    """SWE-agent's demonstrations (`{history}` alone, no trajectory or info) are rollouts, not refusals:
    every message in order, tool calls paired by `tool_call_ids`, ending unknown (a demonstration
    records no exit status)."""
    from ingest.formats import swe_agent
    from tests.conftest import FIXTURES

    path = FIXTURES / "upstream" / "swe-agent" / "function_calling_simple.traj"
    doc = json.loads(path.read_text())
    assert set(doc) == {"history"}
    src = open_source(path)
    assert swe_agent.sniff(src)
    [r] = list(swe_agent.read(src, ReadContext()))
    assert isinstance(r, Rollout), r
    assert [n.message.role for n in r.nodes] == [m["role"] for m in doc["history"]]
    assert r.ending.type == "unknown" and r.ending.detail == "demonstration" and r.extra["demonstration"] is True
    calls = {tc.id for n in r.nodes for tc in n.message.tool_calls or []}
    results = [n.message.tool_call_id for n in r.nodes if n.message.role == "tool"]
    assert results and set(results) <= calls


def test_inspect_length_cut_scored_as_done_and_unparsed_arguments(tmp_path):
    """Issue 20: a sample that completed (no limit, no error) on an output cut at `max_tokens` is
    Inspect claiming success: length_cut with the claim kept (silent_truncation); a tool call
    Inspect could not parse (`arguments: {}`, `parse_error`) keeps the sampled text."""
    raw = '{"cmd": "ls'
    call = {"id": "c1", "function": "bash", "arguments": {}, "type": "function",
            "parse_error": f"Error parsing the following tool call arguments:\n\n{raw}\n\nError details: Unterminated"}
    cut = {"message": {"role": "assistant", "content": "The answer is", "source": "generate"},
           "stop_reason": "max_tokens"}
    path = _eval_zip(tmp_path, {"epochs": [{
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "content": "bad args", "tool_call_id": "c1", "function": "bash"},
                     {"role": "assistant", "content": "The answer is", "source": "generate"}],
        "output": {"model": "m", "choices": [cut]}, "events": []}]})
    from ingest.files import read_records

    src = open_source(path)
    [r] = list(read_records(detect(src), src, ReadContext(), []))  # the reader, then the ending normalised
    assert r.nodes[1].message.tool_calls[0].arguments == raw
    assert r.ending.type == "length_cut" and r.ending.extra["silent_truncation"]["claimed"] == "submitted"
    kinds = {f.kind for f in run_rollout_checks(r).findings}
    assert {"silent_truncation", "malformed_tool_arguments"} <= kinds

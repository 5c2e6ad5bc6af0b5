"""Issue 20's tool kinds: `unparsed_tool_call` (tool-call markup left in the text; one shared
detector, ingest/tool_markup.py; the ending's evidence; the old name migrated) and
`tool_answered_twice` (one call, two results: both kept and shown, the first superseded)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from app.db.migrate import alembic_config, upgrade
from ingest.checks import legacy_kind, run_rollout_checks
from ingest.endings import normalise
from ingest.formats._openai import tool_calls_from_text
from ingest.metrics import tool_errors
from ingest.schema import Rollout
from tests.helpers import ingest, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def rollout(rid: str, messages: list[dict], **kw) -> Rollout:
    nodes = [{"parent": i - 1 if i else None, "message": m, "sampled": m["role"] == "assistant"}
             for i, m in enumerate(messages)]
    return Rollout.model_validate({"id": rid, "run": {"id": "tk"}, "step": 0, "nodes": nodes, "reward": 0.0, **kw})


def kinds(r: Rollout) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in run_rollout_checks(r).findings:
        out.setdefault(f.kind, []).append(f)
    return out


# --- unparsed_tool_call ---------------------------------------------------------------------

DIALECTS = [
    ("Hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'),
    ("Qwen3-Coder XML", "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
                        "</tool_call>"),
    ("Llama 3 python_tag", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eom_id|>'),
    ("Mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]'),
]


def _asked(answer: dict) -> list[dict]:
    return [{"role": "user", "content": "Weather in Oslo?"}, answer]


@pytest.mark.parametrize("dialect,markup", DIALECTS)
def test_each_dialect_left_in_the_text_is_named_with_its_tool(dialect, markup):
    r = normalise(rollout("u", _asked({"role": "assistant", "content": f"Let me check.\n{markup}"}), tools=TOOLS))
    [f] = kinds(r)["unparsed_tool_call"]
    assert (f.node_idx, f.severity) == (1, "error")
    assert f.detail["dialect"] == dialect and f.detail["tool"] == "get_weather" and f.detail["final_answer"] is True
    assert f.detail["at"] == len("Let me check.\n")
    ev = r.ending.evidence
    assert (ev.last_answer_unparsed_tool_call, ev.last_answer_unparsed_tool) == (dialect, "get_weather")


@pytest.mark.parametrize("dialect,markup", DIALECTS)
def test_the_clean_twin_with_a_structured_call_is_silent(dialect, markup):
    call = {"id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}
    r = normalise(rollout("u", [*_asked({"role": "assistant", "content": "Let me check.", "tool_calls": [call]}),
                                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                                {"role": "assistant", "content": "Sunny in Oslo."}], tools=TOOLS))
    assert "unparsed_tool_call" not in kinds(r)
    assert r.ending.evidence.last_answer_unparsed_tool_call is None


def test_an_unparsed_call_before_the_last_answer_is_not_the_ending():
    r = normalise(rollout("u", [*_asked({"role": "assistant", "content": DIALECTS[0][1]}),
                                {"role": "user", "content": "?"}, {"role": "assistant", "content": "Sunny."}],
                          tools=TOOLS))
    [f] = kinds(r)["unparsed_tool_call"]
    assert f.node_idx == 1 and f.detail["final_answer"] is False
    assert r.ending.evidence.last_answer_unparsed_tool_call is None


def test_a_text_protocol_harness_is_not_flagged():
    """No tools declared and no structured call anywhere: the markup is the protocol (Atropos)."""
    r = normalise(rollout("u", _asked({"role": "assistant", "content": DIALECTS[0][1]})))
    assert "unparsed_tool_call" not in kinds(r) and r.ending.evidence.last_answer_unparsed_tool_call is None


def test_one_detector_the_text_reader_and_the_check_share():
    """The Hermes blocks a text-protocol reader parses (`tool_calls_from_text`) are what the check
    detects; no other module of ingest/ compiles a tool-call markup pattern or names an opening."""
    [call] = tool_calls_from_text(DIALECTS[0][1], ["c9"])
    assert (call.id, call.name, json.loads(call.arguments)) == ("c9", "get_weather", {"city": "Oslo"})
    pattern = re.compile(r"re\.compile\(r?[\"'][^\"']*(<tool_call>|python_tag|TOOL_CALLS)"
                         r"|[\"'](<tool_call>|<\|python_tag\|>|\[TOOL_CALLS\])[\"']")
    holders = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ingest").rglob("*.py") if pattern.search(p.read_text()))
    assert holders == ["ingest/tool_markup.py"]


def test_the_old_name_reads_as_the_new_one():
    assert legacy_kind("tool_call_markup_unparsed") == "unparsed_tool_call"
    assert legacy_kind("unparsed_tool_call") == "unparsed_tool_call"


def _unparsed_run(tmp_path) -> Path:
    bad = rollout("bad", _asked({"role": "assistant", "content": f"ok <b>{DIALECTS[0][1]}</b>"}), tools=TOOLS)
    ok = rollout("ok", _asked({"role": "assistant", "content": "Sunny."}), tools=TOOLS)
    return write_jsonl(tmp_path / "u.jsonl", [bad, ok])


def test_unparsed_call_through_the_app_flag_filter_ending_and_escaped_markup(client, engine, tmp_path):
    assert ingest(engine, _unparsed_run(tmp_path), run="tk").ok
    for flag in ("unparsed_tool_call", "tool_call_markup_unparsed"):  # the old name: a pasted link keeps working
        rows = client.get(f"/runs/tk/rollouts.json?flag={flag}").json()["rollouts"]
        assert [r["rollout_id"] for r in rows] == ["bad"], flag
        items = client.get("/api/v1/runs/tk/findings", params={"kind": flag}).json()["items"]
        assert [(f["kind"], f["rollout_id"]) for f in items] == [("unparsed_tool_call", "bad")], flag
    html = client.get("/runs/tk/rollouts/bad").text
    assert "&lt;tool_call&gt;" in html and "<tool_call>" not in html and "&lt;b&gt;" in html
    assert "the final answer was an unparsed Hermes" in html
    d = client.get("/runs/tk/rollouts/bad.json").json()
    assert d["ending"]["evidence"]["last_answer_unparsed_tool_call"] == "Hermes"
    assert "tool call left as text" in html  # the finding's label on the message


def test_migration_0014_renames_stored_findings_and_flags(client, engine, tmp_path):
    assert ingest(engine, _unparsed_run(tmp_path), run="tk").ok
    cfg = alembic_config()

    def stored():
        with engine.connect() as conn:
            kinds = set(conn.execute(sa.text("SELECT kind FROM finding WHERE severity != 'skipped'")).scalars())
            flags = conn.execute(sa.text("SELECT flags FROM rollout WHERE rollout_id = 'bad'")).scalar_one()
        return kinds, json.loads(flags) if isinstance(flags, str) else flags

    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0013_spool_tail")  # back to how the findings were stored before
    kinds, flags = stored()
    assert "tool_call_markup_unparsed" in kinds and "unparsed_tool_call" not in kinds
    assert "tool_call_markup_unparsed" in flags
    upgrade(engine)
    kinds, flags = stored()
    assert "unparsed_tool_call" in kinds and "tool_call_markup_unparsed" not in kinds
    assert "unparsed_tool_call" in flags and "tool_call_markup_unparsed" not in flags
    rows = client.get("/runs/tk/rollouts.json?flag=unparsed_tool_call").json()["rollouts"]
    assert [r["rollout_id"] for r in rows] == ["bad"]


# --- tool_answered_twice --------------------------------------------------------------------

CALL = {"id": "call_1", "name": "bash", "arguments": '{"command": "ls"}'}


def _twice(rid: str = "twice") -> Rollout:
    """One call, a recovery error and then the re-executed output (software-agent-sdk#1782)."""
    return rollout(rid, [{"role": "user", "content": "list"}, {"role": "assistant", "tool_calls": [CALL]},
                         {"role": "tool", "tool_call_id": "call_1", "content": "Error: the runtime restarted",
                          "extra": {"is_error": True}},
                         {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
                         {"role": "assistant", "content": "a.txt"}])


def _once(rid: str = "once", *, error: bool = False) -> Rollout:
    result = {"role": "tool", "tool_call_id": "call_1", "content": "Error: no such dir" if error else "a.txt"}
    return rollout(rid, [{"role": "user", "content": "list"}, {"role": "assistant", "tool_calls": [CALL]},
                         result, {"role": "assistant", "content": "done"}])


def test_a_call_answered_twice_is_reported_with_both_results_and_not_as_an_orphan():
    r = _twice()
    k = kinds(r)
    [f] = k["tool_answered_twice"]
    assert (f.severity, f.node_idx, f.position) == ("warning", 1, 0)
    assert f.detail == {"id": "call_1", "name": "bash", "call_node": 1, "result_nodes": [2, 3],
                        "first_error": "is_error"}
    assert "unpaired_tool_result" not in k and "unanswered_tool_call" not in k
    assert tool_errors(r) == 0  # the error was superseded by the re-executed output


def test_the_clean_twin_with_one_result_per_call_is_silent():
    for r, errors in ((_once(), 0), (_once(error=True), 1)):
        assert "tool_answered_twice" not in kinds(r)
        assert tool_errors(r) == errors  # an error nothing superseded still counts


def test_a_reused_id_for_a_new_call_is_not_answered_twice():
    """tau-bench reuses one id for sequential calls: each result takes its own call."""
    r = rollout("reuse", [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [CALL]},
                          {"role": "tool", "tool_call_id": "call_1", "content": "a"},
                          {"role": "assistant", "tool_calls": [CALL]},
                          {"role": "tool", "tool_call_id": "call_1", "content": "b"}])
    assert not {"tool_answered_twice", "unpaired_tool_result"} & set(kinds(r))


def test_answered_twice_through_the_app_the_call_lists_both_results(client, engine, tmp_path):
    assert ingest(engine, write_jsonl(tmp_path / "t.jsonl", [_twice(), _once()]), run="tk").ok
    rows = client.get("/runs/tk/rollouts.json?flag=tool_answered_twice").json()["rollouts"]
    assert [r["rollout_id"] for r in rows] == ["twice"]
    assert rows[0]["n_tool_errors"] == 0
    d = client.get("/runs/tk/rollouts/twice.json").json()
    msgs = {m["idx"]: m for m in d["messages"]}
    [call] = msgs[1]["tool_calls"]
    assert call["result_node"] == 2 and [r["node"] for r in call["later_results"]] == [3]
    assert msgs[2]["tool_error"] == "is_error" and msgs[2]["tool_error_superseded"] is True
    assert msgs[2]["answers"]["superseded_by"]["node"] == 3 and msgs[3]["answers"]["supersedes"]["node"] == 2
    assert msgs[3]["answers"]["node"] == 1 and not msgs[3]["tool_error_superseded"]
    html = client.get("/runs/tk/rollouts/twice").text
    assert re.search(r"→ result in <a [^>]*>#2</a>, then <a [^>]*>#3</a>", html)
    assert "tool error, superseded by #3" in html and "answers no recorded call" not in html
    once = client.get("/runs/tk/rollouts/once.json").json()
    assert all(not c["later_results"] for m in once["messages"] for c in m["tool_calls"])
    assert "tool_answered_twice" not in {f["kind"] for f in once["findings"]}
    step = client.get("/runs/tk/steps/0").text  # the step's tool-error count says what it leaves out
    assert "not counting errors superseded by a re-executed result" in step and "1 rollout</a> with a call" in step

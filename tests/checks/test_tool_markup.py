"""The shared tool-call markup detector (ingest/tool_markup.py) behind issue 20's `unparsed_tool_call`:
linear in the text (a looping message used to take 14 s at 272 KB), one scan per message, and the
three misfires a tester found, each with its clean twin: markup in an inline `<think>` block and in
fenced code is not a failed parse; leftover markup beside one structured call is (vLLM #26345)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ingest import tool_markup
from ingest.checks import run_rollout_checks
from ingest.endings import normalise
from ingest.schema import Rollout
from tests.helpers import ingest, read_folder, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
HERMES_2 = '<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n</tool_call>'
QWEN_XML = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"
CALL = {"id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}
MB = 1024 * 1024


def rollout(answer: dict, rid: str = "m") -> Rollout:
    messages = [{"role": "user", "content": "Weather in Oslo?"}, answer]
    nodes = [{"parent": i - 1 if i else None, "message": m, "sampled": m["role"] == "assistant"}
             for i, m in enumerate(messages)]
    return normalise(Rollout.model_validate({"id": rid, "run": {"id": "tm"}, "step": 0, "nodes": nodes,
                                             "reward": 0.0, "tools": TOOLS}))


def unparsed(r: Rollout) -> list:
    return [f for f in run_rollout_checks(r).findings if f.kind == "unparsed_tool_call"]


# --- linear in the text ---------------------------------------------------------------------------

LOOPS = {  # a looping assistant message, per dialect: an opening and a cut-off call, over and over
    "Hermes": '<tool_call>\n{"nam',
    "Qwen3-Coder XML": "<tool_call>\n<function",
    "Llama 3 python_tag": '<|python_tag|>{"nam',
    "Mistral": '[TOOL_CALLS][{"nam',
    "mixed": '<tool_call>{"na<|python_tag|>[TOOL_CALLS]["',
}


def _parsed_chars(text: str) -> tuple[tuple, int]:
    """find_all of `text` and how many characters it handed to the dialect parsers."""
    total = 0

    def counting(t: str, start: int, end: int) -> str:
        nonlocal total
        total += end - start
        return t[start:end]

    return tool_markup.find_all(text, body=counting), total


@pytest.mark.parametrize("dialect", list(LOOPS))
def test_a_1mb_looping_message_is_parsed_once_over(dialect):
    """The stretches parsed after each opening never overlap: the work is at most the text's length
    (the old `.*?` pattern re-read the rest of the text from every opening)."""
    text = LOOPS[dialect] * (MB // len(LOOPS[dialect]))
    found, parsed = _parsed_chars(text)
    assert parsed <= len(text)
    if dialect in ("Hermes", "Qwen3-Coder XML"):
        assert found == ()  # no call in it: a cut-off key is not a call to anything
    else:  # these openings are markup by themselves, as before; at most MAX_KEPT are kept
        first = "Llama 3 python_tag" if dialect == "mixed" else dialect
        assert 0 < len(found) <= tool_markup.MAX_KEPT and (found[0].dialect, found[0].complete) == (first, False)


def test_a_1mb_looping_answer_is_decided_through_the_real_reader(tmp_path, client, engine):
    """End to end through the chat reader, the checks and the store: no finding for the loop, one
    for the call after it (found although 1 MB of openings precede it)."""
    loop = LOOPS["Hermes"] * (MB // len(LOOPS["Hermes"]))
    rows = [rollout({"role": "assistant", "content": loop}, "loop"),
            rollout({"role": "assistant", "content": loop + "\n" + HERMES}, "loop-call")]
    assert ingest(engine, write_jsonl(tmp_path / "loop.jsonl", rows), run="tm").ok
    flagged = client.get("/runs/tm/rollouts.json?flag=unparsed_tool_call").json()["rollouts"]
    assert [r["rollout_id"] for r in flagged] == ["loop-call"]
    d = client.get("/runs/tm/rollouts/loop-call.json").json()
    assert d["ending"]["evidence"]["last_answer_unparsed_tool_call"] == "Hermes"


def test_the_check_and_the_ending_share_one_scan_per_message(monkeypatch):
    calls = []
    real = tool_markup.find_all
    monkeypatch.setattr(tool_markup, "find_all", lambda text, **kw: calls.append(len(text)) or real(text, **kw))
    r = rollout({"role": "assistant", "content": f"Let me check.\n{HERMES}"})
    [f] = unparsed(r)
    assert r.ending.evidence.last_answer_unparsed_tool_call == "Hermes" and f.detail["final_answer"] is True
    assert len(calls) == 1  # normalise (the ending's evidence) scanned it; the check reused the scan
    fresh = Rollout.model_validate_json(r.to_json())  # the kept scan is not part of the message
    assert fresh.nodes[1].message == r.nodes[1].message and fresh.to_json() == r.to_json()
    r.nodes[1].message.content = f"<think>{HERMES}</think>Sunny."  # an edited message is scanned again,
    assert unparsed(r) == [] and len(calls) == 2  # not answered from memory
    r.nodes[1].message.content = "Sunny."  # a text with no opening (<tool_call>, ...) needs no scan at all
    assert unparsed(r) == [] and len(calls) == 2


# --- reasoning blocks and fenced code are not a failed parse --------------------------------------

@pytest.mark.parametrize("content", [
    f"<think>I could call it like {HERMES} but let me answer.</think>It is sunny in Oslo.",
    f"<thinking>{QWEN_XML}</thinking>It is sunny in Oslo.",
    f"<think>maybe {HERMES}",  # reasoning cut off: still reasoning
    f"The template put <think> in the prompt; I weigh {HERMES} here.</think>It is sunny.",
])
def test_markup_inside_an_inline_reasoning_block_is_not_flagged(content):
    r = rollout({"role": "assistant", "content": content})
    assert unparsed(r) == [] and r.ending.evidence.last_answer_unparsed_tool_call is None


def test_the_twin_markup_after_the_reasoning_block_is_flagged():
    r = rollout({"role": "assistant", "content": f"<think>I will call the tool.</think>\n{HERMES}"})
    [f] = unparsed(r)
    assert (f.detail["dialect"], f.detail["tool"], f.detail["final_answer"]) == ("Hermes", "get_weather", True)
    assert f.detail["at"] == len("<think>I will call the tool.</think>\n")
    assert r.ending.evidence.last_answer_unparsed_tool_call == "Hermes"


@pytest.mark.parametrize("content", [
    f"The format is:\n```\n{HERMES}\n```\nThat is all.",
    f"Example:\n~~~xml\n{QWEN_XML}\n~~~\n",
    f"Example:\n  ````json\n{HERMES}\n```\nstill in the fence\n````\n",
    f"Unclosed example:\n```\n{HERMES}",
])
def test_markup_inside_fenced_code_is_not_flagged(content):
    r = rollout({"role": "assistant", "content": content})
    assert unparsed(r) == [] and r.ending.evidence.last_answer_unparsed_tool_call is None


def test_the_twin_markup_after_a_closed_fence_is_flagged():
    r = rollout({"role": "assistant", "content": f"The format is:\n```\n<tool_call>...</tool_call>\n```\n{QWEN_XML}"})
    [f] = unparsed(r)
    assert (f.detail["dialect"], f.detail["tool"]) == ("Qwen3-Coder XML", "get_weather")


def test_inline_backticks_are_not_a_fence():
    r = rollout({"role": "assistant", "content": f"see ``` inline ``` then\n{HERMES}"})
    assert [f.detail["tool"] for f in unparsed(r)] == ["get_weather"]


# --- a second call left as text beside a structured one (vLLM #26345) -----------------------------

def test_a_complete_call_beyond_the_structured_ones_is_flagged_with_its_dialect_and_tool():
    r = rollout({"role": "assistant", "content": f"{HERMES}\n{HERMES_2}", "tool_calls": [CALL]})
    [f] = unparsed(r)
    assert (f.detail["dialect"], f.detail["tool"], f.detail["structured_calls"]) == ("Hermes", "get_time", 1)
    assert f.detail["final_answer"] is False  # it made a call: not a final answer
    assert "beside 1 structured call" in f.message
    assert r.ending.evidence.last_answer_unparsed_tool_call is None


def test_a_second_call_to_the_same_tool_left_as_text_is_flagged():
    r = rollout({"role": "assistant", "content": f"{HERMES}\n{HERMES.replace('Oslo', 'Bergen')}",
                 "tool_calls": [CALL]})
    assert [(f.detail["tool"], f.detail["at"]) for f in unparsed(r)] == [("get_weather", len(HERMES) + 1)]


@pytest.mark.parametrize("content", [
    f"Let me check.\n{HERMES}",  # the text repeats the structured call's markup (Tunix ToolAgent's content)
    "Let me check.",
    '<tool_call>\n{"name": "get_time", "argu',  # a cut-off fragment beside the call: not a whole call
    f"```\n{HERMES_2}\n```",  # an example, in a fence
])
def test_the_twin_with_text_that_holds_no_call_beyond_the_structured_one_is_silent(content):
    r = rollout({"role": "assistant", "content": content, "tool_calls": [CALL]})
    assert unparsed(r) == []


def test_the_real_fixtures_are_not_flagged_beyond_the_cases_that_should_be():
    """Tunix's content repeats each structured call's markup; Atropos, mini-swe-agent and SWE-agent
    speak the text protocol; only case 39's two broken rollouts are flagged."""
    flagged = sorted(r.id for folder in ("tests/fixtures/realdata", "tests/fixtures/cases")
                     for _, _, r in read_folder(ROOT / folder) if unparsed(r))
    assert flagged == ["c39-hermes", "c39-qwen3xml"]

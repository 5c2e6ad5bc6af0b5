"""The shared converters (ingest/formats/_openai.py, _responses.py, _build.py) and record_error."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ingest.fields import FieldError
from ingest.formats import _openai, _responses
from ingest.formats._build import RolloutBuilder
from ingest.formats.base import record_error
from ingest.graph import branches
from ingest.schema import Message, Rollout
from tests.conftest import FIXTURES


def test_arguments_kept_raw_with_their_shape():
    shapes = {"{}": "object", '"{\\"q\\": 1}"': "double_encoded", '{"q": "Par': "invalid_json",
              '"Paris"': "scalar", "": "missing", "[1, 2]": "scalar"}
    for raw, shape in shapes.items():
        assert _openai.parse_arguments(raw).shape == shape, raw
    big = _openai.tool_call("c", "f", {"account": 98765432109876543210987})
    assert big.arguments == '{"account": 98765432109876543210987}'  # every digit
    assert big.extra["arguments_from"] == "object" and "arguments_shape" not in big.extra
    assert _openai.parse_arguments(big.arguments).value["account"] == 98765432109876543210987
    assert _openai.tool_call("c", "f", None).extra["arguments_shape"] == "missing"


def test_message_ids_keep_digits_and_roles_map():
    conv = _openai.message_from_openai({"role": "function", "tool_call_id": 9007199254740995, "content": {"a": 1}}, "m")
    assert conv.message.role == "tool" and conv.message.tool_call_id == "9007199254740995"
    assert conv.message.extra["source_role"] == "function" and conv.message.extra["content_from"] == "object"
    assert json.loads(conv.message.content) == {"a": 1}
    with pytest.raises(FieldError) as e:
        _openai.message_from_openai({"role": "user", "content": 5}, "messages[2]")
    assert e.value.field == "messages[2].content"


def test_finish_reasons_normalize_and_keep_raw():
    assert [_openai.finish_reason(x) for x in ("stop", "tool_calls", "length", "abort", "aborted", "weird", None)] == \
        ["stop", "tool_call", "length", "error", "error", None, None]
    call = _openai.call_for(3, "aborted")
    assert call.finish_reason == "error" and call.finish_reason_raw == "aborted"


def test_request_tokens_become_deltas_and_drift_a_new_branch():
    b = RolloutBuilder()
    b.add(Message(role="user", content="q"))
    b.request(Message(role="assistant", content="a"), [1, 2, 3], [4, 5], [-0.1, -0.2])
    b.add(Message(role="tool", content="obs"))
    b.request(Message(role="assistant", content="b"), [1, 2, 3, 4, 5, 9, 9], [6], [-0.3])
    b.add(Message(role="tool", content="obs2"))
    b.request(Message(role="assistant", content="c"), [1, 2, 7], [8], None)  # re-rendered prompt
    nodes = b.nodes
    assert [n.token_ids for n in nodes[:4]] == [[1, 2, 3], [4, 5], [9, 9], [6]]
    assert nodes[1].mask == [True, True] and nodes[2].mask == [False, False]
    paths = branches(nodes)
    assert len(paths) == 2 and b.extra["token_drift"] is True
    root = nodes[paths[1][0]]
    assert root.token_ids == [1, 2, 7] and root.extra["token_drift"] == {"request": 2, "index": 2, "expected": 3,
                                                                         "found": 7}
    seq = [t for i in paths[0] for t in nodes[i].token_ids]
    assert seq == [1, 2, 3, 4, 5, 9, 9, 6]


def test_responses_output_groups_model_calls_and_pairs_parallel_calls():
    items = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi", "annotations": []}]},
        {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}",
         "prompt_token_ids": [1, 2], "generation_token_ids": [3, 4], "generation_log_probs": [-1.0, -2.0]},
        {"type": "function_call_output", "call_id": "b", "output": "B"},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "function_call", "call_id": "c", "name": "h", "arguments": "{",
         "prompt_token_ids": [], "generation_token_ids": [], "generation_log_probs": []},
    ]
    b = RolloutBuilder()
    _responses.add_input(b, "task", "input")
    calls = _responses.add_output(b, items, "output")
    assert len(calls) == 2 and calls[0].tokens and not calls[1].tokens
    first = b.nodes[calls[0].node].message
    assert first.reasoning_content == "think" and first.content == [
        {"type": "text", "text": "hi", "source_type": "output_text"}]
    assert [tc.id for tc in first.tool_calls] == ["a", "b"]
    assert b.nodes[calls[0].node].token_ids == [3, 4] and b.nodes[0].token_ids == [1, 2]
    assert [n.message.tool_call_id for n in b.nodes if n.message.role == "tool"] == ["b", "a"]
    last = b.nodes[calls[1].node].message.tool_calls[0]
    assert last.extra["arguments_shape"] == "invalid_json"  # a final call with no output, cut off


def test_responses_real_nemo_gym_items_convert():
    for f in sorted((FIXTURES / "realdata/nemo-gym").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            d = json.loads(line)
            b = RolloutBuilder()
            _responses.add_input(b, d["responses_create_params"]["input"], "input")
            calls = _responses.add_output(b, d["response"]["output"], "output")
            assert calls and len(branches(b.nodes)) == 1, f.name


def test_record_error_paths_are_one_shape():
    e = record_error("f.jsonl", 3, "rollouts[1]", FieldError("messages[0].role", "message has no role"))
    assert (e.file, e.line, e.field, e.message) == ("f.jsonl", 3, "rollouts[1].messages[0].role", "message has no role")
    with pytest.raises(ValidationError) as v:
        Rollout.model_validate({"id": "x", "run": {"id": "r"}, "nodes": [{"parent": 5, "message": {"role": "user"}}]})
    e = record_error("f", None, "[2]", v.value)
    assert e.field == "[2].nodes[0].parent" and "parent must be" in e.message
    e = record_error("f", 1, None, KeyError("x"))
    assert e.field is None and "KeyError" in e.message


def test_timestamps_one_rule():
    from ingest.timestamps import to_epoch

    assert to_epoch(1795945563.5, "t").epoch == 1795945563.5
    assert to_epoch(1795945563500, "t").epoch == 1795945563.5  # milliseconds
    assert to_epoch(1795945563500000000, "t").epoch == 1795945563.5  # nanoseconds (OTLP)
    z = to_epoch("2026-11-29T09:46:03+00:00", "t")
    assert to_epoch("2026-11-29T05:46:03-04:00", "t") == z and not z.assumed_utc
    naive = to_epoch("2026-11-29T09:46:03", "t")
    assert naive.epoch == z.epoch and naive.assumed_utc  # taken as UTC, flagged
    with pytest.raises(FieldError):
        to_epoch("yesterday", "t")


def test_vllm_output_text_logprobs_become_tokens_without_ids():
    items = [{"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "Hi", "annotations": [],
                           "logprobs": [{"token": "H", "logprob": -0.1, "bytes": [72]},
                                        {"token": "i", "logprob": -0.2, "bytes": [105]}]}]}]
    b = RolloutBuilder()
    (call,) = _responses.add_output(b, items, "output")
    node = b.nodes[call.node]
    assert node.token_ids == [-1, -1] and node.logprobs == [-0.1, -0.2] and node.extra["token_bytes"] == ["48", "69"]
    assert "logprobs" not in node.message.content[0]


def test_media_parts_become_placeholders_stored_once():
    import base64

    data = base64.b64encode(b"\x89PNG fake").decode()
    conv = _openai.message_from_openai({"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
        {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}, "m")
    parts = conv.message.content
    assert parts[1]["type"] == "image" and parts[1]["media_type"] == "image/png" and parts[1]["bytes"] == 9
    assert parts[2]["type"] == "audio" and parts[2]["media_type"] == "audio/wav"
    assert parts[3]["type"] == "image" and parts[3]["image_url"]["url"].startswith("https://")
    assert data not in json.dumps(parts)  # the bytes are not inlined in the content
    assert set(conv.message.extra["media"]) == {parts[1]["sha256"]}  # the same bytes, stored once


def test_reader_specific_status_tables_agree_with_the_one_table():
    from ingest import endings
    from ingest.formats._tunix_build import _STATUS_ENDINGS

    for status, (ending, _) in _STATUS_ENDINGS.items():
        assert endings.from_reason(status) == ending, status

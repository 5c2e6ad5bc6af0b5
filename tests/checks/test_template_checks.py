"""The template checks (reasoning_stripped, tool_results_split, template_mismatch) against a
tokenizer folder whose tokenizer_config.json carries a chat template (tests/fixtures/tokenizers/
tiny-qwen3, a small Qwen3-like ChatML template written for these tests)."""
from __future__ import annotations

import pytest

from ingest.chat_template import TemplateError, load_config, render
from ingest.checks import CheckContext, run_rollout_checks
from ingest.checks.context import load_context
from ingest.endings import normalise
from ingest.files import read_records
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect
from ingest.schema import Rollout
from ingest.source import open_source
from tests.conftest import FIXTURES

FOLDER = FIXTURES / "tokenizers" / "tiny-qwen3"


def prepare(r):
    """Normalise the ending as every reader's output is (in place) and return the rollout."""
    return normalise(r)


@pytest.fixture(scope="module")
def ctx() -> CheckContext:
    return load_context(FOLDER)


def enc(ctx, text: str) -> list[int]:
    return ctx.encode(text)


def fired(r: Rollout, kind: str, ctx: CheckContext):
    res = run_rollout_checks(r, ctx)
    return [f for f in res.findings if f.kind == kind], [s for s in res.skipped if s.kind == kind]


def native(nodes: list[dict], **kw) -> Rollout:
    for i, n in enumerate(nodes):
        n.setdefault("parent", i - 1 if i else None)
        n.setdefault("mask", [n["message"]["role"] == "assistant"] * len(n.get("token_ids", [])))
    return prepare(Rollout.model_validate({"id": "t", "run": {"id": "r"}, "nodes": nodes, "reward": 1.0, **kw}))


def test_the_template_is_kept_with_the_tokenizer_and_rendered_in_a_sandbox(ctx):
    assert load_config(FOLDER / "tokenizer_config.json").chat_template == ctx.chat_template
    assert load_config(FOLDER / "tokenizer.json").chat_template == ctx.chat_template  # beside the tokenizer.json
    assert ctx.turn_start_id() == 1 and ctx.special_tokens["<think>"] == 7
    with pytest.raises(TemplateError, match="unsafe|access"):  # no escape from the sandbox
        render("{{ messages.__class__.__mro__[1].__subclasses__() }}", [])
    with pytest.raises(TemplateError, match="no system"):
        render("{{ raise_exception('no system') }}", [])


def single_turn(ctx, question: str, recorded: str | None = None) -> Rollout:
    prompt = render(ctx.chat_template, [{"role": "user", "content": recorded or question}], add_generation_prompt=True)
    return native([{"message": {"role": "user", "content": question}, "token_ids": enc(ctx, prompt)},
                   {"message": {"role": "assistant", "content": "4"}, "sampled": True,
                    "token_ids": enc(ctx, "4<|im_end|>")}])


def test_template_mismatch(ctx):
    assert fired(single_turn(ctx, "What is 2+2?"), "template_mismatch", ctx) == ([], [])
    (f,), _ = fired(single_turn(ctx, "What is 2+2?", recorded="What is 3+3?"), "template_mismatch", ctx)
    d = f.detail
    assert f.node_idx == 1 and d["expected"] != d["found"] and d["index"] > 0
    assert "2+2" in d["rendered_text"] and "3+3" in d["recorded_text"]
    # no template stored, or no tokenizer: skipped, with the reason
    _, (s,) = fired(single_turn(ctx, "What is 2+2?"), "template_mismatch", CheckContext(tokenizer=ctx.tokenizer))
    assert "no chat template stored" in s.message
    _, (s,) = fired(single_turn(ctx, "q"), "template_mismatch", CheckContext(chat_template=ctx.chat_template))
    assert "no tokenizer.json" in s.message


def read_chat(path, rec: dict) -> Rollout:
    """One chat-shaped record through the real reader (which records prompt ids and drift)."""
    import json

    path.write_text(json.dumps(rec))
    source = open_source(path)
    (r,) = list(read_records(detect(source), source, ReadContext(run_id="r"), []))
    return r


def two_turns(ctx, tmp_path, *, keep_reasoning: bool) -> Rollout:
    """A chat record with per-turn prompt and completion ids (the chat reader's `turns`)."""

    u1, u2 = {"role": "user", "content": "What is 2+2?"}, {"role": "user", "content": "And 3+3?"}
    a1 = {"role": "assistant", "content": "4", "reasoning_content": "two and two make four"}
    a2 = {"role": "assistant", "content": "6"}
    p1 = enc(ctx, render(ctx.chat_template, [u1], add_generation_prompt=True))
    c1 = enc(ctx, "<think>\ntwo and two make four\n</think>\n\n4<|im_end|>")
    if keep_reasoning:  # token in, token out: the history is the sampled tokens
        p2 = p1 + c1 + enc(ctx, "\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n")
    else:  # the history re-rendered: the template drops the earlier reasoning
        p2 = enc(ctx, render(ctx.chat_template, [u1, a1, u2], add_generation_prompt=True))
    rec = {"rollout_id": "t", "messages": [u1, a1, u2, a2], "reward": 1.0,
           "turns": [{"prompt_ids": p1, "completion_ids": c1},
                     {"prompt_ids": p2, "completion_ids": enc(ctx, "6<|im_end|>")}]}
    return read_chat(tmp_path / f"chat-{keep_reasoning}.json", rec)


def test_reasoning_stripped_replaces_token_drift(ctx, tmp_path):
    kept = two_turns(ctx, tmp_path, keep_reasoning=True)
    assert fired(kept, "reasoning_stripped", ctx) == ([], []) and fired(kept, "token_drift", ctx) == ([], [])
    stripped = two_turns(ctx, tmp_path, keep_reasoning=False)
    (f,), _ = fired(stripped, "reasoning_stripped", ctx)
    assert f.node_idx == 3 and f.detail["previous_node"] == 1
    n_reasoning = len(enc(ctx, "<think>\ntwo and two make four\n</think>\n\n"))
    assert f.detail["vanished"] == n_reasoning and f.position == f.detail["index"]
    assert fired(stripped, "token_drift", ctx)[0] == []  # reported in place of the generic finding
    # the re-rendered prompt is exactly what the template makes of the messages
    assert fired(stripped, "template_mismatch", ctx) == ([], [])
    # without a tokenizer the reasoning field alone still classifies it
    assert len(fired(stripped, "reasoning_stripped", CheckContext())[0]) == 1


def parallel(ctx, *, grouped: bool) -> Rollout:
    calls = [{"id": "a", "name": "f", "arguments": '{"x": 1}'}, {"id": "b", "name": "f", "arguments": '{"x": 2}'}]
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "content": "r1", "tool_call_id": "a"},
            {"role": "tool", "content": "r2", "tool_call_id": "b"}]
    head = render(ctx.chat_template, msgs[:1], add_generation_prompt=True)
    assistant = render(ctx.chat_template, [{**msgs[1], "tool_calls": [
        {"id": c["id"], "type": "function", "function": {"name": "f", "arguments": {"x": i + 1}}}
        for i, c in enumerate(calls)]}]
    )[len("<|im_start|>assistant\n"):]
    if grouped:
        t1 = "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n"
        t2 = "<tool_response>\nr2\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    else:
        t1 = "<|im_start|>user\n<tool_response>\nr1\n</tool_response><|im_end|>\n"
        t2 = "<|im_start|>user\n<tool_response>\nr2\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    return native([{"message": msgs[0], "token_ids": enc(ctx, head)},
                   {"message": msgs[1], "sampled": True, "token_ids": enc(ctx, assistant)},
                   {"message": msgs[2], "token_ids": enc(ctx, t1)}, {"message": msgs[3], "token_ids": enc(ctx, t2)},
                   {"message": {"role": "assistant", "content": "done"}, "sampled": True,
                    "token_ids": enc(ctx, "done<|im_end|>")}])


def test_tool_results_split(ctx):
    assert fired(parallel(ctx, grouped=True), "tool_results_split", ctx) == ([], [])
    split = parallel(ctx, grouped=False)
    (f,), _ = fired(split, "tool_results_split", ctx)
    assert (f.node_idx, f.position) == (3, 0)
    assert f.detail["turns"] == 2 and f.detail["template_turns"] == 1
    assert f.detail["expected"] != f.detail["found"] and isinstance(f.detail["index"], int)
    # without the template: a ChatML tokenizer's turns are counted, and the finding still fires
    no_template = CheckContext(tokenizer=ctx.tokenizer, special_tokens=ctx.special_tokens)
    (f,), _ = fired(split, "tool_results_split", no_template)
    assert f.detail["template_turns"] is None
    # without special-token ids nothing can be counted: skipped, never passed
    _, (s,) = fired(split, "tool_results_split", CheckContext())
    assert "no tokenizer with turn-start special tokens" in s.message

"""The synthetic demo run (ingest/demo/): size, determinism, dynamics and trace invariants."""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from ingest import demo
from ingest.demo import render, scripts, toy_tokenizer
from ingest.formats import native
from ingest.formats.base import ReadContext
from ingest.schema import Ending, Rollout
from ingest.source import open_source

ROOT = Path(__file__).resolve().parents[2]
PER_TOKEN = ("mask", "is_content", "logprobs", "advantages", "reference_logprobs")


@pytest.fixture(scope="module")
def generated() -> tuple[list[Rollout], toy_tokenizer.ToyTokenizer]:
    # How long generation takes is measured by bench/ingest_and_pages.py, not asserted here.
    tok = toy_tokenizer.ToyTokenizer()
    rollouts = list(demo.generate(tokenizer=tok))
    return rollouts, tok


@pytest.fixture(scope="module")
def run(generated) -> list[Rollout]:
    return generated[0]


def test_default_run_has_30_steps_of_8_groups_of_8(run):
    assert len(run) == 30 * 8 * 8 == 1920
    assert len({r.id for r in run}) == len(run)
    assert {r.step for r in run} == set(range(30))
    groups: dict[str, list[Rollout]] = defaultdict(list)
    for r in run:
        assert r.run.id == "demo-grpo" and r.run.name == "Demo GRPO run (synthetic)" and r.run.type == "train"
        assert r.group.id.startswith(f"s{r.step:03d}-g") and r.id == f"{r.group.id}-r{r.group.index}"
        groups[r.group.id].append(r)
    assert len(groups) == 30 * 8
    for members in groups.values():
        assert [m.group.index for m in members] == list(range(8))
        assert {m.group.size for m in members} == {8}
        assert len({m.task.key for m in members}) == 1


@pytest.mark.slow
def test_same_seed_gives_identical_bytes(tmp_path: Path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert demo.write(a) == 1920
    assert demo.write(b) == 1920
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes().count(b"\n") == 1920
    ta, tb = tmp_path / "a.tokenizer.json", tmp_path / "b.tokenizer.json"
    assert ta.read_bytes() == tb.read_bytes()


def test_different_seed_differs(tmp_path: Path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    demo.write(a, steps=3, seed=0)
    demo.write(b, steps=3, seed=1)
    assert a.read_bytes() != b.read_bytes()


def test_arguments_shape_the_run():
    rollouts = list(demo.generate(run_id="tiny", steps=2, groups=3, group_size=4, seed=7))
    assert len(rollouts) == 2 * 3 * 4
    assert {r.run.id for r in rollouts} == {"tiny"}
    assert {r.group.size for r in rollouts} == {4}
    assert list(demo.generate(steps=0)) == []
    with pytest.raises(ValueError):
        list(demo.generate(groups=0))


def test_every_ending_but_unknown_occurs(run):
    seen = {r.ending.type for r in run}
    assert seen == set(Ending) - {Ending.unknown}
    counts = {e: sum(r.ending.type == e for r in run) / len(run) for e in seen}
    assert counts[Ending.submitted] > 0.5
    assert 0.02 < counts[Ending.error] < 0.10
    assert 0.04 < counts[Ending.truncated] < 0.14
    assert 0.01 < counts[Ending.length_cut] < 0.08


def test_reward_rises_over_training(run):
    by_step: dict[int, list[float]] = defaultdict(list)
    for r in run:
        by_step[r.step].append(r.reward)
    first = statistics.mean(x for s in range(5) for x in by_step[s])
    last = statistics.mean(x for s in range(25, 30) for x in by_step[s])
    assert last - first > 0.3


def test_errors_are_bursty(run):
    per_step = defaultdict(int)
    for r in run:
        per_step[r.step] += r.ending.type == Ending.error
    mean = statistics.mean(per_step[s] for s in range(30))
    assert max(per_step.values()) > 3 * mean


def test_rewards_are_weighted_sums(run):
    for r in run:
        assert set(r.rewards) == {"correct", "format"}
        assert r.rewards["correct"].weight == 1.0 and r.rewards["format"].weight == 0.1
        assert r.rewards["correct"].score in (0.0, 1.0)
        assert r.reward == pytest.approx(r.rewards["correct"].score + 0.1 * r.rewards["format"].score)
        assert r.total_reward() == r.reward


def test_per_token_arrays_match_token_ids(run):
    for r in run:
        for node in r.nodes:
            n = len(node.token_ids)
            assert all(0 <= t < 32000 for t in node.token_ids)
            for name in PER_TOKEN:
                values = getattr(node, name)
                assert values is None or len(values) == n, (r.id, name)
            assert "source_lengths" not in node.extra


def test_masks_logprobs_and_scaffold(run):
    for r in run:
        for node in r.nodes:
            if not node.token_ids:
                continue  # a terminal environment message is not tokenized
            if node.message.role != "assistant":
                assert not any(node.mask) and all(lp is None for lp in node.logprobs)
                assert node.advantages is None
                continue
            assert node.sampled and node.policy_version is not None
            assert node.mask[-1] is False and node.is_content[-1] is False
            assert node.token_ids[-1] == toy_tokenizer.IM_END
            assert any(node.mask)
            for m, lp in zip(node.mask, node.logprobs):
                assert (lp is not None and lp < 0) if m else lp is None


def test_only_terminal_tool_messages_are_untokenized(run):
    for r in run:
        for i, node in enumerate(r.nodes):
            if not node.token_ids:
                assert node.message.role == "tool" and i == len(r.nodes) - 1
                assert r.ending.type in (Ending.truncated, Ending.task_detected)


def test_calls_and_evidence(run):
    for r in run:
        assistants = [i for i, n in enumerate(r.nodes) if n.message.role == "assistant"]
        assert [c.node for c in r.calls] == assistants
        assert 1 <= len(assistants) <= scripts.MAX_TURNS
        for c in r.calls:
            assert c.model == render.MODEL
            assert c.sampling == {"temperature": 1.0, "max_tokens": scripts.MAX_TOKENS}
            assert c.finish_reason in ("tool_call", "stop", "length")
            assert c.usage.output_tokens == sum(r.nodes[c.node].mask)
            assert c.time.start < c.time.end
            assert r.step - 1 <= c.policy_version <= r.step and c.policy_version >= 0
        ev = r.ending.evidence
        assert ev.last_finish_reason == r.calls[-1].finish_reason
        assert ev.turns == len(assistants) and ev.max_turns == scripts.MAX_TURNS
        assert ev.last_output_token_cap == scripts.MAX_TOKENS
        assert ev.output_tokens == sum(sum(n.mask) for n in r.nodes)
        assert r.policy.start <= r.policy.end
        if r.ending.type == Ending.length_cut:
            assert ev.last_finish_reason == "length" and ev.last_output_tokens == scripts.MAX_TOKENS
        else:
            assert ev.last_output_tokens < scripts.MAX_TOKENS
        if r.ending.type == Ending.truncated:
            assert ev.turns == scripts.MAX_TURNS and ev.last_finish_reason == "tool_call"
        if r.ending.type == Ending.submitted:
            assert ev.last_finish_reason == "stop" and r.ending.detail == "final_answer"
    assert any(r.policy.start != r.policy.end for r in run)


def test_error_rollouts(run):
    errors = [r for r in run if r.ending.type == Ending.error]
    for r in errors:
        assert r.errors and r.reward == 0.0 and r.ending.detail in ("sandbox_crash", "tool_server_unavailable")
        assert all(n.advantages is None for n in r.nodes)
        assert r.nodes[-1].message.tool_calls  # the call whose sandbox died has no result
    assert any(r.ending.detail == "sandbox_crash" for r in errors)
    assert not any(r.errors for r in run if r.ending.type != Ending.error)


@pytest.mark.slow
def test_advantages_use_the_errors_dropped_baseline(run):
    groups: dict[str, list[Rollout]] = defaultdict(list)
    for r in run:
        groups[r.group.id].append(r)
    for members in groups.values():
        kept = [m.reward for m in members if m.ending.type != Ending.error]
        if not kept:
            continue
        baseline = statistics.mean(kept)
        for m in members:
            if m.ending.type == Ending.error:
                continue
            for node in m.nodes:
                if node.message.role == "assistant":
                    for mask, adv in zip(node.mask, node.advantages):
                        if mask:
                            assert adv == pytest.approx(m.reward - baseline, abs=1e-6)
                        else:
                            assert adv is None


def test_hostile_html_reaches_tool_output(run):
    tool_text = [n.message.text() for r in run for n in r.nodes if n.message.role == "tool"]
    assert any("<script>alert(1)</script>" in t for t in tool_text)
    assert any("<img src=x onerror=alert(1)>" in t for t in tool_text)
    hostile = {r.id for r in run for n in r.nodes
               if n.message.role == "tool" and "<script>" in n.message.text()}
    assert 0 < len(hostile) < 0.1 * len(run)


@pytest.mark.slow
def test_round_trip(run):
    for r in run:
        assert Rollout.model_validate(r.to_json_dict()) == r


def test_written_file_reads_back_through_the_native_reader(tmp_path: Path):
    path = tmp_path / "demo.jsonl"
    demo.write(path, steps=2, groups=2, group_size=4)
    src = open_source(path)
    assert native.sniff(src)
    records = list(native.read(src, ReadContext()))
    assert len(records) == 16 and all(isinstance(r, Rollout) for r in records)
    expected = list(demo.generate(steps=2, groups=2, group_size=4))
    for got, want in zip(records, expected):
        got.source = {}
        got._raw_hash = None  # the reader's hash of the line it read (ingest/known.py), not the rollout's content
        assert got == want


def test_tokenizer_is_stable_and_lossless():
    # CRC-32 of each piece, the same in every process and version (a pinned value, not a second call)
    assert toy_tokenizer.tokenize("Answer: 395") == [25075, 4047, 12898]
    ids = toy_tokenizer.tokenize("hello world")
    assert len(ids) == 2 and all(16 <= i < 32000 for i in ids)
    assert ids == [toy_tokenizer.tokenize("hello")[0], toy_tokenizer.tokenize(" world")[0]]
    assert toy_tokenizer.tokenize(" world") != toy_tokenizer.tokenize("world")   # the leading space is part of it
    text = 'def f(x):\n    return {"a": x}  \n\n\tdone. '
    pieces = toy_tokenizer._PIECE.findall(text)
    assert "".join(pieces) == text
    assert pieces[:6] == ["def", " f", "(", "x", ")", ":"] and "   " in pieces and " return" in pieces


def _colliding_pair() -> tuple[str, str]:
    seen: dict[int, str] = {}
    for i in range(100_000):
        w = f"w{i}"
        j = toy_tokenizer._crc_id(w)
        if j in seen:
            return seen[j], w
        seen[j] = w
    raise AssertionError("no CRC-32 collision found")


def test_colliding_pieces_get_distinct_ids_first_seen_keeps_its_hash():
    a, b = _colliding_pair()
    tok = toy_tokenizer.ToyTokenizer()
    ia, _, ib, _, ia2 = tok.encode(f"{a}\n{b}\n{a}")
    assert ia == ia2 == toy_tokenizer._crc_id(a) and ib != ia and 16 <= ib < 32000
    assert tok.encode(b) == [ib] and tok.pieces()[ia] == a and tok.pieces()[ib] == b
    other = toy_tokenizer.ToyTokenizer()
    assert other.encode(b)[0] == toy_tokenizer._crc_id(b) and other.encode(a)[0] != toy_tokenizer._crc_id(a)


def _expected_body(node) -> str:
    """The text a node's body tokens stand for (assistant: what the model sampled)."""
    m = node.message
    if m.role != "assistant":
        return m.text()
    parts = [f"<think>{m.reasoning_content}</think>"] if m.reasoning_content else []
    if m.content:
        parts.append(m.content)
    parts += [f'<tool_call>{{"name": "{c.name}", "arguments": {c.arguments}}}</tool_call>'
              for c in m.tool_calls or []]
    return "\n".join(parts)


def _words_in_order(words: list[str], text: str) -> bool:
    pos = 0
    for w in words:
        pos = text.find(w, pos)
        if pos < 0:
            return False
        pos += len(w)
    return True


def test_run_tokenizer_decodes_every_id(generated, tmp_path: Path):
    from ingest.tokenizer import decode_pieces, decode_text, load

    run, tok = generated
    path = tmp_path / "demo.tokenizer.json"
    tok.write(path)
    vocab = load(path)
    assert vocab.kind == "tokenizer.json" and not vocab.dummy_prefix
    assert {toy_tokenizer.IM_START, toy_tokenizer.IM_END} <= vocab.special
    assert decode_pieces(vocab, [toy_tokenizer.IM_START, toy_tokenizer.ROLE_TOKEN["tool"]])[1].text == "tool\n"
    used = {i for r in run for n in r.nodes for i in n.token_ids or ()}
    assert all(vocab.piece(i) is not None for i in used)
    sample = [r for r in run if r.id == "s000-g7-r0" or r.step % 7 == 3]
    assert any(r.ending.type == Ending.length_cut for r in sample)
    checked = 0
    for r in sample:
        for node in r.nodes:
            if not node.token_ids:
                continue
            role = node.message.role
            text = decode_text(vocab, node.token_ids)
            assert text.startswith(f"<|im_start|>{role}\n") and text.endswith("<|im_end|>")
            body = decode_text(vocab, node.token_ids[2:-1])
            expected = _expected_body(node)
            assert _words_in_order(re.findall(r"\w+", expected), text)
            assert body == expected     # a length cut's content is cut at exactly MAX_TOKENS
            checked += 1
    assert checked > 500


def test_run_tokenizer_is_a_real_huggingface_tokenizer(generated, tmp_path: Path):
    from tokenizers import Tokenizer

    run, tok = generated
    path = tmp_path / "demo.tokenizer.json"
    tok.write(path)
    hf = Tokenizer.from_file(str(path))
    for r in run[::97]:
        for node in r.nodes:
            if node.token_ids:
                body = node.token_ids[2:-1]
                text = hf.decode(body)
                assert hf.encode(text, add_special_tokens=False).ids == body
    assert hf.token_to_id("<|im_end|>") == toy_tokenizer.IM_END


def test_write_writes_the_tokenizer_beside_the_run(tmp_path: Path):
    kw = dict(steps=2, groups=2, group_size=4, seed=3)
    assert demo.tokenizer_path(tmp_path / "x.jsonl") == tmp_path / "x.tokenizer.json"
    demo.write(tmp_path / "x.jsonl", **kw)
    demo.write(tmp_path / "y.jsonl", tokenizer=tmp_path / "other.json", **kw)
    demo.write(tmp_path / "z.jsonl", tokenizer=False, **kw)
    demo.write_tokenizer(tmp_path / "only.json", **kw)
    tj = (tmp_path / "x.tokenizer.json").read_bytes()
    assert tj == (tmp_path / "other.json").read_bytes() == (tmp_path / "only.json").read_bytes()
    assert not (tmp_path / "y.tokenizer.json").exists() and not (tmp_path / "z.tokenizer.json").exists()
    tok = toy_tokenizer.ToyTokenizer()
    list(demo.generate(tokenizer=tok, **kw))
    assert tj == tok.to_json().encode()
    assert json.loads(tj)["model"]["type"] == "WordLevel"


@pytest.mark.slow
def test_cli_demo_writes_tokenizer_and_pages_show_text(tmp_path: Path):
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app

    out = tmp_path / "run.jsonl"
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": db}
    cli = [sys.executable, "-m", "app.cli"]
    done = subprocess.run([*cli, "demo", "--out", str(out), "--steps", "1", "--groups", "8",
                           "--group-size", "2"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    tok = tmp_path / "run.tokenizer.json"
    assert tok.exists() and str(tok) in done.stdout + done.stderr
    done = subprocess.run([*cli, "ingest", str(out), "--tokenizer", str(tok)], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    app = create_app(Settings(database_url=db))
    with TestClient(app) as client:
        d = client.get("/runs/demo-grpo/rollouts/s000-g7-r0.json").json()
    app.state.engine.dispose()
    tokens = [t for m in d["messages"] for t in m["tokens"]]
    assert tokens and all(t["piece"] is not None and not t["piece"]["unknown"] for t in tokens)
    text = "".join(t["piece"]["text"] for t in tokens)
    assert "<|im_start|>user\nA user registered with the name <img src=x onerror=alert(1)>" in text

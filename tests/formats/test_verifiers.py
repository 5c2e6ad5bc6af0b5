"""The verifiers / prime-rl reader (ingest/formats/verifiers.py) on the real Episode files written by
verifiers 0.4.0 (tests/fixtures/realdata/verifiers), prime-rl's run-directory layout, and the
all/effective dedupe. Expected counts were read from the source files (roles, tool calls, token
ids, mask, finish reasons, rewards)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ingest.errors import RecordError
from ingest.formats import registry, verifiers
from ingest.formats._verifiers_arrays import compact
from ingest.formats.base import ReadContext
from ingest.graph import branches, pair_tool_calls
from ingest.schema import Ending, Rollout
from ingest.source import open_source
from tests.conftest import FIXTURES
from tests.helpers import ingest

DATA = FIXTURES / "realdata" / "verifiers"


def read(path: Path, ctx: ReadContext | None = None) -> list[Rollout]:
    out = list(verifiers.read(open_source(path), ctx or ReadContext()))
    errors = [str(r) for r in out if isinstance(r, RecordError)]
    assert not errors, errors
    return out  # type: ignore[return-value]


# file → (roles, tool calls, tokens, sampled tokens, reward, ending, detail, finish reasons)
HAND = {
    "train_multi_tool.jsonl": ("uatatata", 3, 552, 131, 1.5, Ending.submitted, "agent_completed",
                               ["tool_calls", "tool_calls", "tool_calls", "stop"]),
    "train_max_turns.jsonl": ("uatatata", 4, 554, 132, 1.0, Ending.truncated, "max_turns",
                              ["tool_calls"] * 4),
    "eval_multi_tool.jsonl": ("uatatata", 3, 0, 0, 1.5, Ending.submitted, "agent_completed",
                              ["tool_calls", "tool_calls", "tool_calls", "stop"]),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_real_file_matches_hand_counts(name):
    roles, n_calls, n_tokens, n_sampled, reward, ending, detail, finishes = HAND[name]
    (r,) = read(DATA / name)
    assert "".join(n.message.role[0] for n in r.nodes) == roles
    assert sum(len(n.message.tool_calls or []) for n in r.nodes) == n_calls
    assert sum(len(n.token_ids) for n in r.nodes) == n_tokens
    assert sum(sum(n.mask) for n in r.nodes) == n_sampled
    assert r.total_reward() == reward and r.reward is None and set(r.rewards) == {"answered", "counted"}
    assert (r.ending.type, r.ending.detail) == (ending, detail)
    assert [c.finish_reason_raw for c in r.calls] == finishes
    assert r.ending.evidence.last_finish_reason == finishes[-1]
    assert r.source["format"] == "verifiers" and r.episode is not None
    if n_sampled:
        assert r.ending.evidence.output_tokens == n_sampled
        for n in (n for n in r.nodes if n.sampled):  # behaviour logprobs aligned, None where not sampled
            assert len(n.logprobs) == len(n.token_ids)
            assert all((lp is None) == (not m) for lp, m in zip(n.logprobs, n.mask))


def test_max_turns_last_call_has_no_result():
    (r,) = read(DATA / "train_max_turns.jsonl")
    (path,) = branches(r.nodes)
    pairs = pair_tool_calls(path, [n.message.model_dump() for n in r.nodes])
    assert [p.result_node is None for p in pairs] == [False, False, False, True]
    assert [tc.id for n in r.nodes for tc in (n.message.tool_calls or [])] == ["call_0"] * 4  # ids repeat
    assert r.nodes[1].message.reasoning_content and r.nodes[1].message.content is None
    assert r.ending.evidence.max_turns == 4


def test_no_group_recorded_groups_by_task_hash(tmp_path):
    """An eval run writes no `group`: the rollouts of one task (its `task.hash`) within the run and step
    are one group (verifiers' planner tells a task's episodes apart by that hash); the step scopes it."""
    rs = read(DATA / "train_group.jsonl")
    hashes = {r.task.hash for r in rs}
    assert len(rs) == 4 and len(hashes) == 1 and all(r.step is None for r in rs)
    assert {r.group.id for r in rs} == {f"task:{hashes.pop()}"}
    assert all(r.source["group_from"] == "task.hash" and r.group.index is None for r in rs)
    stepped = read(DATA / "train_group.jsonl", ReadContext(step=3))
    assert {r.group.id for r in stepped} == {f"step3:task:{rs[0].task.hash}"}
    one = [read(DATA / f)[0] for f in ("train_multi_tool.jsonl", "train_max_turns.jsonl")]  # two tasks
    assert one[0].group.id != one[1].group.id
    recorded = read(DATA / "train_group_with_advantages.jsonl")  # a recorded group is kept as written
    assert {r.group.id for r in recorded} == {"group-e38ebf9a16a1"} and "group_from" not in recorded[0].source
    line = json.loads((DATA / "train_multi_tool.jsonl").read_text().splitlines()[0])
    for t in [line, *line["traces"]]:
        t["task"].pop("hash")
    (tmp_path / "t.jsonl").write_text(json.dumps(line) + "\n")
    assert read(tmp_path / "t.jsonl")[0].group is None  # no hash: no group


def test_group_with_advantages_run_step_policy():
    rs = read(DATA / "train_group_with_advantages.jsonl")
    assert [r.total_reward() for r in rs] == [1.5, 0.5, 0.5, 0.5]
    assert {r.group.id for r in rs} == {"group-e38ebf9a16a1"} and all(r.step == 7 for r in rs)
    assert all(r.run.id == "fake-train-run" and r.run.type == "train" for r in rs)
    assert rs[0].policy.start == 6 and rs[0].policy.end == 7
    adv = [a for n in rs[0].nodes for a in (n.advantages or []) if a is not None]
    assert len(adv) == 131 and adv[0] == 0.75
    sampled = rs[0].nodes[1]
    assert sampled.policy_version == 7 and len(sampled.advantages) == len(sampled.token_ids)


def test_compact_arrays_round_trip():
    (r,) = read(DATA / "train_multi_tool.jsonl")
    raw = json.loads((DATA / "train_multi_tool.jsonl").read_text())["traces"][0]["nodes"][1]
    assert compact(r.nodes[1], r.nodes[1].logprobs) == raw["logprobs"]


def test_run_directory_step_from_path_and_effective_preferred(tmp_path):
    run = tmp_path / "myrun" / "rollouts" / "step_3" / "train"
    (run / "all").mkdir(parents=True)
    (run / "effective").mkdir()
    # `all` holds the four episodes without advantages, `effective` the same four with them.
    plain = [json.loads(x) for x in (DATA / "train_group.jsonl").read_text().splitlines()]
    with_adv = [json.loads(x) for x in (DATA / "train_group_with_advantages.jsonl").read_text().splitlines()]
    for d in with_adv:
        d.pop("run")  # the step must come from the path
    extra = dict(plain[0], id="extra-episode")
    extra["traces"] = [dict(plain[0]["traces"][0], id="only-in-all")]
    (run / "all" / "traces.jsonl").write_text("\n".join(json.dumps(d) for d in plain + [extra]) + "\n")
    (run / "effective" / "traces.jsonl").write_text("\n".join(json.dumps(d) for d in with_adv) + "\n")
    ctx = ReadContext()
    got = read(run / "all" / "traces.jsonl", ctx)
    assert [r.id for r in got] == ["only-in-all"] and ctx.extra["skipped_duplicates"] == 4
    eff = read(run / "effective" / "traces.jsonl")
    assert all(r.step == 3 and r.source["subset"] == "effective" and r.source["split"] == "train" for r in eff)
    assert all(any(n.advantages for n in r.nodes) for r in eff)


def test_run_directory_ingests_in_one_command(engine, tmp_path):
    run = tmp_path / "rollouts" / "step_5" / "train" / "all"
    run.mkdir(parents=True)
    shutil.copy(DATA / "train_group.jsonl", run / "traces.jsonl")
    report = ingest(engine, tmp_path, run="vf")
    assert report.ok and report.total.inserted == 4
    assert {f.format for f in report.files} == {"verifiers"}


def test_traceless_provider_error_is_an_error_rollout(tmp_path):
    ep = {"id": "ep1", "env": {"id": "e"}, "ok": False, "traces": [],
          "errors": [{"type": "ProviderError", "message": "503 from upstream", "status_code": 503}]}
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(ep) + "\n")
    assert registry.detect(open_source(p)).NAME == "verifiers"
    (r,) = read(p)
    assert r.ending.type == Ending.error and r.ending.detail == "ProviderError"
    assert r.total_reward() is None and r.reward_status() == "unscored" and not r.nodes
    assert r.errors[0].status_code == 503


def test_bad_node_is_a_record_error_with_its_path(tmp_path):
    ep = json.loads((DATA / "train_multi_tool.jsonl").read_text())
    ep["traces"][0]["nodes"][2]["token_ids"][1] = "x"
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(ep) + "\n")
    (err,) = list(verifiers.read(open_source(p), ReadContext()))
    assert isinstance(err, RecordError) and err.line == 1 and err.field == "traces[0].nodes[2].token_ids[1]"


def test_real_files_have_no_restated_branch():
    for name in ("train_multi_tool.jsonl", "train_max_turns.jsonl", "train_group_with_advantages.jsonl"):
        for r in read(DATA / name):
            assert not any(n.extra.get("token_drift") for n in r.nodes), name


def _restated_without_reasoning(tmp_path: Path) -> Path:
    """train_multi_tool's first episode, its last request's prompt restating the previous turn
    without its reasoning, as verifiers' `add_turn` stores it (a message that differs is a new
    node): the prefix up to that turn reused, then the restated turn (its sampled reasoning
    tokens gone) and its tool result as new nodes, then the last assistant node under them."""
    ep = json.loads((DATA / "train_multi_tool.jsonl").read_text().splitlines()[0])
    trace = ep["traces"][0]
    nodes, answer = trace["nodes"][:6], trace["nodes"][7]
    turn, result = trace["nodes"][5], trace["nodes"][6]
    first = turn["mask"].index(True)
    ids = turn["token_ids"][:first + 1] + turn["token_ids"][first + 6:]  # five sampled reasoning tokens gone
    message = {key: v for key, v in turn["message"].items() if key != "reasoning_content"}
    nodes.append({**turn, "parent": 4, "message": message, "sampled": False, "token_ids": ids,
                  "mask": [False] * len(ids), "is_content": [], "logprobs": []})
    nodes.append({**result, "parent": 6})
    trace["nodes"] = nodes + [{**answer, "parent": 7}]
    trace["calls"][-1]["node"] = 8
    path = tmp_path / "restated.jsonl"
    path.write_text(json.dumps(ep) + "\n")
    return path


def test_a_history_restated_without_reasoning_is_reasoning_stripped(tmp_path):
    from ingest.checks import run_rollout_checks

    (r,) = read(_restated_without_reasoning(tmp_path))
    marked = [i for i, n in enumerate(r.nodes) if n.extra.get("token_drift")]
    assert marked == [6]  # the restated turn, the first node of the branch
    assert r.nodes[6].extra["token_drift"]["request"] == 3
    kinds = [(f.kind, f.node_idx) for f in run_rollout_checks(r).findings]
    assert ("reasoning_stripped", 6) in kinds
    # classified (no token_drift); the restated turn is context, not a sample with mask 0, and the old
    # turn's call is answered under its restated copy; call_0 repeating is the real file's own quirk
    assert {k for k, _ in kinds} == {"reasoning_stripped", "duplicate_tool_call_id"}


def test_metrics_and_judge_words_are_components(tmp_path):
    """verifiers `metrics` (unweighted, not in the reward) become components of weight 0 and leave
    the total alone; a judge's recorded reply (`info.judge_calls`) is its reward's explanation."""
    ep = json.loads((DATA / "train_multi_tool.jsonl").read_text().splitlines()[0])
    t = ep["traces"][0]
    t["metrics"] = {"turns": 4.0, "answered": 0.0, "skipped": None}
    t["info"] = {"judge_calls": [{"name": "answered", "request": {},
                                  "response": {"message": {"role": "assistant", "content": "<b>says 5</b>"}}}]}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(ep) + "\n")
    (r,) = read(path)
    assert {k: (v.score, v.weight) for k, v in r.rewards.items()} == {
        "answered": (1.0, 0.5), "counted": (1.0, 1.0), "turns": (4.0, 0.0), "skipped": (None, 0.0)}
    assert r.total_reward() == 1.5 and r.metrics["turns"] == 4.0
    assert r.rewards["answered"].explanation == "<b>says 5</b>" and r.rewards["counted"].explanation is None
    # written back as verifiers: metrics stay metrics, not rewards
    from ingest.formats._verifiers_write import to_episode

    assert set(to_episode(r)["traces"][0]["rewards"]) == {"answered", "counted"}

"""verifiers as it writes runs today: verifiers 0.4.0's own `vf-eval` runs the `rsfake` environment
(tests/producers/vf_env: a calculator MCP toolset, two weighted rewards, its bundled chat harness `null`
in a subprocess runtime) against the scripted fake model server (tests/producers/fake_openai.py), with
a turn cap, a token cap and 2 rollouts per task. It writes its run folder (`<output>/<run>/traces.jsonl`,
one `Episode` per line, + `configs/resolved/eval.json`, `logs/`); Rollscope ingests the folder
(`rollscope ingest`, a real SQLite file) and every trace is compared with what verifiers itself reads
back (`verifiers.v1.utils.trace_store.read_episodes`): messages and roles, tool calls and their pairing,
the harness's own tool errors (`error: ...`), rewards (and each rubric component), endings, groups.

Cases (one task each): one tool call; a call to an unknown tool and one with arguments that are not
JSON (the harness answers both `error: ...`); a tool call every turn until `max_turns`; a generation
cut at `max_tokens` (finish reason `length`); the provider answering 500 at once, and 503 after a tool
turn; a plain answer."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from verifiers.v1 import GroupInfo
from verifiers.v1.trace import Trace
from verifiers.v1.utils.trace_store import TRACES_FILE, read_episodes, write_episode

from app.config import Settings
from app.main import create_app
from tests.producers.fake_openai import CASE, FakeOpenAI
from tests.producers.vf_script import GROUP_SIZE, MAX_TURNS, SCRIPT, run_vf_eval

RS = str(Path(sys.executable).parent / "rollscope")


@pytest.fixture(scope="module")
def vf_run(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("vf-run")
    with FakeOpenAI(SCRIPT) as fake:
        out, done = run_vf_eval(base, fake)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert (out / TRACES_FILE).exists(), done.stderr[-5000:]
    episodes = read_episodes(out, Trace)
    # The premise: verifiers itself says what each case did.
    assert len(episodes) == len(SCRIPT) * GROUP_SIZE
    # The same episodes as a trainer stamps them (verifiers' own GroupInfo), written by verifiers' writer
    grouped = base / "grouped"
    grouped.mkdir()
    for ep in episodes:
        ep.group = GroupInfo(id=f"g-{ep.task.hash[:12]}")
        write_episode(grouped, ep)
    return {"dir": out, "episodes": episodes, "grouped": grouped, "fake": fake}


@pytest.fixture(scope="module")
def db(vf_run, tmp_path_factory) -> str:
    """The run folder ingested once into a real SQLite file (the CLI migrates it on first use)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('vf-db') / 'rollscope.db'}"
    ingest(vf_run["dir"], url)
    return url


@pytest.fixture(scope="module")
def db_grouped(vf_run, tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('vf-db-grouped') / 'rollscope.db'}"
    ingest(vf_run["grouped"] / TRACES_FILE, url)  # the Episode file itself, not a run folder
    return url


def ingest(path: Path, db_url: str) -> str:
    done = subprocess.run([RS, "ingest", str(path), "--db", db_url], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def client_for(db_url: str) -> TestClient:
    return TestClient(create_app(Settings(database_url=db_url)))


def case_of(trace) -> str:
    """The case is the `[case:NAME]` marker of the task's prompt (`read_episodes` types task data as plain
    `TaskData`)."""
    return CASE.search(str(trace.task.data.prompt)).group(1)


def is_tool_error(message) -> bool:
    """The harness's own signal: a tool result that opens with `error:` (verifiers' chat program)."""
    return message.role == "tool" and str(message.content or "").lstrip().lower().startswith("error")


def rows_by_id(c: TestClient, run: str) -> dict[str, dict]:
    items = c.get(f"/api/v1/runs/{quote(run, safe='')}/rollouts?limit=200").json()["items"]
    return {r["rollout_id"]: r for r in items}


def expected_ending(ep, trace) -> str:
    if ep.errors or trace.errors:
        return "error"
    if trace.stop_condition == "max_turns":
        return "truncated"
    if trace.calls and trace.calls[-1].finish_reason == "length":
        return "length_cut"
    return "submitted"


def test_the_cases_happened(vf_run):
    """What verifiers itself reports per case: the script drove the harness where the test means it to."""
    by_case = defaultdict(list)
    for ep in vf_run["episodes"]:
        for t in ep.traces:
            by_case[case_of(t)].append((ep, t))
    assert {c: len(v) for c, v in by_case.items()} == {c: GROUP_SIZE for c in SCRIPT}
    for ep, t in by_case["max-turns"]:
        assert t.stop_condition == "max_turns" and len(t.calls) == MAX_TURNS
    for ep, t in by_case["length"]:
        assert t.calls[-1].finish_reason == "length"
    for ep, t in by_case["provider-error"] + by_case["provider-503"]:
        assert ep.errors or t.errors
    for ep, t in by_case["tool-error"]:
        assert sum(is_tool_error(n.message) for n in t.nodes) == 2


def test_every_trace_as_verifiers_reads_it(vf_run, db):
    run = vf_run["episodes"][0].run.id
    with client_for(db) as c:
        rows = rows_by_id(c, run)
        assert len(rows) == sum(len(ep.traces) for ep in vf_run["episodes"])
        for ep in vf_run["episodes"]:
            for t in ep.traces:
                case = case_of(t)
                base = f"/api/v1/runs/{quote(run, safe='')}/rollouts/{quote(t.id, safe='')}"
                d = c.get(base)
                assert d.status_code == 200, (case, d.text[:500])
                d = d.json()
                env = d["envelope"]
                msgs = c.get(base + "/branches/0/messages?limit=500").json()["items"] if t.nodes else []
                ours = [m["message"] for m in msgs]
                theirs = [n.message for n in t.nodes]
                assert len(ours) == len(theirs), case
                assert [m["role"] for m in ours] == [m.role for m in theirs], case
                for mine, their in zip(ours, theirs):
                    if their.role == "assistant":
                        calls = [(tc.id, tc.name) for tc in their.tool_calls or []]
                        assert [(tc["id"], tc["name"]) for tc in mine.get("tool_calls") or []] == calls, case
                    if their.role == "tool":
                        assert mine["tool_call_id"] == their.tool_call_id, case
                    if isinstance(their.content, str):
                        assert mine.get("content") == their.content, (case, their.role)
                # model calls: one per verifiers call, with its finish reason and usage
                assert len(env["calls"]) == len(t.calls), case
                for mine, their in zip(env["calls"], t.calls):
                    # the source's word kept; `finish_reason` itself is the OTel GenAI enum (docs/trace-format.md)
                    assert mine.get("finish_reason_raw", mine.get("finish_reason")) == their.finish_reason, case
                    assert mine.get("finish_reason") == {"tool_calls": "tool_call"}.get(their.finish_reason,
                                                                                         their.finish_reason), case
                    if their.usage is not None:
                        assert (mine.get("usage") or {}).get("output_tokens") == their.usage.completion_tokens, case
                n_calls = sum(len(m.tool_calls or []) for m in theirs if m.role == "assistant")
                assert d["rollout"]["n_tool_calls"] == n_calls, case
                # rewards: every rubric component with its score and weight; the total is Σ score·weight
                # ... and each metric a component of weight 0 (not in the total)
                assert set(env["rewards"]) == set(t.rewards) | set(t.metrics), case
                for name, r in t.rewards.items():
                    assert env["rewards"][name]["score"] == pytest.approx(r.score), (case, name)
                    assert env["rewards"][name]["weight"] == pytest.approx(r.weight), (case, name)
                for name, v in t.metrics.items():
                    assert (env["rewards"][name].get("score"), env["rewards"][name]["weight"]) == (v, 0.0), case
                if t.rewards and all(r.score is not None for r in t.rewards.values()):
                    total = sum(r.score * r.weight for r in t.rewards.values())
                    assert d["rollout"]["reward"] == pytest.approx(total), case
                # endings
                assert env["ending"]["type"] == expected_ending(ep, t), (case, env["ending"], t.stop_condition)


def test_harness_tool_errors_count(vf_run, db):
    """verifiers' chat harness answers an unknown tool and unparsable arguments with `error: ...`
    (lowercase): each is a tool error in the rollout's row."""
    run = vf_run["episodes"][0].run.id
    with client_for(db) as c:
        rows = rows_by_id(c, run)
        for ep in vf_run["episodes"]:
            for t in ep.traces:
                want = sum(is_tool_error(n.message) for n in t.nodes)
                assert rows[t.id]["n_tool_errors"] == want, (case_of(t), rows[t.id]["n_tool_errors"], want)


@pytest.mark.parametrize("case,ending,detail", [
    ("max-turns", "truncated", "max_turns"),
    ("length", "length_cut", None),
    ("provider-error", "error", None),
    ("provider-503", "error", None),
    ("tool", "submitted", None),
])
def test_endings(vf_run, db, case, ending, detail):
    """The turn cap → truncated (`max_turns` kept as the detail); a last generation cut at max_tokens →
    length_cut although verifiers says `agent_completed` (domain.md: a silent truncation); the provider's
    500 → error; a plain answer → submitted."""
    run = vf_run["episodes"][0].run.id
    with client_for(db) as c:
        rows = rows_by_id(c, run)
        mine = [(t, rows[t.id]) for ep in vf_run["episodes"] for t in ep.traces if case_of(t) == case]
        assert len(mine) == GROUP_SIZE
        for t, row in mine:
            assert row["ending"] == ending, (case, row["ending"], row["ending_detail"], t.stop_condition)
            if detail:
                assert row["ending_detail"] == detail


def test_provider_error_is_kept(vf_run, db):
    """The provider's failure is on the rollout (its message), and its reward is not counted as a score
    of the policy: the run's error-free mean leaves it out."""
    run = vf_run["episodes"][0].run.id
    with client_for(db) as c:
        for ep in vf_run["episodes"]:
            for t in ep.traces:
                if not case_of(t).startswith("provider-"):
                    continue
                d = c.get(f"/api/v1/runs/{quote(run, safe='')}/rollouts/{quote(t.id, safe='')}").json()
                text = json.dumps(d["envelope"].get("errors") or d["envelope"].get("ending"))
                assert ("503" if case_of(t) == "provider-503" else "500") in text, d["envelope"].get("ending")


def test_groups_of_an_eval_run(vf_run, db):
    """`vf-eval -r 2` samples each task twice: verifiers' EvalConfig calls it "the trainer's group size",
    and its own planner groups the episodes by `task.hash`. The eval run folder names no `group`, so the
    rollouts of one task make one group of 2 (one id per task, never shared between tasks)."""
    run = vf_run["episodes"][0].run.id
    with client_for(db) as c:
        rows = rows_by_id(c, run)
        by_hash = defaultdict(set)
        for ep in vf_run["episodes"]:
            for t in ep.traces:
                by_hash[ep.task.hash].add(t.id)
        ids = {}
        for h, members in by_hash.items():
            gids = {rows[r]["group_id"] for r in members}
            assert len(gids) == 1 and None not in gids, (h, gids)
            ids[h] = gids.pop()
            g = c.get(f"/api/v1/runs/{quote(run, safe='')}/groups/{quote(ids[h], safe='')}").json()
            assert g["group"]["size"] == GROUP_SIZE, g["group"]
        assert len(set(ids.values())) == len(by_hash)


def test_groups_stamped_by_verifiers(vf_run, db_grouped):
    """The same episodes with verifiers' own `GroupInfo` (as a trainer stamps them): group id as written,
    size 2; and the group page answers."""
    run = vf_run["episodes"][0].run.id
    with client_for(db_grouped) as c:
        rows = rows_by_id(c, run)
        for ep in vf_run["episodes"]:
            for t in ep.traces:
                assert rows[t.id]["group_id"] == ep.group.id
        for gid in {ep.group.id for ep in vf_run["episodes"]}:
            g = c.get(f"/api/v1/runs/{quote(run, safe='')}/groups/{quote(gid, safe='')}")
            assert g.status_code == 200, g.text[:300]
            assert g.json()["group"]["size"] == GROUP_SIZE
            assert sorted(m["rollout_id"] for m in g.json()["members"]) == sorted(
                t.id for ep in vf_run["episodes"] if ep.group.id == gid for t in ep.traces)


def test_every_page_answers(vf_run, db):
    run = quote(vf_run["episodes"][0].run.id, safe="")
    with client_for(db) as c:
        for ep in vf_run["episodes"]:
            for t in ep.traces:
                for url in (f"/runs/{run}/rollouts/{quote(t.id, safe='')}",
                            f"/runs/{run}/rollouts/{quote(t.id, safe='')}.json"):
                    r = c.get(url, headers={"accept": "text/html"})
                    assert r.status_code == 200, (url, r.text[:300])
        for url in (f"/runs/{run}", f"/runs/{run}/rollouts", f"/runs/{run}.json"):
            assert c.get(url).status_code == 200, url

"""The rollout and group views through the real HTTP app on SQLite and Postgres: the handed cases
that touch the view (01, 04, 08, 13, 30), the graph in the JSON twin, token windows, deep-link
focus, byte-level pieces, the group's estimators and recorded advantages, and the diff."""
from __future__ import annotations

import json
import math
import re

from app.views.group_extras import DiffPage
from app.views.tokenpages import BranchComparePage
from ingest.advantages import STD_EPS
from ingest.schema import Rollout
from tests.conftest import data_path
from tests.helpers import ingest, rollout, write_jsonl


def case(name: str):
    return data_path("cases", name)


def _chips(html: str, state: str) -> list[str]:
    return re.findall(rf'<span class="tok tok-{state}[^"]*" id="t-(\d+)"', html)


def test_case01_drift_branch_says_why_it_forked_and_where_it_differs(client, engine):
    assert ingest(engine, case("01-token-drift-retokenization.json"), run="cases").ok
    d = client.get("/runs/cases/rollouts/case01.json").json()
    b1 = d["branches"][1]
    assert b1["fork"]["reason"] == "rerender" and b1["fork"]["at"] is None
    assert "re-render" in client.get("/runs/cases/rollouts/case01?branch=1").text
    kinds = {n["idx"]: n["kind"] for n in d["graph"]["nodes"]}
    assert kinds[2] == "rerender"
    cmp = client.get("/runs/cases/rollouts/case01.json?branch=0&vs=1").json()
    assert cmp["first_difference"] == 3  # expected 10, found 12
    a, b = cmp["sides"]
    firsts = [[t["id"] for m in s["messages"] for t in m["tokens"] if t["first_diff"]] for s in (a, b)]
    assert firsts == [[10], [12]]
    # the twin is the page model, field for field (extra keys are refused)
    assert BranchComparePage.model_validate(cmp).model_dump(mode="json") == cmp
    html = client.get("/runs/cases/rollouts/case01?branch=0&vs=1").text
    assert html.count("tok-first-diff") == 2


def test_case04_missing_logprobs_are_hatched_never_zero(client, engine):
    assert ingest(engine, case("04-logprobs-length-mismatch.json"), run="cases").ok
    d = client.get("/runs/cases/rollouts/case04a.json").json()
    toks = [t for m in d["messages"] for t in m["tokens"] if t["trained"]]
    assert [t["lpb"] for t in toks][-2:] == [-1, -1] and [t["logprob"] for t in toks][-2:] == [None, None]
    html = client.get("/runs/cases/rollouts/case04a").text
    assert len(re.findall(r'class="tok tok-trained tok-nolp[^"]*"[^>]*data-lpb="-1"', html)) == 2
    b = client.get("/runs/cases/rollouts/case04b.json").json()
    suspect = [t for m in b["messages"] for t in m["tokens"] if t["suspect"]]
    assert [t["logprob"] for t in suspect] == [0.0, 0.0]
    assert "tok-suspect" in client.get("/runs/cases/rollouts/case04b").text


def test_case08_split_character_rebuilt_and_lost_bytes_marked(client, engine):
    assert ingest(engine, case("08-utf8-split-across-tokens.json"), run="cases").ok
    stem = "08-utf8-split-across-tokens"
    a = client.get(f"/runs/cases/rollouts/{stem}%23variant_a.json").json()
    parts = [t["piece"] for t in a["messages"][0]["tokens"] if t["piece"]["partial"]]
    assert [(p["hex"], p["joined"], p["join"]) for p in parts] == [("f0 9f", "😀", "start"), ("98 80", "😀", "end")]
    html = client.get(f"/runs/cases/rollouts/{stem}%23variant_a").text
    assert "tok-partial j-start" in html and "part of “😀”" in html
    b = client.get(f"/runs/cases/rollouts/{stem}%23variant_b").text
    assert b.count("tok-lost") == 4


def test_case13_empty_response_and_untokenized_terminal_message(client, engine):
    assert ingest(engine, case("13-empty-assistant-response.json"), run="cases").ok
    html = client.get("/runs/cases/rollouts/case13").text
    assert "(empty response, 1 token: 151645)" in html
    d = client.get("/runs/cases/rollouts/case13.json").json()
    tool = next(m for m in d["messages"] if m["role"] == "tool")
    assert tool["n_tokens"] == 0
    assert "no tokens" in html


def test_case30_mask_on_environment_tokens_is_a_fault_not_sampled(client, engine):
    assert ingest(engine, case("30-mask-on-env-tokens.jsonl")).ok
    d = client.get("/runs/bugqa/rollouts/case30.json").json()
    states = {m["idx"]: {t["state"] for t in m["tokens"]} for m in d["messages"]}
    assert states == {0: {"context"}, 1: {"trained"}, 2: {"fault"}, 3: {"fault"}, 4: {"trained"}}
    html = client.get("/runs/bugqa/rollouts/case30").text
    assert len(_chips(html, "fault")) == 7 and "trained, not sampled" in html
    # never described as sampled
    assert all("loss mask 1 on a token the policy did not sample" in t
               for t in re.findall(r'tok-fault[^>]*title="([^"]*)"', html))


def _chain(rid: str, n: int, tokens: int = 3) -> Rollout:
    nodes = []
    for i in range(n):
        sampled = i % 2 == 1
        nodes.append({"parent": i - 1 if i else None, "sampled": sampled,
                      "message": {"role": "assistant" if sampled else "user", "content": f"m{i}"},
                      "token_ids": list(range(tokens)), "mask": [sampled] * tokens,
                      "logprobs": [-0.5] * tokens if sampled else [None] * tokens})
    return Rollout.model_validate({"schema": "rollscope/1", "id": rid, "run": {"id": "r1"}, "nodes": nodes,
                                   "reward": 1.0, "ending": {"type": "submitted"}})


def test_focus_opens_the_page_holding_any_message_or_token(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [_chain("long", 123)]))
    d = client.get("/runs/r1/rollouts/long.json?focus=m-110").json()
    assert d["offset"] == 100 and d["range"] == {"first": 100, "last": 122, "total": 123}
    assert d["prev_url"].endswith("offset=50")
    html = client.get("/runs/r1/rollouts/long?focus=m-110").text
    assert 'id="m-110"' in html and "messages 100–122 of 123" in html
    t = client.get("/runs/r1/rollouts/long.json?focus=t-200").json()  # 3 tokens a message
    assert t["offset"] == 50 and any(m["idx"] == 66 and m["t0"] == 198 for m in t["messages"])
    assert client.get("/runs/r1/rollouts/long?focus=x-1").status_code == 422


def test_token_windows_and_the_window_around_an_offset(client, engine, tmp_path):
    r = rollout("big", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    r.nodes[1].token_ids = list(range(5000))
    r.nodes[1].mask, r.nodes[1].logprobs = [True] * 5000, [-0.1] * 5000
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [r]))
    html = client.get("/runs/r1/rollouts/big").text
    assert html.count('class="tok-window"') == 10 and len(_chips(html, "trained")) == 256  # 256 inline, 512 a window
    w = client.get("/runs/r1/rollouts/big?branch=0&node=1&from=1024&to=2048", headers={"HX-Request": "true"}).text
    assert "<html" not in w and len(_chips(w, "trained")) == 1024 and 'id="t-1027"' in w
    j = client.get("/runs/r1/rollouts/big.json?at=3003&radius=2").json()
    assert [t["t"] for t in j["tokens"]] == [3001, 3002, 3003, 3004, 3005]
    assert [t["i"] for t in j["tokens"]] == [2998, 2999, 3000, 3001, 3002] and j["total"] == 5003
    across = client.get("/runs/r1/rollouts/big.json?at=2&radius=2").json()  # spans two messages
    assert [(t["node"], t["i"]) for t in across["tokens"]] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    focus = client.get("/runs/r1/rollouts/big?focus=t-4500").text
    assert 'id="t-4500"' in focus


def test_graph_in_the_twin_and_collapsed_svg(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [_chain("long", 300)]))
    d = client.get("/runs/r1/rollouts/long.json").json()
    nodes = d["graph"]["nodes"]
    assert len(nodes) == 300 and nodes[5] == {"idx": 5, "parent": 4, "role": "assistant", "sampled": True,
                                              "n_tokens": 3, "n_trained": 3, "kind": None, "branches": [0]}
    assert d["svg"]["collapsed"] and len(d["svg"]["units"]) == 3
    assert [u["count"] for u in d["svg"]["units"]] == [0, 298, 0]
    assert d["branches"][0]["sample"] == 0 and d["branches"][0]["n_trained"] == 450


def test_many_branches_are_drawn_few_and_switched_by_number(client, engine, tmp_path):
    nodes = [{"parent": None, "message": {"role": "user", "content": "q"}, "token_ids": [1], "mask": [False]}]
    for k in range(200):
        nodes.append({"parent": 0, "sampled": True, "message": {"role": "assistant", "content": f"a{k}"},
                      "token_ids": [2, k], "mask": [True, True], "logprobs": [-0.1, -0.2]})
    r = Rollout.model_validate({"schema": "rollscope/1", "id": "bon", "run": {"id": "r1"}, "nodes": nodes,
                                "reward": 1.0})
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [r]))
    d = client.get("/runs/r1/rollouts/bon.json?branch=150").json()
    assert len(d["branches"]) == 200 and d["svg"]["hidden_branches"] > 150
    assert d["branches"][150]["fork"]["reason"] == "resample" and d["branches"][150]["sample"] == 150
    html = client.get("/runs/r1/rollouts/bon?branch=150").text
    # the neighbours as links and a number to open any branch; never a list of all 200
    assert 'name="branch" min="0" max="199" value="150"' in html and "<option" not in html
    assert [int(x) for x in re.findall(r'class="branch-link[^"]*"[^>]*>branch (\d+)<', html)] == list(range(147, 154))
    assert 'class="branch-link current" aria-current="page">branch 150<' in html and len(html) < 60_000


def test_byte_level_pieces_read_as_what_they_mean(client, engine, tmp_path):
    rec = {"rollout_id": "bpe", "turns": [{"prompt_ids": [1, 2], "prompt_pieces": ["Hi", "Ċ"],
                                          "completion_ids": [5, 6, 7], "completion_pieces": ["æĺ¯", "Ġworld", "Ċ"],
                                          "logprobs": [-0.1, -0.2, -0.3]}], "reward": 1.0}
    (tmp_path / "bpe.json").write_text(json.dumps(rec))
    assert ingest(engine, tmp_path / "bpe.json", run="b").ok
    d = client.get("/runs/b/rollouts/bpe.json").json()
    pieces = [t["piece"] for m in d["messages"] for t in m["tokens"]]
    assert [p["text"] for p in pieces] == ["Hi", "\n", "是", " world", "\n"]
    assert [p.get("raw") for p in pieces] == [None, "Ċ", "æĺ¯", "Ġworld", "Ċ"]
    html = client.get("/runs/b/rollouts/bpe").text
    assert 'data-raw="æĺ¯"' in html and ">是</span>" in html


def test_group_estimators_recorded_advantages_and_diff(client, engine, tmp_path):
    rewards = [1.0, 1.0, 0.0, 0.0]
    rs = []
    for i, rw in enumerate(rewards):
        r = rollout(f"m{i}", group="g", index=i, reward=rw, ending="error" if i == 3 else "submitted")
        mean = 2 / 3  # errors dropped: (1, 1, 0)
        r.nodes[1].advantages = [rw - mean] * 3 if i != 1 else [0.9] * 3  # m1's recorded value matches nothing
        if i == 2:
            r.nodes[1].token_ids = [110, 999, 112]
        rs.append(r)
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs))
    d = client.get("/runs/r1/groups/g.json").json()
    m = {x["rollout_id"]: x for x in d["members"]}
    e = m["m0"]["estimators"]["errors_dropped"]
    s = math.sqrt(((1 / 3) ** 2 * 2 + (2 / 3) ** 2) / 2)  # sample std of (1, 1, 0)
    assert math.isclose(e["dr_grpo"], 1 / 3) and math.isclose(e["grpo"], (1 / 3) / (s + STD_EPS))
    assert math.isclose(e["rloo"], 1 - 0.5)
    assert m["m3"]["estimators"]["errors_dropped"] is None
    assert math.isclose(m["m3"]["estimators"]["errors_as_zero"]["rloo"], 0 - 2 / 3)
    assert math.isclose(d["policies"]["errors_dropped"]["std_sample"], s)
    assert m["m0"]["recorded_advantage"]["matches"] == ["errors_dropped:dr_grpo"]
    assert m["m1"]["recorded_advantage"]["mismatch"] is True
    assert [x["aligned"]["tokens"][0]["t"] for x in d["members"]] == [0, 0, 0, 0]
    assert d["alignment"]["shared_prefix"] == 4  # the user's 3 tokens + the first sampled one
    html = client.get("/runs/r1/groups/g").text
    assert "std (sample, n − 1)" in html and "matches no estimator" in html and "RLOO" in html
    order = [x["rollout_id"] for x in client.get("/runs/r1/groups/g.json?sort=reward").json()["members"]]
    assert order[:2] == ["m0", "m1"]
    diff = client.get("/runs/r1/groups/g.json?a=m0&b=m2").json()
    assert diff["first_token"] == 4 and diff["first_message"] is None  # same text, other tokens
    assert DiffPage.model_validate(diff).model_dump(mode="json") == diff
    assert [r["a"]["role"] for r in diff["messages"]] == [r["b"]["role"] for r in diff["messages"]]
    assert "tok-first-diff" in client.get("/runs/r1/groups/g?a=m0&b=m2").text


def test_group_without_learning_signal_is_warned(client, engine, tmp_path):
    rs = [rollout(f"s{i}", group="same", index=i, reward=1.0) for i in range(3)]
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs))
    d = client.get("/runs/r1/groups/same.json").json()
    assert "no learning signal with errors dropped: all rewards equal" in d["signal_warnings"]


def test_previous_and_next_rollout_within_the_list(client, engine, tmp_path):
    rs = [rollout(f"n{i}", step=i // 2, ending="error" if i % 2 else "submitted") for i in range(6)]
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs))
    html = client.get("/runs/r1/rollouts?ending=error").text
    assert 'href="/runs/r1/rollouts/n3?list=ending%3Derror"' in html
    d = client.get("/runs/r1/rollouts/n3.json?list=ending%3Derror").json()
    nav = d["list_nav"]
    assert (nav["prev"], nav["next"]) == ("n1", "n5")  # the errors only, in the list's order
    assert nav["next_url"] == "/runs/r1/rollouts/n5.json?list=ending%3Derror"  # the twin links twins
    assert nav["list_url"] == "/runs/r1/rollouts.json?ending=error"
    first = client.get("/runs/r1/rollouts/n0.json?list=").json()["list_nav"]
    assert first["prev"] is None and first["next"] == "n1"
    assert client.get("/runs/r1/rollouts/n0.json").json()["list_nav"] is None
    page = client.get("/runs/r1/rollouts/n3?list=ending%3Derror").text
    assert 'data-next="/runs/r1/rollouts/n5?list=ending%3Derror"' in page
    # a chart's drill-down list (by step) and an out-of-range step (dropped: the wider list)
    nav = client.get("/runs/r1/rollouts/n3.json?list=step%3D1%26ending%3Derror").json()["list_nav"]
    assert (nav["prev"], nav["next"]) == (None, None)  # n3 is step 1's only error
    assert client.get("/runs/r1/rollouts/n2?list=step%3D1").status_code == 200
    nav = client.get("/runs/r1/rollouts/n3.json?list=step%3D99999999999").json()["list_nav"]
    assert (nav["prev"], nav["next"]) == ("n2", "n4")


def test_reasoning_left_out_of_a_re_rendered_prompt_is_marked(client, engine, tmp_path):
    nodes = [
        {"parent": None, "message": {"role": "user", "content": "q"}, "token_ids": [1, 2], "mask": [False, False]},
        {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "a", "reasoning_content": "think"},
         "token_ids": [3, 4, 5], "mask": [True] * 3, "logprobs": [-0.1] * 3},
        {"parent": None, "message": {"role": "user", "content": "q a q2"}, "token_ids": [1, 2, 5, 6],
         "mask": [False] * 4, "token_drift": {"turn": 1, "index": 2, "expected": 3, "found": 5}},
        {"parent": 2, "sampled": True, "message": {"role": "assistant", "content": "b"},
         "token_ids": [7], "mask": [True], "logprobs": [-0.2]},
    ]
    r = Rollout.model_validate({"schema": "rollscope/1", "id": "strip", "run": {"id": "r1"}, "nodes": nodes})
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [r]))
    d = client.get("/runs/r1/rollouts/strip.json").json()
    assert d["messages"][1]["reasoning_dropped_in"] == [1]
    assert d["branches"][1]["fork"]["reason"] == "rerender" and d["branches"][1]["sample"] == 1
    assert "not in the context of later turns (branch 1)" in client.get("/runs/r1/rollouts/strip").text


def test_chart_colours_match_the_ending_badges():
    import re as _re
    from pathlib import Path

    from app.charts import ENDING_COLORS

    css = Path(__file__).resolve().parents[2].joinpath("static", "app.css").read_text()
    badges = dict(_re.findall(r"\.ending-([a-z_]+) \{ background: (#[0-9a-f]{6}); \}", css))
    assert badges == ENDING_COLORS


def test_tool_call_durations_from_a_real_openhands_trajectory(client, engine):
    """OpenHands stamps the action (the call) and the observation (its result): the call's
    duration is their difference, in the timeline and on the call, in the page and its twin."""
    assert ingest(engine, data_path("realdata", "openhands", "basic.json"), run="oh").ok
    d = client.get("/runs/oh/rollouts/basic.json").json()
    call = d["messages"][1]["tool_calls"][0]
    assert call["result_node"] == 2
    assert math.isclose(call["duration"], 13.801384 - 13.764487, abs_tol=1e-5)  # 22:45:13.764487 → .801384
    rows = d["timeline"]["rows"]
    tools = [r for r in rows if r["kind"] == "tool"]
    assert (len(tools) == 1 and tools[0]["node"] == 1 and tools[0]["result_node"] == 2
            and tools[0]["name"] == call["name"])
    assert math.isclose(tools[0]["duration"], call["duration"]) and d["timeline"]["n_tool"] == 1
    html = client.get("/runs/oh/rollouts/basic").text
    assert "1 tool call over" in html and 'class="tl-bar tl-tool"' in html and "after 0.037 s" in html


def test_tool_calls_and_model_calls_share_the_timeline_of_a_real_verifiers_episode(client, engine):
    assert ingest(engine, data_path("realdata", "verifiers", "train_multi_tool.jsonl"), run="vf").ok
    rid = client.get("/runs/vf/rollouts.json").json()["rollouts"][0]["rollout_id"]
    tl = client.get(f"/runs/vf/rollouts/{rid}.json").json()["timeline"]
    assert (tl["n_model"], tl["n_tool"]) == (4, 3) and tl["rows_total"] == 7
    starts = [r["start"] for r in tl["rows"]]
    assert starts == sorted(starts) and starts[0] == 0
    # each tool call runs from its calling message to its result (both stamped by verifiers)
    assert [(r["node"], r["result_node"]) for r in tl["rows"] if r["kind"] == "tool"] == [(1, 2), (3, 4), (5, 6)]
    assert all(0 < r["duration"] < 1 for r in tl["rows"])


def test_compaction_nodes_from_atif_and_openhands_are_drawn_as_compaction(client, engine, tmp_path):
    """No handed or real file records a compaction, so two real files get the record their
    formats define: an ATIF system step with `extra.context_management.type = "compaction"`
    (Harbor's RFC 0001) inside the real multi-tool trajectory, and an OpenHands condenser's
    `condensation` action and `condense` observation inside the real basic.json stream."""
    atif = json.loads(data_path("realdata", "atif", "multi_tool.trajectory.json").read_text())
    compaction = {"step_id": 0, "source": "system", "message": "Context compaction performed",
                  "observation": {"results": [{"content": "Summary: the tool was called twice."}]},
                  "extra": {"context_management": {"type": "compaction", "boundary": "replace"}}}
    atif["steps"].insert(3, compaction)
    for k, step in enumerate(atif["steps"]):
        step["step_id"] = k + 1
    (tmp_path / "atif").mkdir()
    (tmp_path / "atif" / "trajectory.json").write_text(json.dumps(atif))
    events = json.loads(data_path("realdata", "openhands", "basic.json").read_text())
    events[3:3] = [
        {"id": 90, "timestamp": "2025-01-27T22:45:15.000000", "source": "agent", "message": "Summary of the edits",
         "action": "condensation", "args": {"forgotten_events_start_id": 0, "forgotten_events_end_id": 4,
                                             "summary": "Created game_2048.py with the board logic.",
                                             "summary_offset": 1}},
        {"id": 91, "timestamp": "2025-01-27T22:45:15.100000", "source": "environment",
         "observation": "condense", "content": "Created game_2048.py with the board logic.", "extras": {}}]
    (tmp_path / "oh.json").write_text(json.dumps(events))
    assert ingest(engine, tmp_path / "atif" / "trajectory.json", run="cm").ok
    assert ingest(engine, tmp_path / "oh.json", run="oh").ok

    d = client.get("/runs/cm/rollouts/traj-multi-tool.json").json()
    kinds = {n["idx"]: n["kind"] for n in d["graph"]["nodes"] if n["kind"]}
    (idx,) = kinds
    assert kinds[idx] == "compaction" and d["graph"]["nodes"][idx]["role"] == "system"
    assert next(m for m in d["messages"] if m["idx"] == idx)["extra"]["context_management"]["boundary"] == "replace"
    assert '<text x="' in (html := client.get("/runs/cm/rollouts/traj-multi-tool").text) and "k-compaction" in html

    o = client.get("/runs/oh/rollouts/oh.json").json()
    marked = [(n["idx"], n["role"]) for n in o["graph"]["nodes"] if n["kind"] == "compaction"]
    assert len(marked) == 2
    cond = next(m for m in o["messages"] if m["idx"] == marked[0][0])
    assert cond["content"] == "Created game_2048.py with the board logic." and cond["source_role"] == "condensation"
    assert cond["extra"]["forgotten_events"] == {"start": 0, "end": 4}
    # the condenser is not a model call: the calls are still the two model responses
    assert len(o["calls"]) == 2 and all(c["node"] != marked[0][0] for c in o["calls"])
    assert "k-compaction" in client.get("/runs/oh/rollouts/oh").text

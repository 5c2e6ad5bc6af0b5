"""app.mcp.answers without a server: twins in the shapes the pages answer today and in the shapes
the parallel work (issue 24: failures page, grouped search, paired compare) will answer, and twins
missing keys. Links go through a `link` that makes them absolute, as `--url` does."""
from __future__ import annotations

from app.mcp import answers
from app.mcp.reader import Reader, error_message

BASE = "https://rs.example.org"


def link(url):
    return Reader(None, base_url=BASE, where="x").link(url)  # type: ignore[arg-type]


def test_link_drops_the_twin_suffix_only_from_the_path():
    assert link("/runs/a/steps/18.json") == f"{BASE}/runs/a/steps/18"
    assert link("/runs/a/rollouts.json?step=18&ending=error") == f"{BASE}/runs/a/rollouts?step=18&ending=error"
    assert link("/runs/a/rollouts/x.json.json?branch=0") == f"{BASE}/runs/a/rollouts/x.json?branch=0"  # id "x.json"
    assert link("/search.json?q=a.json") == f"{BASE}/search?q=a.json"
    assert link(None) is None
    assert Reader(None, base_url=None, where="x").link("/runs/a.json") == "/runs/a"  # type: ignore[arg-type]


def test_plurals():
    assert answers.plural(1, "hit") == "1 hit" and answers.plural(0, "hit") == "0 hits"
    assert answers.plural(1920, "rollout") == "1,920 rollouts"


def test_error_messages_are_one_line():
    body = {"error": {"code": "not_found", "message": "no run 'x'\nsecond line", "field": None}}
    assert error_message(404, body, "/runs/x.json") == "no run 'x' second line"
    assert error_message(500, None, "/runs/x.json").startswith("Rollscope failed on this request (HTTP 500)")
    assert "\n" not in error_message(422, {"detail": [{"loc": ["q"], "msg": "x" * 1000}]}, "/search.json?q=")
    assert "read token" in error_message(401, {"error": {"message": "reading needs a token"}}, "/runs.json")


def test_failures_answer_to_the_contract():
    twin = {"signatures": [
        {"id": 7, "template": "sandbox exited with code <NUM> (host lost) while running <*>", "count": 41,
         "share": 0.46, "first_step": 18, "last_step": 20, "per_step": {"18": 20, "19": 11, "20": 10},
         "new_at_step": 18, "examples": [{"rollout_id": "s018-g0-r0", "url": "/runs/demo-grpo/rollouts/s018-g0-r0"}],
         "rollouts_url": "/runs/demo-grpo/rollouts?signature=7"},
        {"id": 8, "template": "tool server unavailable (HTTP <NUM>)", "count": 1}]}
    a = answers.failures_answer(twin, link, run="demo-grpo")
    lines = a.text.splitlines()
    assert lines[0] == "2 failure signatures in run demo-grpo, most frequent first:"
    assert "sandbox exited" in lines[1] and "new at step 18" in lines[1]
    assert "41 rollouts (46% of failed), steps 18–20 (18: 20, 19: 11, 20: 10)" in lines[1]
    assert lines[1].endswith(f"{BASE}/runs/demo-grpo/rollouts?signature=7")
    assert lines[3] == "- 'tool server unavailable (HTTP <NUM>)': 1 rollout (— of failed), no steps"
    top = a.data["signatures"][0]
    assert top["examples"] == [{"rollout": "s018-g0-r0", "url": f"{BASE}/runs/demo-grpo/rollouts/s018-g0-r0"}]
    assert a.data["url"] == f"{BASE}/runs/demo-grpo/failures"
    assert answers.failures_answer({}, link, run="r").text.startswith("0 failure signatures in run r.")


def test_search_answer_grouped_hits_and_facets():
    # the shape of app/views/search.py SearchPage's twin
    twin = {"q": "sandbox", "run": "demo-grpo", "total_rollouts": 41, "notes": ["a note"],
            "hits": [{"run_id": "demo-grpo", "rollout_id": "s018-g0-r0", "step": 18, "ending": "error",
                      "ending_detail": "sandbox_crash", "url": "/runs/demo-grpo/rollouts/s018-g0-r0.json",
                      "counts": {"rollout_error": 1},
                      "matches": [{"kind": "rollout_error", "role": None, "node_idx": None, "truncated": True,
                                   "snippet": [{"text": "sandbox", "hit": True}, {"text": " exited", "hit": False}],
                                   "url": "/runs/demo-grpo/rollouts/s018-g0-r0"}]}],
            "facets": {"step": [{"value": 18, "count": 20}, {"value": 19, "count": 11}],
                       "ending": {"error": 41}},
            "next": "c99", "next_url": "/search.json?q=sandbox&run=demo-grpo&after=c99"}
    a = answers.search_answer(twin, link)
    assert a.text.splitlines()[0] == "41 hits for 'sandbox' in run demo-grpo (41 rollouts); 1 on this page."
    assert "By step: 18: 20, 19: 11." in a.text and "By ending: error: 41." in a.text
    assert "«sandbox» exited" in a.text and "after='c99'" in a.text and "Note: a note" in a.text
    assert "rollout_error: '«sandbox» exited' [middle of a long text not indexed]" in a.text
    assert a.data["facets"] == {"step": {18: 20, 19: 11}, "ending": {"error": 41}}
    assert a.data["hits"][0]["url"] == f"{BASE}/runs/demo-grpo/rollouts/s018-g0-r0"
    one = answers.search_answer({"q": "x", "hits": [{"rollout_id": "r", "snippet": []}]}, link)
    assert one.text.startswith("1 hit for 'x' (1 message).")


def test_compare_answer_paired_and_plain():
    twin = {"runs": [{"id": "a", "rollouts": 10, "mean_reward": 0.5, "url": "/runs/a.json"},
                     {"id": "b", "rollouts": 12, "mean_reward": 0.6, "url": "/runs/b.json"}],
            "endings": [{"ending": "error", "shares": [0.1, 0.0], "delta": -0.1}],
            "tasks": [{"task": "t1", "delta": 0.2, "urls": ["/runs/a/rollouts.json?task=t1"]}],
            "paired": {"tasks": [{"task": "t1", "diff": 0.2, "ci_low": 0.05, "ci_high": 0.35, "verdict": "improved",
                                  "urls": ["/runs/a/rollouts.json?task=t1", "/runs/b/rollouts.json?task=t1"]}],
                       "sign_test": {"improved": 1, "regressed": 0, "p_value": 0.5}}}
    a = answers.compare_answer(twin, link)
    assert "- t1: 0.200 [0.050, 0.350] improved" in a.text
    assert "Sign test across tasks: improved 1, regressed 0, p_value 0.500." in a.text
    assert "error -10.0 pts" in a.text
    assert a.data["paired"]["tasks"][0]["urls"][1] == f"{BASE}/runs/b/rollouts?task=t1"
    plain = answers.compare_answer({k: v for k, v in twin.items() if k != "paired"}, link)
    assert "paired" not in plain.data and "t1 0.200" in plain.text
    assert plain.data["url"] == f"{BASE}/compare?runs=a%2Cb"


def test_step_answer_names_new_signatures_when_the_twin_has_them():
    twin = {"run": {"id": "r"}, "step": 3, "rollouts": 1, "headline": ["h"],
            "new_signatures": [{"template": "boom <NUM>", "count": 1, "new_at_step": 3}]}
    a = answers.step_answer(twin, link)
    assert "New failure signatures at this step: 'boom <NUM>' (1 rollout)" in a.text
    assert a.data["url"] == f"{BASE}/runs/r/steps/3"
    bare = answers.step_answer({}, link)  # a twin missing everything: an answer, not an error
    assert bare.text.startswith("Step None of run None")


def test_quote_shows_invisible_characters_as_code_points():
    assert answers.quote("a\u202eb\u200bc\xadd") == "'a⟨U+202E⟩b⟨U+200B⟩c⟨U+00AD⟩d'"
    assert answers.quote("line\nnext\x00") == "'line\\nnext\\x00'"  # ASCII controls as repr writes them
    assert answers.quote("héllo «x»") == "'héllo «x»'" and answers.quote(None) == "None"


def test_rollout_answer_tool_error_is_the_tools_message():
    twin = {"rollout": {"rollout_id": "r", "url": "/runs/a/rollouts/r.json"},
            "messages": [{"idx": 2, "role": "tool", "content": "\nError: no such file\nmore",
                          "tool_error": "error text"},
                         {"idx": 3, "role": "tool", "content": "boom", "tool_error": "division by zero"},
                         {"idx": 4, "role": "tool", "content": "", "tool_error": "is_error"}]}
    a = answers.rollout_answer(twin, link)
    assert "tool error: 'Error: no such file'" in a.text and "tool error: 'division by zero'" in a.text
    assert "tool error (flagged is_error, no message)" in a.text and "'error text'" not in a.text
    assert [m.get("tool_error") for m in a.data["messages"]] == ["Error: no such file", "division by zero", None]


def test_compare_answer_notes_and_runs_other_than_two():
    twin = {"runs": [{"id": "a"}, {"id": "b"}],
            "paired": {"shared_tasks": 1, "tasks": [{"task": "t1", "diff": None, "verdict": "unclear",
                                                     "note": "not in run B"}]}}
    a = answers.compare_answer(twin, link)
    assert "- t1: — unclear (not in run B)" in a.text and "(1 task, 1 task in both runs)" in a.text
    three = {"runs": [{"id": "a"}, {"id": "b"}, {"id": "c"}], "paired": None,
             "tasks": [{"task": "t1", "delta": None}]}
    t = answers.compare_answer(three, link).text
    assert "The paired comparison by task needs exactly two runs; 3 are compared." in t and "run): ." not in t
    noted = answers.compare_answer({**three, "paired_note": "needs two."}, link)
    assert "needs two." in noted.text and noted.data["paired_note"] == "needs two."


def test_compare_answer_with_no_task_in_common_says_so_and_counts_the_rest():
    tasks = [{"task": f"t{i}", "diff": None, "verdict": None, "note": "not in run B" if i < 8 else "not in run A"}
             for i in range(13)]
    twin = {"runs": [{"id": "a"}, {"id": "b"}],
            "paired": {"shared_tasks": 0, "tasks": tasks, "sign_test": {"n_plus": 0, "n_minus": 0, "p": None}}}
    a = answers.compare_answer(twin, link)
    assert "No task in common: none of the 13 tasks has scored rollouts in both runs" in a.text
    assert "Sign test" not in a.text and "p —" not in a.text
    assert "- t9: — (not in run A)" in a.text and "... and 3 more tasks" in a.text


def test_a_rollout_or_hit_without_a_step_says_nothing_of_its_step():
    r = answers.rollout_answer({"rollout": {"rollout_id": "task0-trial0", "step": None, "group_id": None,
                                            "task_key": "t0", "url": "/runs/tau/rollouts/task0-trial0.json"}},
                               link)
    assert r.text.startswith("Rollout task0-trial0 (") and "step None" not in r.text and "task t0" in r.text
    s = answers.search_answer({"q": "x", "hits": [{"run_id": "tau", "rollout_id": "r", "step": None,
                                                   "ending": "submitted", "matches": []}]}, link)
    assert "- tau / r (submitted)" in s.text and "step None" not in s.text
    rows = answers.rollouts_answer({"run": {"id": "tau"}, "rollouts": [
        {"rollout_id": "r", "step": None, "task_key": "t0", "ending": "submitted", "url": "/runs/tau/rollouts/r"}]},
        link)
    assert "- r t0: submitted" in rows.text and "step None" not in rows.text

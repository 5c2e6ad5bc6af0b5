"""Faults found by a fresh-user QA pass, through the real HTTP app on SQLite and Postgres:
bidi controls and invisible characters in trace text are shown, never acted on (JSON keeps them)."""
from __future__ import annotations

import json
import re
from urllib.parse import urlencode

from app.text import INVISIBLE
from app.worker.sync import register_tokenizer
from ingest.schema import Rollout
from tests.conftest import data_path
from tests.helpers import ingest, write_jsonl

RLO, PDF, ZWSP, ZWJ, WJ, BOM = "\u202e", "\u202c", "\u200b", "\u200d", "\u2060", "\ufeff"
HOSTILE_ID = f"abc{RLO}fed"
TEXT = f"{RLO}evil.exe{PDF} txt"
ANY_INVISIBLE = re.compile("[" + "".join(map(chr, sorted(cp for cp in INVISIBLE if cp < 0x10000))) + "]")


def hostile_rollout() -> Rollout:
    return Rollout.model_validate({
        "schema": "rollscope/1", "id": HOSTILE_ID, "run": {"id": f"run{ZWSP}1"}, "step": 1, "reward": 1.0,
        "ending": {"type": "submitted"}, "group": {"id": f"g{WJ}1", "index": 0},
        "task": {"key": f"task{ZWJ}key", "data": {"question": f"q{BOM}uestion", "answer": f"{RLO}42"}},
        "nodes": [
            {"parent": None, "message": {"role": "user", "content": TEXT + " " + "x" * 2100},
             "token_ids": [1824, 32003], "mask": [False, False]},
            {"parent": 0, "sampled": True, "token_ids": [28781, 32003], "mask": [True, True], "logprobs": [-0.1, -0.2],
             "message": {"role": "assistant", "content": "calling",
                         "tool_calls": [{"id": f"call{ZWSP}1", "name": f"run{RLO}sh",
                                         "arguments": f'{{"cmd": "{RLO}ls"}}'}]}},
            {"parent": 1, "message": {"role": "tool", "tool_call_id": f"call{ZWSP}1", "content": f"out{ZWSP}put"}},
        ]})


def load(engine, tmp_path):
    key = register_tokenizer(engine, data_path("tokenizers", "mistral-v1-tokenizer.model"),
                             {32000: "<pad>", 32001: "<s1>", 32002: "<s2>", 32003: f"{RLO}piece{ZWSP}"})
    sibling = Rollout.model_validate(dict(hostile_rollout().model_dump(mode="json", by_alias=True), id="plain",
                                          group={"id": f"g{WJ}1", "index": 1}))
    assert ingest(engine, write_jsonl(tmp_path / "in.jsonl", [hostile_rollout(), sibling]), tokenizer_key=key).ok


def test_pages_show_invisible_characters_and_twins_keep_them(engine, client, tmp_path):
    load(engine, tmp_path)
    run = f"run{ZWSP}1"
    from app import urls
    rollout_url = urls.rollout(run, HOSTILE_ID)
    pages = [urls.runs(), urls.run(run), urls.rollouts(run), rollout_url, urls.group(run, f"g{WJ}1")]
    for url in pages:
        r = client.get(url)
        assert r.status_code == 200, url
        shown = re.sub(r' value="[^"]*"', "", r.text)  # form values are sent back, not shown
        assert not ANY_INVISIBLE.search(shown), (url, ANY_INVISIBLE.findall(shown)[:5])
        assert "⟨U+" in r.text, url
    html = client.get(rollout_url).text
    title = re.search(r"<title>(.*?)</title>", html, re.S).group(1)
    assert "abc⟨U+202E⟩fed" in title
    assert "<bdi>abc⟨U+202E⟩fed</bdi>" in html  # breadcrumb and heading, isolated
    assert "⟨U+202E⟩evil.exe⟨U+202C⟩ txt" in html  # message text
    assert "run⟨U+202E⟩sh" in html and "⟨U+202E⟩ls" in html and "out⟨U+200B⟩put" in html  # tool call
    assert "task⟨U+200D⟩key" in html, re.findall(r"task.{0,30}key", html)  # task key
    assert "q⟨U+FEFF⟩uestion" in html or "q\\ufeffuestion" in html  # task data (tojson writes \\uXXXX)
    assert "⟨U+202E⟩piece⟨U+200B⟩" in html  # a token piece (app/chips.py)
    # the rollouts list shows the id revealed; its link still opens the rollout
    listing = client.get(urls.rollouts(run)).text
    assert "abc⟨U+202E⟩fed" in listing
    # "show full text" (the page's link) reveals too; the plain endpoint is the stored text
    full = re.search(r'href="([^"]+)" class="show-full"', html).group(1).replace("&amp;", "&")
    assert full.endswith("?reveal=1")
    assert client.get(full).text.startswith("⟨U+202E⟩evil.exe⟨U+202C⟩ txt")
    assert client.get(full.removesuffix("?reveal=1")).text.startswith(TEXT)
    # form fields send back the raw id (shown revealed): the group's diff picker still works
    group_html = client.get(urls.group(run, f"g{WJ}1")).text
    assert f'<option value="{HOSTILE_ID}"' in group_html and ">abc⟨U+202E⟩fed</option>" in group_html
    r = client.get(urls.group(run, f"g{WJ}1") + "?" + urlencode({"a": HOSTILE_ID, "b": "plain"}))
    assert r.status_code == 200
    # the JSON twin is data: the raw text, exactly
    d = client.get(urls.rollout(run, HOSTILE_ID, json=True)).json()
    assert d["rollout"]["rollout_id"] == HOSTILE_ID
    assert d["messages"][0]["content"].startswith(TEXT)
    assert d["messages"][1]["tool_calls"][0]["name"] == f"run{RLO}sh"


def test_out_of_range_parameters_are_422_naming_the_field(engine, client, tmp_path):
    """A branch, node, offset, token position or radius out of range is refused, on the page and
    its twin, in the one error shape; values in range still answer 200."""
    fork = Rollout.model_validate({
        "schema": "rollscope/1", "id": "fork", "run": {"id": "rng"}, "step": 1, "reward": 1.0,
        "ending": {"type": "submitted"}, "group": {"id": "g", "index": 0},
        "nodes": [
            {"parent": None, "message": {"role": "user", "content": "pick"}, "token_ids": [1, 2], "mask": [False] * 2},
            {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "A"},
             "token_ids": [3, 4, 5], "mask": [True] * 3, "logprobs": [-0.1] * 3},
            {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "B"},
             "token_ids": [3, 6], "mask": [True] * 2, "logprobs": [-0.1] * 2}]})
    other = Rollout.model_validate(dict(fork.model_dump(mode="json", by_alias=True), id="other",
                                        group={"id": "g", "index": 1}))
    assert ingest(engine, write_jsonl(tmp_path / "in.jsonl", [fork, other])).ok
    page = "/runs/rng/rollouts/fork"
    ok = ["", "?branch=1", "?offset=1", "?focus=t-4", "?focus=m-2", "?at=4&radius=2048", "?node=1&from=0&to=3",
          "?vs=1", "?branch=1&vs=0", "?tokens=all"]
    for q in ok:
        for suffix in ("", ".json"):
            assert client.get(page + suffix + q).status_code == 200, suffix + q
    bad = {"?branch=2": "branch", "?branch=99": "branch", "?offset=2": "offset", "?focus=t-5": "focus",
           "?focus=t-999999": "focus", "?focus=m-7": "focus", "?branch=1&focus=t-4": "focus",
           "?at=5": "at", "?at=5&radius=999999": "radius", "?at=0&radius=2049": "radius",
           "?node=2&from=0&to=2": "node", "?node=1&from=4": "from", "?node=1&from=2&to=1": "to",
           "?node=1&from=0&to=9": "to", "?vs=2": "vs", "?branch=5&vs=0": "branch", "?tokens=some": "tokens"}
    for q, field in bad.items():
        for suffix in ("", ".json"):
            r = client.get(page + suffix + q)
            assert r.status_code == 422, (suffix + q, r.status_code)
            if suffix:
                err = r.json()["error"]
                assert err["code"] == "invalid" and err["field"] == field, (q, err)
            else:
                assert r.headers["content-type"].startswith("text/html")
    assert "0..1" in client.get(page + ".json?branch=99").json()["error"]["message"]
    # the group page: a diff names two members of the group
    group = "/runs/rng/groups/g"
    assert client.get(group + ".json?a=fork&b=other").status_code == 200
    for q, field in {"?a=fork&b=nobody": "b", "?a=nobody&b=fork": "a", "?a=fork": "b", "?b=fork": "a",
                     "?sort=bogus": "sort"}.items():
        r = client.get(group + ".json" + q)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, (q, r.status_code, r.text[:200])
    assert client.get("/runs/rng/groups/nope.json?a=x&b=y").status_code == 404


def test_receiving_means_a_live_source_not_a_finished_cli_batch(engine, client, tmp_path):
    """A one-off `rollscope ingest` (the CLI's path) leaves the run page quiet; rollouts arriving
    through the worker's spool or `POST /api/v1/ingest` make it "receiving" with the newest step
    in progress."""
    from app import auth
    from app.worker.run import run as run_worker
    from ingest.formats.native import write_line
    from tests.helpers import rollout

    assert ingest(engine, write_jsonl(tmp_path / "cli.jsonl", [rollout(f"c{i}", run="cli", step=i) for i in range(2)])).ok
    d = client.get("/runs/cli.json").json()
    assert d["live"] is False and d["in_progress_step"] is None
    html = client.get("/runs/cli").text
    assert "receiving</span>" not in html and "in progress</span>" not in html

    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "rollouts.jsonl").write_bytes(b"".join(write_line(rollout(f"s{i}", run="spooled", step=i)) for i in range(3)))
    assert run_worker(engine, [spool], once=True, poll=0.05, log=lambda _m: None).commits >= 1
    d = client.get("/runs/spooled.json").json()
    assert d["live"] is True and d["in_progress_step"] == 2
    html = client.get("/runs/spooled").text
    assert "receiving</span>" in html and "in progress</span>" in html

    token, _ = auth.issue(engine, "write")
    r = client.post("/api/v1/ingest", content=write_line(rollout("h0", run="posted", step=5)),
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
    d = client.get("/runs/posted.json").json()
    assert d["live"] is True and d["in_progress_step"] == 5
    # the CLI run stays quiet after the others arrive
    assert client.get("/runs/cli.json").json()["live"] is False


def test_twin_carries_the_graph_once_and_api_caps_message_text(engine, client, tmp_path):
    """A long rollout's later twin pages link the graph instead of repeating it; a huge message
    comes back cut at 65,536 characters in the API's message list, with the full text linked."""
    from app.api.v1.rollouts import MESSAGE_TEXT_CAP

    n = 160
    nodes = [{"parent": i - 1 if i else None, "sampled": i % 2 == 1,
              "message": {"role": "assistant" if i % 2 else "tool", "content": f"turn {i}"}} for i in range(n)]
    huge = "0123456789" * 20_000  # 200,000 characters
    nodes[3]["message"] = {"role": "assistant", "content": huge, "reasoning_content": "short"}
    long = Rollout.model_validate({"schema": "rollscope/1", "id": "long", "run": {"id": "big"}, "step": 1,
                                   "reward": 1.0, "ending": {"type": "submitted"}, "nodes": nodes})
    assert ingest(engine, write_jsonl(tmp_path / "in.jsonl", [long])).ok
    first = client.get("/runs/big/rollouts/long.json")
    assert len(first.json()["graph"]["nodes"]) == n and first.json()["graph_url"] is None
    later = client.get("/runs/big/rollouts/long.json?offset=50")
    d = later.json()
    graph_bytes = len(json.dumps(first.json()["graph"]))
    assert d["graph"] is None and len(later.content) < len(first.content) - graph_bytes / 2
    g = client.get(d["graph_url"])
    assert g.status_code == 200 and len(g.json()["graph"]["nodes"]) == n
    assert client.get("/runs/big/rollouts/long.json?graph=2").status_code == 422
    # the HTML page never builds the twin's graph
    assert client.get("/runs/big/rollouts/long?tokens=all").status_code == 200

    r = client.get("/api/v1/runs/big/rollouts/long/branches/0/messages?limit=10")
    assert r.status_code == 200
    items = r.json()["items"]
    assert len(r.content) < 100_000
    big, small = items[3], items[2]
    assert big["truncated"] is True and big["message"]["content"] == huge[:MESSAGE_TEXT_CAP]
    assert big["message"]["reasoning_content"] == "short"
    assert small["truncated"] is False and small["message"]["content"] == "turn 2"
    full = client.get(big["full_text_url"])
    assert full.status_code == 200 and full.text == huge

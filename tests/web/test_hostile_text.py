"""Hostile text through the real HTTP app on SQLite and Postgres: bidi controls and invisible
characters in trace text are shown, never acted on (JSON keeps them)."""
from __future__ import annotations

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

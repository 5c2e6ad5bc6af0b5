"""The rollout page's shared parts: the seven token states worded once (app/views/tokens.py STATES)
for the legend, its JSON for static/app.js and the chips' titles; the breadcrumbs of every page
from one macro; fragments loaded by htmx attributes, not by hand-rolled fetches."""
from __future__ import annotations

import html as htmllib
import json
import re

from app.views import tokens as tokenview
from tests.conftest import data_path
from tests.helpers import ingest


def test_token_states_are_worded_once_for_legend_script_and_chips(client, engine):
    assert ingest(engine, data_path("cases", "30-mask-on-env-tokens.jsonl")).ok
    page = client.get("/runs/bugqa/rollouts/case30").text
    states = json.loads(htmllib.unescape(re.search(
        r'<script type="application/json" id="token-states">(.*?)</script>', page, re.S).group(1)))
    assert states == tokenview.state_rows()
    assert [s["key"] for s in states] == [k for k, _, _ in tokenview.STATES]
    for _, label, text in tokenview.STATES:
        assert f'<span title="{htmllib.escape(text)}">{htmllib.escape(label)}</span>' in page
    faults = re.findall(r'tok-fault[^>]*title="([^"]*)"', page)
    assert faults and all(htmllib.escape(tokenview.STATE_TEXT["fault"]) in t for t in faults)


def test_breadcrumbs_and_fragments(client, engine):
    assert ingest(engine, data_path("cases", "30-mask-on-env-tokens.jsonl")).ok
    page = client.get("/runs/bugqa/rollouts/case30").text
    crumbs = re.search(r'<nav class="crumbs-nav">(.*?)</nav>', page, re.S).group(1)
    assert crumbs == ('<a href="/runs">runs</a> / <a href="/runs/bugqa"><bdi>bugqa</bdi></a>'
                      ' / <a href="/runs/bugqa/rollouts"><bdi>rollouts</bdi></a> / <bdi>case30</bdi>')
    assert "data-src=" not in page  # every fragment is htmx's (hx-get), none fetched by app.js

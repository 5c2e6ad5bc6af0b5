"""Bidi controls as a person sees them, in Debian's chromium against a live uvicorn server on a
real SQLite file: in ids and messages they are shown as markers and never reverse the text."""
from __future__ import annotations

import pytest

from app import urls
from tests.browser import live_server, open_page
from tests.helpers import ingest, write_jsonl
from tests.web.test_hostile_text import HOSTILE_ID, hostile_rollout

pytestmark = pytest.mark.browser

# Left edge of the first occurrence of each needle in the element's text, through a Range: what
# a reader sees left to right, whatever order the characters are stored in.
POSITIONS = """([sel, needles]) => {
  const root = document.querySelector(sel);
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const out = {};
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    for (const w of needles) {
      const i = n.data.indexOf(w);
      if (i < 0 || w in out) continue;
      const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + w.length);
      out[w] = r.getBoundingClientRect().left;
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app.db.engine import make_engine
    from app.db.migrate import upgrade

    folder = tmp_path_factory.mktemp("pagefix")
    url = f"sqlite:///{folder / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    assert ingest(engine, write_jsonl(folder / "in.jsonl", [hostile_rollout()])).ok
    engine.dispose()
    with live_server(url) as base:
        yield base


def test_bidi_controls_show_as_markers_and_never_reverse_text(server, browser):
    run = "run\u200b1"
    page, problems = open_page(browser, server + urls.rollout(run, HOSTILE_ID))
    assert "abc⟨U+202E⟩fed" in page.title()
    h1 = page.locator("main h1 bdi").first.inner_text()
    crumb = page.locator("header.top nav bdi").last.inner_text()
    assert h1 == crumb == "abc⟨U+202E⟩fed"
    # read left to right: "abc" before "fed" in the heading, "evil.exe" before "txt" in the message
    pos = page.evaluate(POSITIONS, ["main h1", ["abc", "fed"]])
    assert pos["abc"] < pos["fed"], pos
    body = page.locator("#m-0 pre.content").first
    assert body.inner_text().startswith("⟨U+202E⟩evil.exe⟨U+202C⟩ txt")
    pos = page.evaluate(POSITIONS, ["#m-0 pre.content", ["⟨U+202E⟩", "evil", "exe", "txt"]])
    assert pos["⟨U+202E⟩"] < pos["evil"] < pos["exe"] < pos["txt"], pos
    # nothing on the page still carries a raw bidi control or zero-width character
    raw = page.evaluate(r"""() => (document.title + document.body.innerText).match(
        /[\u061C\u180E\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u2069\uFEFF]/g)""")
    assert raw is None, raw
    # "show full text" keeps the markers
    page.locator("#m-0 a.show-full").click()
    page.wait_for_function("() => !document.querySelector('#m-0 a.show-full')")
    assert body.inner_text().startswith("⟨U+202E⟩evil.exe⟨U+202C⟩ txt")
    assert problems == []
    page.close()
    # the list: the id reads left to right too
    page, problems = open_page(browser, server + urls.rollouts(run))
    link = page.get_by_text("abc⟨U+202E⟩fed")
    assert link.count() >= 1
    box_abc = page.evaluate(POSITIONS, ["main table", ["abc", "fed"]])
    assert box_abc["abc"] < box_abc["fed"], box_abc
    page.close()

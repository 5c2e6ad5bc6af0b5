"""The rollout and group views as a person sees them, in Debian's chromium against a live uvicorn
server on a real SQLite file: seven token states that look different, overlays, the branch
switcher, two branches side by side, deep links to any message or token, windows and messages
that load as they scroll into view, the keyboard, and no console errors."""
from __future__ import annotations

import pytest

from ingest.schema import Rollout
from tests.browser import live_server, open_page
from tests.conftest import data_path
from tests.helpers import ingest, write_jsonl

pytestmark = pytest.mark.browser

STYLE = ("""e => { const s = getComputedStyle(e);
  return [s.backgroundColor, s.color, s.borderBottomStyle, s.borderBottomColor, """
         """s.fontStyle, s.fontWeight].join('|'); }""")


def _native(rid: str, nodes: list[dict], **kw) -> Rollout:
    body = {"schema": "rollscope/1", "id": rid, "run": {"id": "v"}, "step": 1, "nodes": nodes, "reward": 1.0,
            "ending": {"type": "submitted"}, **kw}
    return Rollout.model_validate(body)


def _chain(n: int) -> list[dict]:
    nodes = []
    for i in range(n):
        sampled = i % 2 == 1
        nodes.append({"parent": i - 1 if i else None, "sampled": sampled,
                      "message": {"role": "assistant" if sampled else "user", "content": f"message {i}"},
                      "token_ids": [1000 + i, 1001 + i, 1002 + i], "mask": [sampled] * 3,
                      "logprobs": [-0.5] * 3 if sampled else [None] * 3})
    return nodes


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app.db.engine import make_engine
    from app.db.migrate import upgrade
    from app.worker.sync import register_tokenizer

    folder = tmp_path_factory.mktemp("views")
    url = f"sqlite:///{folder / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    key = register_tokenizer(engine, data_path("tokenizers", "mistral-v1-tokenizer.model"),
                             {32000: "<pad>", 32001: "<start_of_turn>", 32002: "<end_of_turn>"})
    states = _native("states", [
        {"parent": None, "message": {"role": "user", "content": "What is 2+2?"},
         "token_ids": [1824, 349, 28705], "mask": [False] * 3, "logprobs": [None] * 3},
        {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "4"},
         "token_ids": [28781, 28723, 32002, -1], "mask": [True] * 4, "logprobs": [-0.1, None, -0.02, -0.5],
         "advantages": [0.5, 0.5, 0.5, None], "trainer_logprobs": [-0.3, -0.5, -0.02, None]},
        {"parent": 1, "message": {"role": "tool", "content": "ok"}, "token_ids": [3371, 3372], "mask": [True, True]},
        {"parent": 2, "sampled": True, "message": {"role": "assistant", "content": "four"},
         "token_ids": [2308, 2309, 32002], "mask": [False] * 3, "logprobs": [-0.2, -0.4, -0.01]},
    ], group={"id": "g1", "index": 0})
    long = _native("long", _chain(123), group={"id": "g1", "index": 1}, reward=0.0)
    strip = _native("strip", [
        {"parent": None, "message": {"role": "user", "content": "go"}, "token_ids": [1, 2], "mask": [False, False]},
        {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "long answer"},
         "token_ids": [1000 + (k % 500) for k in range(6000)], "mask": [True] * 6000, "logprobs": [-0.25] * 6000},
    ])
    fork = _native("fork", [
        {"parent": None, "message": {"role": "user", "content": "pick"}, "token_ids": [1, 2], "mask": [False] * 2},
        {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "A"},
         "token_ids": [330, 331, 332], "mask": [True] * 3, "logprobs": [-0.1] * 3},
        {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "B"},
         "token_ids": [330, 400, 332], "mask": [True] * 3, "logprobs": [-0.1] * 3},
    ])
    assert ingest(engine, write_jsonl(folder / "in.jsonl", [states, long, strip, fork]), tokenizer_key=key).ok
    engine.dispose()
    with live_server(url) as base:
        yield base


def test_each_token_state_has_its_own_style_and_legend(server, browser):
    page, problems = open_page(browser, f"{server}/runs/v/rollouts/states")
    styles = {}
    for state in ("trained", "context", "filtered", "fault", "special", "special_trained", "placeholder"):
        chip = page.locator(f"#messages .tok-{state}").first
        chip.wait_for()
        styles[state] = chip.evaluate(STYLE)
        assert page.locator(f"#token-legend .tok-{state}").count() >= 1, state
    assert len(set(styles.values())) == 7, styles
    # the missing behaviour logprob of a trained token is drawn hatched, never as a value
    nolp = page.locator("#messages .tok-trained.tok-nolp").first
    assert nolp.evaluate("e => getComputedStyle(e).backgroundImage").startswith("repeating-linear-gradient")
    assert "logprob missing" in nolp.get_attribute("title")
    assert "none (context)" in page.locator("#messages .tok-context").first.get_attribute("title")
    # overlays: the behaviour-logprob scale, and trainer − inference only where both exist
    before = page.locator("#messages .tok-trained").first.evaluate(STYLE)
    page.get_by_label("behaviour logprob").check()
    assert page.evaluate("document.body.dataset.overlay") == "logprob"
    assert page.locator('.overlay-legend[data-for="logprob"]').is_visible()
    assert page.locator("#messages .tok-trained").first.evaluate(STYLE) != before
    page.get_by_label("trainer − inference").check()
    compared = page.locator("#messages [data-delta]")
    assert compared.count() == 2  # mask 1 with both logprobs: tokens 0 and 2 of message 1
    assert compared.first.get_attribute("data-delta") == "-0.2000"
    hatched = page.locator('#messages [data-dlb="-1"]')  # mask 1, one logprob missing
    assert hatched.count() == 2 + 2  # message 1's two, and the tool's two mask-1 tokens
    assert hatched.first.evaluate("e => getComputedStyle(e).backgroundImage").startswith("repeating-linear-gradient")
    assert page.locator('#messages .tok-context[data-dlb]').count() == 0  # context is never compared
    # hover shows the details
    page.locator("#messages .tok-trained").first.hover()
    info = page.locator("#tokinfo")
    assert info.is_visible() and "logprob -0.1000" in info.inner_text() and "id 28781" in info.inner_text()
    assert problems == []
    page.close()


def test_branch_switcher_and_side_by_side(server, browser):
    page, problems = open_page(browser, f"{server}/runs/v/rollouts/fork")
    assert page.locator("svg.msg-graph .unit").count() == 3
    assert "branch 0" in page.locator(".branch-label").inner_text()
    page.locator("nav.branches a.branch-link", has_text="branch 1").click()
    page.wait_for_load_state("networkidle")
    label = page.locator(".branch-label").inner_text()
    assert "branch 1" in label and "sample 1" in label and "another sample from the same context" in label
    assert page.locator("#m-2").count() == 1 and page.locator("#m-1").count() == 0
    # the graph highlights the branch being read and opens a node in its branch
    assert page.locator("svg.msg-graph .unit.cur").count() == 2
    page.locator('svg.msg-graph .unit[data-node="1"]').click()
    page.wait_for_load_state("networkidle")
    assert "branch=0" in page.url and page.locator("#m-1.target").count() == 1
    page.goto(f"{server}/runs/v/rollouts/fork?branch=1")
    page.locator("a.compare-link").click()
    page.wait_for_load_state("networkidle")
    sides = page.locator(".side")
    assert sides.count() == 2
    diff = page.locator(".tok-first-diff")
    assert diff.count() == 2 and diff.first.get_attribute("id") == "t-3"  # 330 | 331 vs 400
    assert sorted(diff.evaluate_all("els => els.map(e => e.dataset.id)")) == ["331", "400"]
    assert problems == []
    page.close()


def test_deep_link_to_a_late_message_opens_its_page(server, browser):
    page, problems = open_page(browser, f"{server}/runs/v/rollouts/long#m-110")
    page.wait_for_load_state("networkidle")
    msg = page.locator("#m-110")
    msg.wait_for()
    assert "target" in msg.get_attribute("class") and msg.is_visible()
    assert "messages 100–122 of 123" in page.locator(".load-earlier").inner_text()
    page.locator(".load-earlier a").click()
    page.locator("#m-99").wait_for()
    assert page.locator("article.msg").count() == 73
    assert msg.is_visible()  # the reader stays where they were
    assert problems == []
    page.close()


def test_deep_link_to_a_token_in_a_long_strip(server, browser):
    page, problems = open_page(browser, f"{server}/runs/v/rollouts/strip#t-5502")
    tok = page.locator("#t-5502")
    tok.wait_for()
    assert "target" in tok.get_attribute("class")
    assert tok.get_attribute("data-i") == "5500"  # two prompt tokens come first on the branch
    box, view = tok.bounding_box(), page.viewport_size
    assert box and 0 <= box["y"] <= view["height"]
    assert problems == []
    page.close()


def test_long_strips_and_messages_load_as_they_scroll(server, browser):
    page, problems = open_page(browser, f"{server}/runs/v/rollouts/strip")
    chips = page.locator("#m-1 .tok")
    first = chips.count()
    assert 0 < first < 6000 and page.locator("#m-1 .tok-window").count() > 0  # never all at once
    page.locator("#m-1 .tokens").evaluate("e => { e.scrollTop = e.scrollHeight; }")
    page.wait_for_function("n => document.querySelectorAll('#m-1 .tok').length > n", arg=first)
    page.close()
    page, problems2 = open_page(browser, f"{server}/runs/v/rollouts/long")
    assert page.locator("article.msg").count() == 50
    page.mouse.wheel(0, 100000)
    page.locator("#m-50").wait_for()
    assert page.locator("article.msg").count() >= 100
    assert problems == [] and problems2 == []
    page.close()


def test_keyboard(server, browser):
    page, problems = open_page(browser, f"{server}/runs/v/rollouts/long")
    page.keyboard.press("j")
    page.wait_for_function("location.hash !== ''")
    first = page.evaluate("location.hash")
    page.keyboard.press("j")
    page.wait_for_function("h => location.hash !== h", arg=first)
    second = page.evaluate("location.hash")
    assert int(second[3:]) > int(first[3:])
    page.keyboard.press("k")
    page.wait_for_function("h => location.hash !== h", arg=second)
    page.keyboard.press("?")
    assert page.locator("dialog#keys").is_visible()
    page.keyboard.press("Escape")
    page.keyboard.press("g")
    page.wait_for_url("**/groups/g1")
    page.goto(f"{server}/runs/v/rollouts/fork")
    page.keyboard.press("]")
    page.wait_for_url("**branch=1**")
    page.keyboard.press("[")
    page.wait_for_url("**branch=0**")
    # n / p walk the rollouts list the reader came from
    page.goto(f"{server}/runs/v/rollouts")
    page.get_by_role("link", name="states", exact=True).click()
    page.wait_for_load_state("networkidle")
    page.keyboard.press("n")
    page.wait_for_url("**/rollouts/long?list=**")
    page.keyboard.press("p")
    page.wait_for_url("**/rollouts/states?list=**")
    # arrows walk a focused strip token by token
    page.goto(f"{server}/runs/v/rollouts/states")
    page.locator("#m-1 .tokens").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.i") == "1"
    assert "id 28723" in page.locator("#tokinfo").inner_text()
    assert problems == []
    page.close()


def test_pages_fit_800px(server, browser):
    page = browser.new_page(viewport={"width": 800, "height": 900})
    for path in ("/runs/v/rollouts/states", "/runs/v/rollouts/long", "/runs/v/rollouts/fork?branch=1&vs=0",
                 "/runs/v/groups/g1", "/runs/v/rollouts", "/runs/v"):
        page.goto(f"{server}{path}")
        page.wait_for_load_state("networkidle")
        over = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert over <= 0, (path, over)
    page.close()


def test_rollouts_table_collapses_its_columns_at_800px(browser, tmp_path):
    """At 800 px the lower-priority columns of the rollouts list collapse; the rollout id, its
    ending and its reward stay visible and the page does not scroll sideways. At 1280 px every
    column shows."""
    from tests.browser import served_rollouts
    from tests.helpers import rollout

    rs = [rollout(f"swe-bench/django__django-{11000 + k}/attempt-{k}", run="wide", group=f"group-{k // 2}",
                  index=k % 2, reward=k / 4, ending=("submitted", "error", "truncated")[k % 3],
                  task={"key": f"django__django-{11000 + k}:tests/test_{'very_long_module_name_' * 3}{k}.py"})
          for k in range(6)]
    with served_rollouts(tmp_path, rs) as base:
        for width, collapsed in ((800, True), (1280, False)):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(f"{base}/runs/wide/rollouts")
            page.wait_for_load_state("networkidle")
            over = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert over <= 0, (width, over)
            heads = page.locator("#rollouts thead th")
            names = [h.inner_text().strip(" ↑↓") for h in heads.all()]
            shown = [n for n, h in zip(names, heads.all()) if h.is_visible()]
            for key in ("rollout", "ending", "reward"):
                assert key in shown, (width, shown)
            assert ("task" not in shown and "turns" not in shown and "tokens" not in shown) == collapsed, shown
            first = page.locator("#rollouts tbody tr").first
            for name in ("rollout", "ending", "reward"):  # visible, and wide enough to read
                col = names.index(name) + 1
                cell = first.locator(f"td:nth-child({col})")
                box = cell.bounding_box()
                assert cell.is_visible() and box and box["width"] >= 40 and box["x"] + box["width"] <= width, (col, box)
            assert (first.locator(".ending").is_visible()
                    and "swe-bench/django" in first.locator("td").first.inner_text())
            page.close()

"""The paired comparison as a person sees it, in Debian's chromium against a live uvicorn server:
the regressed task listed first with its interval, a click through to the side-by-side page,
two columns of rollout links, and neither page wider than the window (long task keys clip)."""
from __future__ import annotations

import json

import pytest

from tests.browser import served_rollouts
from tests.helpers import ANSWER_TIMEOUT, rollout

pytestmark = pytest.mark.browser

LONG = "benchmark/" + "very_long_task_key_" * 12  # no hyphen, no space: nowhere to break


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    rs = []
    for run, rewards in (("base", {"fine": [1.0] * 8, LONG: [0.0, 1.0] * 4}),
                         ("new", {"fine": [0.0] * 7 + [1.0], LONG: [1.0, 0.0] * 4})):
        rs += [rollout(f"{run}-{t[:4]}-{i}", run=run, step=i % 2, reward=r, task={"key": t})
               for t, rs_ in rewards.items() for i, r in enumerate(rs_)]
    with served_rollouts(tmp_path_factory.mktemp("paired"), rs) as base:
        yield base


@pytest.mark.parametrize("width", [1400, 800])
def test_the_regression_comes_first_and_opens_side_by_side(server, browser, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(f"{server}/compare?runs=base,new")
    first = page.locator("#compare-paired tbody tr").first
    assert first.locator("td").first.inner_text() == "fine"
    assert "regressed" in first.inner_text() and "0.875" in first.inner_text()
    assert "1 regressed, 0 improved, 1 unclear" in page.locator("#paired-summary").inner_text()
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, (width, overflow)
    first.get_by_role("link", name="side by side").click()
    page.wait_for_url("**/compare/task?**")
    sides = page.locator("section.side")
    assert sides.count() == 2
    assert sides.nth(0).locator("tbody tr").count() == 8 and sides.nth(1).locator("tbody tr").count() == 8
    assert "regressed" in page.locator("#task-paired").inner_text()
    sides.nth(1).get_by_role("link", name="new-fine-0").click()
    page.wait_for_url("**/runs/new/rollouts/new-fine-0")
    page.goto(f"{server}/compare/task?runs=base,new&task={LONG}")
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, (width, overflow)
    page.close()


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory, sqlite_demo_template):
    """The demo run (`rollscope demo`), a second demo run on the same tasks and `norew`: other
    tasks, no rewards."""
    import shutil

    from app.db.engine import make_engine
    from ingest import demo
    from tests.browser import live_server
    from tests.helpers import ingest, write_jsonl

    folder = tmp_path_factory.mktemp("paired-demo")
    shutil.copyfile(sqlite_demo_template, folder / "rollscope.db")  # the demo run, ingested once per process
    demo.write(folder / "b.jsonl", tokenizer=False, run_id="demo-grpo-b", seed=1, groups=2)
    norew = [rollout(f"nr-{t}-{i}", run="norew", step=i, reward=None, task={"key": f"other/task-{t}"})
             for t in range(16) for i in range(3)]
    write_jsonl(folder / "norew.jsonl", norew)
    url = f"sqlite:///{folder / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    assert ingest(engine, folder / "b.jsonl", folder / "norew.jsonl").ok
    engine.dispose()
    with live_server(url) as base:
        yield base


# whether a cell's text sits on one line: every box of its text overlaps every other vertically
ONE_LINE = """td => { const r = document.createRange(); r.selectNodeContents(td);
  const b = [...r.getClientRects()].filter(b => b.width > 0);
  return Math.max(...b.map(x => x.top)) < Math.min(...b.map(x => x.bottom)); }"""


def test_the_paired_pages_fit_a_390px_phone(demo_server, browser):
    """At 390 px no page is wider than the window (a wide table scrolls inside its own box): the
    paired table (its numbers never break inside "0.67 (28)"), the side-by-side task page (its two
    columns stacked, not overlapping), the step story, the rollouts list filtered by a failure
    signature (its template shown), the run page (steps and checks tables) and a rollout (its
    reward components and tool calls)."""
    import urllib.request

    twin = urllib.request.urlopen(f"{demo_server}/runs/demo-grpo/failures.json", timeout=ANSWER_TIMEOUT)
    sig = json.load(twin)["signatures"][0]
    page = browser.new_page(viewport={"width": 390, "height": 800})
    for path in ("/compare?runs=demo-grpo,demo-grpo-b", "/compare?runs=demo-grpo,norew",
                 "/compare/task?runs=demo-grpo,demo-grpo-b&task=calc/seconds-in-week",
                 "/compare/task?runs=demo-grpo,norew&task=other/task-1", "/runs/demo-grpo/steps/18",
                 f"/runs/demo-grpo/rollouts?signature={sig['id']}", "/runs/demo-grpo",
                 "/runs/demo-grpo/rollouts/s018-g0-r0"):
        page.goto(demo_server + path)
        page.wait_for_load_state("networkidle")
        width = page.evaluate("() => document.scrollingElement.scrollWidth")
        assert width <= 390, (path, width)
        if path.startswith("/compare?"):
            for td in page.locator("#compare-paired tbody tr").first.locator("td.n").all()[:2]:
                assert td.evaluate(ONE_LINE), (path, td.inner_text())
        if path.startswith("/compare/task"):
            a, b = (page.locator("section.side").nth(i).bounding_box() for i in (0, 1))
            assert b["y"] >= a["y"] + a["height"], (path, a, b)  # stacked: B below A
        if "signature" in path:
            assert sig["template"] in page.locator("#signature-filter").inner_text()
    summary = page.goto(demo_server + "/compare?runs=demo-grpo,norew") and page.locator("#paired-summary").inner_text()
    assert "No task in common" in summary and "unclear" not in summary
    assert page.locator("#compare-paired tbody tr").count() == 13 + 16
    page.close()

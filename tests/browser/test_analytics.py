"""The analytics pages as a person sees them, in Debian's chromium against a live server: a chart
draws and its points drill down (to their step's story, and from it to the rollouts); the step
page tells the story of an error spike; search marks hits and opens the message; compare overlays two runs."""
from __future__ import annotations

import pytest

from tests.browser import open_page, served_rollouts
from tests.helpers import rollout

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    rs = []
    for run in ("base", "new"):
        for s in range(4):
            for i in range(6):
                err = run == "new" and s == 2 and i < 3
                r = rollout(f"{run}-s{s}-{i}", run=run, step=s, group=f"s{s}-g{i // 3}", index=i % 3,
                            reward=float(i % 2), ending="error" if err else "submitted", task={"key": f"t{i % 2}"},
                            messages=[{"role": "user", "content": "Run the <b>quokka</b> tests"},
                                      {"role": "assistant", "content": f"step {s} answer"}])
                if err:
                    r.ending.detail = "sandbox_crash"
                rs.append(r)
    with served_rollouts(tmp_path_factory.mktemp("analytics"), rs) as base:
        yield base


def test_chart_point_drills_down(server, browser):
    page, problems = open_page(browser, f"{server}/runs/new/charts/endings")
    page.locator("figure.chart .plot .main-svg").first.wait_for()
    bar = page.locator("g.trace.bars path").first
    bar.wait_for()
    bar.click(force=True)
    page.wait_for_url("**/runs/new/steps/*")  # an ending's bar opens its step's story (issue 23) ...
    page.locator("main a[href^='/runs/new/rollouts?step=']").first.click()  # ... which links its rollouts
    page.wait_for_url("**/runs/new/rollouts?step=*")
    assert page.locator("#rows tr").count() >= 1
    assert problems == []
    page.close()


def test_run_page_draws_every_chart_from_its_twin(server, browser):
    page, problems = open_page(browser, f"{server}/runs/new")
    page.locator("#chart-reward .plot .main-svg").first.wait_for()
    page.locator("#chart-no_gradient .plot .main-svg").first.wait_for()
    assert problems == []
    page.close()


def test_step_page_explains_the_error_spike(server, browser):
    page, problems = open_page(browser, f"{server}/runs/new/steps/2")
    text = page.locator("main").inner_text()
    assert "sandbox_crash" in text and "error dropped" in text
    page.get_by_role("link", name="next step →").click()
    page.wait_for_load_state("networkidle")
    assert page.locator("h1").inner_text() == "Step 3"
    assert problems == []
    page.close()


def test_search_marks_hits_and_opens_the_message(server, browser):
    page, problems = open_page(browser, f"{server}/search?q=quokka&run=base")
    marks = page.locator("#hits mark")
    assert marks.first.inner_text().lower() == "quokka"
    assert page.locator("#hits b").count() == 0  # trace text stays text
    page.locator("#hits .matches li a").first.click()
    page.wait_for_load_state("networkidle")
    assert "#node-0" in page.url and "/runs/base/rollouts/" in page.url
    assert problems == []
    page.close()


def test_search_finds_the_incident_on_a_phone(server, browser):
    """On a 390 px phone: the crashed rollouts grouped, the step facet narrows to them, and
    nothing is wider than the screen."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{server}/search?q=sandb")
    page.wait_for_load_state("networkidle")
    assert page.locator("#hits > li").count() == 3  # the three crashed rollouts of step 2, by their ending
    assert "step 2 · error (sandbox_crash)" in page.locator("#hits").inner_text()
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, overflow
    page.locator("#facets .facet-link", has_text="error").click()
    page.wait_for_load_state("networkidle")
    assert "ending=error" in page.url and page.locator("#hits > li").count() == 3
    page.close()


def test_compare_overlays_two_runs(server, browser):
    page, problems = open_page(browser, f"{server}/compare?runs=base,new")
    page.locator("figure.chart .plot .main-svg").first.wait_for()
    assert "base: mean (errors scored 0)" in page.locator("main").inner_text()
    assert problems == []
    page.close()

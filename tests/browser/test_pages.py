"""QA fixes as a person sees them, in Debian's chromium against a live uvicorn server: a run
whose id holds a slash is reachable by clicking through, and tokens drawn as bare ids stay apart."""
from __future__ import annotations

import pytest

from tests.browser import open_page, served_rollouts
from tests.helpers import rollout

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    rs = [rollout("a/b", run="team/exp-12", group="g/1", index=0, step=2),
          rollout("c", run="team/exp-12", group="g/1", index=1, step=2, reward=0.0),
          rollout("x", run="dots"), rollout("x.json", run="dots")]
    with served_rollouts(tmp_path_factory.mktemp("web"), rs) as base:
        yield base


def test_click_through_a_run_id_with_a_slash(server, browser):
    page, problems = open_page(browser, f"{server}/runs")
    page.get_by_role("link", name="team/exp-12").click()
    page.wait_for_load_state("networkidle")
    assert page.url.endswith("/runs/team%2Fexp-12")
    page.locator("figure.chart .plot .main-svg").first.wait_for()
    page.get_by_role("link", name="all rollouts").click()
    page.get_by_role("link", name="a/b").click()
    page.wait_for_load_state("networkidle")
    assert page.locator("h1").inner_text().startswith("a/b")
    page.get_by_role("link", name="g/1").first.click()
    page.wait_for_load_state("networkidle")
    assert page.locator("h1").inner_text() == "Group g/1"
    # the filter form submits every field, most of them empty
    page.go_back()
    page.locator('a[href$="/rollouts"]').first.click()
    page.select_option('select[name="ending"]', "submitted")
    page.get_by_role("button", name="filter").click()
    page.wait_for_load_state("networkidle")
    assert page.locator("#rows tr").count() == 2
    assert problems == []
    page.close()


def test_a_rollout_id_ending_in_json_opens_its_page_beside_the_same_id_without_it(server, browser):
    """The link to `x.json` is written `x%2Ejson` (`/rollouts/x.json` is the twin of `x`): the
    browser keeps the escape as it follows the link, and each link opens its own page."""
    page, problems = open_page(browser, f"{server}/runs/dots/rollouts")
    for rid, path in (("x.json", "/runs/dots/rollouts/x%2Ejson"), ("x", "/runs/dots/rollouts/x")):
        page.get_by_role("link", name=rid, exact=True).click()
        page.wait_for_load_state("networkidle")
        assert page.url.split("?")[0] == server + path
        assert page.locator("h1").inner_text().split()[0] == rid, page.url
        page.go_back()
        page.wait_for_load_state("networkidle")
    assert problems == []
    page.close()


def test_bare_token_ids_are_set_apart(server, browser):
    page = browser.new_page()
    page.goto(f"{server}/runs/team%2Fexp-12/rollouts/c")
    boxes = [page.locator(".messages .tok-id").nth(i).bounding_box() for i in range(3)]
    for left, right in zip(boxes, boxes[1:]):
        if abs(left["y"] - right["y"]) < 1:  # same line
            assert right["x"] - (left["x"] + left["width"]) >= 3, (left, right)
    page.close()

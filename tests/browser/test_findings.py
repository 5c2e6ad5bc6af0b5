"""Findings as a person sees them, in Debian's chromium against a live server: the run page's
findings chart and checks table, a bar that opens the filtered rollouts, and a finding's link that
lands on the token it names."""
from __future__ import annotations

import pytest

from tests.browser import open_page, served_rollouts
from tests.helpers import rollout

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    bad = rollout("bad", step=0, group="g0", index=0, reward=1.0)
    bad.nodes[1].token_ids = [-100, 121, 122]
    rs = [bad, rollout("ok", step=0, group="g0", index=1, reward=0.0), rollout("later", step=1, reward=0.5)]
    with served_rollouts(tmp_path_factory.mktemp("findings"), rs) as base:
        yield base


def test_a_findings_bar_opens_the_filtered_rollouts(server, browser):
    page, problems = open_page(browser, f"{server}/runs/r1")
    fig = page.locator('figure[data-figure="fig-findings"]')
    fig.locator(".main-svg").first.wait_for()
    assert "placeholder_token_id" in fig.inner_text()
    row = page.locator("table.checks tr", has_text="placeholder_token_id")
    assert row.locator("td").nth(3).inner_text() == "1"
    assert "no chat template stored" in page.locator("table.checks tr", has_text="template_mismatch").inner_text()
    fig.locator("g.points path").first.click(force=True)  # the step-0 point
    page.wait_for_url("**/rollouts?step=0&flag=placeholder_token_id")
    assert [t.strip() for t in page.locator("#rows td:first-child").all_inner_texts()] == ["bad"]
    assert problems == []


def test_a_finding_link_lands_on_its_token(server, browser):
    page, problems = open_page(browser, f"{server}/runs/r1/rollouts/bad")
    page.locator(".findings a", has_text="token 0").click()
    assert page.evaluate("location.hash") == "#t-3"  # token 0 of message 1: offset 3 of the branch
    target = page.locator("#t-3")
    assert "tok-flagged" in target.get_attribute("class")
    assert "finding: placeholder token id" in target.get_attribute("title")
    assert target.evaluate("el => el.matches(':target')")
    assert problems == []

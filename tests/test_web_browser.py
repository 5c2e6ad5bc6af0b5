"""QA fixes as a person sees them, in Debian's chromium against a live uvicorn server: a run
whose id holds a slash is reachable by clicking through, and tokens drawn as bare ids stay apart."""
from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn
from playwright.sync_api import sync_playwright

from app.config import Settings
from app.main import create_app
from tests.helpers import ingest, rollout, write_jsonl

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app.db import make_engine
    from app.migrate import upgrade

    tmp = tmp_path_factory.mktemp("web")
    url = f"sqlite:///{tmp / 'rollscope.db'}"
    engine = make_engine(url)
    upgrade(engine)
    rs = [rollout("a/b", run="team/exp-12", group="g/1", index=0, step=2),
          rollout("c", run="team/exp-12", group="g/1", index=1, step=2, reward=0.0)]
    assert ingest(engine, write_jsonl(tmp / "s.jsonl", rs)).ok
    engine.dispose()
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(Settings(database_url=url)), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(100):
        if srv.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(5)


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def test_click_through_a_run_id_with_a_slash(server, browser):
    page = browser.new_page()
    problems = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.goto(f"{server}/runs")
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


def test_bare_token_ids_are_set_apart(server, browser):
    page = browser.new_page()
    page.goto(f"{server}/runs/team%2Fexp-12/rollouts/c")
    boxes = [page.locator(".messages .tok-id").nth(i).bounding_box() for i in range(3)]
    for left, right in zip(boxes, boxes[1:]):
        if abs(left["y"] - right["y"]) < 1:  # same line
            assert right["x"] - (left["x"] + left["width"]) >= 3, (left, right)
    page.close()

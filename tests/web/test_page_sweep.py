"""Every page of every rollout answers: the sweep that would have caught a page failing on an
optional field a reader left out (a model call with a start and no end, a message without
content, a rollout without nodes).

Every committed fixture (tests/fixtures/realdata, cases, upstream) and the output of the real
Inspect (tests/producers/inspect_task.py) is ingested into one SQLite file; then, for every
rollout of every run: its page (HTML) and JSON twin, every link and fragment its page carries
to itself, its branches, nodes and group, and the API's per-rollout endpoints (detail, each
branch's messages and tokens, labels, notes); for every run its page, steps, rollouts list and
charts. Each must answer 200, and a JSON answer must parse."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, urldefrag

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from tests.conftest import FIXTURES
from tests.helpers import run_cli
from tests.producers.inspect_task import write_logs

pytestmark = pytest.mark.slow
LINK = re.compile(r'''(?:href|hx-get|data-href|data-url)="([^"]+)"''')
TOKENIZER = FIXTURES / "tokenizers" / "mistral-v1-tokenizer.model"


def _ingest(db: str, *paths: Path, args: tuple[str, ...] = ()) -> None:
    done = run_cli("ingest", *map(str, paths), "--db", db, *args)  # in this process: no interpreter start each
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]  # 1: some records quarantined


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> TestClient:
    tmp = tmp_path_factory.mktemp("sweep")
    db = f"sqlite:///{tmp / 'sweep.db'}"
    real = FIXTURES / "realdata"
    for folder in sorted(p for p in real.iterdir() if p.is_dir() and p.name != "tunix"):
        _ingest(db, folder, args=("--run", f"fixture-{folder.name}"))
    tunix = real / "tunix" / "v0.1.7"
    tok = ("--tokenizer", str(TOKENIZER), "--added-token", "32000=<pad>", "--added-token", "32001=<start_of_turn>",
           "--added-token", "32002=<end_of_turn>")
    batches = ("orchestrator_group.Token.json", "orchestrator_group.Trajectory.json",
               "trajectory_log_orchestrator_group.csv")
    episodes = [p for p in sorted(tunix.glob("*.json")) if not p.name.endswith(".meta.json")
                and p.name != "summary.json" and p.name not in batches]
    _ingest(db, *episodes, args=("--run", "tunix-episodes", *tok))
    for name in batches:  # one run each: the same episodes in one run would triple each group
        _ingest(db, tunix / name, args=("--run", f"tunix-{name}", "--step", "3", *tok))
    cases = [p for p in sorted((FIXTURES / "cases").iterdir()) if p.suffix in (".json", ".jsonl")]
    _ingest(db, *cases, args=("--run", "cases"))
    _ingest(db, FIXTURES / "upstream", args=("--run", "upstream"))
    for fmt in ("eval", "json"):
        _ingest(db, write_logs(tmp / f"inspect-{fmt}", fmt, epochs=2), args=("--run", f"inspect-{fmt}"))
    app = create_app(Settings(database_url=db))
    with TestClient(app) as client:
        yield client
    app.state.engine.dispose()


def _ok(client: TestClient, url: str, *, html: bool) -> str:
    r = client.get(url, headers={"accept": "text/html" if html else "application/json"})
    assert r.status_code == 200, (url, r.status_code, r.text[:800])
    if not html or "json" in r.headers.get("content-type", ""):
        r.json()
    return r.text


def _all(client: TestClient, url: str) -> list[dict]:
    items, after = [], None
    while True:
        page = client.get(url + (f"&after={quote(after)}" if after else "")).json()
        items += page["items"]
        after = page.get("next")
        if not after or not page["items"]:
            return items


def test_every_page_of_every_rollout_answers(swept):
    runs = [r["id"] for r in swept.get("/api/v1/runs").json()["items"]]
    assert len(runs) >= 12
    seen: set[str] = set()
    n_rollouts = 0
    for run in runs:
        r = quote(run, safe="")
        for url in (f"/runs/{r}", f"/runs/{r}/rollouts", f"/runs/{r}.json"):
            _ok(swept, url, html=True)
        for link in _links(_ok(swept, f"/runs/{r}", html=True), f"/runs/{r}/"):
            if link not in seen and "/rollouts/" not in link:
                seen.add(link)
                _ok(swept, link, html=True)
        for item in _all(swept, f"/api/v1/runs/{r}/rollouts?limit=200"):
            n_rollouts += 1
            rid = quote(str(item["rollout_id"]), safe="")
            attempt = item.get("attempt", 0)
            page = f"/runs/{r}/rollouts/{rid}?attempt={attempt}"
            text = _ok(swept, page, html=True)
            _ok(swept, f"/runs/{r}/rollouts/{rid}.json?attempt={attempt}", html=False)
            for link in _links(text, f"/runs/{r}/"):
                if link not in seen and ("/rollouts/" not in link or f"/rollouts/{rid}" in link):
                    seen.add(link)
                    _ok(swept, link, html=True)
            api = f"/api/v1/runs/{r}/rollouts/{rid}"
            detail = swept.get(f"{api}?attempt={attempt}").json()
            for b in range(len(detail["branches"])):
                _ok(swept, f"{api}/branches/{b}/messages?attempt={attempt}", html=False)
                _ok(swept, f"{api}/branches/{b}/tokens?attempt={attempt}", html=False)
            for tail in ("/labels", "/notes"):
                _ok(swept, api + tail, html=False)
        _ok(swept, f"/api/v1/runs/{r}/findings", html=False)
    assert n_rollouts > 100


def _links(html: str, prefix: str) -> list[str]:
    out = []
    for href in LINK.findall(html):
        href = urldefrag(href.replace("&amp;", "&"))[0]
        if href.startswith(prefix) and not href.endswith((".npz",)) and "/export" not in href:
            out.append(href)
    return sorted(set(out))

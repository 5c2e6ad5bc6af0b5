"""Browser-test support: a live uvicorn server on a real SQLite file, Debian's chromium driven by
Playwright, and a page opener that collects console errors."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from app.config import Settings
from app.main import create_app
from tests.helpers import serving

CHROMIUM = "/usr/bin/chromium"
# No downloads, no background traffic: this machine's network is closed.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@contextmanager
def live_server(database_url: str, **settings) -> Iterator[str]:
    """Serve the real app on a free port in a thread (`settings`: more `Settings` fields, e.g.
    `require_read_token=True`); yields its base URL."""
    with serving(create_app(Settings(database_url=database_url, **settings))) as base:
        yield base


@contextmanager
def served_rollouts(folder, rollouts) -> Iterator[str]:
    """A fresh SQLite file in `folder` holding `rollouts` (ingested through the real pipeline),
    served live; yields the base URL."""
    from app.db.engine import make_engine
    from app.db.migrate import upgrade
    from tests.helpers import ingest, write_jsonl

    url = f"sqlite:///{folder / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    assert ingest(engine, write_jsonl(folder / "input.jsonl", rollouts)).ok
    engine.dispose()
    with live_server(url) as base:
        yield base


def tunix_database(folder, extra=()):
    """A fresh SQLite file in `folder` holding the real Tunix trajectory (`submitted.Trajectory`,
    run `tunix`) read with its own SentencePiece tokenizer and added tokens, plus `extra` rollouts
    (ingested through the real pipeline); returns its URL."""
    from app.db.engine import make_engine
    from app.db.migrate import upgrade
    from app.worker.sync import register_tokenizer
    from tests.conftest import data_path
    from tests.helpers import ingest, write_jsonl

    url = f"sqlite:///{folder / 'rollscope.db'}"
    engine = make_engine(url)
    upgrade(engine)
    key = register_tokenizer(engine, data_path("tokenizers", "mistral-v1-tokenizer.model"),
                             {32000: "<pad>", 32001: "<start_of_turn>", 32002: "<end_of_turn>"})
    assert ingest(engine, data_path("realdata", "tunix", "v0.1.7", "submitted.Trajectory.json"), run="tunix",
                  tokenizer_key=key).ok
    if extra:
        assert ingest(engine, write_jsonl(folder / "extra.jsonl", list(extra))).ok
    engine.dispose()
    return url


def open_page(browser, url: str):
    """A new page at `url`, loaded; returns (page, problems) where problems collects console
    errors and uncaught exceptions from then on."""
    page = browser.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(url)
    page.wait_for_load_state("networkidle")
    return page, problems

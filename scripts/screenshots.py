"""Screenshots of the analytics pages over the demo run, for docs/analytics.md.

    .venv/bin/python scripts/screenshots.py            # writes docs/screenshots/*.png

Writes the demo run (`rollscope demo`, seed 0: 30 steps, the step-18 sandbox crash) and a second,
smaller run (`demo-grpo-b`, seed 1) with their tokenizers into a fresh SQLite file in a temporary
folder, serves the real app on a free local port, and shoots with Debian's chromium (never a
downloaded browser) at 1400 px wide: the run page, the reward chart's page, compare of the two
runs, the step-18 story and one of its crashed rollouts. Nothing else is written.
"""
from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
RUN, OTHER = "demo-grpo", "demo-grpo-b"
# (file, path, what to shoot: a CSS selector, or None for the page from its top, at most MAX_HEIGHT)
SHOTS = [("run-page.png", f"/runs/{RUN}", None),
         ("chart-page.png", f"/runs/{RUN}/charts/reward", "main"),
         ("compare.png", f"/compare?runs={RUN},{OTHER}", None),
         ("step-page.png", f"/runs/{RUN}/steps/18", None),
         ("rollout-page.png", None, None)]
WIDTH, MAX_HEIGHT = 1400, 2400


def load(folder: Path) -> str:
    """The two demo runs ingested into a fresh SQLite file in `folder`; returns its URL."""
    from app.db.engine import make_engine
    from app.db.migrate import upgrade
    from app.store.tokenizers import tokenizer_context
    from app.worker.sync import ingest_paths, register_tokenizer
    from ingest import demo
    from ingest.formats.base import ReadContext

    url = f"sqlite:///{folder / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    for name, kw in (("demo", {}), ("other", {"run_id": OTHER, "seed": 1, "groups": 4})):
        path = folder / f"{name}.jsonl"
        demo.write(path, **kw)
        key = register_tokenizer(engine, demo.tokenizer_path(path), {})
        report = ingest_paths(engine, [path], ReadContext(run_id=None), tokenizer_key=key,
                              check_context=tokenizer_context(engine, key))
        assert report.ok, report
    engine.dispose()
    return url


def serve(url: str) -> tuple[str, object]:
    """The real app on a free local port, in a thread; returns (base URL, server)."""
    import uvicorn

    from app.config import Settings
    from app.main import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(Settings(database_url=url)), host="127.0.0.1", port=port,
                                           log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def shoot(base: str, out: Path) -> list[Path]:
    """Every shot of SHOTS into `out`; returns the files written."""
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        for name, path, selector in SHOTS:
            if path is None:  # a crashed rollout of step 18, as its step's story links it
                page.goto(f"{base}/runs/{RUN}/rollouts?step=18&ending=error")
                path = page.locator("#rows a").first.get_attribute("href")
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(300)
            file = out / name
            if selector:
                page.locator(selector).first.screenshot(path=file)
            else:
                height = min(MAX_HEIGHT, page.evaluate("document.documentElement.scrollHeight"))
                page.screenshot(path=file, full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": height})
            written.append(file)
        browser.close()
    return written


def main() -> None:
    """Write the screenshots (docs/screenshots/ unless --out says otherwise)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        base, server = serve(load(Path(tmp)))
        try:
            for f in shoot(base, args.out):
                print(f"wrote {f}")
        finally:
            server.should_exit = True


if __name__ == "__main__":
    main()

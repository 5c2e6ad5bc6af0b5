"""Every test here drives Debian's chromium: each carries the `browser` marker
(`-m "not browser"` runs the rest)."""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium (never a downloaded browser), headless."""
    from playwright.sync_api import sync_playwright

    from tests.browser import ARGS, CHROMIUM

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()

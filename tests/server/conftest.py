"""Fixtures shared by the server's page tests."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"  # Debian's chromium, driven by Playwright (never `playwright install`)


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium under Playwright, one per test module (skipped where it is not installed)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium; .ci/run and make test install it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()

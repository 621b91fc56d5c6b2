"""The board's stats page in a real headless Chromium (as tests/e2e/test_web.py drives it):
the scripted history's figures, its charts drawn by the server, a chart's bar leading to
the board's tasks behind it, and the screenshot docs/stats.md shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..test_stats import scripted_history
from .test_web import browser, shoot  # noqa: F401  (the module-scoped Chromium fixture)

pytestmark = pytest.mark.slow


def test_stats_page_shows_the_figures_as_charts_that_lead_to_their_tasks(
    browser,  # noqa: F811
    web,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    scripted_history()
    context = browser.new_context(viewport={"width": 1440, "height": 1250})
    page = context.new_page()
    try:
        page.goto(web.sign_in_url)
        page.click("#stats-link")
        headline = page.locator("#headline")
        expect(headline).to_contain_text("75 %accepted of reviewed (3 of 4)")
        expect(headline).to_contain_text("50 %accepted after a failed check (2); 50 % fixed")
        expect(page.locator("figure.chart svg")).to_have_count(5)
        expect(page.locator("#by-agent tr")).to_have_count(3)
        shoot(page, "stats", tmp_path)

        page.locator("figure.chart svg a rect").first.click()  # the retry chart's first bar
        expect(page.locator("#group-done h2")).to_contain_text("Recently done")
        assert page.url.endswith("/?group=done")
    finally:
        context.close()

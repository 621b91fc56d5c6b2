"""The board's stats page in a real headless Chromium (as tests/e2e/test_web.py drives it):
the scripted history's figures, its charts drawn by the server, a chart's bar leading to
the board's tasks behind it, and the screenshot docs/stats.md shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.queue import machine as q

from ..support.history import CHECK_FAILED, at, attempt, scripted_history, submit
from ..support.web import shoot

pytestmark = pytest.mark.slow


def test_stats_page_shows_the_figures_as_charts_that_lead_to_their_tasks(
    browser,
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

        earlier_weeks()  # for the screenshot: bars and lines over more than two weeks
        page.reload()
        expect(headline).to_contain_text("accepted of reviewed (27 of 37)")
        shoot(page, "stats", tmp_path)

        page.locator("figure.chart svg a rect").first.click()  # the retry chart's first bar
        expect(page.locator("#group-done h2")).to_contain_text("Recently done")
        assert page.url.endswith("/?group=done")
    finally:
        context.close()


def earlier_weeks() -> None:
    """Six weeks before the scripted ones, each: two tasks accepted at once, one after a
    failed check, one after a rejection (two rejections in the three latest weeks)."""
    for week in range(6, 0, -1):
        base = -week * 7 * 24.0  # hours from T0
        for n in range(2):
            one = q.create_task(f"w{week} first {n}", now=at(base))
            submit(attempt("impl-1", base + 1, 0.4, 900), base + 2 + n + week)
            q.accept_completion(one.id, "human", at(base + 4 + 2 * n + week))
        checked = q.create_task(f"w{week} checked", now=at(base))
        failed = attempt("impl-2", base + 1, 0.3, 600)
        q.requeue_task(failed, CHECK_FAILED.format("pytest -q"), "impl-2", at(base + 2))
        submit(attempt("impl-2", base + 3, 0.3, 600), base + 4, passed=("pytest -q",))
        q.accept_completion(checked.id, "human", at(base + 6 + week))
        rejected = q.create_task(f"w{week} rejected", now=at(base))
        for tries in range(1 + (week <= 3)):
            submit(attempt("impl-2", base + 1 + 3 * tries, 0.5, 1000), base + 2 + 3 * tries)
            q.reject_completion(
                rejected.id, "misses the edge case", "human", at(base + 3 + 3 * tries)
            )
        submit(attempt("impl-1", base + 8, 0.5, 1000), base + 9)
        q.accept_completion(rejected.id, "human", at(base + 10 + week))

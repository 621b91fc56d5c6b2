"""The board in a real headless Chromium (Debian's, as tests/e2e/test_web.py drives it):
typing a search while the board polls keeps every character and filters the board."""

from __future__ import annotations

import time

import pytest

from orchestrator.queue import machine as q

pytestmark = pytest.mark.slow


def test_typing_a_search_while_the_board_polls(browser, web) -> None:
    from playwright.sync_api import expect

    wanted = q.create_task("alpha: parse the config").label
    q.create_task("beta: print the report")
    q.create_task("alphabet soup")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(web.sign_in_url)
        expect(page.locator("#group-waiting li.card")).to_have_count(3)
        box = page.locator("#filters input[name=q]")
        box.click()
        box.press_sequentially("alpha")
        expect(page.locator("#group-waiting li.card")).to_have_count(2)
        # Polls go on while the box has focus; two of them land mid-word, and nothing typed
        # is lost.
        for _ in range(2):
            with page.expect_response(lambda r: "/board?" in r.url, timeout=15_000):
                pass
            expect(box).to_have_value("alpha")
            expect(box).to_be_focused()
        box.press_sequentially(": PARSE")
        expect(box).to_have_value("alpha: PARSE")
        cards = page.locator("#board li.card")
        expect(cards).to_have_count(1)
        expect(cards.first).to_contain_text(wanted)
        assert "q=alpha%3A+PARSE" in page.url  # the address keeps the search for a reload

        # The poll asks with the search: a new match appears, a new non-match does not.
        later = q.create_task("Alpha: parse the flags").label
        q.create_task("gamma")
        expect(cards).to_have_count(2, timeout=15_000)
        expect(page.locator(f"#card-{later}")).to_be_visible()
        expect(box).to_have_value("alpha: PARSE")
        page.reload()
        expect(box).to_have_value("alpha: PARSE")
        expect(cards).to_have_count(2)
    finally:
        context.close()


def test_a_reason_being_typed_on_a_card_survives_the_polls(browser, web) -> None:
    from playwright.sync_api import expect

    task = q.create_task("not needed any more").label
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(web.sign_in_url)
        card = page.locator(f"#card-{task}")
        card.locator("summary").click()
        reason = card.locator("input[name=reason]")
        reason.fill("done upstream")
        page.evaluate(
            "window.polls = 0; document.addEventListener('htmx:beforeRequest', () => polls++)"
        )
        deadline = time.monotonic() + 15
        while page.evaluate("window.polls") < 2:  # two polls came and were held back
            assert time.monotonic() < deadline, "the board stopped polling"
            page.wait_for_timeout(100)
        expect(reason).to_have_value("done upstream")
        card.locator("button.close").click()
        expect(page).to_have_url(f"{web.base}/?done=closed")
        assert q.get_task(task).state.value == "done"
    finally:
        context.close()

"""A preview started from the task page in Chromium: reached through the review page's
sign-in on a port of its own, refused without it, stopped when the task is accepted."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orchestrator.faces import preview
from orchestrator.queue import machine as q

from ..support import HELPERS, run_claimed, set_config, wait_for, write_agents
from ..web_server import start_web

pytestmark = pytest.mark.slow
SERVE = f"{sys.executable} {HELPERS / 'preview_server.py'}"


def test_a_preview_opens_from_the_task_page_behind_the_sign_in_and_stops_on_accept(
    browser,
    git_project: Path,
    bwrap_ok: None,
) -> None:
    from playwright.sync_api import expect

    write_agents(git_project)
    set_config(git_project, preview={"command": SERVE})
    tid = q.create_task("a page to preview").id
    assert run_claimed(q.claim_task(None, "impl-1"), "impl-1").next_state == "provisional"
    server = start_web(git_project)
    signed_in = browser.new_context()
    stranger = browser.new_context()
    try:
        page = signed_in.new_page()
        page.goto(server.sign_in_url)
        page.goto(f"{server.base}/tasks/TASK-{tid}")
        page.click("#preview-start")
        expect(page.locator(".done")).to_contain_text("Preview started")
        link = page.locator("#preview-link")
        url = link.get_attribute("href")
        assert url is not None and url != f"{server.base}/"  # an origin of its own
        with page.expect_popup() as opened:
            link.click()
        shown = opened.value
        expect(shown.locator("body")).to_contain_text(f"TASK-{tid}.txt")  # the branch's file
        shown.goto(f"{url}headers")  # what the agent's server is shown of the reviewer
        expect(shown.locator("body")).to_contain_text("User-Agent")
        assert "octopoid_" not in shown.locator("body").inner_text()  # no session cookie
        assert not [c for c in signed_in.cookies() if c["value"] == "planted"]
        refused = stranger.new_page()
        answer = refused.goto(url)
        assert answer is not None and answer.status == 403
        expect(refused.locator("body")).to_contain_text("signed-in reviewer only")
        page.click("#accept-form button.accept")
        expect(page.locator(".done")).to_contain_text("Accepted")
        wait_for("the preview to stop", lambda: preview.running(tid) is None, timeout=60)
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url, timeout=10)  # its door says so, or is shut
    finally:
        signed_in.close()
        stranger.close()
        preview.stop(tid)
        server.stop()

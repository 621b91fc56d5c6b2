"""Signing in to the review page in Debian's Chromium (#24): the access token never lands in
the browser's history, read from the profile's own History database afterwards.

A persistent profile, as a person's browser has: open the printed link, use the board, sign
out, sign in again through the form, then close the browser and read Default/History.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from ..support import ARGS, CHROMIUM
from ..web_server import Client

pytestmark = pytest.mark.slow


def visited(profile: Path, scratch: Path) -> list[str]:
    """Every URL in the profile's history (a copy: Chromium may hold the file)."""
    for name in ("History", "History-journal", "History-wal"):
        if (profile / "Default" / name).exists():
            shutil.copy(profile / "Default" / name, scratch / name)
    with sqlite3.connect(scratch / "History") as db:
        return [url for (url,) in db.execute("SELECT url FROM urls")]


def test_the_token_never_reaches_the_browser_s_history(
    playwright_chromium, web, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    profile = tmp_path / "profile"
    context = playwright_chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, args=ARGS
    )
    page = context.pages[0] if context.pages else context.new_page()
    page.goto(web.sign_in_url)
    assert page.url == web.base + "/"
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    page.fill("#enqueue-form input[name=title]", "signed-in work")
    page.click("#enqueue-form button[type=submit]")
    expect(page.locator(".done")).to_contain_text("Queued")
    task_page = page.url.split("?", 1)[0]
    page.goto(web.base + "/whoami")
    page.click("form[action='/logout'] button")
    expect(page.locator("input[name=token]")).to_be_visible()
    page.goto(task_page + "?tab=history")  # signed out: the form, which comes back here
    page.fill("input[name=token]", web.token)
    page.fill("input[name=name]", "Ada")
    page.click("form[action='/login'] button")
    assert page.url == task_page + "?tab=history"
    page.goto(web.base + "/whoami")
    expect(page.locator("strong")).to_have_text("Ada")
    context.close()  # Chromium writes its history out as it shuts down

    urls = visited(profile, tmp_path)
    assert web.sign_in_url in urls and task_page + "?tab=history" in urls  # the right file
    assert not [url for url in urls if web.token in url]
    assert web.token.encode() not in (tmp_path / "History").read_bytes()
    code_link = web.sign_in_url.removeprefix(web.base)
    assert Client(web.base).request(code_link)[0] == 403  # the link in history: spent

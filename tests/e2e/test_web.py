"""The review page in a real headless Chromium (Debian's), driven by Playwright, against a
real `octopoid web` and a real scheduler running the scripted agent.

Chromium comes from `apt-get install -y chromium` (.ci/run installs it); Playwright's own
browser download is not used. Without /usr/bin/chromium these tests skip, unless
OCTOPOID_REQUIRE_BROWSER=1 (set by .ci/run) makes that a failure.
"""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from orchestrator import config
from orchestrator.queue import machine as q

from ..support import OCTOPOID, wait_for, write_agents
from ..support.daemon import Daemon, state_of
from ..support.web import shoot
from ..web_server import start_web

pytestmark = pytest.mark.slow


@pytest.fixture
def site(git_project: Path, tmp_path: Path):
    """The project with a command agent, `octopoid web` and a scheduler daemon running."""
    runs = tmp_path / "runs.txt"
    runs.touch()
    write_agents(git_project, lease_seconds=10, shutdown_grace_seconds=1)
    server = start_web(git_project)
    daemon = Daemon(git_project, runs, {"OCTO_TEST_TICK_SECONDS": "0.5"})
    yield server
    daemon.stop()
    server.stop()


@pytest.fixture
def page(browser, site):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.dialogs, page.answer_yes = [], False  # every dialog is recorded; dismissed unless
    page.on(  # a test says yes
        "dialog",
        lambda d: (page.dialogs.append(d.message), d.accept() if page.answer_yes else d.dismiss()),
    )
    page.goto(site.sign_in_url)
    yield page
    context.close()


def task_id_of(page) -> str:
    return page.url.split("/tasks/TASK-", 1)[1].split("?", 1)[0]


def test_enqueue_watch_comment_reject_retry_accept(page, git_project: Path, tmp_path) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#group-review h2")).to_contain_text("Needs review")
    page.locator("details.enqueue summary").click()
    page.fill("input[name=title]", "tick app-file greet people")
    page.fill("textarea[name=context]", "Write greet() in app.py.")
    page.fill("textarea[name=criteria]", "greet(None) does not crash")
    page.click("#enqueue-form button[type=submit]")
    expect(page.locator(".done")).to_contain_text("Queued")
    task_id = task_id_of(page)

    # The live log follows the running agent without reloading the page.
    wait_for("the claim", lambda: state_of(task_id) == "claimed", timeout=30)
    page.goto(page.url.split("?")[0])
    page.evaluate("window.stillTheSamePage = true")
    expect(page.locator("#live-log")).to_contain_text("tick 1", timeout=15_000)
    expect(page.locator("#live-log")).to_contain_text("tick 4", timeout=15_000)
    assert page.evaluate("window.stillTheSamePage") is True
    shoot(page, "task-running", tmp_path)

    # When the attempt ends the page reloads itself into review, diff first.
    expect(page.locator("#state")).to_have_text("provisional", timeout=30_000)
    app = page.locator('details.file[data-path="app.py"]')
    expect(app).to_be_visible()
    expect(page.locator("#merge-check")).to_have_text("merges cleanly")
    for line, text in (("2", "handle None: greet(None) crashes"), ("6", "do not pass None")):
        app.locator(f'td.commentable[data-line="{line}"]').click()
        page.fill("tr.comment-editor textarea", text)
        page.click("tr.comment-editor button.add-comment")
    expect(page.locator("li.comment")).to_have_count(2)
    shoot(page, "task-review", tmp_path)
    page.fill("#reject-form textarea[name=reason]", "greet must handle None")
    page.click("#reject-form button.reject")
    expect(page.locator(".done")).to_contain_text("Rejected")

    # The next attempt's prompt carries both comments, with the code line they are about.
    wait_for("attempt 2", lambda: q.get_task(task_id).attempts == 2, timeout=30)
    wait_for("review again", lambda: state_of(task_id) == "provisional", timeout=60)
    page.goto(f"{page.url.split('?')[0]}?tab=attempt-2")
    prompt = page.locator("#prompt-2")
    expect(prompt).to_contain_text("## Previous Agent Notes")
    for text in ("handle None: greet(None) crashes", "do not pass None", "return 'hello ' + name"):
        expect(prompt).to_contain_text(text)
    on_disk = (config.get_logs_dir() / f"TASK-{task_id}" / "attempt-2.prompt.md").read_text()
    assert "do not pass None" in on_disk

    page.goto("/".join(page.url.split("/")[:3]) + "/")
    expect(page.locator("#group-review")).to_contain_text(f"TASK-{task_id}")
    shoot(page, "board", tmp_path)
    page.click(f"#group-review a:text('TASK-{task_id}')")
    # Loaded: the question is asked by review.js (deferred), which a click on a page still
    # parsing can beat; a loaded machine once did.
    page.wait_for_url(f"**/tasks/TASK-{task_id}**", wait_until="load")
    # The branch holds both attempts' work: Accept asks first. Cancelled, nothing happens.
    page.click("#accept-form button.accept")
    expect(page.locator("#accept-form")).to_be_visible()
    assert state_of(task_id) == "provisional"
    assert len(page.dialogs) == 1 and "from earlier attempts. Accept it?" in page.dialogs[0]
    page.answer_yes = True  # this time the reviewer says yes
    page.click("#accept-form button.accept")
    expect(page.locator(".done")).to_contain_text("Accepted")
    assert state_of(task_id) == "done"
    assert "app.py" in git.Repo(git_project).heads.main.commit.tree


def test_agent_html_is_shown_as_text_and_never_runs(page, git_project: Path) -> None:
    from playwright.sync_api import expect

    task = q.create_task("xss <img src=x onerror=alert('title')> <script>alert(1)</script>")
    wait_for("review", lambda: state_of(task.id) == "provisional", timeout=60)
    base = "/".join(page.url.split("/")[:3])
    page.goto(base + "/")
    expect(page.locator("#group-review")).to_contain_text("<script>alert(1)</script>")
    for tab in ("diff", "notes", "attempt-1", "history"):
        page.goto(f"{base}/tasks/{task.label}?tab={tab}")
        page.wait_for_load_state("load")
    page.goto(f"{base}/tasks/{task.label}?tab=attempt-1")
    expect(page.locator("#log-1")).to_contain_text("<script>alert('log')</script>")
    page.goto(f"{base}/tasks/{task.label}?tab=diff")
    expect(page.locator("#commits")).to_contain_text("<script>alert(1)</script>")
    expect(page.locator('details.file[data-path="xss.html"]')).to_contain_text("onerror=alert(2)")
    assert page.locator("img").count() == 0  # no agent-made element exists at all
    assert page.evaluate("document.scripts.length") == 2  # htmx and review.js, nothing else
    assert page.dialogs == []


def test_a_stale_page_s_accept_is_refused_once_another_attempt_arrived(
    page, git_project: Path
) -> None:
    """Open the task on attempt 1; reject it from the terminal; the daemon lands attempt 2;
    press Accept on the page still showing attempt 1: refused, nothing merged. Reloaded,
    the page shows attempt 2 and accepts it."""
    import subprocess

    from playwright.sync_api import expect

    from ..support import child_env

    task_id = q.create_task("plain work, reviewed twice").id
    wait_for("review", lambda: state_of(task_id) == "provisional", timeout=60)
    page.goto(f"{page.url.split('?')[0].rstrip('/')}/tasks/TASK-{task_id}")
    expect(page.locator("#accept-form")).to_be_visible()
    subprocess.run(
        [OCTOPOID, "reject", task_id, "--reason", "once more"], cwd=git_project,
        env=child_env(git_project), check=True, capture_output=True,
    )  # fmt: skip
    wait_for("attempt 2", lambda: q.get_task(task_id).attempts == 2, timeout=30)
    wait_for("review again", lambda: state_of(task_id) == "provisional", timeout=60)
    main = git.Repo(git_project).heads.main.commit.hexsha
    page.click("#accept-form button.accept")  # the stale page: it still shows attempt 1
    expect(page.locator(".error")).to_contain_text(
        "the branch moved since you loaded this page: attempt 2 arrived"
    )
    assert state_of(task_id) == "provisional"
    assert git.Repo(git_project).heads.main.commit.hexsha == main
    page.reload()
    page.answer_yes = True  # it holds both attempts' work: Accept asks, the reviewer agrees
    page.click("#accept-form button.accept")
    expect(page.locator(".done")).to_contain_text("Accepted")
    assert state_of(task_id) == "done"


def test_the_live_log_appends_and_keeps_the_reader_s_place(page, git_project: Path) -> None:
    """A reader who scrolled up stays where they are while new lines arrive below; the log
    is appended to, never re-sent (the first line is the same element all along)."""

    page.set_viewport_size({"width": 600, "height": 160})  # a log taller than its box
    task_id = q.create_task("long-tick along").id  # lines keep coming however slow we are
    wait_for("the claim", lambda: state_of(task_id) == "claimed", timeout=30)
    page.goto(f"{page.url.split('?')[0].rstrip('/')}/tasks/TASK-{task_id}")
    log = page.locator("#live-log")
    overflowing = (
        "(() => { const l = document.getElementById('live-log');"
        " return l.scrollHeight > l.clientHeight + 20 })()"
    )
    wait_for("a log taller than its box", lambda: page.evaluate(overflowing), timeout=15)
    opened_at_end = page.evaluate(  # it follows the newest line while the reader does
        "(() => { const l = document.getElementById('live-log');"
        " return l.scrollTop + l.clientHeight >= l.scrollHeight - 4 })()"
    )
    assert opened_at_end
    page.evaluate("document.getElementById('live-log').firstChild.marked = true")
    page.evaluate("document.getElementById('live-log').scrollTop = 0")  # the reader looks up
    seen = log.inner_text().count("tick")
    wait_for("more lines below", lambda: log.inner_text().count("tick") > seen, timeout=15)
    assert page.evaluate("document.getElementById('live-log').scrollTop") == 0
    assert page.evaluate("document.getElementById('live-log').firstChild.marked") is True


def test_the_page_s_own_reload_never_aborts_a_click_the_reader_made(page, git_project) -> None:
    """The attempt ends while the reader's click on a tab is on its way: the page must not
    reload itself over it (that aborted the click, and a test's navigation, under load).

    The click's request is held until the page has been told the attempt is over, so the
    two always meet, however fast this machine is."""
    task_id = q.create_task("long-tick along").id
    wait_for("the claim", lambda: state_of(task_id) == "claimed", timeout=30)
    page.goto(f"{page.url.split('?')[0].rstrip('/')}/tasks/TASK-{task_id}")
    running, held, told_over = [True], [], []

    def live(route) -> None:  # the server's answer, except that we say when it is over
        if not running[0]:
            told_over.append(route.request.url)
        body = f'{{"running": {"true" if running[0] else "false"}, "text": "", "next": 0}}'
        route.fulfill(status=200, content_type="application/json", body=body)

    page.route("**/live.json*", live)
    page.route("**/tasks/*?tab=history", lambda route: held.append(route))
    # A click as the reader makes it, dispatched without Playwright waiting for its navigation
    page.evaluate("document.querySelector('nav.tabs a[href=\"?tab=history\"]').click()")
    pump = page.wait_for_timeout  # Playwright hands us its events while we wait on it (an
    # evaluate would wait for the held navigation instead)
    wait_for("the click's request", lambda: pump(50) or held, timeout=30)
    running[0] = False
    # Asked again after being told: the page has read the news and not reloaded over the click
    # (before the fix, the first answer made it reload, aborting the held request).
    wait_for("the news read", lambda: pump(50) or len(told_over) > 1, timeout=30)
    held[0].continue_()
    page.wait_for_url("**?tab=history")
    from playwright.sync_api import expect

    expect(page.locator("nav.tabs a.on")).to_have_text("History")

"""The task page as a reviewer uses it, in Debian's Chromium: a draft review that survives
a reload, comments on odd file names, removed lines and ranges, a refused reject that
keeps what was typed, and a 24 MB diff that eight readers load at once.

Tasks are made ready for review in this process (the scripted agent, one real attempt);
no scheduler runs, so nothing moves unless a test moves it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.memory.open import open_memory
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from ..support import OCTOPOID, child_env, commit_on_branch, remembered, run_claimed, write_agents
from ..support.web import shoot
from ..web_server import start_web

pytestmark = pytest.mark.slow
LIB = "".join(f"value_{i} = {i}\n" for i in range(1, 9))


@pytest.fixture
def reviewed(git_project: Path) -> str:
    """A task ready for review whose branch removes and changes lines of lib.py, and adds
    files named ``a:b.py`` and ``café.py``."""
    write_agents(git_project)
    (git_project / "lib.py").write_text(LIB)
    subprocess.run(["git", "add", "lib.py"], cwd=git_project, check=True)
    subprocess.run(["git", "commit", "-qm", "lib"], cwd=git_project, check=True)
    task = q.create_task(
        "tidy the library",
        context="lib.py has values nobody uses.\nDrop value_2; keep the rest.",
        criteria=["value_2 is gone", "the others are untouched"],
    )
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    changed = LIB.replace("value_2 = 2\n", "").replace("value_5 = 5", "value_5 = 55")
    files = {"lib.py": changed.encode(), "a:b.py": b"one = 1\n", "caf\u00e9.py": b"cafe = 1\n"}
    commit_on_branch(git_project, task.id, files, "tidy")
    assert q.get_store().locate(task.id) is TaskState.PROVISIONAL
    return task.id


@pytest.fixture
def page(browser, reviewed: str, web):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.goto(web.sign_in_url)
    yield page
    context.close()


def lines(page, path: str, side: str, *numbers: int) -> None:
    """Click line numbers in a file (a second one with shift: a range)."""
    file = page.locator(f'details.file[data-path="{path}"]')
    for i, number in enumerate(numbers):
        cell = file.locator(f'td.commentable[data-side="{side}"][data-line="{number}"]')
        cell.click(modifiers=["Shift"] if i else [])


def comment(page, text: str) -> None:
    page.fill("tr.comment-editor textarea", text)
    page.click("tr.comment-editor button.add-comment")


def saved(page) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#draft-status")).to_have_text("Draft saved.")


def test_a_draft_review_survives_a_reload_and_is_what_reject_sends(
    page, web, reviewed: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{web.base}/tasks/TASK-{reviewed}")
    expect(page.locator("#context")).to_contain_text("Drop value_2")  # the task comes first
    expect(page.locator("#criteria li")).to_have_count(2)
    page.locator('#criteria input[data-criterion="0"]').check()
    saved(page)
    lines(page, "lib.py", "old", 2)
    comment(page, "REMOVED-LINE: value_2 is still imported somewhere")
    saved(page)
    lines(page, "lib.py", "new", 3, 5)
    comment(page, "RANGE: 3 to 5 read oddly")
    saved(page)
    lines(page, "a:b.py", "new", 1)
    comment(page, "COLON-NAME: rename this file")
    saved(page)
    lines(page, "caf\u00e9.py", "new", 1)
    comment(page, "ACCENT-NAME: ascii names please")
    saved(page)
    page.locator('details.file[data-path="caf\u00e9.py"] input.viewed-box').check()
    saved(page)
    page.fill("#reason", "REASON: see the comments")
    saved(page)
    page.evaluate("window.scrollTo(0, 0)")
    shoot(page, "task-page", tmp_path)
    page.locator('details.file[data-path="a:b.py"]').scroll_into_view_if_needed()
    shoot(page, "task-draft-review", tmp_path)

    page.reload()  # everything is still there, drawn under its lines
    expect(page.locator("li.comment")).to_have_count(4)
    lib = page.locator('details.file[data-path="lib.py"]')
    expect(lib.locator("tr.inline-comments")).to_have_count(2)
    expect(lib.locator("li.comment").first).to_contain_text("lib.py:removed 2")
    expect(lib.locator("li.comment").nth(1)).to_contain_text("lib.py:3-5")
    expect(page.locator("#reason")).to_have_value("REASON: see the comments")
    expect(page.locator('#criteria input[data-criterion="0"]')).to_be_checked()
    expect(page.locator('#criteria input[data-criterion="1"]')).not_to_be_checked()
    cafe = page.locator('details.file[data-path="caf\u00e9.py"]')
    assert cafe.get_attribute("open") is None  # viewed: folded
    expect(page.locator("#viewed-count")).to_have_text("1 of 4 viewed")

    page.click("#split-link")  # the split view draws the same draft
    expect(page.locator("table.diff.split").first).to_be_visible()
    expect(page.locator("li.comment")).to_have_count(4)
    lib.locator("li.comment", has_text="RANGE").locator("button.drop-comment").click()
    saved(page)
    expect(page.locator("li.comment")).to_have_count(3)

    page.click("#reject-form button.reject")
    expect(page.locator(".done")).to_contain_text("Rejected")
    notes = q.get_task_notes(reviewed)
    assert "### lib.py, removed line 2" in notes and "value_2 = 2" in notes
    assert "### a:b.py, line 1" in notes and "COLON-NAME" in notes
    assert "### caf\u00e9.py, line 1" in notes and "ACCENT-NAME" in notes
    assert "RANGE" not in notes and "REASON: see the comments" in notes


def test_learnings_struck_and_rewritten_survive_a_reload_and_are_what_accept_keeps(
    page, web, reviewed: str
) -> None:
    from playwright.sync_api import expect

    remembered(reviewed, "KEEP-ME: the tests run with tox")
    remembered(reviewed, "STRIKE-ME: push to main directly")
    page.goto(f"{web.base}/tasks/TASK-{reviewed}")
    expect(page.locator("#learnings li")).to_have_count(2)
    page.locator('#learnings input.strike[data-learning="2"]').check()
    saved(page)
    edit = page.locator('#learnings input.learning-edit[data-learning="1"]')
    edit.fill("KEEP-ME: the tests run with nox")
    saved(page)
    page.reload()
    expect(page.locator('#learnings input.strike[data-learning="2"]')).to_be_checked()
    expect(edit).to_have_value("KEEP-ME: the tests run with nox")
    page.on("dialog", lambda dialog: dialog.accept())  # the branch holds two commits
    page.click("#accept-form button.accept")
    expect(page.locator(".done")).to_contain_text("Accepted")
    store = open_memory()
    kept = [n["content"] for n in store.search_notes("KEEP STRIKE tests main", limit=10)]
    store.close()
    assert kept == ["KEEP-ME: the tests run with nox"]


def test_a_refused_reject_keeps_every_word(page, web, git_project: Path, reviewed: str) -> None:
    """The page is stale (the task was rejected from the terminal and tried again): its
    Reject is refused, and the reason and comments typed are on the page still."""
    from playwright.sync_api import expect

    page.goto(f"{web.base}/tasks/TASK-{reviewed}")
    lines(page, "a:b.py", "new", 1)
    comment(page, "KEEP-ME: a comment typed before the refusal")
    saved(page)
    page.fill("#reason", "KEEP-REASON: typed before the refusal")
    argv = [OCTOPOID, "reject", reviewed, "--reason", "from the terminal"]
    subprocess.run(argv, cwd=git_project, env=child_env(git_project), check=True)
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")  # attempt 2 lands
    page.click("#reject-form button.reject")
    expect(page.locator("#action-error")).to_contain_text("attempt 2 arrived")
    expect(page.locator("#reason")).to_have_value("KEEP-REASON: typed before the refusal")
    expect(page.locator("li.comment")).to_contain_text("KEEP-ME")
    assert q.get_task(reviewed).attempts == 2 and "KEEP-ME" not in q.get_task_notes(reviewed)


@pytest.fixture
def web_process(agent_project: Path):
    """`octopoid web` as a process of its own (the ``web`` fixture serves from this one):
    its memory is what is measured."""
    server = start_web(agent_project)
    yield server
    server.stop()


def test_a_24_mb_diff_loads_for_eight_readers_at_once_in_bounded_memory(
    browser,
    web_process,
    git_project: Path,
    reviewed: str,
) -> None:
    """An agent commits a 24 MB file. Eight readers load the page at the same moment: each
    gets the page, which names the file it did not draw, its size (git does not even diff a
    file that big) and how to see it, while the server's memory stays under 300 MB at its
    peak."""
    huge = b"".join(b"generated_%07d = %07d  # filler\n" % (i, i) for i in range(700_000))
    assert len(huge) > 24_000_000
    commit_on_branch(git_project, reviewed, {"generated.py": huge}, "an enormous file")
    context = browser.new_context()
    try:
        tab = context.new_page()
        tab.goto(f"{web_process.base}/login")
        tab.fill("input[name=token]", web_process.token)
        tab.click("form button")
        tab.wait_for_url(f"{web_process.base}/")
        url = f"{web_process.base}/tasks/TASK-{reviewed}"
        loads = tab.evaluate(  # eight loads of the page at the same moment, each timed
            """async url => Promise.all([...Array(8)].map(async () => {
                 const started = performance.now();
                 const reply = await fetch(url, {credentials: "same-origin"});
                 const page = await reply.text();
                 return [reply.status, page, performance.now() - started];
               }))""",
            url,
        )
        print("eight loads at once, ms each:", sorted(int(ms) for _, _, ms in loads))
        for status, html, _ in loads:
            assert status == 200 and "generated.py" in html and "MB, too big to diff" in html
            assert len(html) < 200_000  # the 24 MB are not on the page
        tab.goto(url)
        assert "generated.py" in tab.locator("#too-big").inner_text()
        assert "octopoid diff" in tab.locator("#left-out").inner_text()
    finally:
        context.close()
    peak_kb = _peak_rss_kb(web_process.proc.pid)
    print(f"the server peaked at {peak_kb // 1024} MB")
    assert peak_kb < 300 * 1024, f"the server peaked at {peak_kb // 1024} MB"


def _peak_rss_kb(pid: int) -> int:
    """The high-water mark of a process's resident memory (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")

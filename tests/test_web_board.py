"""The board over real HTTP (a real `octopoid web`, urllib as the client): search, filters,
pages of 50 per group, the cards' buttons, and hostile searches. The browser test (typing
while the board polls) is tests/e2e/test_web_board.py."""

from __future__ import annotations

import html
import re
from urllib.parse import urlencode

import pytest

from orchestrator import config
from orchestrator.model.tasks import TaskState, new_task, render_task
from orchestrator.queue import machine as q

from .support.web import board

S = TaskState


def shown(page: str) -> list[str]:
    """The task labels the page has cards for, in page order."""
    return re.findall(r'<li class="card [^"]*" id="card-(TASK-[^"]+)"', page)


def group_of(page: str, key: str) -> str:
    """One group's section of the board."""
    match = re.search(rf'<section class="group" id="group-{key}">.*?</section>', page, re.S)
    assert match, f"no group {key}"
    return match.group(0)


def card_form(page: str, label: str, action: str) -> dict[str, str]:
    """The hidden fields of the ``action`` form on ``label``'s card, as a browser sends."""
    card = re.search(rf'id="card-{label}">(.*?)</li>', page, re.S)
    assert card, f"no card for {label}"
    form = re.search(
        rf'<form method="post" action="/tasks/{label}/{action}"(.*?)</form>', card[1], re.S
    )
    assert form, f"no {action} button on {label}'s card"
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form[1])
    return {name: html.unescape(value) for name, value in fields}


def write_waiting(n: int, title: str) -> list[str]:
    """``n`` waiting tasks written straight into incoming/ (as the bench fills a queue: the
    claim index finds them by the folder's mtime), in claim order."""
    folder = config.get_queue_dir() / S.INCOMING.value
    ids = [f"w{i:05d}" for i in range(n)]
    for task_id in ids:
        path = folder / f"TASK-{task_id}.md"
        path.write_text(render_task(new_task(task_id, f"{title} {task_id}")), encoding="utf-8")
    return [f"TASK-{task_id}" for task_id in ids]


def test_search_matches_an_id_or_words_of_a_title(git_project, client) -> None:
    parser = q.create_task("Fix the Parser's error messages").label
    docs = q.create_task("write the docs").label
    speed = q.create_task("parser speed").label
    assert set(shown(board(client, "?q=PARSER"))) == {parser, speed}
    assert shown(board(client, "?q=" + docs)) == [docs]
    assert shown(board(client, "?q=" + docs.lower())) == [docs]
    assert shown(board(client, "?q=" + docs.removeprefix("TASK-"))) == [docs]
    assert shown(board(client, "?q=%20%20the%20%20docs%20")) == [docs]  # spaces as one
    page = board(client, "?q=nothing+like+this")
    assert shown(page) == [] and "no match" in page


def test_search_finds_done_tasks_newest_first(git_project, client) -> None:
    ids = [q.create_task(f"release note {i}").id for i in range(3)]
    for task_id in ids:
        q.close_task(task_id, "done", "shipped")
    q.create_task("release note, still waiting")
    done = group_of(board(client, "?q=release+note"), "done")
    assert shown(done) == [f"TASK-{i}" for i in reversed(ids)]


def test_each_filter_narrows_the_board(git_project, client) -> None:
    urgent = q.create_task("urgent thing", priority="P0").label
    later = q.create_task("later thing", priority="P2").label
    docs = q.create_task("docs thing", role="docs", priority="P0").label
    claimed = q.claim_task("implement", "impl-1").label  # the urgent one: claim order
    assert claimed == urgent
    page = board(client, "?group=waiting")
    assert re.findall(r'id="group-(\w+)"', page) == ["waiting"]
    assert set(shown(page)) == {later, docs}
    assert set(shown(board(client, "?priority=P0"))) == {urgent, docs}
    assert shown(board(client, "?role=docs")) == [docs]
    assert shown(board(client, "?priority=P0&group=running")) == [urgent]
    assert shown(board(client, "?priority=P2&q=docs")) == []
    page = board(client, "?group=nonsense&priority=P9&role=%3Cb%3E")  # unknown: ignored
    assert set(shown(page)) == {urgent, later, docs}


def test_the_filter_form_shows_the_query_and_the_poll_sends_it(git_project, client) -> None:
    _, _, page = client.request("/?q=fix+it&group=done&priority=P1&role=implement&page=3")
    form = re.search(r'<form method="get" action="/" id="filters".*?</form>', page, re.S)[0]
    assert 'name="q" value="fix it"' in form
    for name, value in (("group", "done"), ("priority", "P1"), ("role", "implement")):
        assert re.search(rf'name="{name}".*?<option value="{value}" selected>', form, re.S)
    assert '<input type="hidden" name="page" value="3">' in form
    polled = re.search(r'<section id="board"[^>]*>', page)[0]
    assert 'hx-get="/board"' in polled and 'hx-include="#filters"' in polled
    assert page.index('id="filters"') < page.index('id="board"')  # outside what is swapped
    assert '<script src="/static/board.js" defer></script>' in page


def test_a_big_group_shows_50_and_links_to_the_next_page(git_project, client) -> None:
    labels = write_waiting(1_051, "bulk")
    page = board(client)
    waiting = group_of(page, "waiting")
    assert shown(waiting) == labels[:50]
    assert 'href="/?group=waiting&amp;page=2" rel="next">and 1,001 more</a>' in waiting
    assert '<span class="n">1,051</span>' in waiting
    second = group_of(board(client, "?group=waiting&page=2"), "waiting")
    assert shown(second) == labels[50:100]
    assert "page 2 of 22" in second and 'href="/?group=waiting" rel="prev"' in second
    assert 'href="/?group=waiting&amp;page=3" rel="next">and 951 more</a>' in second
    last = group_of(board(client, "?group=waiting&page=999999"), "waiting")  # clamped
    assert shown(last) == labels[1050:] and "page 22 of 22" in last and "more" not in last
    searched = group_of(board(client, "?q=bulk+w0100&group=waiting"), "waiting")
    assert shown(searched) == labels[1000:1010]  # w01000 .. w01009
    assert "page" not in searched


def test_done_pages_go_back_in_time_and_keep_the_search(git_project, client) -> None:
    ids = [q.create_task(f"finished {i}").id for i in range(53)]
    for task_id in ids:
        q.close_task(task_id, "done", "finished")
    q.create_task("finished, but waiting")
    newest_first = [f"TASK-{i}" for i in reversed(ids)]
    done = group_of(board(client), "done")
    assert shown(done) == newest_first[:50]
    assert 'href="/?group=done&amp;page=2" rel="next">and 3 more</a>' in done
    assert shown(group_of(board(client, "?group=done&page=2"), "done")) == newest_first[50:]
    done = group_of(board(client, "?q=finished"), "done")
    assert 'href="/?q=finished&amp;group=done&amp;page=2" rel="next">and 3 more</a>' in done
    page = board(client, "?q=finished&group=done&page=2")
    assert shown(page) == newest_first[50:]


def test_retry_from_a_card_returns_a_failed_task_to_incoming(git_project, client) -> None:
    task = q.create_task("flaky")
    q.fail_task(q.claim_task(None, "impl-1"), "exploded")
    form = card_form(board(client), task.label, "retry")
    assert form["back"] == "board"
    status, headers, _ = client.request(f"/tasks/{task.label}/retry", form)
    assert status == 303 and headers["location"] == "/?done=retried"
    assert q.get_store().locate(task.id) is S.INCOMING
    assert client.request(headers["location"])[0] == 200


def test_requeue_from_a_card_takes_a_claim_back(git_project, client) -> None:
    task = q.create_task("long job")
    q.claim_task(None, "impl-1")
    page = board(client)
    assert "data-confirm=" in re.search(rf'action="/tasks/{task.label}/requeue"[^>]*>', page)[0]
    status, headers, _ = client.request(
        f"/tasks/{task.label}/requeue", card_form(page, task.label, "requeue")
    )
    assert status == 303 and headers["location"] == "/?done=requeued"
    assert q.get_store().locate(task.id) is S.INCOMING


def test_approve_from_a_card_queues_the_proposed_subtasks(git_project, client) -> None:
    task = q.create_task("too big")
    split = '[{"title": "first half"}, {"title": "second half"}]'
    q.propose_split(q.claim_task(None, "impl-1"), split)
    page = board(client)
    assert task.label in shown(group_of(page, "attention"))
    assert f"/tasks/{task.label}/accept" not in page  # accepting is the task page's
    status, headers, _ = client.request(
        f"/tasks/{task.label}/approve", card_form(page, task.label, "approve")
    )
    assert status == 303 and headers["location"] == "/?done=approved"
    assert q.get_task(task.id).state is S.DONE
    assert sorted(t.title for t in q.list_tasks(S.INCOMING)) == ["first half", "second half"]


def test_close_from_a_card_needs_a_reason(git_project, client) -> None:
    task = q.create_task("not needed")
    form = card_form(board(client), task.label, "close")
    status, _, page = client.request(f"/tasks/{task.label}/close", {**form, "reason": " "})
    assert status == 400 and "needs a reason" in page
    assert q.get_store().locate(task.id) is S.INCOMING
    closing = {**form, "reason": "done upstream", "wont_do": "1"}
    status, headers, _ = client.request(f"/tasks/{task.label}/close", closing)
    assert status == 303 and headers["location"] == "/?done=closed"
    closed = q.get_task(task.id)
    assert closed.state is S.DONE and closed.headers["CLOSED"] == "wont-do"


def test_cards_offer_only_what_their_state_allows(git_project, client) -> None:
    running = q.create_task("runs")
    idle = q.create_task("waits")
    assert q.claim_task(None, "impl-1").id == running.id  # the first in claim order
    page = board(client)
    assert re.findall(rf'action="/tasks/{running.label}/(\w+)"', page) == ["requeue"]
    assert re.findall(rf'action="/tasks/{idle.label}/(\w+)"', page) == ["close"]
    q.close_task(idle.id, "done", "finished")
    page = board(client)
    assert idle.label in shown(group_of(page, "done"))
    assert not re.findall(rf'action="/tasks/{idle.label}/(\w+)"', page)


def test_the_board_says_what_a_card_s_button_did(git_project, client) -> None:
    _, _, page = client.request("/?done=retried")
    assert '<p class="done" role="status">Back in incoming with fresh attempts.</p>' in page


@pytest.mark.parametrize(
    "typed",
    [
        "<script>alert(1)</script>",
        '"><img src=x onerror=alert(2)>',
        "x" * 5_000,
        "nul\x00and\x1bescape",
        "{{ 7 * 7 }} {% raw %}",
    ],
    ids=["script", "attribute", "5000-chars", "control-chars", "template"],
)
def test_a_hostile_search_is_escaped_and_harmless(git_project, client, typed: str) -> None:
    q.create_task("an ordinary task")
    status, _, page = client.request("/?" + urlencode({"q": typed}))
    assert status == 200 and "Traceback" not in page
    value = re.search(r'name="q" value="([^"]*)"', page)[1]
    kept = html.unescape(value)
    assert len(kept) <= 200 and "\x00" not in kept and "\x1b" not in kept
    assert kept == "".join(c for c in typed if c.isprintable())[:200].strip()
    for bad in ("<script>alert(1)", "<img src=x"):
        assert bad not in page
    assert shown(board(client, "?" + urlencode({"q": typed}))) == []


def test_a_non_ascii_search_matches_regardless_of_case(git_project, client) -> None:
    task = q.create_task("Ünïcødé straße 日本語 🐙").label
    q.create_task("plain ascii")
    for typed in ("ÜNÏCØDÉ", "STRASSE", "日本語", "🐙"):
        assert shown(board(client, "?" + urlencode({"q": typed}))) == [task], typed
    _, _, page = client.request("/?" + urlencode({"q": "日本語 🐙"}))
    assert 'name="q" value="日本語 🐙"' in page


def test_new_task_is_at_the_top_with_its_fields(git_project, client) -> None:
    _, _, page = client.request("/")
    summary = page.index("<summary>New task</summary>")
    assert summary < page.index('id="board"')
    form = re.search(r'<form method="post" action="/enqueue".*?</form>', page, re.S)[0]
    assert 'name="title" required maxlength="200"' in form
    for name in ("context", "criteria", "priority", "blocked_by", "branch", "csrf"):
        assert f'name="{name}"' in form


def test_a_pull_request_is_linked_from_its_card_and_its_page_only_when_it_is_http(
    git_project, client
) -> None:
    linked, hostile = q.create_task("has a PR"), q.create_task("has a strange PR")
    for task, url in (
        (linked, "https://forge.example/o/r/pull/7"),
        (hostile, "javascript:alert(1)"),
    ):
        q.propose_split(q.claim_task(None, "impl-1"), '[{"title": "a"}]')  # in review
        q.get_store().update(
            task.id,
            S.PROVISIONAL,
            lambda t, u=url: (t.set_header("PR_NUMBER", 7), t.set_header("PR_URL", u)),
        )
    page = board(client)
    assert (
        '<a class="pr" href="https://forge.example/o/r/pull/7" rel="noopener noreferrer">PR #7</a>'
        in page
    )
    assert "javascript:" not in page
    _, _, task_page = client.request(f"/tasks/{linked.label}")
    assert 'id="pull-request" href="https://forge.example/o/r/pull/7"' in task_page
    _, _, task_page = client.request(f"/tasks/{hostile.label}")
    assert "javascript:" not in task_page

"""The review page over real HTTP: a real `octopoid web` process, urllib as the client.

Auth (token, CSRF, where it may listen), the actions calling the CLI's own functions, the
enqueue form's validation, and hostile ids. The browser tests are in tests/e2e/test_web.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from orchestrator.box.bwrap import BWRAP_ENV
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from .support import (
    HELPERS,
    OCTOPOID,
    child_env,
    commit_on_branch,
    invoke,
    run_claimed,
    write_agents,
)
from .support.journals import burned_out
from .support.web import comment_fields, judged, provisional_task
from .web_server import Client, start_web


def test_every_request_without_the_token_is_forbidden(web) -> None:
    anonymous = Client(web.base)
    for path in ("/", "/board", "/static/htmx.min.js", "/tasks/TASK-1", "/pygments.css"):
        status, _, body = anonymous.request(path)
        assert status == 403, path
        assert "token" in body
    status, _, _ = anonymous.request("/?token=" + "x" * len(web.token))
    assert status == 403


def test_the_printed_link_becomes_a_session_cookie_not_the_token(web) -> None:
    client = Client(web.base)
    status, headers, _ = client.request(web.sign_in_url.removeprefix(web.base))
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert web.token not in cookie and web.token not in web.sign_in_url
    status, headers, page = client.request("/")
    assert status == 200 and "Needs review" in page
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"


def test_a_post_without_the_right_csrf_token_changes_nothing(git_project, client) -> None:
    task_id = provisional_task()
    for form in ({}, {"csrf": "0" * 64}):
        status, _, body = client.request(f"/tasks/TASK-{task_id}/accept", form)
        assert status == 403 and "CSRF" in body
    assert q.get_store().locate(task_id) is TaskState.PROVISIONAL
    status, _, _ = client.request("/enqueue", {"title": "sneaky"})
    assert status == 403
    assert q.list_tasks(TaskState.INCOMING) == []


def test_accept_from_the_page_merges_like_the_cli(git_project, client) -> None:
    import git

    task_id = provisional_task()
    form = {"csrf": client.csrf(), **judged(client, task_id)}
    status, headers, _ = client.request(f"/tasks/TASK-{task_id}/accept", form)
    assert status == 303 and headers["location"] == f"/tasks/TASK-{task_id}?done=accepted"
    assert q.get_store().locate(task_id) is TaskState.DONE
    assert f"TASK-{task_id}.txt" in git.Repo(git_project).head.commit.tree
    _, _, page = client.request(headers["location"])
    assert "Accepted: merged" in page and ">done<" in page


def test_a_refused_action_is_shown_on_the_page_not_a_traceback(git_project, client) -> None:
    task_id = provisional_task()
    csrf = client.csrf()
    status, _, page = client.request(f"/tasks/TASK-{task_id}/reject", {"csrf": csrf, "reason": ""})
    assert status == 400 and "needs a reason" in page
    status, _, page = client.request(f"/tasks/TASK-{task_id}/retry", {"csrf": csrf})
    assert status == 409 and "Traceback" not in page
    assert q.get_store().locate(task_id) is TaskState.PROVISIONAL


def test_an_action_racing_a_cli_review_is_refused_cleanly(git_project, client) -> None:
    """A person accepting from the CLI holds the task; the page's reject waits for nothing
    and changes nothing, and says why."""
    task_id = provisional_task()
    csrf = client.csrf()
    with q.get_store().hold(task_id, "accepted"):
        form = {"csrf": csrf, "reason": "no", **judged(client, task_id)}
        status, _, page = client.request(f"/tasks/TASK-{task_id}/reject", form)
        assert status == 409 and "is being accepted" in page
    assert q.get_store().locate(task_id) is TaskState.PROVISIONAL
    assert "## Review" not in (q.get_task_notes(task_id) or "")


def test_reject_with_line_comments_writes_them_into_the_notes(git_project, client) -> None:
    """Comments travel as fields, so a name with ':' or beyond ASCII takes them as any."""
    task_id = provisional_task()
    odd = {"a:b.py": b"one = 1\ntwo = 2\n", "caf\u00e9.py": b"cafe = 1\n"}
    commit_on_branch(git_project, task_id, odd, "odd names")
    form = [
        ("csrf", client.csrf()),
        ("reason", "see the comments"),
        *comment_fields(f"TASK-{task_id}.txt", 1, "say which attempt"),
        *comment_fields("a:b.py", 1, "both: of these", end=2),
        *comment_fields("caf\u00e9.py", 1, "an accent"),
        *judged(client, task_id).items(),
    ]
    status, headers, _ = client.request(f"/tasks/TASK-{task_id}/reject", form)
    assert status == 303, headers
    notes = (git_project / ".octopoid/runtime/shared/notes" / f"TASK-{task_id}.md").read_text()
    assert "## Review Comments" in notes and "say which attempt" in notes
    assert "### a:b.py, lines 1-2" in notes and "both: of these" in notes
    assert "### caf\u00e9.py, line 1" in notes and "cafe = 1" in notes
    assert q.get_store().locate(task_id) is TaskState.INCOMING


def test_a_bad_line_comment_refuses_the_whole_reject_and_keeps_what_was_typed(
    git_project, client
) -> None:
    """A refused reject draws the page again with the reason and every comment as typed."""
    task_id = provisional_task()
    form = [
        ("csrf", client.csrf()),
        ("reason", "REASON-KEPT <b>as typed</b>"),
        *comment_fields("../../etc/passwd", 1, "x"),
        *comment_fields(f"TASK-{task_id}.txt", 1, "COMMENT-KEPT"),
        *judged(client, task_id).items(),
    ]
    status, _, page = client.request(f"/tasks/TASK-{task_id}/reject", form)
    assert status == 400, re.findall(r"action-error.>([^<]*)", page)
    assert "Traceback" not in page and "relative to the repository" in page, page[:6000]
    assert "REASON-KEPT &lt;b&gt;as typed&lt;/b&gt;" in page
    assert page.count("COMMENT-KEPT") >= 2  # drawn under its line, and in its hidden field
    assert q.get_store().locate(task_id) is TaskState.PROVISIONAL


def test_enqueue_from_the_page_checks_like_the_cli(git_project, client) -> None:
    csrf = client.csrf()
    form = {
        "csrf": csrf,
        "title": "add a greeting",
        "context": "## Not a section\nkeep it short",
        "criteria": "prints hello\n\nexits 0",
        "priority": "P0",
        "blocked_by": "",
        "branch": "",
    }
    status, headers, _ = client.request("/enqueue", form)
    assert status == 303
    (task,) = q.list_tasks(TaskState.INCOMING)
    assert headers["location"] == f"/tasks/{task.label}?done=enqueued"
    assert task.priority == "P0" and task.criteria == ["prints hello", "exits 0"]
    assert task.context == "## Not a section\nkeep it short"
    for bad, says in (
        ({"title": "x\x1b[31m"}, "control character"),
        ({"blocked_by": "TASK-999"}, "TASK-999"),
        ({"priority": "P9"}, "priority"),
        ({"branch": "no-such-branch"}, "no-such-branch"),
        ({"title": "   "}, "title"),
    ):
        status, _, page = client.request("/enqueue", {**form, **bad})
        assert status == 400, bad
        assert says in page and "Traceback" not in page
    assert len(q.list_tasks(TaskState.INCOMING)) == 1


@pytest.mark.parametrize(
    "path", ["/tasks/..%2F..%2Fetc%2Fpasswd", "/tasks/TASK-1;id", "/tasks/%00", "/tasks/TASK-99"]
)
def test_a_hostile_or_unknown_id_gets_a_clear_page(client, path: str) -> None:
    status, _, page = client.request(path)
    assert status in (400, 404)
    assert "Traceback" not in page and "root:" not in page


def test_board_counts_are_the_status_command_s(git_project, client) -> None:
    import json

    provisional_task()
    q.create_task("waiting one")
    status = subprocess.run(
        [OCTOPOID, "status", "--json"], env=child_env(git_project), capture_output=True, text=True
    )
    counts = json.loads(status.stdout)["counts"]
    _, _, page = client.request("/board")
    for state, n in counts.items():
        assert f'<td data-state="{state}">{n}</td>' in page


def test_listening_beyond_loopback_needs_an_explicit_token(git_project) -> None:
    env = child_env(git_project)
    for args, says in (
        (["--host", "0.0.0.0"], "without --token"),
        (["--host", "127.0.0.1", "--token", "short"], "at least 16"),
        (["--host", ""], "--host is empty"),
    ):
        done = subprocess.run(
            [OCTOPOID, "web", *args], env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 2, done
        assert says in done.stderr and "Traceback" not in done.stderr


def test_a_port_in_use_is_one_clear_line(git_project) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = subprocess.run(
            [OCTOPOID, "web", "--port", port],
            env=child_env(git_project),
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_a_chosen_token_lets_it_listen_on_all_interfaces(git_project) -> None:
    server = start_web(git_project, "--host", "0.0.0.0", "--token", "a-long-shared-secret-1")
    try:
        assert server.token == "a-long-shared-secret-1"
        client = Client(server.base.replace("0.0.0.0", "127.0.0.1"))
        assert client.request("/")[0] == 403
        client.login(server.token)
        assert client.request("/")[0] == 200
    finally:
        server.stop()


def test_without_the_web_extra_it_says_which_to_install(git_project) -> None:
    blocked = (
        "import sys; sys.modules['starlette'] = None; "  # as if the extra were not installed
        "from orchestrator.faces.cli.main import main; sys.argv = ['octopoid', 'web']; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked], env=child_env(git_project), capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "pip install 'octopoid[web]'" in done.stderr and "starlette" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_secret_in_an_agent_s_commit_message_is_not_shown(git_project, client) -> None:
    task_id = provisional_task()
    key = "AKIA" + "Q3XRT7YP2LMN4VWZ"
    commit_on_branch(git_project, task_id, {}, f"use {key}")
    _, _, page = client.request(f"/tasks/TASK-{task_id}")
    assert "use " in page and key not in page


def test_the_board_says_when_agents_are_not_sandboxed_or_their_network_is_open(
    git_project, bwrap_ok, client
) -> None:
    _, _, board = client.request("/board")
    assert 'id="sandbox"' not in board  # a working box, network closed: nothing to warn of
    broken = start_web(git_project, env={BWRAP_ENV: "octopoid-no-such-bwrap"})
    try:
        _, _, board = broken.client().request("/board")
    finally:
        broken.stop()
    assert 'id="sandbox"' in board and "sandbox unavailable: octopoid-no-such-bwrap" in board
    (git_project / ".octopoid/config.yaml").write_text("sandbox: {network: open}\n")
    _, _, board = client.request("/board")
    assert 'id="sandbox"' in board and "network OPEN for impl-1" in board
    (git_project / ".octopoid/config.yaml").write_text("sandbox: none\n")
    _, _, board = client.request("/board")
    assert "agents are NOT sandboxed" in board


def test_close_from_the_page_ends_a_task_without_a_merge(git_project, client) -> None:
    import git

    task_id = provisional_task()
    csrf = client.csrf()
    status, _, page = client.request(f"/tasks/TASK-{task_id}/close", {"csrf": csrf, "reason": ""})
    assert status == 400 and "needs a reason" in page
    form = {"csrf": csrf, "reason": "already done upstream", "wont_do": "1"}
    status, headers, _ = client.request(f"/tasks/TASK-{task_id}/close", form)
    assert status == 303 and headers["location"] == f"/tasks/TASK-{task_id}?done=closed"
    task = q.get_task(task_id)
    assert task.state is TaskState.DONE and task.headers["CLOSED"] == "wont-do"
    assert f"TASK-{task_id}.txt" not in git.Repo(git_project).head.commit.tree


def test_a_stale_page_cannot_accept_work_that_arrived_after_it_was_loaded(
    git_project, client
) -> None:
    """Load the page on attempt 1, reject from the CLI, let attempt 2 land, press Accept on
    the old page: refused with 409, nothing merged; the fresh page's Accept works."""
    import git

    task_id = provisional_task()
    stale = {"csrf": client.csrf(), **judged(client, task_id)}
    subprocess.run(
        [OCTOPOID, "reject", task_id, "--reason", "again"], cwd=git_project,
        env=child_env(git_project), check=True, capture_output=True,
    )  # fmt: skip
    commit_on_branch(git_project, task_id, {"late.txt": b"attempt 2\n"}, "attempt 2's work")
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    main = git.Repo(git_project).head.commit.hexsha
    status, _, page = client.request(f"/tasks/TASK-{task_id}/accept", stale)
    assert (
        status == 409 and "the branch moved since you loaded this page: attempt 2 arrived" in page
    )
    assert git.Repo(git_project).head.commit.hexsha == main
    assert q.get_store().locate(task_id) is TaskState.PROVISIONAL
    fresh = {"csrf": client.csrf(), **judged(client, task_id)}
    _, _, page = client.request(f"/tasks/TASK-{task_id}")
    assert 'data-confirm="This branch holds' in page  # more than its last attempt's work
    status, _, _ = client.request(f"/tasks/TASK-{task_id}/accept", fresh)
    assert status == 303 and q.get_store().locate(task_id) is TaskState.DONE


def test_accept_expect_in_the_terminal_refuses_a_head_it_did_not_judge(git_project) -> None:
    write_agents(git_project)
    task_id = provisional_task()
    shown = subprocess.run(
        [OCTOPOID, "show", task_id], cwd=git_project, env=child_env(git_project),
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    head = re.search(r"branch: agent/TASK-\d+ at ([0-9a-f]{40})", shown).group(1)
    commit_on_branch(git_project, task_id, {"more.txt": b"x\n"}, "pushed after the look")
    done = subprocess.run(
        [OCTOPOID, "accept", task_id, "--expect", head[:12]], cwd=git_project,
        env=child_env(git_project), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1 and "is at " in done.stderr and head[:12] in done.stderr
    assert q.get_store().locate(task_id) is TaskState.PROVISIONAL
    bad = subprocess.run(
        [OCTOPOID, "accept", task_id, "--expect", "zz"], cwd=git_project,
        env=child_env(git_project), capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "7 to 40 hex digits" in bad.stderr


def test_a_sign_in_s_redirect_stays_on_this_site(web) -> None:
    """Where the form sends the browser after signing in is a path here: ``//evil.example/``
    and its kin are protocol-relative jumps to another host, so they land on the board."""
    for asked, lands in (
        ("/tasks/TASK-1?tab=diff", "/tasks/TASK-1?tab=diff"),
        ("//evil.example/", "/"),
        ("/\\evil.example/", "/"),
        ("https://evil.example/", "/"),
        ("/\tevil", "/"),
    ):
        form = {"token": web.token, "next": asked}
        status, headers, _ = Client(web.base).request("/login", form)
        assert status == 303 and headers["location"] == lands, asked


def test_small_faults_a_reviewer_met(git_project, client) -> None:
    """A blank reason is bad input (exit 2, as the README says); the favicon is no 404;
    the title field allows what the server does (200)."""
    task_id = provisional_task()
    done = subprocess.run(
        [OCTOPOID, "reject", task_id, "--reason", "  "], cwd=git_project,
        env=child_env(git_project), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "needs a reason" in done.stderr
    assert client.request("/favicon.ico")[0] == 204
    assert 'name="title" required maxlength="200"' in client.request("/")[2]


def test_the_live_tab_of_a_finished_attempt_is_the_diff_and_polls_no_more(git_project, client):
    """Once the attempt has ended, ?tab=live (where the page's reload lands) shows the diff
    and has no live poller, so the page reloads once, not every second."""
    task_id = provisional_task()
    status, _, page = client.request(f"/tasks/TASK-{task_id}?tab=live")
    assert status == 200 and 'id="live"' not in page and "hx-trigger" not in page
    assert f"TASK-{task_id}.txt" in page  # the diff's file
    status, _, body = client.request(f"/tasks/TASK-{task_id}/live.json?after=0")
    assert status == 200 and json.loads(body) == {"running": False, "text": "", "next": 0}


def test_the_live_log_sends_only_what_is_new(git_project) -> None:
    """From an offset, only the bytes after it, and a character cut at a chunk's end
    comes whole with the next one."""
    from orchestrator.faces.web import pages
    from orchestrator.queue import task_notes

    log = task_notes.stdout_log_path("7")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"line 1\nline 2\n")
    text, offset = pages.live_since("7", None)
    assert (text, offset) == ("line 1\nline 2\n", 14)
    with open(log, "ab") as f:
        f.write("café\n".encode())
    assert pages.live_since("7", offset) == ("café\n", 20)
    assert pages.live_since("7", 20) == ("", 20)
    big = b"x" * (pages.LIVE_CHUNK - 1) + "é".encode()  # é split across the chunk's end
    log.write_bytes(big)
    text, offset = pages.live_since("7", 0)
    assert offset == pages.LIVE_CHUNK - 1 and text == "x" * (pages.LIVE_CHUNK - 1)
    assert pages.live_since("7", offset) == ("é", len(big))


def test_show_json_gives_scripts_the_head_a_review_can_expect(git_project) -> None:
    write_agents(git_project)
    task_id = provisional_task()
    shown = json.loads(
        subprocess.run(
            [OCTOPOID, "show", task_id, "--json"], cwd=git_project, env=child_env(git_project),
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    assert shown["id"] == f"TASK-{task_id}" and shown["state"] == "provisional"
    assert len(shown["head"]) == 40 and shown["notes"]["attempts"] == 1
    assert shown["headers"]["SUBMITTED_CLAIM"] and shown["history"]
    done = subprocess.run(
        [OCTOPOID, "accept", task_id, "--expect", shown["head"]], cwd=git_project,
        env=child_env(git_project), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_commit_count_says_whose_it_is(git_project, client) -> None:
    task_id = provisional_task()
    _, _, page = client.request(f"/tasks/TASK-{task_id}")
    assert "<dt>commits</dt><dd>1 in attempt 1</dd>" in page


def test_a_proposed_split_is_shown_and_approved_from_its_page(git_project, web, monkeypatch):
    """The board says "approve or reject"; the page shows the subtasks and an Approve button
    that creates them, like `octopoid approve`. A stale page's reject of a newer proposal is
    refused."""
    write_agents(git_project, argv=[sys.executable, str(HELPERS / "breakdown_agent.py")])
    agents = (git_project / ".octopoid/agents.yaml").read_text()
    agents = agents.replace("name: impl-1", "name: bd-1")
    agents = agents.replace("role: implement", "role: breakdown")
    (git_project / ".octopoid/agents.yaml").write_text(agents)
    (git_project / ".octopoid/config.yaml").write_text("breakdown:\n  approve: true\n")
    tid, _ = burned_out()
    monkeypatch.setenv("OCTO_TEST_ANSWER", "three")
    run_claimed(q.claim_task(None, source=TaskState.BREAKDOWN, agent_name="bd-1"), "bd-1")
    client = Client(web.base)
    client.login(web.token)
    _, _, page = client.request(f"/tasks/TASK-{tid}")
    assert 'id="approve-form"' in page and "add the printer" in page
    stale = {"csrf": client.csrf(), "reason": "no", "head": "none", "attempt": "0"}
    status, _, page = client.request(f"/tasks/TASK-{tid}/reject", stale)
    assert status == 409 and "arrived" in page, re.findall(r"role=.alert.>([^<]*)", page)
    status, headers, _ = client.request(f"/tasks/TASK-{tid}/approve", {"csrf": client.csrf()})
    assert status == 303 and headers["location"].endswith("?done=approved")
    assert q.get_task(tid).state is TaskState.DONE
    assert q.get_store().count(TaskState.INCOMING) == 4  # three subtasks and the dependant


def test_the_attempt_is_counted_within_its_budget_after_a_retry(git_project, client) -> None:
    """`retry` gives fresh attempts while ATTEMPTS goes on numbering them: the 4th attempt
    is the 2nd of 2 since the retry, on the page as in `show` (never "4 of 2")."""

    write_agents(git_project, max_attempts=2)
    tid = q.create_task("tried again").id
    q.requeue_task(q.claim_task(None, "impl-1"), "attempt 1 failed")
    q.fail_task(q.claim_task(None, "impl-1"), "attempt 2 failed")
    q.retry_task(tid)
    q.requeue_task(q.claim_task(None, "impl-1"), "attempt 3 failed")
    q.claim_task(None, "impl-1")
    _, _, page = client.request(f"/tasks/TASK-{tid}")
    assert "<dt>attempt</dt><dd>4 (2 of 2 since the retry)</dd>" in page
    assert "attempt: 4 (2 of 2 since the retry)\n" in invoke("show", tid).output

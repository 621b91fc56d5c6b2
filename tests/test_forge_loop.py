"""The forge loop, whole, on GitHub and on GitLab: issue → task → pull request → failing CI
→ retry with the log's tail in its prompt, while a person pushes to the pull request's
branch (the retry's work goes on top of theirs) → two reviews asking for changes by one
reviewer and a comment-only review, all in the next prompt → retry, the reviewer asked
again and told what changed → approval → merge → done, the issue told at each step and
closed by the merge.

The forges are local stateful HTTP servers (tests/forge_fakes) spoken to by the real client
libraries (githubkit, python-gitlab); branches are pushed with git to the bare repository
the server reads; attempts are real agent subprocesses (tests/helpers/agent.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from orchestrator.forge import connect, poller
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from .forge_driver import Driver, attempt, prompt_of
from .forge_fakes.base import LineNote
from .forge_fakes.fixtures import ALICE, BOB
from .support import set_config


def test_the_whole_loop_from_issue_to_merged(
    forge: Driver,
    forged: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = connect()
    number = forge.server.create_issue(
        ALICE,
        "Add the widget file",
        "The app needs its widget.\n\n- [ ] the widget file exists\n- [ ] it says done\n",
        ["octopoid", "P0"],
    )
    assert poller.poll_once(client) == [
        f"TASK-{forge.prefix}-{number}: imported from issue #{number}"
    ]
    task_id = f"{forge.prefix}-{number}"
    task = q.get_task(task_id)
    assert task.priority == "P0" and task.criteria == ["the widget file exists", "it says done"]
    assert poller.poll_once(client) == []  # imported once

    assert attempt(task_id) == "provisional"
    accepted = subprocess.run(  # strategy pull-request: accept opens it, and says where
        ["octopoid", "accept", task_id], capture_output=True, text=True, check=True
    ).stdout
    pr = int(q.get_task(task_id).headers["PR_NUMBER"])
    url = q.get_task(task_id).headers["PR_URL"]
    assert f"pull request #{pr} {url} is open; the task waits in review" in accepted
    for argv, said in (
        (["show", task_id], f"pull request: #{pr} {url}"),
        (["list"], f"(PR #{pr})"),
        (["status"], f"pull request #{pr} {url}"),
    ):
        out = subprocess.run(["octopoid", *argv], capture_output=True, text=True, check=True)
        assert said in out.stdout, out.stdout
    branch = f"agent/TASK-{task_id}"
    head = forge.head(branch)
    assert head == git.Repo(forged).commit(branch).hexsha
    assert poller.poll_once(client) == [
        f"TASK-{task_id}: said 'started' on issue #{number}",
        f"TASK-{task_id}: said 'pull-request-{pr}' on issue #{number}",
    ]

    log = "collecting...\n" + "noise line\n" * 2000 + "E   AssertionError: widget is blue\n"
    forge.ci(head, "unit-tests", passed=False, log=log)
    assert poller.poll_once(client) == [f"TASK-{task_id}: CI failed (unit-tests)"]
    task = q.get_task(task_id)
    assert task.state is TaskState.INCOMING
    assert "forge: CI failed (unit-tests)" in task.history[-1]
    assert poller.poll_once(client) == []  # acted on once

    config_yaml = (forged / ".octopoid/config.yaml").read_text()
    set_config(forged, sandbox="none")  # its agent pushes as alice would, during the attempt
    monkeypatch.setenv("OCTO_TEST_ORIGIN", str(forge.server.remote.path))
    monkeypatch.setenv("OCTO_TEST_PR_PUSH", "alice.txt=alice was here")
    assert attempt(task_id) == "provisional"
    (forged / ".octopoid/config.yaml").write_text(config_yaml)
    monkeypatch.delenv("OCTO_TEST_PR_PUSH")
    second = prompt_of(forged, 2)
    assert "E   AssertionError: widget is blue" in second and "unit-tests" in second
    new_head = forge.head(branch)
    remote = git.Repo(forge.server.remote.path)
    assert remote.git.show(f"{new_head}:alice.txt") == "alice was here"  # hers and ours:
    assert remote.git.show(f"{new_head}:TASK-{task_id}.txt").endswith("attempt 2")  # one PR
    assert int(q.get_task(task_id).headers["PR_NUMBER"]) == pr
    assert poller.poll_once(client) == [f"TASK-{task_id}: told #{pr} of attempt 2"]
    if forge.kind == "github":  # a poll of what did not change is a 304, free of rate limit
        before = forge.server.not_modified
        assert poller.poll_once(client) == []
        assert forge.server.not_modified > before

    forge.ci(new_head, "unit-tests", passed=True)
    note = LineNote(f"TASK-{task_id}.txt", 1, "say which attempt made this")
    forge.review(pr, BOB, "changes", "Close, but not quite.", [note])
    forge.review(pr, ALICE, "comment", "", [LineNote("alice.txt", 1, "keep my line")])
    forge.review(pr, BOB, "changes", "And sign it.", [LineNote("alice.txt", 1, "sign here")])
    assert poller.poll_once(client) == [f"TASK-{task_id}: changes requested by {BOB}"]
    notes = q.get_task_notes(task_id) or ""
    order = ["Close, but not quite.", "say which attempt made this", "keep my line", "sign here"]
    assert all(text in notes for text in order)
    assert notes.index("Close, but not quite.") < notes.index("And sign it.")  # both, in order
    assert f"{ALICE} (a comment): keep my line" in notes  # a comment, marked as one
    assert f"### TASK-{task_id}.txt, line 1" in notes
    assert "done in attempt 2" in notes  # the commented line, quoted from the branch

    assert attempt(task_id) == "provisional"
    third = prompt_of(forged, 3)
    assert "say which attempt made this" in third and "sign here" in third
    last = forge.head(branch)
    assert poller.poll_once(client) == [f"TASK-{task_id}: told #{pr} of attempt 3"]
    assert forge.asked_to_review(pr) == [BOB]  # asked again, as a person would
    told = [c for c in forge.pr_comments(pr) if f"TASK-{task_id}:attempt-3" in c]
    assert len(told) == 1 and f"@{BOB}" in told[0] and "Add the widget file" in told[0]
    assert "**Attempt:** 3" in forge.pr_body(pr)  # the description follows the attempts
    forge.ci(last, "unit-tests", passed=True)
    forge.review(pr, BOB, "approve")
    assert poller.poll_once(client) == [f"TASK-{task_id}: approved and merged by octopoid-bot"]
    done = q.get_task(task_id)
    assert done.state is TaskState.DONE and "forge: merged by octopoid-bot" in done.history[-1]
    assert q.get_task_notes(task_id) is None  # notes cleaned
    assert forge.head(branch) is None  # the branch deleted on the remote
    main = git.Repo(forge.server.remote.path)
    assert main.is_ancestor(last, main.commit("main").hexsha)
    assert forge.issue_closed(number)  # by the pull request's "Closes #N"
    said = forge.comments(number)
    assert [s.rsplit("<!-- octopoid:", 1)[1] for s in said] == [
        f"TASK-{task_id}:started -->",
        f"TASK-{task_id}:pull-request-{pr} -->",
    ]  # no "done": the forge said it, closing the issue
    assert poller.poll_once(client) == [] and len(forge.comments(number)) == 2
    for path in (forged / ".octopoid").rglob("*"):  # the token is in no file octopoid wrote
        if path.is_file():
            assert b"tok-bot" not in path.read_bytes(), path

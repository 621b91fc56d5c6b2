"""The forge loop, whole, on GitHub and on GitLab: issue → task → pull request → failing CI
→ retry with the log's tail in its prompt → review with line comments → retry → approval →
merge → done, with a comment on the issue at each step.

The forges are local stateful HTTP servers (tests/forge_fakes) spoken to by the real client
libraries (githubkit, python-gitlab); branches are pushed with git to the bare repository
the server reads; attempts are real agent subprocesses (tests/helpers/agent.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import git

from orchestrator import queue_utils as q
from orchestrator import review
from orchestrator.forge import connect, poller
from orchestrator.tasks import TaskState

from .forge_driver import Driver, attempt, forge, forged, prompt_of  # noqa: F401
from .forge_fakes.base import LineNote
from .forge_fakes.fixtures import ALICE, BOB, github_forge, gitlab_forge  # noqa: F401


def test_the_whole_loop_from_issue_to_merged(forge: Driver, forged: Path) -> None:  # noqa: F811
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
    opened = review.accept(task_id, "alice")  # strategy pull-request: accept opens it
    assert opened.strategy == "pull-request"
    pr = int(q.get_task(task_id).headers["PR_NUMBER"])
    url = q.get_task(task_id).headers["PR_URL"]
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
        f"TASK-{task_id}: said 'pull-request' on issue #{number}",
    ]

    log = "collecting...\n" + "noise line\n" * 2000 + "E   AssertionError: widget is blue\n"
    forge.ci(head, "unit-tests", passed=False, log=log)
    assert poller.poll_once(client) == [f"TASK-{task_id}: CI failed (unit-tests)"]
    task = q.get_task(task_id)
    assert task.state is TaskState.INCOMING
    assert "forge: CI failed (unit-tests)" in task.history[-1]
    assert poller.poll_once(client) == []  # acted on once

    assert attempt(task_id) == "provisional"
    second = prompt_of(forged, 2)
    assert "E   AssertionError: widget is blue" in second and "unit-tests" in second
    assert forge.head(branch) != head  # the attempt pushed to the same branch: same PR
    assert int(q.get_task(task_id).headers["PR_NUMBER"]) == pr
    assert poller.poll_once(client) == []  # no CI yet on the new head
    if forge.kind == "github":  # a poll of what did not change is a 304, free of rate limit
        before = forge.server.not_modified
        assert poller.poll_once(client) == []
        assert forge.server.not_modified > before

    new_head = forge.head(branch)
    forge.ci(new_head, "unit-tests", passed=True)
    note = LineNote(f"TASK-{task_id}.txt", 1, "say which attempt made this")
    forge.review(pr, BOB, "changes", "Close, but not quite.", [note])
    assert poller.poll_once(client) == [f"TASK-{task_id}: changes requested by {BOB}"]
    notes = q.get_task_notes(task_id) or ""
    assert "Close, but not quite." in notes and "say which attempt made this" in notes
    assert f"### TASK-{task_id}.txt, line 1" in notes
    assert "done in attempt 2" in notes  # the commented line, quoted from the branch

    assert attempt(task_id) == "provisional"
    assert "say which attempt made this" in prompt_of(forged, 3)
    last = forge.head(branch)
    forge.ci(last, "unit-tests", passed=True)
    forge.review(pr, BOB, "approve")
    assert poller.poll_once(client) == [
        f"TASK-{task_id}: approved and merged by octopoid-bot",
        f"TASK-{task_id}: said 'done' on issue #{number}",
    ]
    done = q.get_task(task_id)
    assert done.state is TaskState.DONE and "forge: merged by octopoid-bot" in done.history[-1]
    assert q.get_task_notes(task_id) is None  # notes cleaned
    assert forge.head(branch) is None  # the branch deleted on the remote
    main = git.Repo(forge.server.remote.path)
    assert main.is_ancestor(last, main.commit("main").hexsha)
    said = forge.comments(number)
    assert [s.rsplit("<!-- octopoid:", 1)[1] for s in said] == [
        f"TASK-{task_id}:started -->",
        f"TASK-{task_id}:pull-request -->",
        f"TASK-{task_id}:done -->",
    ]
    assert poller.poll_once(client) == [] and len(forge.comments(number)) == 3
    for path in (forged / ".octopoid").rglob("*"):  # the token is in no file octopoid wrote
        if path.is_file():
            assert b"tok-bot" not in path.read_bytes(), path

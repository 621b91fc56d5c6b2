"""An agent that rightly finds nothing to change says so; the attempt goes to review with
its reason instead of burning every attempt, and accepting it closes the task unmerged."""

from __future__ import annotations

import subprocess

import git

from orchestrator import config
from orchestrator.backends.base import no_change_reason
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from .support import OCTOPOID, child_env, commit_on_branch, run_claimed, write_agents


def test_the_marker_is_read_from_the_last_line_that_carries_it() -> None:
    assert no_change_reason("x\nNO CHANGE NEEDED: done in #12\n") == "done in #12"
    assert no_change_reason("**No change needed:** it is `already` there**") == (
        "it is `already` there"
    )
    assert no_change_reason("> no change needed: first\nNO CHANGE NEEDED:  second ") == "second"
    assert no_change_reason("I might say NO CHANGE NEEDED: later") is None  # not a line start
    assert no_change_reason("NO CHANGE NEEDED:   \n") is None


def test_a_no_change_attempt_lands_in_review_and_accept_closes_it(git_project) -> None:
    write_agents(git_project)
    tid = q.create_task("nothing-to-do: add timeouts").id
    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert report.next_state == "provisional"
    task = q.get_task(tid)
    assert task.headers["NO_CHANGE"] == "every call site already passes timeout=30"
    prompt = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.prompt.md").read_text()
    assert "end your final message with one line `NO CHANGE NEEDED: <why>`" in prompt
    assert task.attempts == 1 and "no change needed: every call site" in task.path.read_text()
    listed = subprocess.run(
        [OCTOPOID, "show", tid], cwd=git_project, env=child_env(git_project),
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "NO_CHANGE: every call site" in listed
    from orchestrator.faces.web import board

    (review,) = [g for g in board.board()["groups"] if g.key == "review"]
    assert any("no change needed: every call site" in f for c in review.cards for f in c.facts)
    main = git.Repo(git_project).head.commit.hexsha
    done = subprocess.run(
        [OCTOPOID, "accept", tid], cwd=git_project, env=child_env(git_project),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "accepted (no change needed, nothing merged)" in done.stdout
    assert q.get_task(tid).state is TaskState.DONE
    assert git.Repo(git_project).head.commit.hexsha == main


def test_no_further_change_on_a_branch_with_earlier_work_sends_that_work_to_review(git_project):
    write_agents(git_project)
    tid = q.create_task("nothing-to-do: already fixed").id
    task = q.claim_task(None, "impl-1")
    q.requeue_task(task, "set up an earlier attempt", counted=False)
    from orchestrator.git import branches

    branches.ensure_branch(git.Repo(git_project), tid, "main")
    commit_on_branch(git_project, tid, {"fix.txt": b"fixed\n"}, "the fix, from attempt 1")
    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert report.next_state == "provisional"
    task = q.get_task(tid)
    assert "NO_CHANGE" not in task.headers and task.headers["COMMITS"] == "1"
    assert "No further change" in (q.get_task_notes(tid) or "")


def test_a_no_change_mark_goes_with_a_rejection_and_accept_merges_work_whatever(git_project):
    """A reviewer rejects "no change needed"; the next attempt commits: its work is
    reviewed and merged, never dropped as nothing."""
    from orchestrator.review import verdicts as review

    write_agents(git_project)
    tid = q.create_task("nothing-to-do: add timeouts").id
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    review.reject(tid, "there is one call site without a timeout: fix it")
    assert "NO_CHANGE" not in q.get_task(tid).headers
    task = q.get_task(tid)  # a mark left by hand (or an older octopoid) on work to merge
    q.get_store().update(tid, TaskState.INCOMING, lambda t: t.set_header("NO_CHANGE", "x"))
    commit_on_branch(git_project, tid, {"fix.txt": b"timeout=30\n"}, "add the timeout")
    claimed = q.claim_task(None, "impl-1")
    q.submit_completion(claimed, 1, 1)
    assert "NO_CHANGE" not in q.get_task(tid).headers  # a submit without the mark drops it
    q.get_store().update(tid, TaskState.PROVISIONAL, lambda t: t.set_header("NO_CHANGE", "x"))
    done = review.accept(tid)
    assert done.strategy == "merge" and task.label in git.Repo(git_project).head.commit.message
    assert "fix.txt" in git.Repo(git_project).head.commit.tree


def test_closing_a_task_already_done_refuses_and_keeps_what_its_accept_left(git_project):
    from orchestrator.model.exceptions import IllegalTransition
    from orchestrator.review import finishing
    from orchestrator.review import verdicts as review

    from .support import provisional_with_commit

    tid = provisional_with_commit(git_project)
    review.accept(tid)
    left = [finishing.BRANCH, finishing.REMOTE_BRANCH]
    finishing.begin(finishing.ACCEPT, tid, left, {"by": "alice"})  # left over
    try:
        review.close(tid, "wont-do", "from a stale page")
    except IllegalTransition:
        pass
    else:
        raise AssertionError("a task in done was closed")
    assert finishing.pending(tid) == [finishing.BRANCH, finishing.REMOTE_BRANCH]

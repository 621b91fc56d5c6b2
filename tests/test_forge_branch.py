"""A task's branch as people on the forge change it, on GitHub and GitLab: a person's push
to the pull request's branch while an attempt runs (the attempt's work goes on top of it,
or the task says why not), a push octopoid lost and a person's push after it, squash
merges, a pull request closed by mistake and reopened, and what is left of a task's
branches once it is over."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from orchestrator.forge import connect, poller
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .forge_driver import Driver, attempt, in_review
from .forge_fakes.fixtures import ALICE, BOB
from .support import set_config


def sent_back(forge: Driver, title: str) -> tuple[str, int, str]:
    """A task whose pull request's CI failed, back in incoming: (id, number, its head)."""
    task_id, number, label = in_review(title)
    head = forge.head(f"agent/{label}")
    forge.ci(head, "build", passed=False, log="boom\n")
    assert poller.poll_once(connect()) == [f"{label}: CI failed (build)"]
    return task_id, number, head


def once(forge: Driver) -> None:
    """What happens in git alone is the same whichever forge shows it: GitHub's run
    proves it (the suite's time is spent where the forges differ)."""
    if forge.kind == "gitlab":
        pytest.skip("the same git on either forge: the GitHub run proves it")


def pushed_during_the_attempt(
    forge: Driver,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    file: str,
) -> tuple[str, int, str, str]:
    """Attempt 2 of a task sent back by its CI, during which alice pushes ``file`` (its
    ``{label}`` the task's) to the pull request's branch; the attempt runs where its agent
    may push as she would, with no box. (id, number, the first attempt's head, what
    attempt 2 came to)."""
    task_id, number, first = sent_back(forge, "alice pushes meanwhile")
    set_config(root, sandbox="none")
    monkeypatch.setenv("OCTO_TEST_ORIGIN", str(forge.server.remote.path))
    named = file.format(label=f"TASK-{task_id}")
    monkeypatch.setenv("OCTO_TEST_PR_PUSH", f"{named}=alice's version")
    return task_id, number, first, attempt(task_id)


def test_a_person_s_push_during_an_attempt_is_built_on_and_the_work_reaches_the_pull_request(
    forge: Driver,
    forged: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task_id, number, first, came_to = pushed_during_the_attempt(
        forge, forged, monkeypatch, "alice.txt"
    )
    assert came_to == "provisional"
    label, branch = f"TASK-{task_id}", f"agent/TASK-{task_id}"
    remote = git.Repo(forge.server.remote.path)
    head = forge.head(branch)
    assert remote.git.show(f"{head}:alice.txt") == "alice's version"  # theirs kept
    assert remote.git.show(f"{head}:{label}.txt") == f"{label} done in attempt 2"  # and ours
    assert [c.author.name for c in remote.iter_commits(f"{first}..{head}")] == [
        "Test User",
        "alice",
    ]  # rebased onto theirs: their commit first, then the attempt's
    task = q.get_task(task_id)
    assert task.headers["BRANCH_TIP"] == head
    said = "alice pushed 1 commit to " + branch
    assert said in task.history[-1] and "rebased onto theirs" in task.history[-1]
    assert said in (q.get_task_notes(task_id) or "")
    assert poller.poll_once(connect()) == [f"{label}: told #{number} of attempt 2"]
    assert any(f"{label}: alice pushes meanwhile" in c for c in forge.pr_comments(number))
    repo = git.Repo(forged)
    assert repo.git.for_each_ref(f"refs/octopoid/replaced/{branch}")  # its tip before
    forge.squash_by_hand(number, BOB)  # as many repositories merge: by content
    assert poller.poll_once(connect())[0] == f"{label}: merged by {BOB}"
    done = q.get_task(task_id)
    assert done.state is TaskState.DONE and "kept" not in done.history[-1]
    assert not remote.is_ancestor(head, forge.head("main"))  # no ancestry to go by
    assert not repo.git.for_each_ref(f"refs/heads/{branch}", "refs/octopoid/replaced/")
    assert forge.head(branch) is None  # nor on the remote


def test_work_that_conflicts_with_a_person_s_push_goes_back_saying_where_and_is_kept(
    forge: Driver,
    forged: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    once(forge)
    task_id, _, _, came_to = pushed_during_the_attempt(forge, forged, monkeypatch, "{label}.txt")
    assert came_to == "incoming"  # not to review: its work is not on the pull request
    label, branch = f"TASK-{task_id}", f"agent/TASK-{task_id}"
    remote = git.Repo(forge.server.remote.path)
    theirs = forge.head(branch)
    assert remote.commit(theirs).author.name == "alice"  # their push stands
    ours = q.get_task(task_id).headers["BRANCH_TIP"]
    assert git.Repo(forged).commit(branch).hexsha == ours != theirs  # ours is kept here
    assert git.Repo(forged).git.show(f"{ours}:{label}.txt") == f"{label} done in attempt 2"
    why = f"conflict with theirs in {label}.txt"
    task = q.get_task(task_id)
    assert "its commits are not on the pull request" in task.history[-1]
    assert why in task.history[-1]
    notes = q.get_task_notes(task_id) or ""
    assert why in notes and f"git merge {theirs[:12]}" in notes  # what the next one does


def test_a_push_octopoid_lost_is_put_on_top_of_a_person_s_push_by_the_next_poll(
    forge: Driver,
    forged: Path,
) -> None:
    once(forge)
    task_id, number, first = sent_back(forge, "lost push")
    branch = f"agent/TASK-{task_id}"
    assert attempt(task_id) == "provisional"
    ours = q.get_task(task_id).headers["BRANCH_TIP"]
    forge.server.remote.git("update-ref", f"refs/heads/{branch}", first)  # the push was lost
    git.Repo(forged).git.update_ref(f"refs/remotes/origin/{branch}", first)  # never arrived
    theirs = forge.server.force_push(ALICE, branch, {"alice.txt": "hers\n"}, parent=first)
    assert poller.poll_once(connect()) == [f"TASK-{task_id}: told #{number} of attempt 2"]
    head = forge.head(branch)
    remote = git.Repo(forge.server.remote.path)
    assert remote.is_ancestor(theirs, head) and head != theirs
    assert remote.git.show(f"{head}:TASK-{task_id}.txt") == f"TASK-{task_id} done in attempt 2"
    task = q.get_task(task_id)
    assert task.headers["BRANCH_TIP"] == head != ours
    assert "forge: alice pushed 1 commit" in task.history[-1]
    forge.ci(head, "build", passed=False, log="again\n")
    assert poller.poll_once(connect()) == [f"TASK-{task_id}: CI failed (build)"]


def test_a_lost_push_that_conflicts_with_a_person_s_goes_back_saying_so_on_the_pull_request(
    forge: Driver,
    forged: Path,
) -> None:
    task_id, number, first = sent_back(forge, "lost and conflicting")
    branch, label = f"agent/TASK-{task_id}", f"TASK-{task_id}"
    assert attempt(task_id) == "provisional"
    forge.server.remote.git("update-ref", f"refs/heads/{branch}", first)
    git.Repo(forged).git.update_ref(f"refs/remotes/origin/{branch}", first)
    theirs = forge.server.force_push(ALICE, branch, {f"{label}.txt": "hers\n"}, parent=first)
    assert poller.poll_once(connect()) == [
        f"{label}: its work conflicts with a push to its branch: back to incoming"
    ]
    assert forge.head(branch) == theirs
    task = q.get_task(task_id)
    assert task.state is TaskState.INCOMING and "conflicts with a push" in task.history[-1]
    assert f"conflict with theirs in {label}.txt" in (q.get_task_notes(task_id) or "")
    said = [c for c in forge.pr_comments(number) if f"{label}:attempt-2" in c]
    assert len(said) == 1 and f"{label}.txt" in said[0]


def test_a_person_s_rewrite_is_taken_and_the_work_it_dropped_is_kept_after_the_merge(
    forge: Driver,
    forged: Path,
) -> None:
    once(forge)
    _, number, label = in_review("rewritten")
    branch = f"agent/{label}"
    first, base = forge.head(branch), forge.head("main")
    forge.server.force_push(BOB, branch, {"bob.txt": "redone\n"}, parent=base)
    assert poller.poll_once(connect()) == []  # theirs taken, ours set aside
    forge.server.merge_by_hand(number, BOB)
    assert poller.poll_once(connect())[0] == f"{label}: merged by {BOB}"
    repo = git.Repo(forged)
    assert not repo.git.for_each_ref(f"refs/heads/{branch}")  # what was merged: gone
    assert repo.commit(f"refs/octopoid/replaced/{branch}").hexsha == first  # never merged


def test_a_pull_request_closed_by_mistake_and_reopened_is_followed_to_its_merge(
    forge: Driver,
    forged: Path,
) -> None:
    task_id, number, label = in_review("closed by mistake")
    forge.review(number, BOB, "changes", "one more thing")
    assert poller.poll_once(connect()) == [f"{label}: changes requested by {BOB}"]
    assert attempt(task_id) == "provisional"
    forge.server.close_by_hand(number, BOB)
    assert poller.poll_once(connect()) == [f"{label}: closed by {BOB}"]
    assert q.get_task(task_id).state is TaskState.FAILED
    forge.server.reopen_by_hand(number)
    assert poller.poll_once(connect()) == [f"{label}: pull request #{number} reopened"]
    back = q.get_task(task_id)
    assert back.state is TaskState.PROVISIONAL and int(back.headers["PR_NUMBER"]) == number
    assert f"forge: pull request #{number} reopened" in back.history[-1]
    assert poller.poll_once(connect()) == []  # the review it had answered is not taken again
    forge.server.merge_by_hand(number, BOB)
    assert poller.poll_once(connect()) == [f"{label}: merged by {BOB}"]
    assert q.get_task(task_id).state is TaskState.DONE


def test_closing_a_task_deletes_its_remote_branches_and_keeps_its_work_here(
    forge: Driver,
    forged: Path,
) -> None:
    once(forge)
    task = q.get_task(in_review("not wanted")[0])
    tip = task.headers["BRANCH_TIP"]
    review.close(task.id, "wont-do", "done another way", "alice")
    remote = git.Repo(forge.server.remote.path)
    assert not remote.git.for_each_ref(f"refs/heads/agent/{task.label}", "refs/octopoid/tasks/")
    assert git.Repo(forged).commit(f"agent/{task.label}").hexsha == tip  # the work is here

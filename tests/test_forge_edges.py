"""The forge loop at its edges, on GitHub and GitLab: an attempt becomes a branch on the
forge only when a person asks for review, a pull request that cannot be merged blocks no
other, an approval of an earlier attempt merges nothing, a merge by hand during a retry
keeps the retry's branch, a closed pull request is forgotten by a retry, a lost push is
made again, a reviewer's silence acts once, and a CI log's control characters never reach
the notes."""

from __future__ import annotations

from pathlib import Path

import certifi
import git
import pytest

from orchestrator.forge import connect, poller
from orchestrator.forge.github import GitHubForge
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .forge_driver import Driver, attempt, in_review
from .forge_fakes.fixtures import ALICE, BOB, REPO


def head(forge: Driver, task_id: str) -> str:
    return forge.head(f"agent/TASK-{task_id}")


def test_an_attempt_is_a_branch_on_the_forge_only_once_a_person_asks_for_review(
    forge: Driver,
    forged: Path,
) -> None:
    task = q.create_task("reviewed first")
    assert attempt(task.id) == "provisional"
    tip = q.get_task(task.id).headers["BRANCH_TIP"]
    assert forge.head(f"agent/{task.label}") is None  # no branch: no workflow ran it
    assert forge.server.remote.git("rev-parse", f"refs/octopoid/tasks/{task.label}") == tip
    review.accept(task.id, "alice")  # merge.strategy pull-request: the person asks
    assert forge.head(f"agent/{task.label}") == tip  # pushed from the submitted tip
    pr = int(q.get_task(task.id).headers["PR_NUMBER"])
    assert connect().pull_request(pr).head_sha == tip


def test_a_pull_request_that_cannot_merge_blocks_no_other(
    forge: Driver,
    forged: Path,
) -> None:
    stuck, stuck_pr, label = in_review("conflicts")
    other, _, _ = in_review("fails its CI")
    main = forge.head("main")
    forge.server.force_push(ALICE, "main", {f"{label}.txt": "main's own\n"}, parent=main)
    forge.ci(head(forge, stuck), "build", passed=True)
    forge.review(stuck_pr, BOB, "approve")
    forge.ci(head(forge, other), "build", passed=False, log="broken\n")
    done = poller.poll_once(connect())
    assert done == [f"TASK-{other}: CI failed (build)"]  # the other is judged all the same
    assert q.get_task(stuck).state is TaskState.PROVISIONAL  # left for a person
    assert q.get_task(other).state is TaskState.INCOMING


def test_an_approval_of_an_earlier_attempt_does_not_merge_the_next_and_says_so(
    forge: Driver,
    forged: Path,
) -> None:
    if forge.kind == "gitlab":
        pytest.skip("GitLab's approvals name no commit: the project's reset-on-push decides")
    task_id, pr, label = in_review("approved early")
    first = head(forge, task_id)
    forge.review(pr, ALICE, "approve")
    forge.ci(first, "build", passed=False, log="boom\n")
    assert "CI failed" in poller.poll_once(connect())[0]
    assert attempt(task_id) == "provisional"
    second = head(forge, task_id)
    forge.ci(second, "build", passed=True)
    assert poller.poll_once(connect()) == [  # approved was attempt 1, not this one
        f"{label}: told #{pr} of attempt 2; approvals of an earlier head, said on #{pr}"
    ]
    said = [c for c in forge.pr_comments(pr) if f"{label}:stale-" in c]
    assert len(said) == 1 and f"@{ALICE} ({first[:12]})" in said[0] and second[:12] in said[0]
    said = f"approved by {ALICE} ({first[:12]}), of an earlier head"
    assert said in q.get_task(task_id).history[-1]
    assert poller.poll_once(connect()) == []  # said once for this head
    forge.review(pr, ALICE, "approve")
    assert "merged" in poller.poll_once(connect())[0]


def test_a_merge_by_hand_during_a_retry_keeps_the_retry_s_branch(
    forge: Driver,
    forged: Path,
) -> None:
    task_id, pr, label = in_review("merged meanwhile")
    forge.ci(head(forge, task_id), "build", passed=False, log="boom\n")
    poller.poll_once(connect())
    forge.server.merge_by_hand(pr, BOB)  # while the task waits for its next attempt
    assert attempt(task_id) == "provisional"
    tip = git.Repo(forged).commit(f"agent/{label}").hexsha
    assert poller.poll_once(connect())[0] == f"{label}: merged by {BOB}"
    done = q.get_task(task_id)
    assert done.state is TaskState.DONE and "which is kept" in done.history[-1]
    assert git.Repo(forged).commit(f"agent/{label}").hexsha == tip  # nothing of it lost


def test_a_closed_pull_request_is_forgotten_so_a_retry_opens_a_new_one(
    forge: Driver,
    forged: Path,
) -> None:
    task_id, pr, _ = in_review("closed")
    forge.server.close_by_hand(pr, BOB)
    poller.poll_once(connect())
    failed = q.get_task(task_id)
    assert failed.state is TaskState.FAILED and "PR_NUMBER" not in failed.headers
    review.retry(task_id)
    assert attempt(task_id) == "provisional"
    assert poller.poll_once(connect()) == []  # not failed again by the old one
    review.accept(task_id, "alice")
    assert int(q.get_task(task_id).headers["PR_NUMBER"]) != pr


def test_a_push_the_remote_lost_is_made_again(
    forge: Driver,
    forged: Path,
) -> None:
    task_id, _, label = in_review("pushed twice")
    first = head(forge, task_id)
    forge.ci(first, "build", passed=False, log="boom\n")
    poller.poll_once(connect())
    assert attempt(task_id) == "provisional"
    forge.server.remote.git("update-ref", f"refs/heads/agent/{label}", first)  # push lost
    poller.poll_once(connect())
    assert head(forge, task_id) == git.Repo(forged).commit(f"agent/{label}").hexsha


def test_a_reviewer_asking_for_changes_without_a_word_is_heard_once(
    forge: Driver,
    forged: Path,
) -> None:
    task_id, pr, _ = in_review("silent reviewer")
    forge.review(pr, BOB, "changes")
    assert poller.poll_once(connect()) == [f"TASK-{task_id}: changes requested by {BOB}"]
    assert "(no summary)" in (q.get_task_notes(task_id) or "")
    assert attempt(task_id) == "provisional"
    told = [f"TASK-{task_id}: told #{pr} of attempt 2"]
    assert poller.poll_once(connect()) == told  # the same silence is not a new review
    forge.review(pr, BOB, "changes", "still the name")
    assert poller.poll_once(connect()) == [f"TASK-{task_id}: changes requested by {BOB}"]
    notes = q.get_task_notes(task_id) or ""
    assert notes.count("still the name") == 1


def test_a_ci_log_s_control_characters_never_reach_the_notes(
    forge: Driver,
    forged: Path,
) -> None:
    task_id, _, _ = in_review("odd bytes")
    log = "ok\n\x1b]52;c;aGVsbG8=\x07\x1b[2Jcleared\x00\n"
    forge.ci(head(forge, task_id), "b\x1b[31muild", passed=False, log=log)
    poller.poll_once(connect())
    notes = q.get_task_notes(task_id) or ""
    task = q.get_task(task_id)
    assert "cleared" in notes
    for text in (notes, "\n".join(task.history)):
        assert not any(c in text for c in "\x1b\x07\x00")


def test_closing_a_task_closes_its_pull_request_and_an_outage_only_delays_it(
    forge: Driver,
    forged: Path,
) -> None:
    from orchestrator.review import finishing

    task_id, pr, label = in_review("not needed after all")
    forge.server.fail_next(1, 502)  # the forge is down as the person closes it
    closed = review.close(task_id, "wont-do", "done upstream", "alice")
    assert closed.task.state is TaskState.DONE and "pull-request" in closed.cleanup_error
    assert connect().pull_request(pr).state == "open"
    assert finishing.finish_interrupted()  # the scheduler's housekeeping, later
    assert connect().pull_request(pr).state == "closed"
    said = [c for c in forge.pr_comments(pr) if f"{label}:closed" in c]
    assert len(said) == 1 and "done upstream" in said[0]
    assert finishing.finish_interrupted() == []  # nothing left to do


def test_a_reviewer_the_forge_will_not_ask_again_holds_up_no_verdict(
    forge: Driver,
    forged: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    if forge.kind == "gitlab":
        pytest.skip("GitLab takes a quick action for anyone: it refuses nobody")
    task_id, pr, label = in_review("reviewed by a guest")
    forge.review(pr, "carol", "changes", "from outside the team")  # not a collaborator
    assert poller.poll_once(connect()) == [f"{label}: changes requested by carol"]
    assert attempt(task_id) == "provisional"
    forge.ci(head(forge, task_id), "build", passed=False, log="still broken\n")
    assert poller.poll_once(connect()) == [  # refused the re-request; judged all the same
        f"{label}: told #{pr} of attempt 2; CI failed (build)"
    ]
    assert "the forge refused request_review" in caplog.text


def test_github_makes_its_tls_context_once_not_for_every_request(
    github_forge, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """githubkit makes an HTTP client for every request, and httpx a TLS context for each
    (the whole CA bundle read, ~55 ms of CPU) unless given one: the forge makes it once.
    A CA file gone after the forge is made fails no request."""
    cafile = tmp_path / "ca.pem"
    cafile.write_text(Path(certifi.where()).read_text())
    monkeypatch.setenv("SSL_CERT_FILE", str(cafile))
    forge = GitHubForge(github_forge.api, REPO, "tok-bot")
    cafile.unlink()  # a context made for a request now would fail to read it
    number = github_forge.create_issue(ALICE, "Add the widget", "- [ ] done\n", ["octopoid"])
    for _ in range(3):
        assert forge.issue(number).title == "Add the widget"

"""Review never half-happens: accept holds the task, and an interrupted accept heals."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

import pytest

from orchestrator.git import branches, core
from orchestrator.git import merges as git_merges
from orchestrator.model.exceptions import IllegalTransition, TaskBusy
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import finishing
from orchestrator.review import verdicts as review

from .support import OCTOPOID, child_env, octopoid, provisional_with_commit, wait_for
from .support.journals import merges_of


class Crash(BaseException):
    """kill -9 at one exact instant of an accept."""


def test_a_reject_or_second_accept_during_an_accept_is_refused(git_project, monkeypatch):
    tid = provisional_with_commit(git_project)
    merged, go = threading.Event(), threading.Event()
    real_merge = git_merges.merge_task_branch

    def paused_merge(*args, **kwargs):
        sha = real_merge(*args, **kwargs)
        merged.set()
        go.wait(30)
        return sha

    monkeypatch.setattr(git_merges, "merge_task_branch", paused_merge)
    accepting = threading.Thread(target=review.accept, args=(tid,))
    accepting.start()
    assert merged.wait(30)
    try:
        for args in (["reject", tid, "--reason", "no"], ["accept", tid], ["retry", tid]):
            done = octopoid(git_project, *args)
            assert done.returncode == 1, done
            message = done.stderr.strip()
            assert "\n" not in message and "Traceback" not in message
            if args[0] != "retry":
                assert f"TASK-{tid} is being accepted (pid " in message
    finally:
        go.set()
        accepting.join(30)
    assert q.get_task(tid).state is TaskState.DONE
    assert merges_of(git_project, tid) == 1


def interrupt_accept(tid: str, *, before_merge: bool = False, after: str = "") -> None:
    """Run an accept that dies just before the git merge, or just after ``after``."""
    real_merge = git_merges.merge_task_branch

    def merge(*args, **kwargs):
        if before_merge:
            raise Crash
        sha = real_merge(*args, **kwargs)
        if after == "merge":
            raise Crash
        return sha

    def die(*args, **kwargs):
        raise Crash

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(git_merges, "merge_task_branch", merge)
        if after == "move":
            patch.setattr(q, "accept_completion", die)
        with pytest.raises(Crash):
            review.accept(tid)


@pytest.mark.parametrize("where", ["merge", "move"])
def test_an_accept_interrupted_after_merging_is_finished_without_merging_again(git_project, where):
    tid = provisional_with_commit(git_project)
    interrupt_accept(tid, after=where)
    task = q.get_task(tid)
    assert task.state is TaskState.PROVISIONAL and merges_of(git_project, tid) == 1
    with pytest.raises(IllegalTransition, match=r"already merged .*octopoid accept"):
        review.reject(tid, "changed my mind")
    assert q.get_task(tid).state is TaskState.PROVISIONAL
    review.accept(tid)
    assert q.get_task(tid).state is TaskState.DONE
    assert merges_of(git_project, tid) == 1


def test_an_accept_interrupted_before_merging_can_still_be_rejected(git_project):
    tid = provisional_with_commit(git_project)
    interrupt_accept(tid, before_merge=True)
    assert finishing.pending(tid)[0] == finishing.MERGE  # the accept's journal, begun
    review.reject(tid, "not yet")
    task = q.get_task(tid)
    assert task.state is TaskState.INCOMING and not finishing.pending(tid)
    assert merges_of(git_project, tid) == 0


@pytest.mark.slow
def test_five_concurrent_accepts_merge_once(git_project):
    tid = provisional_with_commit(git_project)
    procs = [
        subprocess.Popen(
            [OCTOPOID, "accept", tid],
            cwd=git_project,
            env=child_env(git_project),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(5)
    ]
    results = [(p.wait(60), *p.communicate()) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 1, 1, 1, 1], results
    for code, _, err in results:
        if code:
            line = err.strip()
            assert "\n" not in line and "Traceback" not in line
            assert "is being accepted" in line or "is in done, not provisional" in line, line
            assert "merging" not in line  # never "merging failed and was undone"
    assert merges_of(git_project, tid) == 1
    assert q.get_task(tid).state is TaskState.DONE


@pytest.mark.slow
def test_accept_and_reject_at_the_same_instant_stay_consistent(git_project, tmp_path):
    """Through the installed CLI, 10 times (OCTOPOID_RACE_TRIALS for more): merged and done,
    or not merged and in incoming."""
    trials = int(os.environ.get("OCTOPOID_RACE_TRIALS", "10"))
    outcomes = []
    for n in range(trials):
        tid = provisional_with_commit(git_project, f"f{n}.txt")
        go = tmp_path / f"go-{n}"
        wait = f"while [ ! -e {go} ]; do :; done; exec {OCTOPOID} "
        procs = [
            subprocess.Popen(
                ["sh", "-c", wait + args],
                cwd=git_project,
                env=child_env(git_project),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for args in (f"accept {tid}", f"reject {tid} --reason race")
        ]
        go.touch()
        codes = [p.wait(60) for p in procs]
        state, merges = q.get_task(tid).state, merges_of(git_project, tid)
        assert (state, merges) in ((TaskState.DONE, 1), (TaskState.INCOMING, 0)), (n, codes)
        assert sorted(codes) == [0, 1], (n, codes)
        outcomes.append(state)
        if state is TaskState.INCOMING:  # out of the way of the next trial's claim
            q.fail_task(tid, "trial over")
            branches.remove_worktree(core.open_repo(), tid)
    assert len(outcomes) == trials


HOLDER = """
import sys
from orchestrator.queue import machine as q
with q.get_store().hold(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_close_waits_for_a_forge_poll_that_holds_the_task_instead_of_refusing(
    git_project, caplog
):
    tid = provisional_with_commit(git_project)
    poll = subprocess.Popen(  # a forge's poll judging the task, in another process
        [sys.executable, "-c", HOLDER, tid, review.FORGE_HOLD],
        env=child_env(git_project),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert poll.stdout.readline() == "held\n"
    outcome: dict = {}
    caplog.set_level(logging.INFO, "octopoid.review")

    def close() -> None:
        try:
            outcome["task"] = review.close(tid, "wont-do", "not needed", "alice").task
        except Exception as exc:
            outcome["error"] = exc

    closing = threading.Thread(target=close)
    closing.start()
    try:  # until the close says it waits (or gives up: refused)
        waits = lambda: "waiting for the forge's poll" in caplog.text or not closing.is_alive()  # noqa: E731
        wait_for("the close to wait or fail", waits, timeout=120)
    finally:
        poll.communicate("go\n", timeout=60)  # the poll lets the task go
        closing.join(120)
    assert "error" not in outcome, outcome["error"]
    assert outcome["task"].state is TaskState.DONE


def test_a_close_during_a_person_s_accept_is_still_refused_at_once(git_project):
    tid = provisional_with_commit(git_project)
    accepting = subprocess.Popen(
        [sys.executable, "-c", HOLDER, tid, "accepted"],
        env=child_env(git_project),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert accepting.stdout.readline() == "held\n"
    try:
        with pytest.raises(TaskBusy, match="is being accepted"):
            review.close(tid, "wont-do", "not needed", "alice")
    finally:
        accepting.communicate("go\n", timeout=60)

"""Branches through a git remote (``git.remote``): two clones of one bare repository share
one PostgreSQL queue, as two machines would. Real git, real agent subprocesses."""

from __future__ import annotations

import stat
from pathlib import Path

import git
import pytest

from orchestrator.model.exceptions import GitError, MergeRefused
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import finishing
from orchestrator.review import verdicts as review

from .support import Machines, attempt, set_config

# A pre-receive hook on the remote that, at the first push to main, lands another commit on
# main first (as another machine's accept would), so that push is refused mid-flight.
RACING_HOOK = """#!/bin/sh
while read old new ref; do
  if [ "$ref" = refs/heads/main ] && [ ! -e "$RACE_MARK" ]; then
    touch "$RACE_MARK"
    unset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
    c=$(git commit-tree -p "$old" -m "landed meanwhile by another machine" "$old^{tree}")
    git update-ref refs/heads/main "$c" "$old"
  fi
done
"""


def test_a_retry_on_another_machine_continues_the_pushed_branch_and_accept_lands_it(
    machines: Machines,
) -> None:
    machines.on("a")
    task = q.create_task("feature")
    branch = f"agent/TASK-{task.id}"
    assert attempt(machines, "a", task.id) == "provisional"
    first = machines.carried(task.id)
    assert first is not None  # the attempt on a pushed its branch
    config = (machines.roots["a"] / ".git" / "config").read_text()
    assert "agent/" not in config  # no upstream written: the shared config is left alone

    review.reject(task.id, "also say which attempt", "bob")  # on b, which never had it
    assert attempt(machines, "b", task.id) == "provisional"
    b_repo = git.Repo(machines.roots["b"])
    second = b_repo.commit(branch)
    assert b_repo.is_ancestor(first, second) and second.hexsha != first  # built on a's work
    assert machines.carried(task.id) == second.hexsha
    on_forge = [ref for ref in machines.listed() if ref.startswith("refs/heads/agent/")]
    assert on_forge == []  # no branch nobody reviewed, so no CI runs it
    prompt = (machines.roots["b"] / ".octopoid/runtime/logs").rglob("attempt-2.prompt.md")
    assert "## Attempt 1" in next(prompt).read_text()  # a's notes, from the database

    machines.on("a")
    done = review.accept(task.id, "alice")
    assert done.task.state is TaskState.DONE and done.cleanup_error is None
    main = git.Repo(machines.origin).commit("main")
    assert main.message.startswith(f"Merge TASK-{task.id}: feature")
    assert git.Repo(machines.origin).is_ancestor(second.hexsha, main.hexsha)
    assert machines.carried(task.id) is None  # merged, so removed from the remote
    assert git.Repo(machines.roots["a"]).commit("main") == main  # a's main followed


def test_an_accept_whose_push_loses_a_race_merges_again_onto_the_new_base(
    machines: Machines, tmp_path: Path
) -> None:
    hook = machines.origin / "hooks" / "pre-receive"
    hook.write_text(RACING_HOOK)
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    machines.monkeypatch.setenv("RACE_MARK", str(tmp_path / "raced"))
    machines.on("b")
    task = q.create_task("raced")
    assert attempt(machines, "b", task.id) == "provisional"
    review.accept(task.id, "carol")
    assert (tmp_path / "raced").exists()  # the hook did land a commit first
    origin = git.Repo(machines.origin)
    main = origin.commit("main")
    assert main.message.startswith(f"Merge TASK-{task.id}: raced")
    assert main.parents[0].message.strip() == "landed meanwhile by another machine"
    assert q.get_task(task.id).state is TaskState.DONE


def test_an_unreachable_remote_does_not_stop_the_attempt_and_the_notes_say_why(
    machines: Machines,
) -> None:
    root = machines.on("a")
    moved = machines.origin.with_name("gone.git")
    machines.origin.rename(moved)
    task = q.create_task("offline")
    assert attempt(machines, "a", task.id) == "provisional"  # the work is kept locally
    notes = q.get_task_notes(task.id)
    assert "could not fetch from origin" in notes and "not pushed to origin" in notes
    assert git.Repo(root).commit(f"agent/TASK-{task.id}")  # the commit is on the branch here
    moved.rename(machines.origin)
    machines.on("b")
    with pytest.raises(GitError, match="could not push it; accept it there"):
        review.accept(task.id, "bob")  # b never saw the branch: nothing changes
    assert q.get_task(task.id).state is TaskState.PROVISIONAL
    machines.on("a")
    review.accept(task.id, "alice")  # the remote is back: accept pushes the merged base
    assert git.Repo(machines.origin).commit("main").message.startswith(f"Merge TASK-{task.id}")


def test_a_remote_name_that_could_be_an_option_is_refused_by_config(project: Path) -> None:
    from orchestrator import config
    from orchestrator.model.exceptions import ConfigError

    (project / ".octopoid/config.yaml").write_text("git:\n  remote: --upload-pack=touch x\n")
    with pytest.raises(ConfigError, match="not a remote's name"):
        config.load_config()


def test_accept_merges_what_the_last_attempt_pushed_over_a_stale_local_branch(
    machines: Machines,
) -> None:
    machines.on("a")
    task = q.create_task("diverged")
    branch = f"agent/TASK-{task.id}"
    b_root = machines.roots["b"]
    b_repo = git.Repo(b_root)  # b's killed attempt left a commit of its own, never pushed
    b_repo.git.branch(branch, "main")
    b_repo.git.checkout(branch)
    (b_root / "stale.txt").write_text("from an attempt that was killed\n")
    b_repo.index.add(["stale.txt"])
    stale = b_repo.index.commit("stale work")
    b_repo.git.checkout("main")
    assert attempt(machines, "a", task.id) == "provisional"
    pushed = machines.carried(task.id)

    machines.on("b")
    review.accept(task.id, "bob")
    main = git.Repo(machines.origin).commit("main")
    assert git.Repo(machines.origin).is_ancestor(pushed, main.hexsha)
    assert "stale.txt" not in [item.path for item in main.tree.traverse()]
    kept = b_repo.commit(f"refs/octopoid/replaced/{branch}")
    assert kept == stale  # the replaced tip is kept, not lost


def land_on_main(root: Path, path: str, text: str) -> None:
    """A person's change to main, pushed to the remote from ``root``'s checkout."""
    repo = git.Repo(root)
    (root / path).write_text(text)
    repo.index.add([path])
    repo.index.commit(f"a person changes {path}")
    repo.git.push("origin", "main")


def test_a_conflict_is_settled_by_one_reject_and_one_attempt_then_accepted_elsewhere(
    machines: Machines,
) -> None:
    machines.on("a")
    task = q.create_task("conflict rebase-on-retry")
    assert attempt(machines, "a", task.id) == "provisional"
    land_on_main(machines.roots["b"], "README.md", "# changed by a person\n")

    machines.on("b")
    with pytest.raises(MergeRefused, match="conflicts in"):
        review.accept(task.id, "bob")
    assert not finishing.pending(task.id)  # the refusal left nothing behind: no journal
    review.reject(task.id, "it conflicts with main: rebase it", "bob")

    assert attempt(machines, "a", task.id) == "provisional"  # rebased and resolved
    submitted = q.get_task(task.id).headers["BRANCH_TIP"]
    assert machines.carried(task.id) == submitted  # the rewrite reached the remote

    machines.on("b")
    done = review.accept(task.id, "bob")  # the first try, on the other machine
    assert done.task.state is TaskState.DONE
    origin = git.Repo(machines.origin)
    assert origin.is_ancestor(submitted, origin.commit("main").hexsha)
    assert origin.git.show("main:README.md") == "# changed by the agent"


def test_an_attempt_never_overwrites_a_push_someone_made_meanwhile(machines: Machines) -> None:
    root = machines.on("a")
    set_config(root, sandbox="none")  # its agent pushes as someone else would: no box
    machines.monkeypatch.setenv("OCTO_TEST_ORIGIN", str(machines.origin))
    task = q.create_task("push-aside")
    assert attempt(machines, "a", task.id) == "provisional"
    theirs = git.Repo(machines.origin).commit(f"refs/octopoid/tasks/TASK-{task.id}")
    assert theirs.message.strip() == "pushed by someone else"  # still there: not overwritten
    assert "someone else pushed to it" in q.get_task_notes(task.id)
    mine = q.get_task(task.id).headers["BRANCH_TIP"]

    done = review.accept(task.id, "alice")  # what the attempt submitted, not their push
    origin = git.Repo(machines.origin)
    assert origin.is_ancestor(mine, done.merged_sha)
    assert not origin.is_ancestor(theirs.hexsha, done.merged_sha)
    assert machines.carried(task.id) == theirs.hexsha  # their branch is left to them


def test_prune_on_the_machine_that_ran_the_attempts_removes_what_the_other_merged(
    machines: Machines,
) -> None:
    machines.on("a")
    merged, squashed = q.create_task("merged"), q.create_task("squashed")
    for task in (merged, squashed):
        assert attempt(machines, "a", task.id) == "provisional"
    review.reject(merged.id, "one more thing", "bob")
    assert attempt(machines, "b", merged.id) == "provisional"  # a keeps the older tip
    review.accept(merged.id, "bob")
    set_config(machines.roots["b"], merge={"strategy": "squash"})
    review.accept(squashed.id, "bob")

    machines.on("a")  # its main never moved: the remote's holds the first, History the other
    assert review.prune_worktrees() == [
        f"deleted agent/TASK-{merged.id}: merged",
        f"deleted agent/TASK-{squashed.id}: merged",
    ]
    a_repo = git.Repo(machines.roots["a"])
    assert not [ref for ref in a_repo.references if ref.path.startswith("refs/heads/agent/")]


def test_a_remote_that_refuses_octopoid_s_refs_is_named_in_the_notes(machines: Machines) -> None:
    git.Repo(machines.origin).git.config("receive.hideRefs", "refs/octopoid")  # as GitLab hides
    machines.on("a")
    task = q.create_task("refused")
    assert attempt(machines, "a", task.id) == "provisional"  # the work is kept here
    notes = q.get_task_notes(task.id) or ""
    said = f"origin refused to update refs/octopoid/tasks/TASK-{task.id} (deny updating a hidden"
    assert said in notes and "let that remote take pushes there" in notes
    assert not [ref for ref in machines.listed() if "TASK-" in ref]  # nor pushed elsewhere


def as_an_older_octopoid_left_it(machines: Machines, task_id: str) -> str:
    """The task's branch on the remote as ``refs/heads/agent/TASK-<id>`` and no tip recorded
    on the task, as octopoid left them before task branches moved under refs/octopoid/."""
    origin = git.Repo(machines.origin)
    tip = q.get_task(task_id).headers["BRANCH_TIP"]
    origin.git.update_ref(f"refs/heads/agent/TASK-{task_id}", tip)
    origin.git.update_ref("-d", f"refs/octopoid/tasks/TASK-{task_id}")
    q.get_store().update(task_id, TaskState.PROVISIONAL, lambda t: t.drop_header("BRANCH_TIP"))
    return tip


def test_branches_an_older_octopoid_pushed_are_continued_then_removed(
    machines: Machines,
) -> None:
    machines.on("a")
    accepted, retried = q.create_task("accepted"), q.create_task("retried")
    for task in (accepted, retried):
        assert attempt(machines, "a", task.id) == "provisional"
    first = as_an_older_octopoid_left_it(machines, accepted.id)
    older = as_an_older_octopoid_left_it(machines, retried.id)
    machines.on("b")  # never had either branch
    done = review.accept(accepted.id, "bob")
    assert git.Repo(machines.origin).is_ancestor(first, done.merged_sha)
    review.reject(retried.id, "one more thing", "bob")
    assert attempt(machines, "b", retried.id) == "provisional"
    tip = q.get_task(retried.id).headers["BRANCH_TIP"]
    assert git.Repo(machines.origin).is_ancestor(older, tip)  # built on the older push
    review.accept(retried.id, "bob")
    assert not [ref for ref in machines.listed() if "TASK-" in ref]  # both names removed

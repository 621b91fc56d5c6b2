"""Accept merges the task branch into its base; refused merges change nothing."""

from __future__ import annotations

import io
from pathlib import Path

import git
import pytest

from orchestrator.git import branches, core
from orchestrator.model.exceptions import GitError, IllegalTransition, MergeRefused
from orchestrator.model.tasks import TaskState, render_task
from orchestrator.queue import machine as q
from orchestrator.review import diffs
from orchestrator.review import verdicts as review

from .support import cli_output, provisional_with_commit


def set_strategy(root: Path, strategy: str) -> None:
    (root / ".octopoid/config.yaml").write_text(f"merge:\n  strategy: {strategy}\n")


def test_accept_merges_and_removes_worktree_branch_and_notes(git_project: Path) -> None:
    tid = provisional_with_commit(git_project)
    done = review.accept(tid, "alice")
    repo = git.Repo(git_project)
    assert repo.head.commit.message.startswith(f"Merge TASK-{tid}: add feature.txt")
    assert len(repo.head.commit.parents) == 2
    assert (git_project / "feature.txt").read_text() == "new\n"  # the checkout moved too
    assert done.task.state is TaskState.DONE and done.merged_sha == repo.head.commit.hexsha
    assert not branches.worktree_for(tid).exists()
    assert not branches.branch_exists(repo, f"agent/TASK-{tid}")
    assert q.get_task_notes(tid) is None


@pytest.mark.parametrize(("strategy", "parents"), [("squash", 1), ("ff-only", 1)])
def test_squash_and_fast_forward(git_project: Path, strategy: str, parents: int) -> None:
    set_strategy(git_project, strategy)
    tid = provisional_with_commit(git_project)
    review.accept(tid)
    head = git.Repo(git_project).head.commit
    assert len(head.parents) == parents and (git_project / "feature.txt").exists()
    if strategy == "squash":
        assert head.message.startswith(f"Merge TASK-{tid}")


def test_strategy_none_leaves_the_branch_for_a_pull_request(git_project: Path) -> None:
    set_strategy(git_project, "none")
    tid = provisional_with_commit(git_project)
    before = git.Repo(git_project).head.commit.hexsha
    review.accept(tid)
    repo = git.Repo(git_project)
    assert repo.head.commit.hexsha == before
    assert branches.branch_exists(repo, f"agent/TASK-{tid}")
    assert q.get_task(tid).state is TaskState.DONE


def test_a_conflict_is_aborted_and_leaves_the_task_as_it_was(git_project: Path) -> None:
    tid = provisional_with_commit(git_project, "README.md", "agent's readme\n")
    repo = git.Repo(git_project)
    (git_project / "README.md").write_text("human's readme\n")
    repo.index.add(["README.md"])
    repo.index.commit("human edit")
    head, before = repo.head.commit.hexsha, render_task(q.get_task(tid))
    with pytest.raises(MergeRefused, match=r"conflicts in:\n  README\.md\nnothing was merged"):
        review.accept(tid)
    assert repo.head.commit.hexsha == head and not repo.is_dirty()
    assert (git_project / "README.md").read_text() == "human's readme\n"
    assert render_task(q.get_task(tid)) == before  # no MERGING left: nothing to finish
    assert q.get_task_notes(tid) is not None and branches.worktree_for(tid).exists()
    closed = review.close(tid, "done", "merged by hand instead")
    assert closed.task.state is TaskState.DONE


def test_uncommitted_edits_block_only_a_merge_that_touches_them(git_project: Path) -> None:
    """An edited agents.yaml (or any file the merge leaves alone) does not stop an accept;
    an edit to a file the branch changes, or anything staged, does, and is named."""
    repo = git.Repo(git_project)
    repo.index.add([".octopoid/agents.yaml"])
    repo.index.commit("track the agents")
    tid = provisional_with_commit(git_project, "README.md", "agent's readme\n")
    (git_project / "README.md").write_text("uncommitted\n")
    with pytest.raises(MergeRefused, match=r"to files the merge changes:\n  README\.md\n"):
        review.accept(tid)
    assert q.get_task(tid).state is TaskState.PROVISIONAL
    assert (git_project / "README.md").read_text() == "uncommitted\n"
    repo.git.checkout("README.md")
    (git_project / "notes.txt").write_text("staged\n")
    repo.git.add("notes.txt")
    with pytest.raises(MergeRefused, match=r"staged changes on main.*\n  notes\.txt\n"):
        review.accept(tid)
    repo.git.rm("--cached", "-q", "notes.txt")
    (git_project / ".octopoid/agents.yaml").write_text("agents: []\n# being edited\n")
    review.accept(tid)
    assert q.get_task(tid).state is TaskState.DONE
    assert repo.head.commit.tree["README.md"].data_stream.read() == b"agent's readme\n"
    assert "# being edited" in (git_project / ".octopoid/agents.yaml").read_text()
    assert repo.is_dirty(untracked_files=False)  # the edit is still the user's, uncommitted


def test_base_not_checked_out_is_merged_without_touching_the_checkout(git_project: Path) -> None:
    repo = git.Repo(git_project)
    repo.git.branch("release")
    q.create_task("on release", branch="release")
    task = q.claim_task(None, "a")
    worktree = branches.ensure_worktree(repo, task.id, "release")
    (worktree / "r.txt").write_text("r\n")
    git.Repo(worktree).index.add(["r.txt"])
    git.Repo(worktree).index.commit("release work")
    q.submit_completion(task, 1, 1)
    main_before = repo.head.commit.hexsha
    review.accept(task.id)
    assert repo.head.commit.hexsha == main_before and not (git_project / "r.txt").exists()
    assert "r.txt" in repo.commit("release").tree
    assert not any(
        p.name.startswith(".merge-") for p in branches.worktree_for("x").parent.iterdir()
    )


def test_accept_needs_a_provisional_task(git_project: Path) -> None:
    tid = q.create_task("t").id
    with pytest.raises(IllegalTransition, match="not provisional"):
        review.accept(tid)


def test_reject_keeps_branch_and_worktree(git_project: Path) -> None:
    tid = provisional_with_commit(git_project)
    review.reject(tid, "needs tests")
    assert branches.worktree_for(tid).exists()
    assert "needs tests" in q.get_task_notes(tid)


def test_diff_and_prune(git_project: Path) -> None:
    tid = provisional_with_commit(git_project)
    out = io.BytesIO()
    diffs.write_diff(tid, out)
    assert b"+new" in out.getvalue()
    assert review.prune_worktrees() == []  # provisional: kept
    set_strategy(git_project, "none")
    review.accept(tid)
    assert review.list_worktrees() == [(f"TASK-{tid}", "done")]
    assert review.prune_worktrees() == [
        f"removed TASK-{tid}; kept agent/TASK-{tid}: not merged into main (for review or a PR)"
    ]
    assert review.list_worktrees() == []
    repo = git.Repo(git_project)
    assert branches.branch_exists(repo, f"agent/TASK-{tid}")  # the PR's branch survives


def test_prune_deletes_a_branch_only_once_its_base_has_it(git_project: Path) -> None:
    set_strategy(git_project, "none")
    tid = provisional_with_commit(git_project)
    review.accept(tid)
    repo = git.Repo(git_project)
    repo.git.merge("--no-ff", "-m", "the PR was merged", f"agent/TASK-{tid}")
    assert review.prune_worktrees() == [f"removed TASK-{tid} and its branch"]
    assert not branches.branch_exists(repo, f"agent/TASK-{tid}")


def test_worktree_errors_carry_gits_words(git_project: Path) -> None:
    with pytest.raises(GitError, match="base branch 'nope' does not exist"):
        branches.ensure_worktree(git.Repo(git_project), "5", "nope")


def test_not_a_git_repo_is_a_clear_error(project: Path) -> None:
    with pytest.raises(GitError, match="not a git repository"):
        core.open_repo()


def test_list_and_status_mark_a_review_whose_branch_no_longer_merges(git_project: Path) -> None:
    import json

    clean = provisional_with_commit(git_project, "fine.txt")
    tid = provisional_with_commit(git_project, "README.md", "agent's readme\n")
    assert "conflicts" not in cli_output("list") and "no longer merges" not in cli_output("status")
    repo = git.Repo(git_project)
    (git_project / "README.md").write_text("human's readme\n")
    repo.index.add(["README.md"])
    repo.index.commit("human edit")
    listed = cli_output("list")
    assert f"TASK-{tid}  provisional (conflicts)" in listed
    assert f"TASK-{tid} no longer merges into its base (conflicts in README.md)" in listed
    rows = {r["id"]: r for r in json.loads(cli_output("list", "--json"))}
    assert rows[f"TASK-{tid}"]["conflicts"] == ["README.md"]
    assert rows[f"TASK-{clean}"]["conflicts"] is None
    status = json.loads(cli_output("status", "--json"))
    assert status["unmergeable"] == [
        {"id": f"TASK-{tid}", "conflicts": ["README.md"], "refused": []}
    ]
    assert f"TASK-{tid} no longer merges" in cli_output("status")
    # the store's record: two judgements per waiting review and pair of tips (before and
    # after the base moved), shared with every machine of the store
    cache = q.get_store().records.read("merge-checks").value
    assert {label: len(pairs) for label, pairs in cache.items()} == {
        f"TASK-{clean}": 4,
        f"TASK-{tid}": 4,
    }

"""``sandbox: none``: hooks, config, refs and HEAD an agent changes are put back.

The old containment, kept for machines without bubblewrap: hostile agents act through a
shell (the command backend) and through the anthropic backend's tools against the local
fake Messages API. With ``sandbox: bwrap`` none of this is reachable
(tests/e2e/test_hostile_agents.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import git
import pytest

from orchestrator import config
from orchestrator.backends.worktree_tools import WorktreeTools
from orchestrator.box.trusted import TrustedWorkspace
from orchestrator.git import branches
from orchestrator.model.exceptions import IllegalTransition
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .helpers.fake_messages_api import FakeMessagesAPI, tool_use
from .support import provisional_with_commit, run_claimed, set_config, write_agents


@pytest.fixture
def hostile(git_project: Path, tmp_path: Path, monkeypatch):
    """Run one attempt of a scripted command agent whose title says what it does."""
    set_config(git_project, sandbox="none")
    write_agents(git_project)
    monkeypatch.setenv("OCTO_TEST_PWNED", str(tmp_path / "pwned"))

    def attempt(title: str):
        tid = q.create_task(title).id
        report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
        return tid, report, q.get_task_notes(tid)

    return attempt


def common(root: Path) -> Path:
    return root / ".git"


def test_a_planted_hook_is_removed_and_fails_the_attempt(hostile, git_project, tmp_path):
    tid, report, notes = hostile("plant-hook")
    assert report.next_state == "incoming" and report.outcome == "error"
    assert "the agent added .git/hooks/post-merge; octopoid put it back" in notes
    assert not (common(git_project) / "hooks/post-merge").exists()
    kept = git_project / f".octopoid/runtime/containment/TASK-{tid}/1/hooks/post-merge"
    assert "touch" in kept.read_text()  # what was displaced is kept, not lost
    assert "reached outside its branch" in q.get_task(tid).history[-1]


def test_a_hooks_path_in_the_shared_config_is_undone(hostile, git_project):
    before = (common(git_project) / "config").read_text()
    _, report, notes = hostile("hooks-path")
    assert report.next_state == "incoming"
    assert "the agent changed .git/config" in notes
    assert (common(git_project) / "config").read_text() == before
    assert "hooksPath" not in git.Repo(git_project).git.config("--list")


def test_moving_main_is_undone_and_the_moved_value_kept(hostile, git_project):
    main_before = git.Repo(git_project).commit("main").hexsha
    tid, report, notes = hostile("move-main")
    repo = git.Repo(git_project)
    assert repo.commit("main").hexsha == main_before
    assert "the agent moved refs/heads/main; octopoid put it back" in notes
    displaced = repo.commit(f"refs/octopoid/displaced/TASK-{tid}/1/refs/heads/main")
    assert displaced.hexsha == repo.commit(f"agent/TASK-{tid}").hexsha
    assert report.next_state == "incoming"


@pytest.mark.parametrize("how", ["fake-commit", "dir-swap"])
def test_moving_main_from_inside_the_users_checkout_or_behind_a_directory_is_undone(
    hostile, git_project, how
):
    main_before = git.Repo(git_project).commit("main").hexsha
    _, report, notes = hostile(f"{how} work")
    assert report.next_state == "incoming"
    assert git.Repo(git_project).commit("main").hexsha == main_before
    assert "the agent moved refs/heads/main; octopoid put it back" in notes
    hooks = common(git_project) / "hooks"
    assert not (hooks / "post-commit").exists()
    assert (hooks / "applypatch-msg.sample").is_file()  # the directory is gone, the file back


def test_a_worktree_of_the_agents_own_cannot_move_a_branch(
    hostile, git_project, tmp_path, monkeypatch
):
    repo = git.Repo(git_project)
    repo.git.branch("release")
    monkeypatch.setenv("OCTO_TEST_SIDE", str(tmp_path / "side"))
    _, report, notes = hostile("side-worktree work")
    assert report.next_state == "incoming"
    assert repo.commit("release").hexsha == repo.commit("main").hexsha  # put back
    assert f"the agent added the worktree {tmp_path / 'side'}" in notes
    assert str(tmp_path / "side") not in repo.git.worktree("list")


def test_a_check_that_plants_a_hook_is_caught_after_the_checks(hostile, git_project):
    set_config(git_project, checks={"commands": ["sh check.sh"]})
    _, report, notes = hostile("check-plant work")
    assert report.next_state == "incoming"
    assert not (common(git_project) / "hooks/post-merge").exists()
    assert "(containment)" in notes and "the agent added .git/hooks/post-merge" in notes


def test_work_committed_on_another_branch_goes_back_with_a_note(hostile, git_project):
    tid, report, notes = hostile("switch-branch")
    assert report.next_state == "incoming" and report.commits == 0
    assert f"work was committed to feature/x, not agent/TASK-{tid}" in notes
    assert branches.worktree_branch(tid) == f"refs/heads/agent/TASK-{tid}"
    assert not branches.branch_exists(git.Repo(git_project), "feature/x")


def test_an_honest_attempt_is_not_flagged(hostile):
    _, report, notes = hostile("plain work")
    assert report.next_state == "provisional" and report.commits == 1
    assert "octopoid put it back" not in notes


def prepare(git_project: Path) -> TrustedWorkspace:
    cfg = config.load_config()
    task = q.claim_task(None, "x")
    return TrustedWorkspace(task, {"name": "x"}, cfg, task.headers["CLAIM_TOKEN"], [])


def test_the_user_and_other_agents_committing_meanwhile_are_not_breaches(git_project):
    set_config(git_project, sandbox="none")
    q.create_task("a"), q.create_task("b")
    space, other = prepare(git_project), prepare(git_project)  # another task starts meanwhile
    commit(git.Repo(other.worktree), "b.txt")  # its agent commits on its own branch
    commit(git.Repo(git_project), "user.txt")  # the user commits in their checkout
    git.Repo(git_project).git.tag("v1")  # and tags it: none of the attempt's work in either
    back = space.bring_back()
    assert back.commits == 0 and back.breaches == []
    assert git.Repo(git_project).commit("v1") == git.Repo(git_project).commit("main")
    for each in (space, other):
        each.close()


def test_a_branch_made_with_the_agents_commits_is_removed(git_project):
    set_config(git_project, sandbox="none")
    tid = q.create_task("a").id
    space = prepare(git_project)
    wt = git.Repo(space.worktree)
    commit(wt, "work.txt")  # the attempt's own commit (its committer is the attempt's)
    wt.git.branch("release", "HEAD")  # ... then a branch to carry it past review
    back = space.bring_back()
    kept = f"refs/octopoid/displaced/TASK-{tid}/1/refs/heads/release"
    assert back.breaches == [
        f"the agent created refs/heads/release with unreviewed work; octopoid removed it "
        f"(kept as {kept})"
    ]
    assert not branches.branch_exists(git.Repo(git_project), "release")
    space.close()


def commit(repo: git.Repo, name: str) -> None:
    Path(repo.working_dir, name).write_text(name)
    repo.index.add([name])
    repo.index.commit(f"add {name}")


def test_accept_runs_no_hook_unless_asked(git_project, tmp_path):
    marker = tmp_path / "hook-ran"
    hook = common(git_project) / "hooks/post-merge"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    review.accept(provisional_with_commit(git_project, "one.txt"))
    assert not marker.exists()
    (git_project / ".octopoid/config.yaml").write_text("merge:\n  run_hooks: true\n")
    review.accept(provisional_with_commit(git_project, "two.txt"))
    assert marker.exists()  # the user's own hook, opted back in


def test_accept_refuses_a_branch_with_nothing_beyond_its_base(git_project):
    q.create_task("empty")
    task = q.claim_task(None, "agent")
    branches.ensure_worktree(git.Repo(git_project), task.id, "main")
    q.submit_completion(task, 1, 1)
    with pytest.raises(IllegalTransition, match="no commits beyond main"):
        review.accept(task.id)
    assert q.get_task(task.id).state is TaskState.PROVISIONAL


def test_search_text_never_follows_a_symlink_out_of_the_worktree(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("API_TOKEN=hunter2\n")
    worktree = tmp_path / "wt"
    (worktree / "docs").mkdir(parents=True)
    (worktree / "docs/readme.md").write_text("TOKEN goes here\n")
    (worktree / "leak.txt").symlink_to(secret)
    (worktree / "outside").symlink_to(tmp_path)
    tools = WorktreeTools(worktree, 5, dict(os.environ))
    out, is_error = tools.call("search_text", {"pattern": "TOKEN"})
    assert not is_error and "docs/readme.md:1" in out and "hunter2" not in out
    out, is_error = tools.call("search_text", {"pattern": "TOKEN", "path": "leak.txt"})
    assert is_error and "outside the worktree" in out


def test_an_anthropic_agent_planting_a_hook_by_run_command_is_caught(git_project, monkeypatch):
    plant = (
        'h="$(git rev-parse --git-common-dir)/hooks/post-merge"; '
        'printf "#!/bin/sh\\necho pwned\\n" > "$h"; chmod +x "$h"'
    )
    script = [
        tool_use("run_command", {"command": plant}),
        tool_use("write_file", {"path": "a.txt", "content": "work\n"}),
        tool_use("finish", {"summary": "done"}),
    ]
    set_config(git_project, sandbox="none")
    with FakeMessagesAPI(script) as api:
        (git_project / ".octopoid/agents.yaml").write_text(
            "agents:\n  - name: api-1\n    role: implement\n    backend: anthropic\n"
            f"    model: claude-sonnet-4-6\n    base_url: {api.base_url}\n"
        )
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-not-a-real-key")
        tid = q.create_task("make a.txt").id
        report = run_claimed(q.claim_task(None, "api-1"), "api-1")
    assert report.next_state == "incoming"
    assert not (common(git_project) / "hooks/post-merge").exists()
    assert "the agent added .git/hooks/post-merge" in q.get_task_notes(tid)


@pytest.mark.parametrize("first_checks_first", [False, True])
def test_attempts_at_once_cannot_launder_each_others_work_through_a_snapshot(
    git_project, first_checks_first
):
    """A commits onto main; B starts (its snapshot holds A's commit) and commits on top;
    neither check may leave main holding either agent's work, whichever runs first."""
    set_config(git_project, sandbox="none")
    repo = git.Repo(git_project)
    m0 = repo.commit("main").hexsha
    q.create_task("a"), q.create_task("b")
    first = prepare(git_project)

    def agent_commit(space: TrustedWorkspace) -> None:
        env = {**os.environ, "GIT_COMMITTER_EMAIL": space.box.env["GIT_COMMITTER_EMAIL"]}
        subprocess.run(
            ["git", "-C", str(git_project), "commit", "-q", "--allow-empty", "-m", "smuggled"],
            env=env,
            check=True,
        )

    agent_commit(first)  # onto main, in the user's checkout
    second = prepare(git_project)
    agent_commit(second)
    order = (first, second) if first_checks_first else (second, first)
    found = [order[0].bring_back().breaches, order[1].bring_back().breaches]
    assert found[0] and found[1] == []  # the first check put main back; nothing left after
    assert repo.commit("main").hexsha == m0
    for space in (first, second):
        space.close()

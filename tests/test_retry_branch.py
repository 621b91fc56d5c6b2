"""A retry is told what its branch already holds; `retry --fresh` starts from the base."""

from __future__ import annotations

import subprocess
import sys

import git

from orchestrator.git import branches
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .support import OCTOPOID, child_env, commit_on_branch, prompt_of, run_claimed, write_agents


def test_the_next_prompt_lists_the_branch_s_commits_and_how_far_the_base_moved(git_project):
    write_agents(git_project)
    tid = q.create_task("plain").id
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")  # commits TASK-<id>.txt
    commit_on_branch(git_project, tid, {"more.txt": b"x\n"}, "second try at the parser")
    repo = git.Repo(git_project)
    (git_project / "base.txt").write_text("moved on\n")
    repo.index.add(["base.txt"])
    repo.index.commit("the base moves on")
    review.reject(tid, "not yet")
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    prompt = prompt_of(tid, 2)
    assert "## The Branch Already Holds" in prompt
    block = prompt.split("## The Branch Already Holds", 1)[1]
    assert "second try at the parser" in block and "main has 1 commit it lacks" in block
    assert "## The Branch Already Holds" not in prompt_of(tid, 1)


def test_retry_fresh_starts_from_the_base_and_keeps_the_old_tip(git_project):
    write_agents(git_project)
    tid = q.create_task("plain").id
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    repo = git.Repo(git_project)
    old_tip = repo.commit(f"agent/TASK-{tid}").hexsha
    q.fail_task(q.get_task(tid), "wrong approach")
    done = subprocess.run(
        [OCTOPOID, "retry", "--fresh", tid], cwd=git_project, env=child_env(git_project),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"TASK-{tid} back in incoming (from its base)\n"
    assert f"agent/TASK-{tid}" not in [h.name for h in repo.heads]
    kept = f"refs/octopoid/replaced/agent/TASK-{tid}-{old_tip[:12]}"
    assert repo.commit(kept).hexsha == old_tip
    task = q.get_task(tid)
    assert task.state is TaskState.INCOMING and task.moves()[-1] == ("failed", "incoming")
    assert "retry from main; earlier commits kept under" in task.path.read_text()
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert "## The Branch Already Holds" not in prompt_of(tid, 2)
    assert repo.commit(f"agent/TASK-{tid}").parents[0].hexsha == repo.commit("main").hexsha


def test_starting_over_twice_keeps_both_old_tips(git_project):
    write_agents(git_project)
    tid = q.create_task("plain").id
    repo = git.Repo(git_project)
    tips = []
    for _ in range(2):
        run_claimed(q.claim_task(None, "impl-1"), "impl-1")
        tips.append(repo.commit(f"agent/TASK-{tid}").hexsha)
        q.fail_task(q.get_task(tid), "wrong approach")
        review.retry(tid, fresh=True)
    kept = [r.path for r in repo.refs if r.path.startswith("refs/octopoid/replaced/")]
    assert sorted(kept) == sorted(
        f"refs/octopoid/replaced/agent/TASK-{tid}-{tip[:12]}" for tip in tips
    )


CLAIMER = """
import sys
from orchestrator.queue import machine as q
from orchestrator.model.tasks import TaskState
print("ready", flush=True)
task = q.claim_task(None, source=TaskState.BREAKDOWN, agent_name="breaker")
print(task.label if task else "nothing", flush=True)
"""


def test_a_breakdown_agent_cannot_claim_a_task_while_it_is_started_over(git_project):
    """retry --fresh sets the branch aside under the task's lock: a breakdown agent asking
    for the task at that instant waits, then finds it gone to incoming, never half-reset."""
    write_agents(git_project)
    tid = q.create_task("plain").id
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")  # a branch with a commit
    review.reject(tid, "start over")
    q.recycle_to_breakdown(q.claim_task(None, "impl-1"), "burned out twice")
    claimers: list[subprocess.Popen] = []

    def also_claim(task) -> None:  # inside the lock: another process asks for the task now
        claimers.append(
            subprocess.Popen(
                [sys.executable, "-c", CLAIMER],
                cwd=git_project,
                env=child_env(git_project),
                stdout=subprocess.PIPE,
                text=True,
            )
        )
        assert claimers[0].stdout.readline() == "ready\n"
        branches.set_branch_aside(git.Repo(git_project), task.id)

    q.retry_task(tid, reason="start over", prepare=also_claim)
    out, _ = claimers[0].communicate(timeout=60)
    assert out.strip() == "nothing"
    assert q.get_task(tid).state is TaskState.INCOMING

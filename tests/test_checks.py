"""Checks before review: failing checks and merge conflicts send the work back with what
failed in the notes, so the next attempt starts from it; passing work reaches review."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import git
import pytest

from orchestrator import config
from orchestrator.model.tasks import TaskState, utcnow
from orchestrator.queue import machine as q

from .support import (
    HELPERS,
    Served,
    child_env,
    octopoid,
    run_claimed,
    set_config,
    write_agents,
)

PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider test_sum.py"


@pytest.fixture
def checked(git_project: Path):
    write_agents(git_project)
    (git_project / ".octopoid/config.yaml").write_text(
        "checks:\n  commands:\n    - " + json.dumps(PYTEST) + "\n  timeout_seconds: 60\n"
    )
    return git_project


def attempt():
    return run_claimed(q.claim_task(None, "impl-1"), "impl-1")


def test_a_failing_check_sends_the_work_back_and_the_retry_reads_why(checked):
    tid = q.create_task("check-fix the sum").id
    first = attempt()
    assert first.next_state == "incoming" and first.commits == 1
    notes = q.get_task_notes(tid)
    assert "## Checks — attempt 1" in notes and "ARITH-CLUE: one plus one is two" in notes
    assert "checks: 0 passed, 1 failed" in q.get_task(tid).history[-1]
    second = attempt()
    prompt = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-2.prompt.md").read_text()
    assert "ARITH-CLUE: one plus one is two" in prompt  # what failed, in the next prompt
    assert second.next_state == "provisional"
    history = q.get_task(tid).history
    assert any(f"check `{PYTEST}` passed" in line for line in history)
    assert "checks: 1 passed" in history[-1]


def test_a_check_that_times_out_fails_with_that_reason(git_project):
    write_agents(git_project)
    (git_project / ".octopoid/config.yaml").write_text(
        'checks:\n  commands: ["sleep 30"]\n  timeout_seconds: 1\n'
    )
    tid = q.create_task("plain work").id
    assert attempt().next_state == "incoming"
    assert "[timed out after 1s]" in q.get_task_notes(tid)


def test_a_task_brings_its_own_check_through_enqueue(git_project):
    write_agents(git_project)
    done = octopoid(
        git_project,
        "enqueue",
        "plain work",
        "--check",
        "false",
    )
    assert done.returncode == 0, done.stderr
    tid = done.stdout.strip().removeprefix("TASK-")
    assert q.get_task(tid).headers["CHECKS"] == '["false"]'
    assert attempt().next_state == "incoming"
    assert "$ false\n[exit status 1 after " in q.get_task_notes(tid)


def test_checks_have_no_network_unless_they_name_what_they_reach(
    git_project, loopback_servers: list[Served], bwrap_ok
):
    """Checks run the agent's code: by default they reach nothing; with ``checks.network``
    they reach what it names, and each refusal is in the notes."""
    write_agents(git_project)
    named, other = (served.port for served in loopback_servers)
    probe = f"{sys.executable} {HELPERS / 'net_probe.py'}"
    reach = f"{probe} 127.0.0.1 {named}"
    set_config(git_project, checks={"commands": [reach]})
    tid = q.create_task("plain work").id
    assert attempt().next_state == "incoming"
    assert "refused (ConnectionRefusedError" in q.get_task_notes(tid)  # no network at all
    steal = f"{probe} - - 'CONNECT 127.0.0.1:{other} HTTP/1.1' || true"
    allow = {"mode": "allow", "allow": [f"127.0.0.1:{named}"]}
    set_config(git_project, checks={"commands": [reach, steal], "network": allow})
    assert attempt().next_state == "provisional"
    notes = q.get_task_notes(tid)
    assert "## Checks' network — attempt 2" in notes
    assert f"network: refused 127.0.0.1:{other}: not on this box's list" in notes
    assert len(loopback_servers[0].seen) == 1 and loopback_servers[1].seen == []


def test_a_branch_that_no_longer_merges_goes_back_naming_the_conflict(git_project):
    write_agents(git_project)
    tid = q.create_task("conflict with main").id
    repo = git.Repo(git_project)
    repo.git.branch(f"agent/TASK-{tid}", "main")  # an earlier attempt's branch, then main moved
    (git_project / "README.md").write_text("# changed on main meanwhile\n")
    repo.git.commit("-qam", "main moved")
    report = attempt()
    assert report.next_state == "incoming"
    notes = q.get_task_notes(tid)
    assert "Conflicting files:\n  README.md" in notes and "Rebase onto the base branch" in notes
    assert "conflicts with its base in README.md" in q.get_task(tid).history[-1]


def test_octopoid_checks_reruns_them_by_hand(checked):
    tid = q.create_task("check-fix the sum").id
    attempt()
    run = octopoid(
        checked,
        "checks",
        tid,
    )
    assert run.returncode == 1
    assert f"check `{PYTEST}` failed: exit status 1" in run.stdout
    assert "ARITH-CLUE" in run.stdout and "merges cleanly" in run.stdout
    assert q.get_task(tid).state is TaskState.INCOMING  # nothing moved


def test_how_long_each_check_took_is_recorded_failed_or_passed(checked):
    import re

    tid = q.create_task("check-fix the sum").id
    attempt()
    assert re.search(r"\[exit status 1 after \d+\.\ds\]", q.get_task_notes(tid))
    assert re.search(r"1 failed \(.* after \d+\.\ds\)", q.get_task(tid).history[-1])
    attempt()
    assert re.search(r"check `.*` passed \(\d+\.\ds\)", "\n".join(q.get_task(tid).history))


def test_the_duration_runs_from_the_claim_not_from_the_checks_line() -> None:
    from datetime import UTC, datetime

    from orchestrator.faces.web.pages import _duration
    from orchestrator.model.tasks import new_task

    task = new_task("7", "t")
    t0 = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)
    task.add_history(t0, "incoming", "claimed", "impl-1", "")
    # a check's line as older versions wrote it: still no move
    task.add_history(t0.replace(second=40), "claimed", "claimed", "checks", "check `x` passed")
    task.add_history(t0.replace(second=41), "claimed", "provisional", "impl-1", "1 commit")
    assert _duration(task, t0.replace(minute=5)) == "41s"


def test_a_check_s_history_line_is_an_event_where_the_task_is_not_a_move(project: Path):
    """A check that passed is written ``in claimed``, never ``claimed → claimed``: it is no
    move (moves, the ledger, the page's duration), and the page lists it under Checks."""
    from orchestrator.faces.web.pages import _check_lines, _duration

    tid = q.create_task("checked").id
    q.submit_completion(q.claim_task(None, "impl-1"), 1, 1, checks=["check `x` passed (0.1s)"])
    task = q.get_task(tid)
    check = next(line for line in task.history if "check `x`" in line)
    assert check.split("  ")[1:] == ["in claimed", "(checks: check `x` passed (0.1s))"]
    assert "claimed → claimed" not in "\n".join(task.history)
    assert [dst for _, dst in task.moves()] == ["incoming", "claimed", "provisional"]
    assert _check_lines(task) == [check] and _duration(task, utcnow()) != "-"


def test_commits_count_the_attempt_s_own_work_not_the_base_it_merged_in(git_project: Path):
    from orchestrator.git import branches
    from orchestrator.git import history as git_history

    from .support import commit_on_branch

    repo = git.Repo(git_project)
    start = branches.ensure_branch(repo, "5", "main")
    for n in range(3):  # the base moves on by three commits
        (git_project / f"base{n}.txt").write_text("b\n")
        repo.index.add([f"base{n}.txt"])
        repo.index.commit(f"base {n}")
    repo.git.branch("-f", "scratch", "agent/TASK-5")
    repo.git.checkout("-q", "scratch")
    repo.git.merge("-q", "--no-ff", "-m", "merge main in", "main")
    repo.git.checkout("-q", "main")
    repo.git.branch("-f", "agent/TASK-5", "scratch")
    commit_on_branch(git_project, "5", {"own.txt": b"mine\n"}, "own work")
    assert git_history.commits_on_branch(repo, "5", start, "main") == 2  # the merge + its own
    assert git_history.commits_on_branch(repo, "5", start) == 5


def test_octopoid_checks_with_no_check_makes_no_box_and_asks_git_three_things(
    git_project: Path, tmp_path: Path
):
    """With no check to run, `octopoid checks` makes neither a clone nor a box (an
    attempt's checks make none either: nothing runs the branch's code) and runs git three
    times, as plain processes: the merge's conflicts, the paths the branch writes, and
    what the checkout holds untracked (it has no linked worktree to list)."""
    from .support import commit_on_branch, logged_tool

    tid = q.create_task("checked with no check").id
    git.Repo(git_project).git.branch(f"agent/TASK-{tid}", "main")  # an attempt's branch
    commit_on_branch(git_project, tid, {"work.txt": b"work\n"}, "work")
    log, tools = tmp_path / "calls", tmp_path / "bin"
    tools.mkdir()
    logged_tool(tools, "git", log)
    bwrap = logged_tool(tools, "bwrap", log)
    env = {**child_env(git_project), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    run = octopoid(git_project, "checks", tid, env={**env, "OCTOPOID_BWRAP": str(bwrap)})
    assert run.returncode == 0 and "merges cleanly into its base" in run.stdout, run.stderr
    calls = [line.split() for line in log.read_text().splitlines()]
    assert [call[0] for call in calls] == ["git"] * 3  # no bwrap: neither probe nor box
    asked = sorted(
        next(w for w in call[1:] if not w.startswith(("-", "/", "core."))) for call in calls
    )
    assert asked == ["diff", "ls-files", "merge-tree"]


def test_octopoid_checks_probes_bwrap_while_it_clones_the_branch(
    git_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ok: None
):
    """bwrap's probe starts before the branch is cloned for the checks and runs meanwhile:
    a bwrap held until the clone exists still answers (the old order, probe then clone,
    waited for it forever), and the check runs in the box it allows."""
    from orchestrator.model.ids import TaskId
    from orchestrator.roles import checks

    from .support import commit_on_branch, logged_tool

    set_config(git_project, checks={"commands": ["test -f work.txt"], "timeout_seconds": 60})
    tid = q.create_task("checked in a box").id
    git.Repo(git_project).git.branch(f"agent/TASK-{tid}", "main")
    commit_on_branch(git_project, tid, {"work.txt": b"work\n"}, "work")
    clones = config.get_worktrees_dir() / ".checks-*"
    log = tmp_path / "calls"
    monkeypatch.setenv("OCTOPOID_BWRAP", str(logged_tool(tmp_path, "bwrap", log, hold=clones)))
    verdict = checks.recheck(TaskId(tid))
    assert verdict.passed, [r.line() for r in verdict.results]
    assert "octopoid-probe" in log.read_text().splitlines()[0]  # the probe's box came first


def test_octopoid_checks_of_a_task_never_attempted_says_it_has_no_branch(git_project: Path):
    """No branch is neither a conflict nor git's own complaint: the command says what is
    missing (git's merge-tree exits 1 for a missing branch, as for a conflict)."""
    from orchestrator.git import merges
    from orchestrator.model.exceptions import GitError

    from .support import cli_output

    tid = q.create_task("never attempted").id
    said = cli_output("checks", tid, code=1)
    assert f"TASK-{tid} has no branch agent/TASK-{tid} (no attempt yet?)" in said
    with pytest.raises(GitError, match="not something we can merge"):
        merges.merge_conflicts(git_project, tid, "main")

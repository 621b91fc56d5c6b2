"""One attempt, run in this process: worktree, prompt, agent, notes, next state."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import git
import pytest

from orchestrator import config
from orchestrator.backends import AgentResult
from orchestrator.git import branches
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.roles.base import ahead
from orchestrator.roles.outcome import settle

from .support import branch_file, prompt_of, run_claimed, write_agents


def attempt(title: str, **kw) -> tuple[str, object]:
    q.create_task(title, **kw)
    claimed = q.claim_task(None, "impl-1")
    return claimed.id, run_claimed(claimed, "impl-1")


def test_a_committing_agent_lands_in_provisional(agent_project: Path) -> None:
    tid, report = attempt("plain work", context="Do the thing in app.py")
    assert report.next_state == "provisional" and report.commits == 1
    task = q.get_task(tid)
    assert task.state is TaskState.PROVISIONAL and task.headers["COMMITS"] == "1"
    prompt = prompt_of(tid, 1)
    assert "You are an implementer agent" in prompt and "Do the thing in app.py" in prompt
    assert "## Previous Agent Notes" not in prompt and "## History" not in prompt
    assert branch_file(agent_project, tid, f"TASK-{tid}.txt").endswith("attempt 1")
    assert not branches.worktree_for(tid).exists()  # the attempt's clone went with it
    assert "committed" in q.get_task_notes(tid)
    log = config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log"
    assert "working on" in log.read_text()
    assert not (config.get_notes_dir() / f"TASK-{tid}.stdout.log").exists()


def test_a_failed_attempts_output_reaches_the_next_prompt(agent_project: Path) -> None:
    tid, first = attempt("fail-once please")
    assert first.next_state == "incoming" and "exit status 1" in first.reason
    assert "exit status 1" in q.get_task(tid).history[-1]
    second = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert second.next_state == "provisional"
    prompt = prompt_of(tid, 2)
    assert "## Previous Agent Notes" in prompt and "CLUE: the config lives in" in prompt
    notes = q.get_task_notes(tid)
    assert "using the clue from the previous attempt" in notes


def test_retry_reuses_the_branch_and_keeps_earlier_commits(agent_project: Path) -> None:
    tid, _ = attempt("plain")
    q.reject_completion(tid, "also add docs please")
    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert report.commits == 1  # counted from this attempt's start
    assert "also add docs please" in prompt_of(tid, 2)
    log = list(git.Repo(agent_project).iter_commits(f"agent/TASK-{tid}", max_count=3))
    assert len(log) == 3  # initial + two attempts


def test_max_attempts_ends_in_failed(agent_project: Path) -> None:
    write_agents(agent_project, max_attempts=2)
    tid, first = attempt("always-fail")
    assert first.next_state == "incoming"
    second = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert second.next_state == "failed"
    assert "attempts exhausted" in q.get_task(tid).headers["ERROR"]
    assert "I cannot do this" in q.get_task_notes(tid)


def test_finishing_without_commits_is_not_success(agent_project: Path) -> None:
    tid, report = attempt("no-commit")
    assert report.next_state == "incoming"
    assert "without committing" in q.get_task(tid).history[-1]


def test_a_missing_program_is_a_clear_note_and_costs_no_attempt(git_project: Path) -> None:
    write_agents(git_project, argv=["/no/such/agent-binary", "{prompt_file}"])
    tid, report = attempt("anything")
    assert report.next_state == "incoming"
    assert "cannot run '/no/such/agent-binary': it does not exist" in q.get_task_notes(tid)
    task = q.get_task(tid)
    assert task.headers["INTERRUPTED"] == "1" and q.attempts_left(task, 3) == 3


def test_a_missing_base_branch_fails_the_attempt_with_gits_words(agent_project: Path) -> None:
    tid, report = attempt("anything", branch="no-such-branch")
    assert report.next_state == "incoming"
    assert "base branch 'no-such-branch' does not exist" in q.get_task_notes(tid)


def test_not_a_git_repo_is_reported_in_the_notes(project: Path) -> None:
    write_agents(project)
    tid, report = attempt("anything")
    assert report.next_state == "incoming" and "not a git repository" in q.get_task_notes(tid)


def test_timeout_stops_the_agent_and_says_so(git_project: Path) -> None:
    write_agents(git_project, timeout_seconds=1)
    tid, report = attempt("slow")
    assert report.outcome == "timeout" and report.next_state == "incoming"
    assert "timed out after 1s" in q.get_task_notes(tid)


def test_placeholders_are_filled_in(git_project: Path) -> None:
    script = (
        "import sys; d = {'k': 1}; print('ARGS', *sys.argv[1:4]); "
        "print('PROMPT', open(sys.argv[3]).read()[:28])"
    )
    write_agents(
        git_project, argv=[sys.executable, "-c", script, "{task_id}", "{worktree}", "{prompt_file}"]
    )
    tid, _ = attempt("anything")
    notes = q.get_task_notes(tid)
    task_arg, worktree_arg, prompt_arg = notes.split("ARGS ", 1)[1].split("\n", 1)[0].split()
    assert task_arg == f"TASK-{tid}"
    assert worktree_arg == str(git_project)  # the box shows its clone at the project's path
    assert prompt_arg == "/run/octopoid/prompt.md"  # the box's copy of the prompt
    assert "PROMPT You are an implementer agent" in notes


def test_two_burned_out_attempts_go_to_breakdown(project: Path) -> None:
    write_agents(project)
    agents_cfg = config.load_agents()
    agent = agents_cfg["agents"][0]  # max_turns 10
    tid = q.create_task("t").id
    burned = AgentResult(0, "max_turns", turns=9, summary="ran out of turns")
    report = settle(q.claim_task(None, "impl-1"), agent, agents_cfg, burned, 0)
    assert report.next_state == "incoming" and q.get_task(tid).headers["BURNED_OUT"] == "1"
    report = settle(q.claim_task(None, "impl-1"), agent, agents_cfg, burned, 0)
    assert report.next_state == "breakdown"


def test_the_agents_own_env_reaches_it_and_its_secrets_are_redacted(git_project: Path) -> None:
    import yaml

    write_agents(git_project, argv=["sh", "-c", 'echo "mode=$MY_AGENT_MODE key=$DEPLOY_TOKEN"'])
    doc = yaml.safe_load((git_project / ".octopoid/agents.yaml").read_text())
    # every value is hidden whatever its name, but for those too short to be secrets
    doc["agents"][0]["env"] = {"MY_AGENT_MODE": "fast", "DEPLOY_TOKEN": "tok-from-agents-yaml"}
    (git_project / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))
    tid, _ = attempt("anything")
    notes = q.get_task_notes(tid)
    assert "mode=fast" in notes and "key=[REDACTED:DEPLOY_TOKEN]" in notes
    log = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()
    assert "tok-from-agents-yaml" not in notes + log


def test_what_the_prompt_reads_runs_while_the_caller_goes_on_and_its_error_reaches_it() -> None:
    """``ahead``: the notes and memory are read while the workspace is cloned, not after."""
    started, go = threading.Event(), threading.Event()

    def read() -> str:
        started.set()
        assert go.wait(30)  # only the caller, going on meanwhile, lets it finish
        return "notes and memory"

    reading = ahead(read)
    assert started.wait(30)
    go.set()
    assert reading.result() == "notes and memory"
    with pytest.raises(ZeroDivisionError):
        ahead(lambda: 1 / 0).result()

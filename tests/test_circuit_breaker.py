"""An agent that cannot work costs no task an attempt: one whose program is missing is never
started (`cannot-run`), and attempts failing for a cause no task can fix (the program cannot
start, the key is refused, the API is overloaded) are given back, and three in a row pause
the agent (the circuit breaker) until `octopoid resume --agent`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import config
from orchestrator.backends.base import CAUSES
from orchestrator.daemon import scheduler, stalls
from orchestrator.faces.web import board
from orchestrator.model.tasks import TaskState
from orchestrator.queue import agent_records
from orchestrator.queue import machine as q
from orchestrator.roles import agent_status

from .helpers.fake_messages_api import FakeMessagesAPI, error, text
from .support import invoke, run_claimed, set_config, wait_for, write_agents

KEY = "sk-ant-api03-breaker-test-0123456789"
SETUP_SAYS = "ERROR: no matching distribution found for demo-missing"


def passes_until_quiet(daemon: scheduler.Scheduler, timeout: float = 120) -> None:
    """Scheduler passes until one starts nothing and no runner is left."""
    quiet = lambda: not daemon.loop_once().started and not daemon.runners  # noqa: E731
    wait_for("the scheduler to go quiet", quiet, timeout)


def attempts_in_process(agent: str) -> None:
    """Attempts one after another, each run here as its runner would run it, for as long
    as the scheduler would let ``agent`` claim (``stalls.for_agent``, its own rule): the
    SDK is imported once, not by a runner per attempt."""
    while True:
        agents_cfg = config.load_agents()
        (own,) = [a for a in agents_cfg["agents"] if a["name"] == agent]
        if stalls.for_agent(own, agents_cfg, agent_records.day_records(agents_cfg)):
            return
        task = q.claim_task(own["role"], agent)
        if task is None:
            return
        run_claimed(task, agent)


def api_agent(root: Path, base_url: str, **top: object) -> None:
    """agents.yaml with one anthropic agent, api-1, talking to ``base_url``."""
    agent = {"name": "api-1", "role": "implement", "backend": "anthropic"}
    agent |= {"model": "claude-haiku-4-5", "base_url": base_url, "max_turns": 5}
    doc = {"lease_seconds": 30, **top, "agents": [agent]}
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize(
    ("argv0", "why"),
    [
        ("/nonexistent/prog", "'/nonexistent/prog' does not exist"),
        ("no-such-agent-program", "'no-such-agent-program' is not on PATH"),
        ("./README.md", "'./README.md' is not an executable file"),
        ("./needs-node.sh", "needs 'no-such-interpreter' (its #! line), which is not found"),
        ("./.octopoid/runtime/agent.sh", "inside"),
        ("./agent.sh", None),  # in the checkout: the box sees the clone there
        (sys.executable, None),
    ],
)
def test_an_agent_program_is_checked_as_its_box_will_see_it(git_project: Path, argv0, why):
    scripts = {
        "agent.sh": "#!/bin/sh\n",
        "needs-node.sh": "#!/usr/bin/env no-such-interpreter\n",
        ".octopoid/runtime/agent.sh": "#!/bin/sh\n",
    }
    for name, script in scripts.items():
        (git_project / name).write_text(script)
        (git_project / name).chmod(0o755)
    write_agents(git_project, argv=[argv0, "{prompt_file}"])
    problem = agent_status.readiness_problem(config.load_agents()["agents"][0])
    assert problem is None if why is None else why in problem


def test_a_missing_program_is_said_everywhere_and_no_attempt_is_spent(git_project: Path):
    write_agents(git_project, argv=["/nonexistent/prog", "{prompt_file}"])
    ids = [q.create_task(f"task {n}").id for n in range(3)]
    said = "cannot run: '/nonexistent/prog' does not exist"
    (row,) = json.loads(invoke("agents", "--json", code=0).output)
    assert row["problem"] == "'/nonexistent/prog' does not exist" and said in row["not_claiming"]
    summary = json.loads(invoke("status", "--json", code=0).output)["stalls"]
    assert {"code": "cannot-run", "text": said} in summary["agents"]["impl-1"]
    daemon = scheduler.Scheduler()
    daemon.initialize()
    try:
        assert daemon.loop_once().started == []
    finally:
        daemon.shutdown(grace=0)
    for tid in ids:
        task = q.get_task(tid)
        assert task.state is TaskState.INCOMING and task.attempts == 0


def _failing_agent(root: Path, cause: str, base_url: str) -> str:
    """agents.yaml with one agent that will fail for ``cause``; its name. For
    ``cannot-start``, a script in the checkout that was never committed: the readiness
    check finds it, the attempt's clone (all its box shows there) does not have it."""
    if cause == "setup":  # the project's set-up fails, before any agent starts
        write_agents(root)
        set_config(root, workspace={"setup": [f"echo resolving; echo '{SETUP_SAYS}' >&2; exit 3"]})
        return "impl-1"
    if cause != "cannot-start":
        api_agent(root, base_url)
        return "api-1"
    script = root / "my-agent.sh"
    script.write_text("#!/bin/sh\necho never runs\n")
    script.chmod(0o755)
    write_agents(root, argv=[str(script), "{prompt_file}"])
    return "impl-1"


def _said_everywhere(agent: str, cause: str) -> None:
    """The breaker's pause in every face, with its reason."""
    said = f"agent {agent}: paused by the circuit breaker: 3 attempts in a row"
    for face in ("status", "agents", "doctor"):
        assert said in invoke(face, code=0).output, face
    assert any(said in line for line in board.board()["stalls"])
    (row,) = json.loads(invoke("agents", "--json", code=0).output)
    assert row["state"] == "paused" and CAUSES[cause] in row["breaker"]["why"]
    codes = json.loads(invoke("status", "--json", code=0).output)["stalls"]["agents"][agent]
    assert [s["code"] for s in codes] == ["breaker"]


@pytest.mark.parametrize(
    ("cause", "replies"),
    [
        ("auth", [error(401, "authentication_error", "invalid x-api-key")] * 3),
        ("overloaded", [error(529)] * 9),  # the SDK tries each call three times
        ("cannot-start", []),
        ("setup", []),
    ],
)
def test_three_tasks_failing_for_one_cause_pause_the_agent_once_and_cost_nothing(
    git_project: Path,
    hook,
    sched,
    monkeypatch: pytest.MonkeyPatch,
    cause: str,
    replies: list,
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    set_config(git_project, notify={"urls": [hook.url], "events": ["agent_paused"]})
    with FakeMessagesAPI(replies) as api:
        agent = _failing_agent(git_project, cause, api.base_url)
        assert agent_status.readiness_problem(config.load_agents()["agents"][0]) is None
        ids = [q.create_task(f"task {n}").id for n in range(3)]
        daemon = sched()
        if cause != "cannot-start":
            attempts_in_process(agent)
        passes_until_quiet(daemon)  # cannot-start: its runners, as on any night
        hold = agent_records.held(agent)
        assert hold is not None and hold.kind == agent_records.BREAKER
        assert CAUSES[cause] in hold.why and "TASK-1, TASK-2, TASK-3" in hold.why
        for tid in ids:  # each tried once, and given back
            task = q.get_task(tid)
            assert (task.state, task.attempts, task.headers["INTERRUPTED"]) == (
                TaskState.INCOMING,
                1,
                "1",
            )
            assert q.attempts_left(task, 3) == 3
            assert f"not counted: {CAUSES[cause]}" in q.get_task_notes(tid)
            assert cause != "setup" or SETUP_SAYS in q.get_task_notes(tid)  # its own words
        later = q.create_task("enqueued after the trip").id
        passes_until_quiet(daemon)
        assert q.get_task(later).attempts == 0
        daemon.shutdown(grace=10)
    (post,) = hook.wait_for(1)  # the sender's first post imports apprise: slow under load
    assert post["title"] == f"octopoid: agent {agent} is paused"
    assert CAUSES[cause] in post["message"] and f"resume --agent {agent}" in post["message"]
    log = (config.get_logs_dir() / "scheduler.log").read_text()
    assert log.count(f"circuit breaker tripped for agent {agent}") == 1
    _said_everywhere(agent, cause)
    assert "circuit breaker is reset" in invoke("resume", "--agent", agent, code=0).output
    assert agent_records.held(agent) is None and stalls.report()["claiming"]


def test_a_task_s_own_failure_does_not_trip_the_breaker(
    git_project: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two refused keys, then an agent that ran and failed on its task: three failures in
    a row, but only the first two were no task's fault; they are given back, the third
    counts, and the agent is not paused."""
    replies = [error(401, "authentication_error", "invalid x-api-key")] * 2
    replies.append(text("I looked around and stopped."))  # ends without committing
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeMessagesAPI(replies) as api:
        api_agent(git_project, api.base_url, max_attempts=1)
        ids = [q.create_task(f"task {n}").id for n in range(3)]
        attempts_in_process("api-1")
    assert agent_records.held("api-1") is None and stalls.report()["claiming"]
    given_back, own = [q.get_task(tid) for tid in ids[:2]], q.get_task(ids[2])
    assert all(
        t.headers["INTERRUPTED"] == "1" and t.state is TaskState.INCOMING for t in given_back
    )
    assert own.state is TaskState.FAILED and "INTERRUPTED" not in own.headers
    assert "without committing" in own.headers["ERROR"]

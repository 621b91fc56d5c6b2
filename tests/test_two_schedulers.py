"""Two machines act as one team through their running schedulers: two clones, one bare
remote, one PostgreSQL, `octopoid scheduler run` on each (``OCTOPOID_HOST`` tells them
apart). A pause said on one machine stops the other's claims and a resume there restarts
them; a usage limit one machine meets stops the other using that agent; the project's
daily budget is spent once across both; an attempt run by b's scheduler asks questions
answered on a (the CLI, then the page) and gets the answers; an accept and a breakdown's
split SIGKILLed on a are finished by b's sweep, once. What a scheduler decides is read
in its log; that it did not claim, after a pass known to have begun later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import git
import pytest
import yaml

from orchestrator.base import processes
from orchestrator.model.tasks import TaskState, utcnow
from orchestrator.queue import machine as q
from orchestrator.queue import questions

from .support import (
    HELPERS,
    Machines,
    child_env,
    octopoid_output,
    set_config,
    wait_for,
    write_agents,
)
from .support.daemon import start_scheduler
from .support.journals import KILLED_ACCEPT, burned_out, killed_split, split_once
from .web_server import start_web

PAUSED = "not claiming: paused (`octopoid resume`)"
RESUMED = "not claiming: no longer; claiming resumes"
LIMITED = "agent claude-limited: waits for its usage limit to reset at 2100-01-01T00:00:00Z"
SPENT = "not claiming: the project spent its budget today (it resets at 00:00 UTC): $0.02 of $0.01"


class SchedulerLog:
    """A scheduler's log file, read from where it stood at the last ``mark()``."""

    def __init__(self, root: Path) -> None:
        self.path, self.at = root / ".octopoid/runtime/logs/scheduler.log", 0

    def mark(self) -> None:
        self.at = self.path.stat().st_size if self.path.exists() else 0

    def says(self, text: str) -> bool:
        if not self.path.exists():
            return False
        with self.path.open("rb") as log:
            log.seek(self.at)
            return text in log.read().decode(errors="replace")


class Team:
    """Machines a and b, each with its scheduler (`octopoid scheduler run`) and its log."""

    def __init__(self, machines: Machines) -> None:
        self.machines, self.roots = machines, machines.roots
        self.env = {
            name: child_env(root) | {"OCTOPOID_HOST": f"machine-{name}"}
            for name, root in self.roots.items()
        }
        self.logs = {name: SchedulerLog(root) for name, root in self.roots.items()}
        self.daemons: dict[str, subprocess.Popen] = {}

    def start(self, *names: str) -> None:
        for name in names:
            self.logs[name].mark()
            self.daemons[name] = start_scheduler(self.roots[name], self.env[name])
        self.all_say("started for", names)

    def stop(self, name: str) -> None:
        """As `octopoid scheduler stop` does: SIGTERM, and its running attempts finish."""
        daemon = self.daemons.pop(name)
        daemon.terminate()
        daemon.wait(60)

    def mark(self) -> None:
        for log in self.logs.values():
            log.mark()

    def all_say(self, text: str, names: tuple[str, ...] = ("a", "b")) -> None:
        """Wait until each running scheduler of ``names`` logs ``text`` (since its last
        ``mark``)."""
        for name, log in self.logs.items():
            if name in self.daemons and name in names:
                wait_for(f"{name}'s scheduler to log {text!r}", lambda log=log: log.says(text), 60)

    def cli(self, name: str, *args: str) -> str:
        return octopoid_output(None, *args, cwd=self.roots[name], env=self.env[name])


@pytest.fixture
def team(machines: Machines, tmp_path: Path):
    """Two machines on one PostgreSQL, each running its scheduler: a command agent
    (implement), two Claude Code agents replaying a session (roles ``paid``: $0.02, and
    ``limited``: a usage limit until 2100), and a project budget of $0.01 a day."""
    claude = tmp_path / "claude"
    claude.write_text(f'#!/bin/sh\nexec {sys.executable} {HELPERS / "fake_claude.py"} "$@"\n')
    claude.chmod(0o755)
    sessions = Path(__file__).parent / "fixtures" / "claude"
    for root in machines.roots.values():  # as a checked-in config.yaml and agents.yaml
        set_config(
            root, sandbox="none", questions={"wait_seconds": 120},
            budgets={"project_daily": {"usd": 0.01}},
        )  # fmt: skip
        write_agents(root)
        doc = yaml.safe_load((root / ".octopoid/agents.yaml").read_text())
        doc["agents"] += [
            {
                "name": f"claude-{role}", "role": role, "backend": "claude-code",
                "claude_path": str(claude), "max_turns": 5,
                "env": {"FAKE_CLAUDE_SESSION": str(sessions / f"{session}.jsonl")},
            }
            for role, session in (("paid", "success"), ("limited", "usage_limit"))
        ]  # fmt: skip
        (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))
    team = Team(machines)
    try:
        team.start("a", "b")
        machines.on("a")
        yield team
    finally:
        for daemon in team.daemons.values():
            daemon.terminate()
        for daemon in team.daemons.values():
            try:
                daemon.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()


def a_pass_of_b(team: Team) -> None:
    """Wait until b's scheduler begins a pass after now: its reaper gives back a claim that
    machine a holds with its lease run out (a's own reaper sees that owner, this process,
    alive), once an enqueue wakes it. Both tasks have a role no agent takes."""
    marker = q.create_task("a claim whose lease ran out", role="marker")
    with team.machines.monkeypatch.context() as patch:
        patch.setattr(processes, "hostname", lambda: "machine-a")
        past = utcnow() - timedelta(minutes=1)
        q.claim_task(task=marker.id, agent_name="impl-1", lease_seconds=1, now=past)
    q.create_task("wakes the schedulers", role="marker")
    reaped = f"reaped {marker.label}: lease expired"
    wait_for("b's scheduler to reap the marker", lambda: team.logs["b"].says(reaped), 60)


def claims(task_id: str) -> int:
    """How often the task was claimed, as its History says."""
    return q.get_task(task_id).section("History").count("→ claimed")


def in_state(task_id: str, state: TaskState) -> Callable[[], bool]:
    return lambda: q.get_store().locate(task_id) is state


def pause_on_a_stops_b_and_resume_on_b_restarts_a(team: Team) -> None:
    team.mark()
    team.cli("a", "pause")
    team.all_say(PAUSED)  # b's scheduler read a's pause, and so did a's
    waiting = q.create_task("enqueued while paused").id
    a_pass_of_b(team)
    a_pass_of_b(team)  # so the pass that reaped the first marker has ended
    assert q.get_store().locate(waiting) is TaskState.INCOMING
    team.mark()
    team.cli("b", "resume")
    team.all_say(RESUMED)  # a's scheduler claims again
    wait_for("the waiting task to run", in_state(waiting, TaskState.PROVISIONAL), 60)


def a_usage_limit_seen_on_one_machine_stops_the_other(team: Team) -> str:
    team.mark()
    limited = q.create_task("meets a usage limit", role="limited").id
    team.all_say(LIMITED)  # the machine that met it, and the other one without trying
    # The runner pauses the agent before it gives the task back (so no claim comes in
    # between), so a scheduler may log the pause while the task is still claimed.
    wait_for("the limited task to be given back", in_state(limited, TaskState.INCOMING), 60)
    assert claims(limited) == 1
    return limited


def a_project_budget_spent_on_one_machine_stops_both(team: Team) -> None:
    team.mark()
    paid = q.create_task("costs two cents", role="paid").id
    wait_for("the paid task to run", in_state(paid, TaskState.PROVISIONAL), 60)
    team.all_say(SPENT)  # the machine that did not run it counts it too
    for root in team.roots.values():  # lifted, for what follows
        set_config(root, budgets={})


def asked(question: str) -> Callable[[], bool]:
    return lambda: any(x.get("question") == question for x in questions.open_questions())


def a_question_asked_on_b_is_answered_on_a_by_the_cli_and_the_page(team: Team) -> str:
    team.stop("a")  # so the attempt is b's
    task = q.create_task("ask-twice")
    wait_for("the attempt on b to ask", asked("Which port?"), 60)
    team.cli("a", "answer", task.label, "5433", "--by", "dana")
    wait_for("the attempt on b to ask again", asked("Which branch?"), 60)
    page = start_web(team.roots["a"])
    try:
        web = page.client()
        assert "Which branch?" in web.request(f"/tasks/{task.label}")[2]
        form = {"csrf": web.csrf(), "answer": "release/2.0"}
        assert web.request(f"/tasks/{task.label}/answer", form)[0] == 303
    finally:
        page.stop()
    wait_for("the attempt on b to end", in_state(task.id, TaskState.PROVISIONAL), 60)
    notes = q.get_task_notes(task.id) or ""  # what the agent printed: the replies it got
    assert "reply: The answer: 5433" in notes and "reply: The answer: release/2.0" in notes
    return task.id


def an_accept_and_a_split_killed_on_a_are_finished_once_by_b_s_sweep(team: Team, tid: str) -> None:
    """Killed together, so one wait for b's housekeeping sweep covers both."""
    team.mark()
    team.cli("a", "pause")  # so nobody claims the task to split or its parts
    team.all_say(PAUSED)
    argv = [sys.executable, "-c", KILLED_ACCEPT, tid, "move"]  # merged and pushed, not moved
    killed = subprocess.run(argv, cwd=team.roots["a"], env=team.env["a"])
    assert killed.returncode == -signal.SIGKILL
    big, dependant = burned_out()
    q.claim_task(None, source=TaskState.BREAKDOWN, agent_name="bd-1")
    killed_split(team.roots["a"], big)
    for finished in (
        f"TASK-{tid}: finished what its accept left",
        f"TASK-{big}: finished what its split left",
    ):
        wait_for(f"b's sweep: {finished}", lambda f=finished: team.logs["b"].says(f), 60)
    assert q.get_store().locate(tid) is TaskState.DONE
    merges = git.Repo(team.machines.origin).git.log("--format=%s", "main").splitlines()
    assert sum(s.startswith(f"Merge TASK-{tid}: ") for s in merges) == 1
    assert team.machines.carried(tid) is None  # b's sweep deleted the task's refs there
    split_once(big, [dependant])


@pytest.mark.slow
def test_two_running_schedulers_share_pauses_limits_budgets_questions_and_journals(
    team: Team,
) -> None:
    pause_on_a_stops_b_and_resume_on_b_restarts_a(team)
    limited = a_usage_limit_seen_on_one_machine_stops_the_other(team)
    a_project_budget_spent_on_one_machine_stops_both(team)
    asked_on_b = a_question_asked_on_b_is_answered_on_a_by_the_cli_and_the_page(team)
    an_accept_and_a_split_killed_on_a_are_finished_once_by_b_s_sweep(team, asked_on_b)
    assert claims(limited) == 1  # neither machine used that agent again

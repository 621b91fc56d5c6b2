"""Two machines, one queue: two clones with different HOST identities, one PostgreSQL, one
bare git remote, two real schedulers and two reviewers, 30 tasks. One machine's scheduler
and runners are killed with SIGKILL mid-run; the other reaps its claims after their lease
and finishes them. Every task is done and merged exactly once; no task ever runs twice at
the same time, and no attempt is ever a branch on the remote (where a forge's CI would run
it): task branches travel as refs/octopoid/tasks/."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import timedelta
from itertools import pairwise
from pathlib import Path

import git
import pytest
import yaml

from orchestrator import processes, questions
from orchestrator import queue_utils as q
from orchestrator.processes import TOKEN_ENV, environment_of, marked_processes
from orchestrator.tasks import TaskState, render_task, utcnow

from .conftest import HELPERS, child_env, set_config, wait_for, write_agents
from .test_breakdown import burned_out, killed_split, split_once
from .test_finishing import KILLED_ACCEPT
from .test_git_remote import Machines
from .web_server import start_web

OCTOPOID = shutil.which("octopoid") or "octopoid"
TASKS = 30  # exactly once is proved as well by 30 as by 200 (STYLE.md 15)

# The scripted agent, wrapped to log when each attempt starts and ends (for overlap checks).
TIMED_AGENT = """
import os, subprocess, sys, time
log = os.environ["OCTO_TEST_TIMES"]
task = os.environ["OCTOPOID_TASK_ID"]
with open(log, "a") as f:
    f.write(f"start {task} {os.environ['OCTO_TEST_HOST']} {time.time():.6f}\\n")
code = subprocess.run([sys.executable, sys.argv[1]]).returncode
with open(log, "a") as f:
    f.write(f"end {task} {os.environ['OCTO_TEST_HOST']} {time.time():.6f}\\n")
sys.exit(code)
"""

# A reviewer on one machine: accepts the provisional tasks of its parity until every task
# has ended (in done, or in failed: the test then says which).
REVIEWER = """
import sys, time
from orchestrator import queue_utils as q, review
from orchestrator.exceptions import OctopoidError
from orchestrator.tasks import TaskState, render_task, utcnow
parity, total, deadline = int(sys.argv[1]), int(sys.argv[2]), time.monotonic() + 400
ended = lambda: sum(q.get_store().count(s) for s in (TaskState.DONE, TaskState.FAILED))
while time.monotonic() < deadline and ended() < total:
    for task in q.get_store().list(TaskState.PROVISIONAL):
        if int(task.id) % 2 == parity:
            try:
                review.accept(task.id, f"reviewer-{parity}")
            except OctopoidError as exc:
                print(f"{task.label}: {exc}", file=sys.stderr, flush=True)
    time.sleep(0.2)
"""


def _processes_of(root: Path) -> list[int]:
    """PIDs of runners and agents started for ``root`` (they carry a claim token; a forked
    runner in the marks it noted)."""
    return [
        pid
        for pid in marked_processes(**{"OCTOPOID_ROOT": str(root)})
        if any(e.startswith(f"{TOKEN_ENV}=".encode()) for e in environment_of(pid))
    ]


def start_scheduler(root: Path, env: dict[str, str]) -> subprocess.Popen:
    """`octopoid scheduler run` in ``root``, in a session of its own (as a daemon runs)."""
    return subprocess.Popen(
        [OCTOPOID, "scheduler", "run"], env=env, cwd=root, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _kill(pids: list[int]) -> list[int]:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it may have just finished
            os.kill(pid, signal.SIGKILL)
    return pids


def _kill_stragglers(root: Path, killed: list[int]) -> list[int]:
    """SIGKILL what of ``root`` a first kill missed, as a machine's death would, until
    three scans in a row find none: a runner its fork server was forking as the daemon
    died appears after the first scan (the fork server outlives the daemon's group by a
    moment)."""
    more: list[int] = []
    quiet = 0
    while quiet < 3:
        found = [pid for pid in _processes_of(root) if pid not in killed + more]
        more += _kill(found)
        quiet = 0 if found else quiet + 1
        time.sleep(0.2)
    return more


@pytest.mark.slow
def test_two_machines_run_every_task_exactly_once_through_a_kill_9(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str
) -> None:
    machines = Machines(tmp_path, monkeypatch, pg_dsn)
    pushed = tmp_path / "pushed-refs.log"  # every ref any push ever updated on the remote
    hook = machines.origin / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ncat >> '{pushed}'\n")
    hook.chmod(0o755)
    for root in machines.roots.values():  # the agent logs its runs in a file: trusted
        set_config(root, sandbox="none")
    agent = tmp_path / "timed_agent.py"
    agent.write_text(TIMED_AGENT)
    times = tmp_path / "times.log"
    for root in machines.roots.values():
        write_agents(
            root,
            argv=[sys.executable, str(agent), str(HELPERS / "agent.py")],
            max_concurrent=3,
            lease_seconds=10,  # a runner renews every 3 s: one on a loaded machine keeps it
            max_claimed=12,
            max_provisional=1000,
        )
    machines.on("a")
    ids = [q.create_task(f"change {i}").id for i in range(TASKS)]
    env = {
        name: child_env(root)
        | {"OCTOPOID_HOST": f"machine-{name}", "OCTO_TEST_HOST": f"machine-{name}"}
        | {"OCTO_TEST_TIMES": str(times)}
        for name, root in machines.roots.items()
    }
    schedulers = {name: start_scheduler(root, env[name]) for name, root in machines.roots.items()}
    said = {name: tmp_path / f"reviewer-{name}.err" for name in machines.roots}
    reviewers = [
        subprocess.Popen(
            [sys.executable, "-c", REVIEWER, str(parity), str(TASKS)], env=env[name],
            cwd=machines.roots[name], stderr=said[name].open("w"),
        )
        for parity, name in enumerate(("a", "b"))
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        # Kill B mid-run: some work done, and B holding an attempt that A must then reap.
        while q.get_store().count(TaskState.DONE) < TASKS // 10 or not _processes_of(
            machines.roots["b"]
        ):
            counts = {state.value: q.get_store().count(state) for state in TaskState}
            assert time.monotonic() < deadline, f"the machines made no progress: {counts}"
            time.sleep(0.1)
        os.killpg(schedulers["b"].pid, signal.SIGKILL)
        victims = _kill(_processes_of(machines.roots["b"]))
        killed_at = time.time()
        orphans = [
            t.id for t in q.get_store().list(TaskState.CLAIMED)
            if t.headers.get("HOST") == "machine-b"
        ]  # fmt: skip
        victims += _kill_stragglers(machines.roots["b"], victims)
        schedulers["b"].wait()
        for reviewer, name in zip(reviewers, said, strict=True):
            assert reviewer.wait(timeout=400) == 0, said[name].read_text()[-2000:]
    finally:
        for proc in schedulers.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in reviewers:
            proc.kill()
    assert victims, "machine b had nothing running when it was killed"

    states = Counter(q.get_store().locate(t) for t in ids)
    assert states == {TaskState.DONE: TASKS}, states
    origin = git.Repo(machines.origin)
    subjects = origin.git.log("--format=%s", "main").splitlines()
    merges = Counter(s.split(":")[0] for s in subjects if s.startswith("Merge TASK-"))
    assert sorted(merges) == sorted(f"Merge TASK-{t}" for t in ids)
    assert set(merges.values()) == {1}  # every branch merged once
    assert not [r for r in origin.references if "TASK-" in r.path]  # none left behind
    updated = {line.split()[2] for line in pushed.read_text().splitlines()}
    assert f"refs/octopoid/tasks/TASK-{ids[0]}" in updated  # how attempts travelled
    assert not [ref for ref in updated if ref.startswith("refs/heads/agent/")]  # never a branch

    runs: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    open_runs: dict[str, tuple[float, str]] = {}
    for line in times.read_text().splitlines():
        kind, task, host, at = line.split()
        if kind == "end":
            start, host = open_runs.pop(task)
            runs[task].append((start, float(at), host))
            continue
        if task in open_runs:  # only an attempt killed with machine b may never have ended
            start, dead = open_runs.pop(task)
            assert dead == "machine-b" and float(at) >= killed_at, f"{task} ran twice at once"
            runs[task].append((start, killed_at, dead))
        open_runs[task] = (float(at), host)
    assert all(host == "machine-b" for _, host in open_runs.values()), open_runs
    assert orphans, "machine b held no claim when it was killed"
    for task_id in orphans:  # reaped by machine a after the lease, then run and merged
        assert "lease expired" in render_task(q.get_task(task_id)), task_id
    for task, attempts in runs.items():
        attempts.sort()
        for (_, end, _), (start, _, _) in pairwise(attempts):
            assert start >= end, f"{task} ran twice at once"


# --- the team's shared state, through two running schedulers ------------------------------

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
        done = subprocess.run(
            [OCTOPOID, *args], cwd=self.roots[name], env=self.env[name],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str):
    """Two machines on one PostgreSQL, each running its scheduler: a command agent
    (implement), two Claude Code agents replaying a session (roles ``paid``: $0.02, and
    ``limited``: a usage limit until 2100), and a project budget of $0.01 a day."""
    machines = Machines(tmp_path, monkeypatch, pg_dsn)
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
    assert q.get_store().locate(limited) is TaskState.INCOMING and claims(limited) == 1
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


def an_accept_killed_on_a_after_its_merge_is_finished_by_b_s_sweep(team: Team, tid: str) -> None:
    team.mark()
    argv = [sys.executable, "-c", KILLED_ACCEPT, tid, "move"]  # merged and pushed, not moved
    killed = subprocess.run(argv, cwd=team.roots["a"], env=team.env["a"])
    assert killed.returncode == -signal.SIGKILL
    finished = f"TASK-{tid}: finished what its accept left"
    wait_for("b's sweep", lambda: team.logs["b"].says(finished), 60)
    assert q.get_store().locate(tid) is TaskState.DONE
    merges = git.Repo(team.machines.origin).git.log("--format=%s", "main").splitlines()
    assert sum(s.startswith(f"Merge TASK-{tid}: ") for s in merges) == 1
    assert team.machines.carried(tid) is None  # b's sweep deleted the task's refs there


def a_split_killed_half_way_on_a_is_finished_once_by_b_s_sweep(team: Team) -> None:
    team.mark()
    team.cli("a", "pause")  # so nobody claims the task or its parts
    team.all_say(PAUSED)
    tid, dependant = burned_out()
    q.claim_task(None, source=TaskState.BREAKDOWN, agent_name="bd-1")
    killed_split(team.roots["a"], tid)
    finished = f"TASK-{tid}: finished its split"
    wait_for("b's sweep", lambda: team.logs["b"].says(finished), 60)
    split_once(tid, [dependant])


def test_two_running_schedulers_share_pauses_limits_budgets_questions_and_journals(
    team: Team,
) -> None:
    pause_on_a_stops_b_and_resume_on_b_restarts_a(team)
    limited = a_usage_limit_seen_on_one_machine_stops_the_other(team)
    a_project_budget_spent_on_one_machine_stops_both(team)
    asked_on_b = a_question_asked_on_b_is_answered_on_a_by_the_cli_and_the_page(team)
    an_accept_killed_on_a_after_its_merge_is_finished_by_b_s_sweep(team, asked_on_b)
    a_split_killed_half_way_on_a_is_finished_once_by_b_s_sweep(team)
    assert claims(limited) == 1  # neither machine used that agent again

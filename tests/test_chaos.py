"""Real processes racing and dying: claims are exclusive, kill -9 loses nothing."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import git
import pytest

from orchestrator import config
from orchestrator.base.processes import TOKEN_ENV, environment_of, marked_processes
from orchestrator.faces import reports
from orchestrator.model.tasks import TaskState, read_task_file
from orchestrator.queue import machine as q
from orchestrator.queue.task_notes import split_notes
from orchestrator.review import verdicts as review

from .support import (
    OCTOPOID,
    child_env,
    helper_cmd,
    race_claimers,
    run_all,
    start_then_kill,
    wait_for,
    write_agents,
)
from .support.daemon import AgentCounter

pytestmark = pytest.mark.slow


def test_eight_processes_claim_500_tasks_exactly_once(project: Path, tmp_path: Path) -> None:
    ids = {q.create_task(f"task {i}", priority=f"P{i % 4}").id for i in range(500)}
    outputs = race_claimers(project, tmp_path / "go")
    claimed = [line for out in outputs for line in out.split()]
    assert len(claimed) == len(set(claimed)) == 500
    assert set(claimed) == ids
    assert sum(1 for out in outputs if out.strip()) > 1  # the work really was shared
    assert reports.status_summary()["counts"]["claimed"] == 500
    assert reports.status_summary()["counts"]["incoming"] == 0


def _assert_invariant(project: Path, ids: set[str]) -> None:
    # A kill between a write's two renames leaves the task as .TASK-x.md.old + .new; every
    # reader (and the sweep) rolls that forward first, and so does this check.
    q.get_store().recover()
    queue = project / ".octopoid/runtime/queue"
    seen: dict[str, str] = {}
    for state in TaskState:
        for name in os.listdir(queue / state.value):
            if name.startswith("."):
                continue  # a temp file a kill left: never taken for a task
            assert state is not TaskState.QUARANTINE, f"quarantined: {name}"
            task = read_task_file(queue / state.value / name, state)
            assert task.id not in seen, f"{task.id} in {seen.get(task.id)} and {state.value}"
            seen[task.id] = state.value
    assert set(seen) == ids
    for task_id in ids:
        notes = q.get_task_notes(task_id)
        if notes is not None:
            assert notes.startswith(f"# Agent Notes: TASK-{task_id}\n")
            _, sections = split_notes(notes)
            assert all(s.body.rstrip().endswith("```") for s in sections)


def test_kill_9_during_transitions_loses_no_task(project: Path) -> None:
    """The state machine alone: a churner moving tasks at random, killed 25 times, each
    time after a few moves of its own and at a random instant of the next ones."""
    ids = {q.create_task(f"task {i}").id for i in range(30)}
    rng = random.Random(1234)
    for round_ in range(25):
        churn = helper_cmd("churn", str(round_))
        start_then_kill(project, churn, rng.uniform(0, 0.1), done=rng.randint(2, 8))
        _assert_invariant(project, ids)
    moves = sum(len(t.history) for s in TaskState for t in q.list_tasks(s))
    assert moves >= 30 + 25 * 2, "the churner's moves are not all in History"


def test_four_processes_saving_notes_lose_and_interleave_nothing(project: Path) -> None:
    run_all(project, [helper_cmd("notes_writer", "42", f"w{n}", "25") for n in range(4)])
    _, sections = split_notes(q.get_task_notes("42"))
    assert len(sections) == 100
    assert sorted(s.attempt for s in sections) == list(range(1, 101))
    for s in sections:
        writer = s.heading.split(" — ")[1].split(" ")[0]
        n = int(s.body.split("Turns: ")[1].split(" ")[0])
        assert f"{writer}-{n}-BEGIN" in s.body and f"{writer}-{n}-END" in s.body
        assert s.body.count("-BEGIN") == 1


def test_kill_9_during_a_notes_save_leaves_the_old_notes_whole(project: Path) -> None:
    rng = random.Random(99)
    notes_path = config.get_notes_dir() / "TASK-7.md"
    for _ in range(15):
        before = q.get_task_notes("7") or ""
        start_then_kill(project, helper_cmd("notes_writer", "7", "w", "1000"), rng.uniform(0, 0.15))
        after = notes_path.read_text() if notes_path.exists() else ""
        assert after.startswith(before)  # earlier attempts untouched
        _, sections = split_notes(after)
        for s in sections:  # every section present is whole
            assert s.body.count("-BEGIN") == 1 and s.body.count("-END") == 1
        assert [s.attempt for s in sections] == list(range(1, len(sections) + 1))


class Chaos:
    """A daemon on a git project, and random kill -9s of it, its runners, and review commands.

    ``check()`` asserts the invariants after every kill: each task in exactly one folder,
    ATTEMPTS never going down, at most one agent per task at any instant (sampled all the
    time), and the base branch merged at most once per task.
    """

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root, self.rng = root, rng
        self.daemon: subprocess.Popen | None = None
        self.attempts: dict[str, int] = {}
        self.sampler = AgentCounter()
        self.sampler.start()
        self.out = open(root.parent / "chaos-daemon.out", "ab")  # noqa: SIM115

    def ensure_daemon(self) -> None:
        if self.daemon is None or self.daemon.poll() is not None:
            self.daemon = subprocess.Popen(
                [OCTOPOID, "scheduler", "run"],
                cwd=self.root,
                env=child_env(self.root) | {"OCTO_TEST_SLEEP": "0.3"},
                stdout=self.out,
                stderr=subprocess.STDOUT,
            )
            log = self.root / ".octopoid/runtime/logs/scheduler.log"
            started = f"scheduler {self.daemon.pid} started for".encode()
            wait_for(  # killed at random instants of its start, it never claimed on a slow machine
                "the scheduler to start",
                lambda: (
                    self.daemon.poll() is not None or (log.exists() and started in log.read_bytes())
                ),
                60,
            )

    def kill_later(self, proc: subprocess.Popen, delay: float) -> None:
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def cli(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [OCTOPOID, *args],
            cwd=self.root,
            env=child_env(self.root),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def one_kill(self) -> str:
        """Kill one thing at a random moment; return what was killed."""
        self.ensure_daemon()
        roll = self.rng.random()
        if roll < 0.2:
            self.kill_later(self.daemon, self.rng.uniform(0.05, 0.6))
            return "scheduler"
        if roll < 0.45:
            runners = runner_pids(self.root)
            if runners:
                time.sleep(self.rng.uniform(0, 0.2))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.rng.choice(runners), signal.SIGKILL)
                return "runner"
        states = {
            "accept": TaskState.PROVISIONAL,
            "reject": TaskState.PROVISIONAL,
            "requeue": TaskState.CLAIMED,
            "retry": TaskState.FAILED,
        }
        command = self.rng.choice(list(states))
        tasks = q.list_tasks(states[command])
        if not tasks:
            time.sleep(0.1)
            return "nothing"
        tid = self.rng.choice(tasks).id
        args = [command, tid] + (["--reason", "chaos"] if command == "reject" else [])
        self.kill_later(self.cli(*args), self.rng.uniform(0.05, 0.5))
        return command

    def check(self, ids: set[str]) -> None:
        store = q.get_store()
        queue = self.root / ".octopoid/runtime/queue"
        for name in os.listdir(queue / TaskState.QUARANTINE.value):
            raise AssertionError(f"quarantined: {name}")
        for task_id in ids:
            states = store.where(task_id)  # under the task's lock: movers cannot interleave
            assert len(states) == 1, f"TASK-{task_id} in {states}"
            attempts = q.get_task(task_id).attempts
            assert attempts >= self.attempts.get(task_id, 0), f"TASK-{task_id} ATTEMPTS down"
            self.attempts[task_id] = attempts
        assert max(self.sampler.most.values(), default=0) <= 1, self.sampler.most
        merges = merge_counts(self.root)
        assert all(n == 1 for n in merges.values()), merges

    def close(self) -> None:
        self.sampler.stop()
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            self.daemon.wait(60)
        self.out.close()


def runner_pids(root: Path) -> list[int]:
    """The project's runners, spawned or forked by the fork server: found by their marks as
    octopoid finds them (a forked runner's /proc environ is the server's)."""
    out = []
    for pid in marked_processes(**{config.ROOT_ENV: str(root)}):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        runner = (
            b"orchestrator.roles.implementer" in cmd or b"orchestrator.daemon.forkserver" in cmd
        )
        token = any(e.startswith(f"{TOKEN_ENV}=".encode()) for e in environment_of(pid))
        if runner and token:  # the fork server itself holds no claim token
            out.append(pid)
    return out


def merge_counts(root: Path) -> Counter:
    subjects = git.Repo(root).git.log("--format=%s", "main").splitlines()
    return Counter(s.split(":")[0] for s in subjects if s.startswith("Merge TASK-"))


def test_random_kill_9s_of_daemon_runners_and_review_keep_every_invariant(git_project: Path):
    """30 kill -9s (OCTOPOID_CHAOS_KILLS for more): scheduler, runners, accept, CLI moves.

    The base branch is checked out nowhere (merges go through a scratch worktree and an
    atomic ref update), as a kill inside `git merge` in a user's own checkout leaves git's
    own state to clear by hand.
    """
    kills = int(os.environ.get("OCTOPOID_CHAOS_KILLS", "30"))
    git.Repo(git_project).git.checkout("-b", "work")
    write_agents(
        git_project, max_concurrent=3, max_claimed=4, lease_seconds=4, shutdown_grace_seconds=1
    )
    ids = {q.create_task(f"slow chaos {i}").id for i in range(8)}
    chaos = Chaos(git_project, random.Random(2026))
    killed: Counter = Counter()
    try:
        while sum(killed.values()) - killed["nothing"] < kills:
            killed[chaos.one_kill()] += 1
            chaos.check(ids)
            while q.get_store().count(TaskState.INCOMING) < 5:  # the agents stay busy, and
                ids.add(q.create_task(f"slow chaos more {len(ids)}").id)  # healing is short
        heal(chaos, ids)
    finally:
        chaos.close()
    assert killed["scheduler"] and killed["runner"] and killed["accept"], killed
    merges = merge_counts(git_project)
    done = {t.id for t in q.list_tasks(TaskState.DONE)}
    assert {f"Merge TASK-{t}" for t in done} == set(merges), "merged iff done"


def heal(chaos: Chaos, ids: set[str]) -> None:
    """Stop the chaos, let the daemon finish, and accept everything that reaches review."""
    chaos.ensure_daemon()
    open_states = (TaskState.INCOMING, TaskState.CLAIMED, TaskState.PROVISIONAL)

    def healed() -> bool:
        for task in q.list_tasks(TaskState.PROVISIONAL):  # in this process: no kill is due
            review.accept(task.id, "chaos")
        return not any(q.get_store().count(s) for s in open_states)

    wait_for("every task out of the open states", healed, 300)  # CI shares two cores
    chaos.check(ids)

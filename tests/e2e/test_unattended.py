"""Left alone: a small queue run by the real scheduler (`octopoid scheduler run`) with a
`command` agent, two Claude Code agents (the fake `claude` replaying recorded sessions) and
a real check. It stalls on backpressure, lands a no-change attempt in review, sends a
burned-out task to breakdown (which no agent serves), stops a task at its budget and pauses
an agent at its usage limit. At each stall `status --json` says why; then a person gets
every task out through the CLI alone (run in this process: the scheduler, its runners and
agents are the processes under test, and each command as a process of its own costs ~0.5 s
of start-up, ~60 times over)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from .. import support
from ..support import HELPERS, OCTOPOID, child_env, cli_output, set_config

SESSIONS = HELPERS.parent / "fixtures" / "claude"


def status() -> dict[str, Any]:
    return json.loads(cli_output("status", "--json"))


def codes(found: dict[str, Any]) -> set[str]:
    stalls = found["stalls"]
    agents = [s for reasons in stalls["agents"].values() for s in reasons]
    return {s["code"] for s in stalls["system"] + stalls["unserved"] + agents}


def wait_for(what: str, ok, timeout: float = 180) -> dict[str, Any]:
    """Poll `status --json` until ``ok(status)``; the deadline only bounds a hang."""
    return support.wait_for(what, lambda: ok(found := status()) and found, timeout)


def state_of(task: str) -> str:
    rows = json.loads(cli_output("list", "--json"))
    return next((r["state"] for r in rows if r["id"] == task), "done")


def fake_claude(tmp_path: Path) -> str:
    exe = tmp_path / "bin" / "claude"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {HELPERS / "fake_claude.py"} "$@"\n')
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.slow
def test_a_queue_left_alone_explains_every_stall_and_a_person_gets_every_task_out(
    git_project: Path, tmp_path: Path
) -> None:
    claude = fake_claude(tmp_path)

    def claude_agent(name: str, role: str, session: str) -> dict:
        return {
            "name": name, "role": role, "backend": "claude-code", "claude_path": claude,
            "max_turns": 2, "env": {"FAKE_CLAUDE_SESSION": str(SESSIONS / session)},
        }  # fmt: skip

    agents = {
        "max_provisional": 2,
        "lease_seconds": 30,
        "agents": [
            {"name": "impl-1", "role": "implement", "backend": "command",
             "argv": [sys.executable, str(HELPERS / "agent.py")], "max_concurrent": 2},
            claude_agent("claude-burn", "burn", "max_turns.jsonl"),
            claude_agent("claude-limited", "limited", "usage_limit.jsonl"),
        ],
    }  # fmt: skip
    (git_project / ".octopoid/agents.yaml").write_text(yaml.safe_dump(agents))
    set_config(git_project, checks={"commands": ["test -s README.md"]})

    def enqueue(*args: str) -> str:
        return cli_output("enqueue", *args).strip()

    noop = enqueue("nothing-to-do: add timeouts")
    budget = enqueue("slow", "--budget", "seconds=2")
    burned = enqueue("a burner", "--role", "burn")
    limited = enqueue("a limited one", "--role", "limited")
    daemon = subprocess.Popen(
        [OCTOPOID, "scheduler", "run"], cwd=git_project, env=child_env(git_project),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        found = wait_for(
            "a no-change review, a budget stop, a breakdown nobody serves, a usage limit",
            lambda s: (
                {"unserved", "usage-limit"} <= codes(s)
                and s["counts"]["failed"] == 1
                and s["counts"]["provisional"] == 1
            ),
        )
        texts = json.dumps(found["stalls"])
        assert "no agent has role: breakdown" in texts
        assert "waits for its usage limit to reset at 2100-01-01T00:00:00Z" in texts
        assert state_of(burned) == "breakdown"
        assert state_of(limited) == "incoming"
        assert state_of(budget) == "failed"
        shown = cli_output("show", budget)
        assert "budget (seconds=2)" in shown and "--budget" in shown
        shown = cli_output("show", noop)
        assert "is in provisional" in shown and "NO_CHANGE: every call site" in shown

        plain = [enqueue(f"plain {n}") for n in range(3)]
        found = wait_for("backpressure", lambda s: "backpressure" in codes(s))
        assert re.search(r"\d tasks wait for review and max_provisional is 2", json.dumps(found))
        assert not found["stalls"]["claiming"]
        assert "incoming" in [state_of(t) for t in plain]  # held back

        # A person, through the CLI alone: reviews free the queue, then the rest is closed.
        def review_all() -> None:
            rows = json.loads(cli_output("list", "provisional", "--json"))
            if rows:
                cli_output("accept", *[r["id"] for r in rows])

        def all_done() -> bool:
            review_all()
            return all(state_of(t) == "done" for t in plain)

        support.wait_for("every plain task done", all_done, 180)
        assert state_of(noop) == "done"
        cli_output("close", burned, "--reason", "split by hand into a new task")
        cli_output("close", budget, "--wont-do", "--reason", "not worth more time")
        cli_output("close", limited, "--reason", "done on another machine")
        cli_output("resume", "--agent", "claude-limited")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    everything = [noop, budget, burned, limited, *plain]
    assert [state_of(t) for t in everything] == ["done"] * len(everything)
    assert "all is well" in cli_output("doctor")

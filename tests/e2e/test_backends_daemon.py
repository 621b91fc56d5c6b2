"""The daemon end to end with the real agent backends: the real `claude` CLI and the SDK loop.

Both talk to the project's scripted Messages API on 127.0.0.1; nothing leaves the machine
and no real key is needed. The claude CLI comes from the npm registry into a cached
project-local folder (`.ci/run` does it first; this fixture does it at run time if needed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.queue import machine as q

from ..helpers.fake_messages_api import FakeMessagesAPI, text, tool_use
from ..support import branch_file, branch_head, child_env
from ..support.daemon import QUIET, run_daemon_until, write_agent

pytestmark = pytest.mark.slow


def test_the_real_claude_cli_commits_and_reports_turns_and_cost(
    git_project: Path, claude_cli: Path
) -> None:
    script = [
        tool_use(
            "Bash",
            {
                "command": "echo hello > hello.txt && git add hello.txt && "
                "git commit -q -m 'add hello.txt'",
                "description": "commit the file",
            },
            say="Creating hello.txt.",
        ),
        text("Committed hello.txt."),
    ]
    with FakeMessagesAPI(script) as api:
        env = (
            child_env(git_project)
            | QUIET
            | {"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": "sk-ant-dummy-00000000"}
        )
        write_agent(
            git_project,
            backend="claude-code",
            claude_path=str(claude_cli),
            allowed_tools=["Bash", "Read", "Edit", "Write"],
        )
        tid = q.create_task("add hello.txt").id
        run_daemon_until(git_project, env, lambda: q.get_task(tid).state.value == "provisional")
    task = q.get_task(tid)
    assert task.state.value == "provisional", (git_project.parent / "daemon.out").read_text()
    assert branch_file(git_project, tid, "hello.txt") == "hello"
    assert branch_head(git_project, tid).summary == "add hello.txt"
    assert len(api.requests) >= 2 and api.requests[0]["stream"] is True
    assert "add hello.txt" in str(api.requests[0]["messages"][0])  # our prompt arrived
    notes = q.get_task_notes(tid)
    header = next(line for line in notes.splitlines() if line.startswith("Turns: "))
    assert header.startswith("Turns: 2 | Commits: 1 | Cost: $")
    assert float(header.split("$")[1]) > 0
    log = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()
    assert "→ Bash:" in log and "[result: success, 2 turns" in log
    assert "sk-ant-dummy-00000000" not in log + notes


def test_the_anthropic_backend_under_the_daemon(git_project: Path) -> None:
    script = [
        tool_use("write_file", {"path": "NOTES.md", "content": "written by the loop\n"}),
        tool_use("finish", {"summary": "Add NOTES.md"}),
    ]
    with FakeMessagesAPI(script) as api:
        env = child_env(git_project) | {"ANTHROPIC_API_KEY": "sk-ant-dummy-11111111"}
        write_agent(
            git_project, backend="anthropic", model="claude-haiku-4-5", base_url=api.base_url
        )
        tid = q.create_task("write the notes file").id
        run_daemon_until(git_project, env, lambda: q.get_task(tid).state.value == "provisional")
    assert q.get_task(tid).state.value == "provisional"
    assert branch_file(git_project, tid, "NOTES.md") == "written by the loop"
    notes = q.get_task_notes(tid)
    assert "Turns: 2 | Commits: 1 | Cost: $0.00" in notes
    log = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()
    assert "→ write_file" in log and "sk-ant-dummy-11111111" not in notes + log

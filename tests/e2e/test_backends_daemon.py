"""The daemon end to end with the real agent backends: the real `claude` CLI and the SDK loop.

Both talk to the project's scripted Messages API on 127.0.0.1; nothing leaves the machine
and no real key is needed. The claude CLI comes from the npm registry into a cached
project-local folder (`.ci/run` does it first; this fixture does it at run time if needed).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import config
from orchestrator.queue import machine as q

from ..helpers.fake_messages_api import FakeMessagesAPI, text, tool_use
from ..support import OCTOPOID, branch_file, branch_head, child_env

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
CLAUDE_PACKAGE = "@anthropic-ai/claude-code@2.1.197"
CLAUDE_CACHE = REPO / ".cache" / "claude-code"
QUIET = {
    "DISABLE_TELEMETRY": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    """The real claude executable, installed from npm into .cache/claude-code if missing."""
    exe = CLAUDE_CACHE / "node_modules" / ".bin" / "claude"
    if exe.exists():
        return exe
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed, so the real claude CLI cannot be installed")
    done = subprocess.run(
        [npm, "install", "--prefix", str(CLAUDE_CACHE), "--no-audit", "--no-fund", CLAUDE_PACKAGE],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and exe.exists(), f"npm install failed:\n{done.stderr[-2000:]}"
    return exe


def run_daemon_until(root: Path, env: dict[str, str], done, timeout: float = 90) -> None:
    log = open(root.parent / "daemon.out", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [OCTOPOID, "scheduler", "run"],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            assert proc.poll() is None, (root.parent / "daemon.out").read_text()
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()


def write_agent(root: Path, **agent: object) -> None:
    doc = {
        "lease_seconds": 30,
        "shutdown_grace_seconds": 1,
        "agents": [{"name": "agent-1", "role": "implement", "max_turns": 5, **agent}],
    }
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))


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

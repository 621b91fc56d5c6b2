"""The octopoid command, through click's runner and as the installed executable."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator import queue_utils as q
from orchestrator.cli import cli

from .conftest import child_env


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_enqueue_prints_the_id_and_list_shows_it(project: Path) -> None:
    assert (
        run(
            "enqueue",
            "Fix login",
            "--priority",
            "P0",
            "--criterion",
            "tests pass",
            "--context",
            "see auth.py",
        ).output
        == "TASK-1\n"
    )
    assert run("enqueue", "Second", "--blocked-by", "TASK-1").output == "TASK-2\n"
    table = run("list").output
    assert table.splitlines()[0].split() == ["ID", "STATE", "PRI", "ROLE", "ATT", "TITLE"]
    assert "TASK-1  incoming  P0" in table
    rows = json.loads(run("list", "incoming", "--json").output)
    assert [r["id"] for r in rows] == ["TASK-1", "TASK-2"]
    assert json.loads(run("list", "--role", "review", "--json").output) == []


def test_context_file_is_read(project: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx.md"
    ctx.write_text("Long context\nwith lines\n")
    run("enqueue", "T", "--context-file", str(ctx))
    assert q.get_task("1").context == "Long context\nwith lines"


def test_show_mentions_notes_and_prints_the_file(project: Path) -> None:
    run("enqueue", "T")
    assert "retry notes: none" in run("show", "task-1").output
    q.claim_task(None, "a")
    q.save_task_notes("1", "a", "clue", 0, 1)
    out = run("show", "1").output
    assert "TASK-1 is in claimed" in out and "1 attempt(s)" in out and "# [TASK-1] T" in out


def test_review_commands_move_tasks(project: Path) -> None:
    (project / ".octopoid/config.yaml").write_text("merge:\n  strategy: none\n")
    for title in ("a", "b"):
        run("enqueue", title)
    for _ in range(2):
        q.submit_completion(q.claim_task(None, "x"), 1, 1)
    out = run("reject", "TASK-1", "--reason", "missing tests").output
    assert "back in incoming" in out
    assert "missing tests" in run("notes", "1").output
    assert run("notes", "1", "--path").output.strip().endswith("shared/notes/TASK-1.md")
    assert "accepted (branch left in place)" in run("accept", "2").output
    assert "has no retry notes" in run("notes", "2").output
    q.claim_task(None, "x")
    run("requeue", "1")
    q.fail_task(q.claim_task(None, "x"), "boom")
    run("retry", "1")
    counts = json.loads(run("status", "--json").output)["counts"]
    assert counts["incoming"] == 1 and counts["done"] == 1
    assert "incoming     1" in run("status").output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["show", "99"], 3, "no task TASK-99"),
        (["show", "../../etc/passwd"], 2, "invalid task id"),
        (["accept", "1"], 1, "is in incoming, not provisional"),
        (["reject", "1", "--reason", "x"], 1, "not provisional"),
        (["retry", "1"], 1, "not failed or rejected"),
        (["notes", "a/b"], 2, "invalid task id"),
        (["list", "nowhere"], 2, "Invalid value"),
        (["enqueue", "x", "--priority", "P9"], 2, "Invalid value"),
        (["enqueue", "   "], 2, "a task needs a title"),
        (["enqueue", "x", "--role", "two words"], 2, "role must be a word"),
        (["enqueue", "x", "--blocked-by", "../1"], 2, "invalid task id"),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(project: Path, args, code, message) -> None:
    run("enqueue", "T")
    result = run(*args, ok=False)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not a crash


def test_accept_many_reports_each_and_exits_with_the_worst(project: Path) -> None:
    (project / ".octopoid/config.yaml").write_text("merge:\n  strategy: none\n")
    run("enqueue", "a")
    q.submit_completion(q.claim_task(None, "x"), 1, 1)
    result = run("accept", "1", "2", "../x", ok=False)
    assert "TASK-1 accepted" in result.output
    assert "no task TASK-2" in result.output and "invalid task id" in result.output
    assert result.exit_code == 3


def test_installed_executable_runs_outside_a_project(tmp_path: Path) -> None:
    exe = shutil.which("octopoid")
    assert exe, "the octopoid console script is not installed (pip install -e .)"
    env = child_env(tmp_path)
    env.pop("OCTOPOID_ROOT")
    proc = subprocess.run([exe, "list"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "octopoid init" in proc.stderr
    assert "Traceback" not in proc.stderr
    steps = [["init"], ["enqueue", "From the shell"], ["list", "--json"], ["show", "TASK-1"]]
    outs = [
        subprocess.run(
            [exe, *s], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
        ).stdout
        for s in steps
    ]
    assert outs[1] == "TASK-1\n" and json.loads(outs[2])[0]["title"] == "From the shell"


def test_agents_lists_state_and_problems(project: Path) -> None:
    (project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: c1, role: implement, backend: claude-code,"
        " claude_path: no-such-claude}\n  - {name: s1, role: implement, backend: command,"
        ' argv: ["true"]}\n'
    )
    run("enqueue", "t")
    q.claim_task(None, "s1")
    result = CliRunner().invoke(cli, ["agents"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split()[:4] == ["NAME", "ROLE", "BACKEND", "STATE"]
    assert any(ln.startswith("c1") and " idle " in ln for ln in lines)
    assert any(ln.startswith("s1") and "running TASK-1" in ln for ln in lines)
    assert "c1 cannot run: 'no-such-claude' is not on PATH" in result.output
    assert "npm install -g @anthropic-ai/claude-code" in result.output
    run("pause", "--agent", "c1")
    rows = json.loads(run("agents", "--json").output)
    assert [r["state"] for r in rows] == ["paused", "running TASK-1"]


def test_show_and_status_report_usage(project: Path) -> None:
    run("enqueue", "t")
    task = q.claim_task(None, "a")
    q.record_usage(task, 37, 0.41)
    q.record_usage(task, 3, 0.09)
    assert "usage: 40 turns, $0.50 across 1 attempt(s)" in run("show", "1").output
    out = run("status").output
    assert "usage: 40 turns, $0.50 in total" in out and "TASK-1" in out


def test_diff_and_worktrees_commands(git_project: Path) -> None:
    from .test_review import provisional_with_commit

    tid = provisional_with_commit(git_project)
    assert "+new" in run("diff", tid).output
    assert run("worktrees").output.splitlines()[1].split() == [f"TASK-{tid}", "provisional"]
    assert "nothing to prune" in run("worktrees", "--prune").output
    (git_project / ".octopoid/config.yaml").write_text("merge:\n  strategy: none\n")
    run("accept", tid)
    assert f"removed TASK-{tid}" in run("worktrees", "--prune").output
    assert "no worktrees" in run("worktrees").output
    assert "has no branch" in run("diff", tid, ok=False).output

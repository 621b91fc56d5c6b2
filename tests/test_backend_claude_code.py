"""The claude-code backend against a fake `claude` replaying recorded stream-json sessions."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.backends.base import AgentRequest
from orchestrator.backends.claude_code import ClaudeCodeBackend, StreamJsonParser
from orchestrator.base.fsutil import TailBuffer
from orchestrator.box.box import Box
from orchestrator.faces.reports import agents_overview
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from .support import HELPERS, run_claimed

FIXTURES = Path(__file__).parent / "fixtures" / "claude"


@pytest.fixture
def fake_claude(git_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """agents.yaml with a claude-code agent whose `claude` is tests/helpers/fake_claude.py."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "claude"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {HELPERS / "fake_claude.py"} "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - name: claude-1\n    role: implement\n    backend: claude-code\n"
        "    max_turns: 5\n    max_budget_usd: 2.5\n    model: claude-sonnet-4-5\n"
        "    allowed_tools: [Bash, Edit]\n    disallowed_tools: [WebFetch]\n"
    )

    def run(session: str, title: str = "add hi.txt", **env: str):
        monkeypatch.setenv("FAKE_CLAUDE_SESSION", str(FIXTURES / f"{session}.jsonl"))
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        tid = q.create_task(title).id
        report = run_claimed(q.claim_task(None, "claude-1"), "claude-1")
        calls = [ln for ln in attempt_log(tid).splitlines() if ln.startswith("FAKE_CLAUDE_CALL")]
        return (
            tid,
            report,
            json.loads(calls[0].removeprefix("FAKE_CLAUDE_CALL ")) if calls else None,
        )

    return run


def attempt_log(tid: str) -> str:
    return (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()


def test_a_recorded_success_commits_and_reports_real_numbers(fake_claude) -> None:
    tid, report, call = fake_claude("success")
    assert report.next_state == "provisional" and report.commits == 1 and report.turns == 2
    argv = call["argv"]
    assert argv[:7] == [
        *("-p", "--input-format", "stream-json", "--output-format", "stream-json"),
        *("--verbose", "--max-turns"),
    ]
    assert argv[argv.index("--max-turns") + 1] == "5"
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert argv[argv.index("--allowedTools") + 1] == "Bash,Edit,mcp__octopoid"  # + the channel
    mcp = json.loads(argv[argv.index("--mcp-config") + 1])["mcpServers"]["octopoid"]
    assert (mcp["command"], mcp["args"]) == ("octopoid", ["mcp"]) and "--strict-mcp-config" in argv
    assert argv[argv.index("--disallowedTools") + 1] == "WebFetch"
    assert argv[argv.index("--max-budget-usd") + 1] == "2.5"
    assert argv[argv.index("--model") + 1] == "claude-sonnet-4-5"
    assert "# Task TASK-1: add hi.txt" in call["prompt"]  # the prompt came on stdin
    notes = q.get_task_notes(tid)
    assert "Turns: 2 | Commits: 1 | Cost: $0.02" in notes
    log = attempt_log(tid)
    assert "→ Bash:" in log and "Committed hi.txt." in log and '{"type"' not in log
    task = q.get_task(tid)
    assert task.headers["TURNS_TOTAL"] == "2" and task.headers["COST_USD_TOTAL"] == "0.0200"
    assert task.headers["TOKENS_TOTAL"] == "2400"  # the recorded result: 2000 in, 400 out
    assert "1 commit, 2 turns, $0.02" in task.history[-1]
    (row,) = agents_overview()
    assert row["last_outcome"] == "success" and row["cost_today_usd"] == 0.02


def test_max_turns_is_reported_and_retried(fake_claude) -> None:
    tid, report, _ = fake_claude("max_turns")
    assert report.outcome == "max_turns" and report.turns == 2
    assert report.next_state == "incoming"
    assert "Turns: 2 | Commits: 0 | Cost: $0.01" in q.get_task_notes(tid)


def test_error_during_execution(fake_claude) -> None:
    tid, report, _ = fake_claude("error_during_execution")
    assert report.outcome == "error" and report.turns == 1 and report.next_state == "incoming"
    assert "Looking at the failing import" in q.get_task_notes(tid)


def test_overload_backs_off_without_burning_an_attempt(fake_claude) -> None:
    tid, report, _ = fake_claude("overloaded")
    assert report.outcome == "rate_limited" and report.next_state == "incoming"
    task = q.get_task(tid)
    assert task.headers["INTERRUPTED"] == "1" and task.not_before is not None
    assert q.attempts_left(task, 3) == 3
    assert q.claim_task(None, "claude-1") is None  # backing off: not claimable yet
    later = task.not_before.replace(microsecond=0)
    from datetime import timedelta

    assert q.claim_task(None, "claude-1", now=later + timedelta(seconds=1)).id == tid


@pytest.mark.parametrize(
    ("session", "outcome", "cause"),
    [
        ("auth_failed", "error", "auth"),
        ("overloaded", "rate_limited", "overloaded"),
        ("unreachable", "error", "unreachable"),
        ("usage_limit", "rate_limited", None),  # its own pause, until the reset
        ("error_during_execution", "error", None),
    ],
)
def test_a_failure_no_task_can_fix_is_named(session: str, outcome: str, cause: str | None):
    """(auth_failed.jsonl and unreachable.jsonl are the real CLI, 2.1.197, against a local
    API answering 401 and against a closed port, with CLAUDE_CODE_MAX_RETRIES=0.)"""
    out = TailBuffer(10_000)
    parser = StreamJsonParser(out)
    parser.feed((FIXTURES / f"{session}.jsonl").read_bytes())
    parser.finish()
    out.close()
    result = parser.to_result(1, False)
    assert (result.outcome, result.cause) == (outcome, cause)


def test_a_refused_key_costs_the_task_nothing(fake_claude) -> None:
    tid, report, _ = fake_claude("auth_failed")
    task = q.get_task(tid)
    assert report.next_state == "incoming" and task.headers["INTERRUPTED"] == "1"
    assert "not counted: the agent's API credentials are missing or refused" in (
        q.get_task_notes(tid)
    )


def test_a_session_killed_mid_stream_counts_its_turns(fake_claude) -> None:
    tid, report, _ = fake_claude("success", FAKE_CLAUDE_DIE_AFTER="3")
    assert report.outcome == "error" and report.turns == 1  # one assistant message seen
    assert "without a result" in q.get_task_notes(tid)


def test_garbage_lines_and_a_truncated_last_line_are_tolerated(fake_claude) -> None:
    tid, report, _ = fake_claude("success", FAKE_CLAUDE_GARBAGE="1")
    assert report.commits == 1 and report.outcome == "error"  # no complete result event
    log = attempt_log(tid)
    assert "npm WARN something not JSON at all" in log and "telemetry_v9" not in log


def test_a_50_mb_stream_is_parsed_in_bounded_memory(fake_claude) -> None:
    tid, report, _ = fake_claude("success", FAKE_CLAUDE_FLOOD_MB="50")
    assert report.next_state == "provisional" and report.turns == 2
    assert (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").stat().st_size < 11 << 20


def test_missing_claude_is_a_clear_error(git_project: Path) -> None:
    (git_project / ".octopoid/agents.yaml").write_text(
        "agents:\n  - {name: c, role: implement, backend: claude-code,"
        " claude_path: claude-not-installed}\n"
    )
    (row,) = agents_overview()
    assert "npm install -g @anthropic-ai/claude-code" in row["problem"]
    tid = q.create_task("t").id
    report = run_claimed(q.claim_task(None, "c"), "c")
    assert report.next_state == "incoming"
    assert "'claude-not-installed' is not on PATH" in q.get_task_notes(tid)
    assert q.get_task(tid).state is TaskState.INCOMING


def test_a_message_s_own_turn_after_the_result_counts_its_turns_too() -> None:
    """A message that reaches Claude Code as its session ends gets a turn of its own: a
    second result whose num_turns counts that turn alone (its cost is the session's)."""
    parser = StreamJsonParser(TailBuffer(10_000))
    for turns, cost in ((3, 0.01), (1, 0.02)):
        result = {"type": "result", "subtype": "success", "num_turns": turns}
        parser.feed(json.dumps(result | {"total_cost_usd": cost}).encode() + b"\n")
    result = parser.to_result(0, False)
    assert (result.outcome, result.turns, result.cost_usd) == ("success", 4, 0.02)


def test_parser_handles_lines_split_across_chunks(tmp_path: Path) -> None:
    data = (FIXTURES / "success.jsonl").read_bytes()
    out = TailBuffer(10_000)
    parser = StreamJsonParser(out)
    for i in range(0, len(data), 7):
        parser.feed(data[i : i + 7])
    parser.finish()
    out.close()
    result = parser.to_result(0, False)
    assert (result.outcome, result.turns, result.cost_usd) == ("success", 2, 0.02)
    assert result.tokens_in == 2000 and result.tokens_out == 400 and result.session_id


def test_permission_denials_reach_the_notes(tmp_path: Path) -> None:
    event = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": 3,
        "result": "could not run it",
        "total_cost_usd": 0.1,
        "permission_denials": [{"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}],
    }
    out = TailBuffer(10_000)
    parser = StreamJsonParser(out)
    parser.feed(json.dumps(event).encode() + b"\n")
    out.close()
    assert "[permission denied:" in out.text() and "rm -rf /" in out.text()
    assert parser.to_result(0, False).details["permission_denials"]


def test_backend_reports_a_timeout(tmp_path: Path) -> None:
    hung = tmp_path / "hung-claude"
    hung.write_text('#!/bin/sh\necho \'{"type": "system", "subtype": "init"}\'\nsleep 30\n')
    hung.chmod(0o755)
    request = AgentRequest(
        task_id="TASK-9",
        prompt="x",
        prompt_file=tmp_path / "p",
        box=Box(tmp_path, tmp_path, dict(os.environ)),
        options={"claude_path": str(hung)},
        timeout_seconds=1,
        max_turns=3,
    )
    out = TailBuffer(1000)
    result = ClaudeCodeBackend().run(request, out)
    assert result.outcome == "timeout" and "timed out after 0 turns" in result.summary


def test_its_box_shows_the_login_credentials_only_without_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.box.box import exposures
    from orchestrator.box.bwrap import HIDDEN

    monkeypatch.setenv("HOME", str(tmp_path))
    credentials = tmp_path / ".claude" / ".credentials.json"
    credentials.parent.mkdir()
    credentials.write_text("{}")
    (tmp_path / ".claude" / "history.jsonl").write_text("the user's other sessions")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    needs = ClaudeCodeBackend().needs({"claude_path": "no-such-claude"})
    assert needs == [str(credentials)]
    shown = exposures(needs, [], (*HIDDEN, tmp_path))
    assert credentials in shown and credentials.parent not in shown  # the file, not ~/.claude
    assert ClaudeCodeBackend().needs({"claude_path": "x", "env": {"ANTHROPIC_API_KEY": "k"}}) == []


def test_a_usage_limit_pauses_the_agent_until_its_reset_and_gives_the_attempt_back(
    fake_claude,
) -> None:
    """(usage_limit.jsonl is overloaded.jsonl with Claude Code's usage-limit text: the
    recorded CLI could not be made to hit a real subscription limit.)"""
    from datetime import UTC, datetime

    from orchestrator.daemon import stalls
    from orchestrator.queue import agent_records

    tid, report, _ = fake_claude("usage_limit")
    assert report.outcome == "rate_limited" and report.next_state == "incoming"
    task = q.get_task(tid)
    assert task.headers["INTERRUPTED"] == "1" and q.attempts_left(task, 3) == 3
    assert "usage limit reached; it resets at 2100-01-01T00:00:00Z" in task.history[-1]
    hold = agent_records.held("claude-1")
    assert hold.kind == agent_records.USAGE_LIMIT and hold.until == datetime(2100, 1, 1, tzinfo=UTC)
    (why,) = stalls.report()["agents"]["claude-1"]
    assert why["code"] == "usage-limit" and "2100-01-01T00:00:00Z" in why["text"]
    assert not stalls.report()["claiming"]
    agent_records.set_paused(False, "claude-1")  # `octopoid resume --agent` tries again now
    assert agent_records.held("claude-1") is None and stalls.report()["claiming"]


def test_the_reset_time_is_read_in_either_form() -> None:
    from datetime import UTC, datetime

    from orchestrator.backends.claude_code import usage_limit_reset

    assert usage_limit_reset("Claude AI usage limit reached|1767225600") == datetime(
        2026, 1, 1, tzinfo=UTC
    )
    now = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
    later = usage_limit_reset("5-hour limit reached ∙ resets 3pm", now)
    assert later is not None and later > now and later.astimezone().hour == 15
    assert usage_limit_reset("API Error: 529 Overloaded") is None

"""The real Claude Code CLI (the pinned version) calls octopoid's tools over MCP from inside
its sandbox: remember, search_memory and ask_human, through the --mcp-config octopoid gives
it. Nobody answers in time, so the attempt ends "needs input"; the answer given on the task
page releases the task and reaches the next attempt's prompt. The Messages API is the
project's scripted one on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.memory import lifecycle
from orchestrator.memory.notes import NotesManager
from orchestrator.queue import machine as q

from ..helpers.fake_messages_api import FakeMessagesAPI, text, tool_use
from ..support import branch_file, child_env, set_config
from ..support.daemon import QUIET, run_daemon_until, write_agent
from ..web_server import start_web

pytestmark = pytest.mark.slow


def test_claude_code_remembers_searches_and_asks_through_mcp_and_gets_its_answer(
    git_project: Path,
    claude_cli: Path,
    bwrap_ok: None,
) -> None:
    lifecycle.add_learning("Important Facts", "widgets are painted in the paint shop", [], None)
    script = [
        tool_use(
            "mcp__octopoid__remember",
            {"section": "Important Facts", "text": "the widget goes in widget.txt"},
        ),
        tool_use("mcp__octopoid__search_memory", {"query": "widgets painted"}),
        tool_use("mcp__octopoid__ask_human", {"question": "Blue or red widget?"}),
        text("I asked which colour; stopping until someone answers."),
        tool_use(  # attempt 2, once answered
            "Bash",
            {
                "command": "echo red > widget.txt && git add widget.txt && "
                "git commit -q -m 'a red widget'",
                "description": "commit the widget",
            },
        ),
        text("Committed the red widget."),
    ]
    set_config(git_project, questions={"wait_seconds": 0})  # nobody answers in time
    with FakeMessagesAPI(script) as api:
        env = (
            child_env(git_project)
            | QUIET
            | {"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": "sk-ant-dummy-22222222"}
        )
        write_agent(git_project, backend="claude-code", claude_path=str(claude_cli))
        tid = q.create_task("make the widget").id
        run_daemon_until(  # a cap for a loaded machine, not a window: it stops once asked
            git_project, env, lambda: "QUESTION" in q.get_task(tid).headers, timeout=300
        )
        held = q.get_task(tid)
        assert held.state.value == "incoming", (git_project.parent / "daemon.out").read_text()
        assert held.headers["NOT_BEFORE"] == q.NEVER
        tools = {tool["name"] for tool in api.requests[0].get("tools", [])}
        assert {"mcp__octopoid__remember", "mcp__octopoid__ask_human"} <= tools
        said = str(api.requests[2]["messages"])  # search_memory's answer came back
        assert "painted in the paint shop" in said
        notes = NotesManager(notes_id=f"TASK-{tid}").load_notes()
        assert "the widget goes in widget.txt" in notes  # remembered, in its own notes

        server = start_web(git_project)
        try:
            web = server.client()
            _, _, page = web.request(f"/tasks/TASK-{tid}")
            assert "Blue or red widget?" in page and 'id="answer-form"' in page
            form = {"csrf": web.csrf(), "answer": "Red, please."}
            status, headers, _ = web.request(f"/tasks/TASK-{tid}/answer", form)
            assert status == 303 and headers["location"].endswith("?done=answered")
        finally:
            server.stop()
        assert "NOT_BEFORE" not in q.get_task(tid).headers

        run_daemon_until(
            git_project, env, lambda: q.get_task(tid).state.value == "provisional", timeout=300
        )
    assert q.get_task(tid).state.value == "provisional", (
        git_project.parent / "daemon.out"
    ).read_text()
    assert branch_file(git_project, tid, "widget.txt") == "red"
    second = str(api.requests[4]["messages"][0])  # attempt 2's prompt
    assert "Blue or red widget?" in second and "Red, please." in second
    assert q.get_task(tid).headers.get("INTERRUPTED") == "1"  # asking cost no attempt

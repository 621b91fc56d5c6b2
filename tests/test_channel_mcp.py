"""The channel as an MCP server: the agent's tools inside an attempt.

``octopoid mcp`` in the box (sandbox/client.py, run here as the box runs it) is driven by
the official MCP SDK's stdio client; the tools act on the attempt's own task only; a
question is answered while it waits, or ends the attempt "needs input" until a person
answers, and whichever of the answer and the attempt's end comes second sees the other.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from orchestrator.box.box import write_client
from orchestrator.memory import lifecycle
from orchestrator.memory.notes import NotesManager
from orchestrator.model.exceptions import InvalidInput
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.queue import questions
from orchestrator.roles.tools import TOOLS

from .support import OCTOPOID, set_config


def with_session(path: str, work) -> object:
    """Run ``work(session)`` against ``octopoid mcp`` relaying to the channel at ``path``."""
    folder = Path(path).parent
    write_client(folder)
    server = StdioServerParameters(
        command=str(folder / "bin" / "octopoid"),
        args=["mcp"],
        env={"OCTOPOID_CHANNEL": path, "PATH": os.environ["PATH"]},
    )

    async def main() -> object:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)

    return anyio.run(main)


def text_of(result) -> str:
    return "".join(block.text for block in result.content)


def test_an_mcp_client_lists_and_calls_the_attempt_s_tools(served) -> None:
    path, mine, other, server = served
    lifecycle.add_learning("Important Facts", "the staging database is pg-staging-2", [], None)

    async def work(session: ClientSession) -> dict:
        tools = await session.list_tools()
        calls = {
            "remember": await session.call_tool(
                "remember", {"section": "Important Facts", "text": "use port 5433"}
            ),
            "search": await session.call_tool("search_memory", {"query": "staging database"}),
            "task": await session.call_tool("read_task", {}),
            "progress": await session.call_tool("report_progress", {"text": "testing MCP"}),
            "unknown": await session.call_tool("accept", {"task": other.id}),
            "bad": await session.call_tool("remember", {"section": "Key Topics"}),
            "huge": await session.call_tool("report_progress", {"text": "x" * 5000}),
        }
        try:  # past the channel's line limit: refused before it is read, as the request's
            await session.call_tool("remember", {"section": "Key Topics", "text": "x" * 10**5})
        except MCPError as exc:
            calls["too_long"] = str(exc)
        return {"tools": [t.name for t in tools.tools], **calls}

    got = with_session(path, work)
    assert got["tools"] == [t["name"] for t in TOOLS]
    assert not got["remember"].is_error and json.loads(text_of(got["remember"]))["added"]
    assert "use port 5433" in NotesManager(notes_id=mine.label).load_notes()
    assert "pg-staging-2" in text_of(got["search"])
    assert "my context" in text_of(got["task"]) and "OTHER-SECRET" not in text_of(got["task"])
    assert server.attempt_tools.take_progress() == "testing MCP"  # the huge one was refused
    for name in ("unknown", "bad", "huge"):  # refused as tool errors; the channel goes on
        assert got[name].is_error, name
    assert "no tool 'accept'" in text_of(got["unknown"])
    assert "too long" in got["too_long"]


def test_a_proposed_split_is_checked_then_left_for_the_runner(served) -> None:
    path, _, _, server = served
    cycle = [{"title": "a", "depends_on": [2]}, {"title": "b", "depends_on": [1]}]
    good = [{"title": "schema"}, {"title": "API", "depends_on": [1], "criteria": ["it works"]}]

    async def work(session: ClientSession) -> list:
        return [
            await session.call_tool("propose_split", {"subtasks": cycle}),
            await session.call_tool("propose_split", {"subtasks": good}),
        ]

    refused, taken = with_session(path, work)
    assert refused.is_error and "only earlier subtasks" in text_of(refused)
    assert not taken.is_error and [s.title for s in server.toolbox.proposed] == ["schema", "API"]


def test_a_question_answered_while_it_waits_is_the_tool_s_reply(
    served,
    project: Path,
) -> None:
    path, mine, _, _ = served
    set_config(project, questions={"wait_seconds": 600})

    over = threading.Event()

    def person() -> None:  # answers once the question is up (or gives up with the session)
        while not questions.open_questions():
            if over.wait(0.05):
                return
        questions.answer(mine.id, "use the blue one", "alice")

    helper = threading.Thread(target=person)
    helper.start()

    async def work(session: ClientSession):
        return await session.call_tool("ask_human", {"question": "Which colour?"})

    try:
        answered = with_session(path, work)
    finally:
        over.set()
        helper.join()
    assert not answered.is_error and text_of(answered) == "The answer: use the blue one"
    notes = q.get_task_notes(mine.id) or ""
    assert "Q: Which colour?" in notes and "A: use the blue one" in notes


def test_an_unanswered_question_holds_the_task_until_the_answer_releases_it(
    served,
    project: Path,
) -> None:
    path, mine, _, _ = served
    set_config(project, questions={"wait_seconds": 0})

    async def work(session: ClientSession):
        first = await session.call_tool("ask_human", {"question": "Staging or prod?"})
        return first, await session.call_tool("ask_human", {"question": "And again?"})

    first, again = with_session(path, work)
    assert "No answer yet" in text_of(first)
    assert again.is_error and "asked already" in text_of(again)  # one question an attempt
    task = q.get_task(mine.id)
    assert questions.unanswered(task) == "Staging or prod?"
    questions.hold_for_answer(task, "Staging or prod?", "success: asked")
    held = q.get_task(mine.id)
    assert held.state is TaskState.INCOMING and held.headers["NOT_BEFORE"] == q.NEVER
    assert held.headers["INTERRUPTED"] == "1"  # not counted as an attempt
    assert q.claim_task("implement", "agent") is None  # nothing else is claimable here
    assert "Staging or prod?" in (q.get_task_notes(mine.id) or "")
    questions.answer(mine.id, "staging", "bob")
    released = q.get_task(mine.id)
    assert "NOT_BEFORE" not in released.headers and "QUESTION" not in released.headers
    assert q.claim_task("implement", "agent").id == mine.id
    with pytest.raises(InvalidInput, match="no open question"):
        questions.answer(mine.id, "again", "bob")


def test_an_answer_given_as_the_attempt_gives_up_leaves_the_task_free(
    served,
    project: Path,
) -> None:
    _, mine, _, _ = served
    questions.ask(mine.id, mine.attempts, "Which branch?")
    questions.answer(mine.id, "main", "carol")  # arrives before the runner settles
    questions.hold_for_answer(q.get_task(mine.id), "Which branch?", "success: asked")
    task = q.get_task(mine.id)
    assert task.state is TaskState.INCOMING and "NOT_BEFORE" not in task.headers
    assert (q.get_task_notes(mine.id) or "").count("Which branch?") == 1  # the Q&A only


def test_octopoid_answer_answers_once_and_says_why_not_in_one_line(project: Path) -> None:
    from .support import invoke

    task = q.create_task("asks")
    questions.ask(task.id, 1, "Which port?")

    def answer(*args: str):
        return invoke("answer", *args)

    done = answer(task.label, "5433", "--by", "dana")
    assert done.exit_code == 0 and done.stdout == f"{task.label}: answered (Which port?)\n"
    assert "A: 5433" in (q.get_task_notes(task.id) or "")
    again = answer(task.label, "5434")
    assert again.exit_code == 2
    assert again.stderr == f"octopoid: {task.label} has no open question\n"
    assert answer("TASK-999", "x").exit_code == 3  # no such task, as every command says
    assert answer("../x", "x").stderr.startswith("octopoid: invalid task id")


def test_an_answer_releases_only_a_question_s_hold_not_a_rate_limit_s(project: Path) -> None:
    task = q.create_task("backing off")
    later = "2999-01-01T00:00:00Z"
    q.get_store().update(task.id, TaskState.INCOMING, lambda t: t.set_header("NOT_BEFORE", later))
    questions.ask(task.id, 0, "Is the quota raised?")
    questions.answer(task.id, "not yet", "erin")
    assert q.get_task(task.id).headers["NOT_BEFORE"] == later


def test_two_people_answering_at_the_same_instant_give_one_answer(project: Path) -> None:
    import subprocess

    from .support import child_env

    task = q.create_task("asks once")
    questions.ask(task.id, 1, "Which region?")
    argv = [OCTOPOID, "answer", task.label]
    people = [
        subprocess.Popen([*argv, f"region {n}"], env=child_env(project), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for n in range(4)
    ]  # fmt: skip
    codes = sorted(p.wait(timeout=120) for p in people)
    for p in people:
        p.communicate()
    assert codes == [0, 2, 2, 2]
    assert (q.get_task_notes(task.id) or "").count("Q: Which region?") == 1

"""The anthropic backend: the real SDK against a scripted Messages API on 127.0.0.1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.git import branches
from orchestrator.memory.notes import NotesManager
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.queue import steering
from orchestrator.review import verdicts as review

from .helpers.fake_messages_api import FakeMessagesAPI, error, text, tool_use
from .support import branch_file, branch_head, run_claimed

KEY = "sk-ant-api03-test-key-0123456789abcdef"


@pytest.fixture
def anthropic_agent(git_project: Path, monkeypatch: pytest.MonkeyPatch):
    """Runs one attempt of a new task with an anthropic agent against a scripted API."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)

    def run(
        script: list[dict],
        *,
        max_turns: int = 10,
        budget: float | None = None,
        config: str = "",
        on_request=None,
    ):
        with FakeMessagesAPI(script, on_request=on_request) as api:
            lines = [
                "agents:",
                "  - name: api-1",
                "    role: implement",
                "    backend: anthropic",
                "    model: claude-sonnet-4-6",
                f"    base_url: {api.base_url}",
                f"    max_turns: {max_turns}",
                "    command_timeout_seconds: 10",
            ]
            if budget is not None:
                lines.append(f"    max_budget_usd: {budget}")
            (git_project / ".octopoid/agents.yaml").write_text("\n".join(lines) + "\n")
            (git_project / ".octopoid/config.yaml").write_text(
                "prices:\n  claude-sonnet-4-6: {input_per_mtok: 3, output_per_mtok: 15}\n" + config
            )
            tid = q.create_task("make the greeting friendlier").id
            report = run_claimed(q.claim_task(None, "api-1"), "api-1")
        return tid, report, api

    return run


def worktree(tid: str) -> Path:
    return branches.worktree_for(tid)


def test_the_loop_edits_files_and_commits_on_finish(anthropic_agent) -> None:
    tid, report, api = anthropic_agent(
        [
            tool_use(
                "write_file",
                {"path": "src/greet.py", "content": "def greet():\n    return 'hi'\n"},
                say="Creating the module.",
            ),
            tool_use(
                "replace_in_file",
                {"path": "src/greet.py", "old_text": "'hi'", "new_text": "'hello, friend'"},
            ),
            tool_use("run_command", {"command": "git status --short"}),
            tool_use("finish", {"summary": "Friendlier greeting in src/greet.py"}),
        ]
    )
    assert report.next_state == "provisional" and report.commits == 1 and report.turns == 4
    root = config.find_project_root()
    assert branch_head(root, tid).summary == "Friendlier greeting in src/greet.py"
    assert branch_head(root, tid).committer.email == f"TASK-{tid}@agents.octopoid.invalid"
    assert branch_file(root, tid, "src/greet.py") == "def greet():\n    return 'hello, friend'"
    notes = q.get_task_notes(tid)
    assert "Turns: 4 | Commits: 1 | Cost: $0.02" in notes  # 4 x (1000 in, 200 out) at 3/15
    said = [  # the loop's transcript, in order: what the model said, each call, its result
        "Creating the module.",
        '→ write_file: {"path": "src/greet.py", "content": "def greet():\\n    return \'hi\'\\n"}',
        "← wrote 29 chars to src/greet.py",
        "← replaced 1 occurrence in src/greet.py",
        '→ finish: {"summary": "Friendlier greeting in src/greet.py"}',
        "[committed: Friendlier greeting in src/greet.py]",
    ]
    where = [notes.find(line) for line in said]
    assert -1 not in where and where == sorted(where), notes
    status_result = api.requests[3]["messages"][-1]["content"][0]
    assert "?? src/" in status_result["content"] and status_result["is_error"] is False
    assert api.requests[0]["model"] == "claude-sonnet-4-6"
    assert {t["name"] for t in api.requests[0]["tools"]} >= {"read_file", "finish"}
    assert "make the greeting friendlier" in api.requests[0]["messages"][0]["content"]


def test_a_tool_error_goes_back_to_the_model(anthropic_agent) -> None:
    _tid, report, api = anthropic_agent(
        [
            tool_use("replace_in_file", {"path": "README.md", "old_text": "nope", "new_text": "x"}),
            tool_use("write_file", {"path": "README.md", "content": "# better\n"}),
            tool_use("finish", {"summary": "Rewrote the README"}),
        ]
    )
    result = api.requests[1]["messages"][-1]["content"][0]
    assert result["is_error"] is True and "occurs 0 times" in result["content"]
    assert report.next_state == "provisional"


def test_an_overload_is_retried_by_the_sdk(anthropic_agent) -> None:
    _tid, report, api = anthropic_agent(
        [
            error(529),
            tool_use("write_file", {"path": "a.txt", "content": "a\n"}),
            tool_use("finish", {"summary": "added a.txt"}),
        ]
    )
    assert report.next_state == "provisional" and report.turns == 2
    assert len(api.requests) == 3


def test_a_lasting_overload_backs_off_without_spending_an_attempt(anthropic_agent) -> None:
    tid, report, _ = anthropic_agent([error(529)] * 10)
    assert report.outcome == "rate_limited" and report.next_state == "incoming"
    task = q.get_task(tid)
    assert task.not_before is not None and q.attempts_left(task, 3) == 3


def test_path_escapes_are_refused_and_nothing_is_written_outside(
    anthropic_agent, git_project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    tid, report, api = anthropic_agent(
        [
            tool_use("read_file", {"path": "../../../../../../etc/passwd"}),
            tool_use("write_file", {"path": str(outside / "evil.txt"), "content": "x"}),
            tool_use("write_file", {"path": "../escape.txt", "content": "x"}),
            tool_use("run_command", {"command": f"ln -s {outside} link"}),
            tool_use("write_file", {"path": "link/evil.txt", "content": "x"}),
            tool_use("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}),
            tool_use("finish", {"summary": "tried"}),
        ]
    )
    errors = [r["messages"][-1]["content"][0] for r in api.requests[1:]]
    refused = [e for e in errors if e["is_error"]]
    assert len(refused) == 5 and all("refused" in e["content"] for e in refused)
    assert not any(outside.iterdir())
    assert not (worktree(tid).parent / "escape.txt").exists()
    assert report.next_state == "provisional"  # the symlink itself was committed


def test_max_turns_stops_the_loop(anthropic_agent) -> None:
    _tid, report, api = anthropic_agent([tool_use("list_dir", {})] * 10, max_turns=3)
    assert report.outcome == "max_turns" and report.turns == 3 and len(api.requests) == 3
    assert report.next_state == "incoming"


def test_budget_stops_the_loop(anthropic_agent) -> None:
    tid, report, _api = anthropic_agent([tool_use("list_dir", {})] * 10, budget=0.01)
    assert report.outcome == "budget" and report.turns == 2  # $0.006 per turn
    assert "budget" in q.get_task(tid).history[-1]


def test_a_task_s_token_budget_stops_the_loop_and_the_task_waits(anthropic_agent) -> None:
    """1200 tokens a turn against a task budget of 2000: the second turn spends it; the
    attempt stops there (not at the agent's max_turns), notes saved, the task in failed/
    saying which budget, with no dollar budget blamed."""
    tid, report, api = anthropic_agent(
        [tool_use("list_dir", {})] * 10, config="budgets:\n  task:\n    tokens: 2000\n"
    )
    assert report.outcome == "budget" and report.next_state == "failed" and len(api.requests) == 2
    task = q.get_task(tid)
    assert "TASK-" in task.headers["ERROR"] and "task budget (tokens=2000)" in task.headers["ERROR"]
    assert task.headers["TOKENS_TOTAL"] == "2400" and "## Attempt 1" in q.get_task_notes(tid)


def test_the_api_key_never_reaches_notes_or_logs(anthropic_agent) -> None:
    tid, _report, _ = anthropic_agent(
        [
            tool_use(
                "run_command", {"command": "echo key is $ANTHROPIC_API_KEY"}, say=f"My key is {KEY}"
            ),
            tool_use("finish", {"summary": f"done; the key was {KEY}"}),
        ]
    )
    log = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()
    task_file = q.get_task(tid).path.read_text()
    commit = branch_head(config.find_project_root(), tid).message
    for text_ in (q.get_task_notes(tid) or "", log, task_file, commit):
        assert KEY not in text_
    assert "[REDACTED:ANTHROPIC_API_KEY]" in log
    assert re.search(r"^key is\s*$", log, re.M)  # the API call is the runner's: no key in the box


def test_a_missing_api_key_is_reported(anthropic_agent, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    tid, report, api = anthropic_agent([text("hi")])
    assert report.next_state == "incoming" and api.requests == []
    assert "ANTHROPIC_API_KEY is not set" in q.get_task_notes(tid)
    assert q.get_task(tid).state is TaskState.INCOMING


def test_an_unpriced_model_has_an_unknown_cost(anthropic_agent, git_project: Path) -> None:
    from orchestrator.backends.anthropic_api import price_per_token

    assert price_per_token("claude-haiku-4-5-20251001") == (1e-6, 5e-6)  # built-in table
    (git_project / ".octopoid/config.yaml").write_text("")
    assert price_per_token("some-future-model") is None


def test_an_api_agent_asks_through_the_channel_and_its_attempt_ends_needs_input(
    anthropic_agent,
) -> None:
    """The channel's tools in the API loop, inside a real attempt: remember lands in the
    task's notes; an unanswered ask_human holds the task, not counting the attempt."""
    tid, report, api = anthropic_agent(
        [
            tool_use("remember", {"section": "Key Topics", "text": "greetings live in src"}),
            tool_use("ask_human", {"question": "Formal or casual?"}),
            tool_use("finish", {"summary": "asked"}),
        ],
        config="questions: {wait_seconds: 0}\n",
    )
    task = q.get_task(tid)
    assert report.next_state == "incoming" and task.headers["QUESTION"] == "Formal or casual?"
    assert task.headers["INTERRUPTED"] == "1"
    assert "No answer yet" in str(api.requests[2]["messages"][-1])
    assert "greetings live in src" in NotesManager(notes_id=task.label).load_notes()


def test_an_api_agent_proposes_a_split_that_waits_for_a_person(anthropic_agent) -> None:
    split = [{"title": "the module"}, {"title": "its tests", "depends_on": [1]}]
    tid, report, _ = anthropic_agent(
        [tool_use("propose_split", {"subtasks": split}), tool_use("finish", {"summary": "split"})]
    )
    task = q.get_task(tid)
    assert report.next_state == "provisional" and task.headers["PROPOSED_SPLIT"] == "2"
    created = review.approve(tid, "fay")
    assert [t.title for t in created] == ["the module", "its tests"]
    assert created[1].blocked_by == [created[0].id]


def test_a_message_said_mid_attempt_joins_the_conversation_before_the_next_call(
    anthropic_agent,
) -> None:
    """`octopoid say` while the model works on its first turn: the next request carries
    the message as text in the user turn, beside the tool's result; the notes keep it."""

    def say_during_first_call(n: int, body: dict) -> None:
        if n == 0:
            task_id = re.search(r"TASK-(\w+)", body["messages"][0]["content"]).group(1)
            steering.say(task_id, "use the v2 endpoint, not v1")

    tid, report, api = anthropic_agent(
        [
            tool_use("write_file", {"path": "api.txt", "content": "v1\n"}),
            tool_use("finish", {"summary": "Used the v2 endpoint"}),
        ],
        on_request=say_during_first_call,
    )
    assert report.next_state == "provisional" and len(api.requests) == 2
    first, second = api.requests[0]["messages"], api.requests[1]["messages"]
    assert "v2 endpoint" not in str(first)
    turn = second[-1]
    assert turn["role"] == "user" and turn["content"][0]["type"] == "tool_result"
    assert turn["content"][-1]["type"] == "text"
    assert "Message from human" in turn["content"][-1]["text"]
    assert "use the v2 endpoint, not v1" in turn["content"][-1]["text"]
    notes = q.get_task_notes(tid)
    assert "## Message — human" in notes and "[a person says] Message from human" in notes

"""Steering a running attempt: `octopoid say` (notes, the next prompt, `octopoid inbox`),
`octopoid stop` and `octopoid attach` (docs/steering.md)."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from orchestrator import config
from orchestrator.base.processes import TOKEN_ENV, marked_processes
from orchestrator.model.tasks import render_task
from orchestrator.queue import agent_records, steering
from orchestrator.queue import machine as q
from orchestrator.queue.leases import attempts_left
from orchestrator.roles import agent_status

from .helpers.fake_messages_api import FakeMessagesAPI, text, tool_use
from .support import (
    OCTOPOID,
    branch_file,
    child_env,
    invoke,
    prompt_of,
    run_claimed,
    set_config,
    wait_for,
    write_agents,
)
from .support.daemon import QUIET, ended, running, said_in_log, write_agent

TOKEN = "ghp_" + "a1B2" * 9  # a GitHub token's shape: redacted wherever it enters


@contextlib.contextmanager
def listening(root: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """A task's attempt running, its agent asking its inbox: (the task's id, its runner)."""
    write_agents(root)
    tid = q.create_task("listen for a message").id
    with running(root, q.claim_task(None, "impl-1")) as runner:
        wait_for("the agent to listen", lambda: said_in_log(tid, "listening"), 60)
        yield tid, runner


def test_say_refuses_an_unknown_task_an_empty_and_a_huge_message(project: Path) -> None:
    tid = q.create_task("steer me").id
    unknown = invoke("say", "TASK-999", "hello")
    assert unknown.exit_code == 3 and "no task TASK-999" in unknown.output
    empty = invoke("say", tid, "  \n ")
    assert empty.exit_code == 2 and "a message needs words" in empty.output
    huge = invoke("say", tid, "x" * (steering.MAX_MESSAGE_CHARS + 1))
    assert huge.exit_code == 2 and "at most 4000 characters" in huge.output
    assert "Traceback" not in unknown.output + empty.output + huge.output
    assert steering.read(tid) == {}


def test_a_message_is_redacted_noted_and_waits_for_the_next_attempt_s_prompt(
    git_project: Path,
) -> None:
    write_agents(git_project)
    tid = q.create_task("steered before it starts").id
    said = invoke("say", f"task-{tid}", f"use the v2 endpoint, not v1 ({TOKEN})")
    assert said.exit_code == 0, said.output
    assert "for its next attempt's prompt" in said.output
    notes = q.get_task_notes(tid)
    assert "## Message — human (" in notes and "use the v2 endpoint, not v1" in notes
    assert TOKEN not in notes and TOKEN not in str(steering.read(tid))

    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert report.next_state == "provisional"
    prompt = prompt_of(tid, 1)
    assert "## Messages From a Person" in prompt and "use the v2 endpoint, not v1" in prompt
    assert TOKEN not in prompt
    assert steering.read(tid)["waiting"] == []  # delivered once: the next prompt lacks it
    q.reject_completion(tid, "once more")
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert "## Messages From a Person" not in prompt_of(tid, 2)


def test_a_command_agent_reads_a_message_sent_mid_attempt_with_octopoid_inbox(
    git_project: Path,
) -> None:
    with listening(git_project) as (tid, runner):
        said = invoke("say", tid, "use the v2 endpoint")
        assert said.exit_code == 0 and "for its running attempt" in said.output, said.output
        ended(runner)
    assert q.get_task(tid).state.value == "provisional"
    assert "use the v2 endpoint" in branch_file(git_project, tid, "said.txt")
    notes = q.get_task_notes(tid)
    assert "## Message — human" in notes and "inbox: Message from human" in notes
    assert "## Messages From a Person" not in prompt_of(tid, 1)  # it came while running


def test_a_finished_task_takes_no_message(project: Path) -> None:
    tid = q.create_task("finished").id
    q.claim_task(None, "impl-1")
    q.complete_task(tid)
    refused = invoke("say", tid, "too late")
    assert refused.exit_code == 1 and f"TASK-{tid} is done" in refused.output


def test_the_real_claude_cli_takes_a_message_mid_session_with_its_next_request(
    git_project: Path,
    claude_cli: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pinned Claude Code in its box, against the scripted Messages API: a message said
    while the model answers the first request goes out with the next one, as a user turn
    beside the tool's result; the CLI exits once its result is in (stdin closed)."""
    said = "use the v2 endpoint, not v1"

    def say_during_first_call(n: int, body: dict) -> None:
        if n == 0:
            tid = re.search(r"TASK-(\w+)", json.dumps(body["messages"][0])).group(1)
            steering.say(tid, said)
            wait_for("the runner to take it", lambda: not steering.read(tid)["waiting"], 60)

    script = [
        tool_use("Bash", {"command": "echo v1 > api.txt && git add api.txt && "
                          "git commit -q -m 'api: v1'", "description": "commit"}),
        text("Committed api.txt."),
    ]  # fmt: skip
    with FakeMessagesAPI(script, on_request=say_during_first_call) as api:
        for name, value in {**QUIET, "ANTHROPIC_BASE_URL": api.base_url}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-dummy-00000000")
        write_agent(
            git_project, backend="claude-code", claude_path=str(claude_cli),
            allowed_tools=["Bash"], timeout_seconds=120,
        )  # fmt: skip
        tid = q.create_task("commit api.txt").id
        report = run_claimed(q.claim_task(None, "agent-1"), "agent-1")
    assert report.next_state == "provisional", report
    steered = [r for r in api.requests if said in json.dumps(r["messages"])]
    assert steered and steered[0] is api.requests[1]  # the very next request
    last = json.dumps(api.requests[1]["messages"][-2:])
    assert "tool_result" in last and "Message from human" in last
    notes = q.get_task_notes(tid)
    assert "## Message — human" in notes and "[a person says] Message from human" in notes


def test_stop_ends_a_running_attempt_without_counting_it(git_project: Path) -> None:
    """`octopoid stop` mid-attempt, delivered through the store: the runner kills the
    agent, the reason is in the notes, and the task is back in incoming with the attempt
    given back (not against max_attempts, not the breaker's)."""
    write_agents(git_project, env={"OCTO_TEST_SLEEP": "600"}, timeout_seconds=900)
    tid = q.create_task("slow to finish").id
    streak = {"cause": "box", "tasks": ["TASK-x"]}  # a failure no task can fix, just before
    agent_records.record_attempt(
        "impl-1", "TASK-x", "error", 0, None, failure=agent_status.failure("box", "")
    )
    claimed = q.claim_task(None, "impl-1")
    token = claimed.headers["CLAIM_TOKEN"]
    with running(git_project, claimed) as runner:
        wait_for("the agent to work", lambda: said_in_log(tid, "working on"), 60)
        assert marked_processes(**{TOKEN_ENV: token})  # the agent, running
        stopped = invoke("stop", f"TASK-{tid}", "--reason", "wrong approach: use v2")
        assert stopped.exit_code == 0, stopped.output
        assert "attempt 1 stopped; the task is in incoming" in stopped.output
        ended(runner)
    assert marked_processes(**{TOKEN_ENV: token}) == []
    task = q.get_task(tid)
    assert task.state.value == "incoming" and task.headers["INTERRUPTED"] == "1"
    assert attempts_left(task, 3) == 3
    assert "stopped by human: wrong approach: use v2" in render_task(task)  # History
    notes = q.get_task_notes(tid)
    assert "interrupted: stopped by human: wrong approach: use v2" in notes
    record = agent_records.day_records(config.load_agents())["impl-1"]
    assert record["last_outcome"] == "interrupted" and record["systemic"] == streak


def test_stop_refuses_a_task_that_is_not_running(project: Path) -> None:
    tid = q.create_task("waiting").id
    refused = invoke("stop", tid, "--reason", "no")
    assert refused.exit_code == 1 and "no attempt is running" in refused.output
    assert invoke("stop", "TASK-999", "--reason", "no").exit_code == 3


def attach_terminal(root: Path, task_id: str):
    """`octopoid attach` in a real pseudo-terminal."""
    return pexpect.spawn(
        OCTOPOID, ["attach", f"TASK-{task_id}"], cwd=str(root), env=child_env(root),
        encoding="utf-8", timeout=60, dimensions=(50, 200),
    )  # fmt: skip


def test_attach_shows_the_attempt_live_and_a_typed_line_reaches_the_agent(
    git_project: Path,
) -> None:
    with listening(git_project) as (tid, runner):
        term = attach_terminal(git_project, tid)
        term.expect_exact(f"attached to TASK-{tid}, attempt 1")
        term.expect_exact("listening")  # what it said before: the log's tail
        term.sendline("use the v2 endpoint")
        term.expect_exact("[message 1 sent]")
        term.expect_exact("inbox: Message from human")  # the agent's answer, as it came
        term.expect_exact(f"attempt 1 ended; TASK-{tid} is in provisional")
        term.expect(pexpect.EOF)
        term.close()
        assert term.exitstatus == 0
        ended(runner)
    assert "use the v2 endpoint" in branch_file(git_project, tid, "said.txt")


@pytest.mark.parametrize("detach", ["sendeof", "sendintr"])  # Ctrl-D, Ctrl-C
def test_detaching_leaves_the_attempt_running(git_project: Path, detach: str) -> None:
    write_agents(git_project, env={"OCTO_TEST_TICK_SECONDS": "0.2"})
    tid = q.create_task("long-tick").id
    with running(git_project, q.claim_task(None, "impl-1")) as runner:
        wait_for("the agent to tick", lambda: said_in_log(tid, "tick 1\n"), 60)
        term = attach_terminal(git_project, tid)
        term.expect(r"tick (\d+)")
        seen = int(term.match.group(1))
        term.expect_exact(f"tick {seen + 2}\r\n")  # lines arrive as the agent prints them
        getattr(term, detach)()
        term.expect_exact(f"detached from TASK-{tid}; its attempt goes on")
        term.expect(pexpect.EOF)
        term.close()
        assert term.exitstatus == 0
        after = seen + 8
        wait_for("more ticks", lambda: said_in_log(tid, f"tick {after}\n"), 60)
        assert q.get_task(tid).state.value == "claimed"
        steering.ask_stop(tid, "the test is over")
        ended(runner)


def test_attach_to_a_task_with_no_running_attempt_says_so(project: Path) -> None:
    tid = q.create_task("waiting").id
    refused = invoke("attach", tid)
    assert refused.exit_code == 1 and "no attempt is running" in refused.output
    assert invoke("attach", "TASK-999").exit_code == 3


def test_a_stop_while_the_checks_run_gives_the_task_back_uncounted(git_project: Path) -> None:
    set_config(git_project, checks={"commands": ["sleep 600"]})
    write_agents(git_project)
    tid = q.create_task("checked at length").id
    claimed = q.claim_task(None, "impl-1")
    archived = config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log"
    with running(git_project, claimed) as runner:
        wait_for("the agent's notes (the checks come next)", archived.exists, 60)
        stopped = invoke("stop", tid, "--reason", "enough checking")
        assert stopped.exit_code == 0, stopped.output
        ended(runner)
    assert marked_processes(**{TOKEN_ENV: claimed.headers["CLAIM_TOKEN"]}) == []
    task = q.get_task(tid)
    assert task.state.value == "incoming" and attempts_left(task, 3) == 3
    assert "## Stopped — attempt 1" in q.get_task_notes(tid)


def test_the_task_page_sends_a_message_and_asks_a_stop_while_the_attempt_runs(
    git_project: Path, client
) -> None:
    tid = q.create_task("running").id
    q.claim_task(None, "impl-1")
    _, _, page = client.request(f"/tasks/TASK-{tid}")
    assert 'id="say-form"' in page and 'id="stop-form"' in page  # the live tab, and an action
    csrf = client.csrf()
    said = {"csrf": csrf, "message": f"use the v2 endpoint ({TOKEN})"}
    status, headers, _ = client.request(f"/tasks/TASK-{tid}/say", said)
    assert status == 303 and headers["location"].endswith("?done=said")
    assert "use the v2 endpoint" in q.get_task_notes(tid) and TOKEN not in q.get_task_notes(tid)
    assert steering.read(tid)["waiting"][0]["text"].startswith("use the v2 endpoint")
    stop = {"csrf": csrf, "reason": "wrong approach"}
    status, headers, _ = client.request(f"/tasks/TASK-{tid}/stop", stop)
    assert status == 303 and headers["location"].endswith("?done=stop-asked")
    assert steering.stop_asked(tid, 1)["reason"] == "wrong approach"
    status, _, page = client.request(f"/tasks/TASK-{tid}/say", {"csrf": csrf, "message": " "})
    assert status == 400 and "a message needs words" in page

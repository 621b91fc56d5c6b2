"""Memory through a task's life, and the `octopoid memory` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import config
from orchestrator.memory.notes import NotesManager
from orchestrator.memory.store import MemoryStore
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review

from .support import OCTOPOID, cli_output, remembered, run_claimed, wait_for, write_agents


def test_an_agent_learns_and_accept_makes_it_project_memory(git_project: Path) -> None:
    write_agents(git_project)
    tid = q.create_task("learn about the build", context="The build is slow").id
    report = run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    assert report.next_state == "provisional"
    eph = NotesManager(notes_id=f"TASK-{tid}")
    assert "The build is slow" in eph.task_context()
    assert eph.get_section_items("Important Facts") == ["the build cache lives in .cache/build"]
    prompt = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.prompt.md").read_text()
    assert "octopoid memory add" in prompt and "## Relevant Memory" not in prompt
    done = review.accept(tid, "alice")
    assert done.promoted == 1 and not eph.notes_file.exists()
    (hit,) = MemoryStore().search_notes("build cache")
    assert hit["tags"] == [f"TASK-{tid}"] and hit["task_id"] == f"TASK-{tid}"
    assert hit["metadata"] == {
        "source": f"notes.TASK-{tid}.md",
        "task": f"TASK-{tid}",
        "attempt": 1,
        "agent": "impl-1",
        "accepted_by": "alice",
        "accepted_at": done.task.headers["COMPLETED_AT"],
    }
    nxt = q.create_task("speed up the build cache").id
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    prompt = (config.get_logs_dir() / f"TASK-{nxt}" / "attempt-1.prompt.md").read_text()
    assert "## Relevant Memory" in prompt and "the build cache lives in .cache/build" in prompt
    assert MemoryStore().get_note(hit["id"])["access_count"] == 1


def test_reject_and_retry_keep_the_task_notes(git_project: Path) -> None:
    write_agents(git_project)
    tid = q.create_task("learn again").id
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    review.reject(tid, "not yet")
    assert NotesManager(notes_id=f"TASK-{tid}").count_items() == 1


def test_memory_cli(project: Path) -> None:
    assert "added to notes.md" in cli_output(
        "memory", "add", "important facts", "Tests need Redis", "--tag", "ci", "--topic", "testing"
    )
    assert "already in notes.md" in cli_output(
        "memory", "add", "Important Facts", "tests need redis"
    )
    hits = json.loads(cli_output("memory", "search", "redis", "--json"))
    assert [h["content"] for h in hits] == ["Tests need Redis"] and hits[0]["tags"] == ["ci"]
    assert "#" in cli_output("memory", "search", "redis", "--tag", "ci")
    assert "no matching notes" in cli_output("memory", "search", "redis", "--tag", "other")
    assert "- Tests need Redis" in cli_output("memory", "show")
    tid = q.create_task("a task of mine").id
    env = {"OCTOPOID_NOTES_ID": f"TASK-{tid}"}  # a person's, outside any attempt
    assert f"added to notes.TASK-{tid}.md" in cli_output(
        "memory", "add", "File Knowledge", "a.py: x", env=env
    )
    assert f"- [TASK-{tid} by human] a.py: x" in cli_output(
        "memory", "show", "--notes-id", f"TASK-{tid}"
    )
    assert "1 new note in" in cli_output("memory", "promote", f"TASK-{tid}")
    NotesManager.create_ephemeral("TASK-99", "gone")
    assert "removed notes.TASK-99.md" in cli_output("memory", "gc")  # TASK-99 does not exist
    assert cli_output("memory", "remove", f"#{hits[0]['id']}").startswith("removed 1")
    assert "Tests need Redis" not in cli_output("memory", "show")
    cli_output("memory", "add", "Ongoing Threads", "Flaky: retry twice")
    assert cli_output("memory", "remove", "flaky:  retry TWICE").startswith(
        "removed 2"
    )  # file + store
    assert json.loads(cli_output("memory", "search", "flaky", "--json")) == []
    out = cli_output("memory", "remove", "never written", code=1)
    assert "no note matches" in out
    assert "no note matches" in cli_output("memory", "remove", "\u00b2", code=1)  # not an id
    assert "unknown section" in cli_output("memory", "add", "Gossip", "x", code=2)  # bad input
    assert "invalid notes id" in cli_output("memory", "show", "--notes-id", "../x", code=2)


def test_hand_edited_main_notes_are_searchable(project: Path) -> None:
    NotesManager().add_item("Key Topics", "the flaky scheduler test")
    hits = json.loads(cli_output("memory", "search", "flaky", "--json"))
    assert hits and hits[0]["metadata"] == {"source": "notes.md"}


@pytest.mark.slow
def test_the_daemon_loop_promotes_memory(git_project: Path) -> None:
    """claim -> ephemeral notes visible to the command agent -> accept -> searchable."""
    import subprocess

    from .support import child_env

    write_agents(git_project)
    tid = q.create_task("learn under the daemon").id
    proc = subprocess.Popen(
        [OCTOPOID, "scheduler", "run"],
        cwd=git_project,
        env=child_env(git_project),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for("the task in review", lambda: q.get_task(tid).state.value == "provisional")
    finally:
        proc.terminate()
        proc.wait(30)
    cli_output("accept", tid)
    assert MemoryStore().search_notes("build cache")
    assert not NotesManager(notes_id=f"TASK-{tid}").notes_file.exists()


def _accept_with_distill(git_project: Path, reply: str) -> tuple[object, list]:
    from .helpers.fake_messages_api import FakeMessagesAPI, text
    from .support import provisional_with_commit

    NotesManager().add_item("Important Facts", "the old build used make")
    tid = provisional_with_commit(git_project)
    remembered(tid, "builds use nox")
    with FakeMessagesAPI([text(reply)]) as api:
        (git_project / ".octopoid/config.yaml").write_text(
            f"memory:\n  distill: anthropic\n  distill_model: claude-haiku-4-5\n"
            f"  base_url: {api.base_url}\n"
        )
        done = review.accept(tid, "alice")
    return done, api.requests


def test_distillation_applies_a_valid_diff(git_project: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-dummy-123456")
    reply = (
        'Here you go: {"additions": [{"section": "Important Facts", "item": '
        '"builds use nox, not make"}], "removals": ["the old build used make"]}'
    )
    done, requests = _accept_with_distill(git_project, reply)
    assert done.distilled == {"added": 1, "removed": 1}
    assert NotesManager().get_section_items("Important Facts") == ["builds use nox, not make"]
    assert "builds use nox" in requests[0]["messages"][0]["content"]
    assert requests[0]["model"] == "claude-haiku-4-5"


@pytest.mark.parametrize(
    "reply",
    [
        "not json at all",
        '{"additions": [{"section": "Gossip", "item": "x"}], "removals": []}',
        '{"additions": [], "removals": ["an item that does not exist"]}',
    ],
)
def test_distillation_refuses_invalid_replies_and_changes_nothing(
    git_project: Path, monkeypatch, reply
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-dummy-123456")
    done, _ = _accept_with_distill(git_project, reply)
    assert "error" in done.distilled and done.task.state.value == "done"
    assert NotesManager().get_section_items("Important Facts") == ["the old build used make"]


def test_distillation_without_a_key_is_skipped_not_a_crash(git_project: Path, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    done, requests = _accept_with_distill(git_project, '{"additions": [], "removals": []}')
    assert done.task.state.value == "done" and "error" in done.distilled and requests == []

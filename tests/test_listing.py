"""`octopoid list` a page at a time: waiting tasks from the claim index (no file parsed),
done ones newest first from the ledger, the rest by id; `--all` prints every task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.faces import listing
from orchestrator.model import tasks
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

from .support import cli_output, invoke

S = TaskState


@pytest.fixture
def many(project: Path) -> list[str]:
    """120 waiting tasks (every third P0, so claim order is not id order)."""
    return [
        q.create_task(f"task {i}", priority="P0" if i % 3 == 0 else "P2").id for i in range(120)
    ]


def test_a_page_shows_fifty_and_says_how_to_see_the_rest(many: list[str]) -> None:
    out = cli_output("list").splitlines()
    assert out[0].split()[:3] == ["ID", "STATE", "PRI"]
    shown = [line.split()[0] for line in out[1:51]]
    claim_order = [t.label for t in sorted(map(q.get_task, many), key=tasks.claim_order)]
    assert shown == claim_order[:50]
    assert out[51] == "... and 70 more in incoming (octopoid list incoming --page 2, or --all)"
    third = cli_output("list", "incoming", "--page", "3").splitlines()
    assert [line.split()[0] for line in third[1:]] == claim_order[100:]
    assert len(cli_output("list", "--limit", "7").splitlines()) == 1 + 7 + 1


def test_a_page_of_waiting_tasks_parses_no_task_file(many, monkeypatch) -> None:
    parsed = []
    real = tasks.parse_task
    monkeypatch.setattr(tasks, "parse_task", lambda *a, **k: parsed.append(a) or real(*a, **k))
    (section,) = listing.page([S.INCOMING], None)
    assert len(section.lines) == 50 and section.total == 120 and parsed == []
    assert section.lines[0].title.startswith("task ") and section.lines[0].priority == "P0"
    q.get_task(many[0])  # the count does see a task read
    assert len(parsed) == 1


def test_all_prints_every_task_and_json_is_one_array_either_way(many: list[str]) -> None:
    out = cli_output("list", "--all").splitlines()
    assert len(out) == 1 + 120 and "more in" not in "".join(out)
    rows = json.loads(cli_output("list", "--all", "--json"))
    assert sorted(r["id"] for r in rows) == sorted(f"TASK-{i}" for i in many)
    page = json.loads(cli_output("list", "--json"))
    assert len(page) == 50 and page[0]["state"] == "incoming"
    assert cli_output("list", "--limit", "200", "--json") == cli_output("list", "--all", "--json")


def test_all_says_that_it_leaves_done_out(project: Path) -> None:
    q.create_task("finished")
    q.accept_completion(q.submit_completion(q.claim_task(None, "a"), 1, 1).id)
    q.create_task("waits")
    out = cli_output("list", "--all").splitlines()
    assert [line.split()[0] for line in out[1:-1]] == ["TASK-2"]
    assert out[-1] == "(done is left out: 1 task; `octopoid list done --all`)"
    assert cli_output("list", "done", "--all").splitlines()[1].split()[:2] == ["TASK-1", "done"]
    helped = invoke("list", "--help").output
    assert "done is listed only when named" in " ".join(helped.split())


def test_quarantined_files_are_listed_with_why_and_counted_alike_everywhere(
    project: Path,
) -> None:
    """Four entries, one of them no task file at all and one a second file of one name:
    each listed (a page, --all, --json) with its reason; status and doctor both say 4."""
    incoming = project / ".octopoid/runtime/queue/incoming"
    for name, data in [("TASK-50.md", b"junk"), ("notes.txt", b"x"), ("TASK-70.md", b"1")]:
        (incoming / name).write_bytes(data)
        q.list_tasks("incoming")
    (incoming / "TASK-70.md").write_bytes(b"2")
    q.list_tasks("incoming")
    names = ["TASK-50.md", "TASK-70.md", "TASK-70.md.1", "notes.txt"]
    out = cli_output("list", "quarantine").splitlines()
    assert [line.split()[0] for line in out[1:]] == names and "more in" not in "".join(out)
    assert "unreadable: file name 'notes.txt' is not TASK-<id>.md" in out[4]
    assert cli_output("list", "quarantine", "--page", "2") == "no tasks\n"
    assert [line.split()[0] for line in cli_output("list", "--all").splitlines()[1:]] == names
    rows = json.loads(cli_output("list", "quarantine", "--json"))
    assert [r["id"] for r in rows] == names and all(r["error"] for r in rows)
    assert json.loads(cli_output("status", "--json"))["counts"]["quarantine"] == 4
    assert "4 unreadable file(s) in quarantine/" in cli_output("doctor")


def test_done_lists_newest_first_and_a_role_filters(project: Path) -> None:
    made = [q.create_task(f"done {i}", role="review" if i % 2 else "implement") for i in range(5)]
    for task in made:  # claimed, submitted, accepted: done in this order
        claimed = q.claim_task(task.role, "agent")
        q.submit_completion(claimed.id, commits_count=1, turns_used=1)
        q.accept_completion(claimed.id)
    out = cli_output("list", "done").splitlines()
    assert [line.split()[0] for line in out[1:]] == [t.label for t in reversed(made)]
    reviews = cli_output("list", "done", "--role", "review").splitlines()
    assert [line.split()[0] for line in reviews[1:]] == [made[3].label, made[1].label]
    q.create_task("waits", role="review")
    q.create_task("waits too")
    assert [ln.split()[3] for ln in cli_output("list", "--role", "review").splitlines()[1:]] == [
        "review"
    ]


def test_an_empty_project_lists_no_tasks(project: Path) -> None:
    assert cli_output("list") == "no tasks\n"
    assert (
        cli_output("list", "--all")
        == "ID          STATE         PRI  ROLE        ATT  BLOCKED         TITLE\nno tasks\n"
    )

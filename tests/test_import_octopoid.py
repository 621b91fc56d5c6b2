"""`octopoid import-octopoid`: an octopoid checkout's queue, notes and state.db, brought in.

The tree is generated as octopoid (maxthelion/octopoid, its file-queue era) writes it:
create_task's template, then the ``KEY: value`` paragraphs each transition appends, the
``## Error`` / ``## Rejection Details`` sections, and its notes format.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.faces import importer
from orchestrator.model.exceptions import InvalidInput
from orchestrator.model.tasks import TaskState, format_time, read_task_file, render_task
from orchestrator.queue import machine as q
from orchestrator.queue.task_notes import notes_summary

from .support import invoke

S = TaskState
CREATED = "2026-02-05T10:00:00.123456"  # octopoid wrote datetime.now().isoformat(): local


def local_to_utc(value: str) -> str:
    return format_time(datetime.fromisoformat(value).astimezone(UTC))


class Octopoid:
    """An octopoid checkout's ``.orchestrator/`` being written the way octopoid writes it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.orch = root / ".orchestrator"
        (self.orch / "shared" / "notes").mkdir(parents=True)

    def task(
        self,
        state: str,
        task_id: str,
        title: str,
        role: str = "implement",
        blocked_by: str | None = None,
        project: str | None = None,
        criteria: tuple[str, ...] = ("It works", "Tests pass"),
    ) -> Path:
        folder = self.orch / "shared" / "queue" / state
        folder.mkdir(parents=True, exist_ok=True)
        project_line = f"PROJECT: {project}\n" if project else ""
        blocked_line = f"BLOCKED_BY: {blocked_by}\n" if blocked_by else ""
        checklist = "\n".join(f"- [ ] {c}" for c in criteria)
        path = folder / f"TASK-{task_id}.md"
        path.write_text(
            f"# [TASK-{task_id}] {title}\n\nROLE: {role}\nPRIORITY: P1\nBRANCH: main\n"
            f"CREATED: {CREATED}\nCREATED_BY: human\n{project_line}{blocked_line}\n"
            f"## Context\nWhy {title.lower()} matters.\n\n## Acceptance Criteria\n{checklist}\n"
        )
        return path

    @staticmethod
    def append(path: Path, text: str) -> None:
        with open(path, "a") as f:
            f.write(text)

    def claimed(self, path: Path, agent: str = "impl-agent-1", at: str = CREATED) -> None:
        self.append(path, f"\nCLAIMED_BY: {agent}\nCLAIMED_AT: {at}\n")

    def notes(self, task_id: str, *attempts: str) -> None:
        text = f"# Agent Notes: TASK-{task_id}\n"
        for n, output in enumerate(attempts, 1):
            text += f"\n## Attempt {n} — impl-agent-1 ({CREATED})\nTurns: 50 | Commits: 0\n\n"
            text += f"{output}\n\n"
        (self.orch / "shared" / "notes" / f"TASK-{task_id}.md").write_text(text)


@pytest.fixture
def octo(tmp_path: Path) -> Octopoid:
    """A tree with tasks in every octopoid state, a BLOCKED_BY chain and notes."""
    o = Octopoid(tmp_path / "old-checkout")
    o.task("incoming", "a1000001", "Plain waiting task", project="PROJ-1")
    o.task("incoming", "c1000001", "Chain one", role="chain")
    o.task("incoming", "c1000002", "Chain two", role="chain", blocked_by="c1000001")
    o.task("incoming", "c1000003", "Chain three", role="chain", blocked_by="c1000002")
    claimed = o.task("claimed", "b1000001", "Half done")
    o.claimed(claimed)
    o.notes("b1000001", "explored src/, found auth.py\n## not a heading", "added a test")
    back = o.task("incoming", "e1000002", "Rejected by review")
    o.claimed(back)
    o.append(back, "\nSUBMITTED_AT: 2026-02-05T11:00:00\nCOMMITS_COUNT: 0\nTURNS_USED: 90\n")
    o.append(
        back,
        "\nREJECTED_AT: 2026-02-05T11:05:00\nREJECTION_REASON: no commits\n"
        "ATTEMPT_COUNT: 1\nREJECTED_BY: pre-check\n",
    )
    prov = o.task("provisional", "d1000001", "Waiting for review")
    o.claimed(prov)
    o.append(prov, "\nSUBMITTED_AT: 2026-02-05T12:00:00\nCOMMITS_COUNT: 3\nTURNS_USED: 40\n")
    done = o.task("done", "f1000001", "Finished")
    o.append(done, "\nACCEPTED_AT: 2026-02-05T13:00:00\nACCEPTED_BY: gatekeeper\n")
    o.notes("f1000001", "left behind")
    failed = o.task("failed", "a2000001", "Broke")
    o.claimed(failed)
    o.append(
        failed, "\nFAILED_AT: 2026-02-05T14:00:00\n\n## Error\n```\nImportError: no foo\n```\n"
    )
    rejected = o.task("rejected", "a3000001", "Already there")
    o.claimed(rejected)
    o.append(
        rejected,
        "\nREJECTED_AT: 2026-02-05T15:00:00\nREJECTION_REASON: already_implemented\n"
        "REJECTED_BY: impl-agent-1\n\n## Rejection Details\nauth.py has it\n",
    )
    escalated = o.task("escalated", "a4000001", "Too big")
    o.append(escalated, "\nESCALATED_AT: 2026-02-05T16:00:00\nPLAN_ID: a4000099\n")
    o.task("recycled", "a5000001", "Recycled away")
    o.task("incoming", "a6000001", "Waits on the recycled one", blocked_by="a5000001")
    (o.orch / "shared" / "queue" / "incoming" / "README.md").write_text("queue notes\n")
    return o


EXPECTED = {
    "a1000001": S.INCOMING,
    "c1000001": S.INCOMING,
    "c1000002": S.INCOMING,
    "c1000003": S.INCOMING,
    "b1000001": S.INCOMING,
    "e1000002": S.INCOMING,
    "d1000001": S.PROVISIONAL,
    "f1000001": S.DONE,
    "a2000001": S.FAILED,
    "a3000001": S.REJECTED,
    "a4000001": S.BREAKDOWN,
    "a6000001": S.INCOMING,
}


def snapshot(project: Path) -> dict[str, bytes]:
    runtime = project / ".octopoid/runtime"
    files = [*runtime.glob("queue/*/TASK-*.md"), *runtime.glob("shared/notes/*")]
    return {str(p.relative_to(runtime)): p.read_bytes() for p in files}


def test_every_state_lands_where_the_mapping_says(project: Path, octo: Octopoid) -> None:
    source = {p: p.read_bytes() for p in octo.root.rglob("*") if p.is_file()}
    report = importer.import_octopoid(octo.root)
    assert {p: p.read_bytes() for p in octo.root.rglob("*") if p.is_file()} == source
    assert {q.get_task(i).state for i in EXPECTED} == set(EXPECTED.values())
    for task_id, state in EXPECTED.items():
        task = q.get_task(task_id)
        assert task.state is state, task_id
        assert task.headers["IMPORTED_FROM"].startswith("octopoid ")
        assert task.headers["CREATED"] == local_to_utc(CREATED)
        assert task.criteria == ["It works", "Tests pass"]  # appended lines are not criteria
    assert len(report.imported) == len(EXPECTED) and not report.already
    problems = "\n".join(report.problems)
    assert "TASK-a5000001: octopoid state 'recycled' has no counterpart" in problems
    assert "TASK-a6000001: stuck: TASK-a5000001 does not exist" in problems
    assert "queue/incoming/README.md: not a task file" in problems
    assert "TASK-f1000001: notes not imported (done tasks keep none)" in problems


def test_headers_history_and_state_details_are_kept(project: Path, octo: Octopoid) -> None:
    importer.import_octopoid(octo.root)
    plain = q.get_task("a1000001")
    assert plain.headers["PROJECT"] == "PROJ-1" and plain.headers["CREATED_BY"] == "human"
    assert plain.context == "Why plain waiting task matters."
    claimed = q.get_task("b1000001")
    assert "CLAIMED_BY" not in claimed.headers and claimed.headers["IMPORTED_FROM"] == (
        "octopoid claimed"
    )
    assert claimed.history[0].endswith("octopoid: created  (human)")
    assert claimed.history[1].endswith("octopoid: claimed  (impl-agent-1)")
    assert claimed.history[-1].endswith(
        "octopoid claimed → incoming  (import-octopoid: the claim by impl-agent-1 ended)"
    )
    prov = q.get_task("d1000001")
    assert (prov.headers["COMMITS"], prov.headers["TURNS"]) == ("3", "40")
    assert prov.headers["SUBMITTED_AT"] == local_to_utc("2026-02-05T12:00:00")
    assert q.get_task("f1000001").headers["ACCEPTED_BY"] == "gatekeeper"
    assert q.get_task("a2000001").headers["ERROR"] == "ImportError: no foo"
    rejected = q.get_task("a3000001")
    assert rejected.headers["REJECT_REASON"] == "already_implemented"
    assert rejected.headers["REJECT_DETAILS"] == "auth.py has it"
    assert rejected.section("Rejection Details") == "auth.py has it\n\n"
    escalated = q.get_task("a4000001")
    assert escalated.headers["PLAN_ID"] == "a4000099"
    assert escalated.history[1].endswith("octopoid: escalated  (octopoid: a4000099)")


def test_a_number_too_long_for_int_is_a_dropped_header_not_a_crash(
    project: Path, tmp_path: Path
) -> None:
    """``int`` refuses over 4,300 digits (and ``isdigit`` passes ``²``): each header is
    dropped with its reason, the task still comes in."""
    o = Octopoid(tmp_path / "old-checkout")
    prov = o.task("provisional", "d1000001", "Waiting for review")
    o.append(prov, f"\nCOMMITS_COUNT: {'9' * 5000}\nTURNS_USED: \u00b2\n")
    report = importer.import_octopoid(o.root)
    task = q.get_task("d1000001")
    assert task.state is S.PROVISIONAL and "COMMITS" not in task.headers
    assert "TURNS" not in task.headers
    dropped = [p for p in report.problems if "is not usable here; dropped" in p]
    assert len(dropped) == 2, report.problems


def test_notes_are_converted_and_attempts_continue(project: Path, octo: Octopoid) -> None:
    importer.import_octopoid(octo.root)
    notes = q.get_task_notes("b1000001")
    assert notes.startswith("# Agent Notes: TASK-b1000001\n")
    assert notes_summary("b1000001") == {"attempts": 2, "reviews": 0}  # '## not a heading' fenced
    assert "```text\nexplored src/, found auth.py\n## not a heading\n```" in notes
    assert q.get_task("b1000001").attempts == 2
    review = q.get_task("e1000002")
    assert notes_summary("e1000002") == {"attempts": 0, "reviews": 1}
    assert "Review — rejected by pre-check" in q.get_task_notes("e1000002")
    assert review.attempts == 1 and q.attempts_left(review, 3) == 3  # a fresh budget
    assert q.get_task_notes("f1000001") is None
    while (got := q.claim_task("implement", "impl-agent-1")) and got.id != "b1000001":
        pass
    q.save_task_notes("b1000001", "impl-agent-1", "third try")  # numbered on from octopoid's
    assert "## Attempt 3 — impl-agent-1" in q.get_task_notes("b1000001")


def test_round_trips_through_show(project: Path, octo: Octopoid) -> None:
    importer.import_octopoid(octo.root)
    for task_id, state in EXPECTED.items():
        path = project / ".octopoid/runtime/queue" / state.value / f"TASK-{task_id}.md"
        assert render_task(read_task_file(path)) == path.read_text()
        result = invoke("show", f"TASK-{task_id}")
        assert result.exit_code == 0, result.output
        assert f"TASK-{task_id} is in {state.value}" in result.output
        assert path.read_text() in result.output


def test_blocked_chain_still_runs_in_order(project: Path, octo: Octopoid) -> None:
    importer.import_octopoid(octo.root)
    order = []
    while (task := q.claim_task("chain", "chain-agent")) is not None:
        order.append(task.id)
        assert q.claim_task("chain", "chain-agent") is None  # the next waits for this one
        q.complete_task(task, "done")
    assert order == ["c1000001", "c1000002", "c1000003"]


def test_running_it_twice_changes_nothing(project: Path, octo: Octopoid) -> None:
    first = importer.import_octopoid(octo.root)
    before = snapshot(project)
    second = importer.import_octopoid(octo.root)
    assert snapshot(project) == before
    assert not second.imported and sorted(second.already) == sorted(f"TASK-{i}" for i in EXPECTED)
    assert set(second.problems) <= set(first.problems)


def test_a_task_of_this_project_with_the_same_id_is_left_alone(
    project: Path, octo: Octopoid
) -> None:
    mine = q.create_task("mine")
    octo.task("incoming", mine.id, "theirs")
    report = importer.import_octopoid(octo.root)
    assert f"TASK-{mine.id}: a task with this id is already here; left alone" in report.problems
    assert q.get_task(mine.id).title == "mine"


def test_octopoid_paths_drive_imported_tasks(project: Path, octo: Octopoid) -> None:
    importer.import_octopoid(octo.root)
    old = octo.orch / "shared" / "queue" / "provisional" / "TASK-d1000001.md"
    done = q.accept_completion(old, validator="gatekeeper")
    assert done == project / ".octopoid/runtime/queue/done/TASK-d1000001.md"


def test_state_db_decides_the_state_blockers_and_history(project: Path, tmp_path: Path) -> None:
    o = Octopoid(tmp_path / "db-checkout")
    o.task("incoming", "k1000001", "Claimed in the db only")  # db mode: claims moved no file
    o.task("provisional", "k1000002", "Accepted in the db")
    o.task("incoming", "k1000003", "Unblocked in the db", blocked_by="k1000009")
    with sqlite3.connect(o.orch / "state.db") as db:
        db.executescript(
            "CREATE TABLE tasks (id TEXT PRIMARY KEY, file_path TEXT NOT NULL UNIQUE,"
            " queue TEXT NOT NULL DEFAULT 'incoming', priority TEXT DEFAULT 'P2', role TEXT,"
            " branch TEXT DEFAULT 'main', blocked_by TEXT, claimed_by TEXT, claimed_at DATETIME,"
            " commits_count INTEGER DEFAULT 0, turns_used INTEGER,"
            " attempt_count INTEGER DEFAULT 0, project_id TEXT,"
            " created_at DATETIME DEFAULT CURRENT_TIMESTAMP);"
            "CREATE TABLE task_history (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " task_id TEXT NOT NULL, event TEXT NOT NULL, agent TEXT, details TEXT,"
            " timestamp DATETIME DEFAULT CURRENT_TIMESTAMP);"
        )
        queue = o.orch / "shared" / "queue"
        rows = [
            ("k1000001", queue / "incoming/TASK-k1000001.md", "claimed", None, 2),
            ("k1000002", queue / "provisional/TASK-k1000002.md", "done", None, 1),
            ("k1000003", queue / "incoming/TASK-k1000003.md", "incoming", None, 0),
            ("k1000004", queue / "incoming/TASK-k1000004.md", "incoming", None, 0),
        ]
        db.executemany(
            "INSERT INTO tasks (id, file_path, queue, blocked_by, attempt_count)"
            " VALUES (?, ?, ?, ?, ?)",
            [(i, str(p), s, b, a) for i, p, s, b, a in rows],
        )
        db.execute(
            "INSERT INTO task_history (task_id, event, agent, details, timestamp)"
            " VALUES ('k1000001', 'claimed', 'impl-agent-2', NULL, '2026-02-06 09:30:00')"
        )
    db_mtime = (o.orch / "state.db").stat().st_mtime_ns
    report = importer.import_octopoid(o.root)
    assert (o.orch / "state.db").stat().st_mtime_ns == db_mtime  # only read
    claimed = q.get_task("k1000001")
    assert claimed.state is S.INCOMING and claimed.attempts == 2
    assert claimed.headers["IMPORTED_FROM"] == "octopoid claimed"
    assert claimed.history[0] == "2026-02-06T09:30:00Z  octopoid: claimed  (impl-agent-2)"
    assert q.get_task("k1000002").state is S.DONE
    assert q.get_task("k1000003").blocked_by == []  # state.db had cleared it
    assert "TASK-k1000004: in state.db (incoming) but has no task file" in report.problems


def test_cli_imports_and_reports(project: Path, octo: Octopoid) -> None:
    result = invoke("import-octopoid", str(octo.root))
    assert result.exit_code == 0, result.output
    assert "imported TASK-b1000001: claimed -> incoming" in result.output
    assert f"{len(EXPECTED)} tasks imported, 0 already here" in result.output
    assert "could not map" in result.output and "recycled" in result.output
    again = invoke("import-octopoid", str(octo.root))
    assert f"0 tasks imported, {len(EXPECTED)} already here" in again.output


def test_a_folder_without_an_octopoid_queue_is_refused(project: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no octopoid queue"):
        importer.import_octopoid(tmp_path)
    result = invoke("import-octopoid", str(tmp_path))
    assert result.exit_code == 2 and "no octopoid queue" in result.output

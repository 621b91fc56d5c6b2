"""What keeps status and claims flat: the index's listing diff, the usage ledger, relaxed
durability, lean imports, and `octopoid doctor`."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.faces import doctor, reports
from orchestrator.model.tasks import TaskState, new_task, render_task
from orchestrator.queue import machine as q
from orchestrator.queue.store import files
from orchestrator.review import verdicts as review

from .support import OCTOPOID, child_env, invoke, write_agents


def drop_by_hand(root: Path, task_id: str, title: str, **fields) -> Path:
    path = root / f".octopoid/runtime/queue/incoming/TASK-{task_id}.md"
    path.write_text(render_task(new_task(task_id, title, **fields)))
    return path


def test_a_task_dropped_by_hand_is_found_and_an_editors_save_is_reread(project, monkeypatch):
    q.create_task("made by octopoid", priority="P2")
    assert q.get_store().waiting()[0].id == "1"  # the index is built and synced
    reads = []
    real = files.FolderStore._read_or_quarantine
    monkeypatch.setattr(
        files.FolderStore, "_read_or_quarantine", lambda s, p: reads.append(p.name) or real(s, p)
    )
    drop_by_hand(project, "90", "dropped in", priority="P0")
    assert [w.id for w in q.get_store().waiting()] == ["90", "1"]
    assert reads == ["TASK-90.md"]  # only the new name was read, not the whole folder
    tmp = project / ".octopoid/runtime/queue/incoming/.edit"
    tmp.write_text(render_task(new_task("1", "made by octopoid", priority="P0")))
    os.replace(tmp, project / ".octopoid/runtime/queue/incoming/TASK-1.md")  # a new inode
    assert q.claim_task(None, "a").id == "1"  # re-read: now P0 and older than TASK-90


def test_status_takes_usage_from_the_ledger_without_reading_done_tasks(project, monkeypatch):
    for title, turns in (("a", 5), ("b", 7)):
        claim = q.claim_task(None, "x") if q.create_task(title) else None
        q.record_usage(claim, turns, turns / 10)
        q.complete_task(claim)
    monkeypatch.setattr(
        files.FolderStore,
        "list",
        lambda self, state: (  # tasks in flight (claimed, in review) only: never done/
            pytest.fail(f"read {state.value}")
            if state not in (TaskState.CLAIMED, TaskState.PROVISIONAL)
            else []
        ),
    )
    usage = reports.status_summary()["usage"]
    assert usage["turns"] == 12 and usage["cost_usd"] == pytest.approx(1.2)
    assert [t["id"] for t in usage["tasks"]] == ["TASK-2", "TASK-1"]


def test_doctor_rebuild_restores_a_lost_index_and_ledger(project):
    claim = q.claim_task(None, "x") if q.create_task("a") else None
    q.record_usage(claim, 3, 0.3)
    q.requeue_task(claim, "back")
    q.create_task("b", blocked_by=["1"])
    db = project / ".octopoid/runtime/queue/.claim-index.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM ledger")
        conn.execute("DELETE FROM incoming")
    lines = doctor.examine(rebuild=True)
    assert "rebuilt the claim index and usage ledger from 2 tasks" in lines
    assert reports.status_summary()["usage"]["turns"] == 3
    assert [w.id for w in q.get_store().waiting()] == ["1", "2"]


def test_doctor_repairs_a_half_written_move_and_names_an_interrupted_accept(project):
    tid = q.create_task("t").id
    claimed = project / ".octopoid/runtime/queue/claimed"
    incoming = project / ".octopoid/runtime/queue/incoming"
    text = (incoming / f"TASK-{tid}.md").read_text()
    (claimed / f".TASK-{tid}.md.new").write_text(text.replace("ATTEMPTS: 0", "ATTEMPTS: 1"))
    os.rename(incoming / f"TASK-{tid}.md", claimed / f".TASK-{tid}.md.old")  # killed here
    other = q.create_task("half accepted").id
    q.submit_completion(q.claim_task(None, "x"), 1, 1)
    q.get_store().update(other, TaskState.PROVISIONAL, lambda t: t.set_header("MERGED", "ab12"))
    lines = doctor.examine()
    assert f"repaired TASK-{tid} in claimed: its interrupted write finished" in lines
    assert any(f"TASK-{other}: an accept stopped half-way" in line for line in lines)
    assert q.get_task(tid).attempts == 1


def test_relaxed_durability_never_fsyncs_but_still_moves_by_rename(project, monkeypatch):
    (project / ".octopoid/config.yaml").write_text("durability: relaxed\n")
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    claim = q.claim_task(None, "x") if q.create_task("t") else None
    q.submit_completion(claim, 1, 1)
    assert calls == []
    assert q.get_task(claim.id).state is TaskState.PROVISIONAL
    (project / ".octopoid/config.yaml").write_text("durability: durable\n")
    q.accept_completion(claim.id)
    assert calls  # the durable default fsyncs again


def test_list_status_and_show_never_import_gitpython_or_anthropic(git_project):
    """Not even with a task in review, once its merge check is cached (the first status
    after a branch moves runs git merge-tree through GitPython)."""
    from .support import provisional_with_commit

    provisional_with_commit(git_project)
    q.create_task("t")
    subprocess.run([OCTOPOID, "status"], cwd=git_project, env=child_env(git_project), check=True,
                   capture_output=True)  # fmt: skip
    probe = (
        "import sys; from orchestrator.faces.cli.main import main\n"
        "sys.argv = ['octopoid', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('git', 'anthropic', 'detect_secrets') if m in sys.modules "
        "and type(sys.modules[m]).__name__ != '_LazyModule']  # imported, not just named\n"
        "print('HEAVY', heavy)"
    )
    for args in (["list"], ["status"], ["show", "1"], ["--help"]):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args],
            cwd=git_project,
            env=child_env(git_project),
            capture_output=True,
            text=True,
        )
        assert "HEAVY []" in done.stdout, (args, done.stdout[-300:], done.stderr[-500:])


def test_the_doctor_command_says_all_is_well(git_project):
    write_agents(git_project)  # a command agent: it can run here
    done = subprocess.run(
        [OCTOPOID, "doctor"], cwd=git_project, env=child_env(git_project), capture_output=True
    )
    assert done.returncode == 0 and b"all is well" in done.stdout


def test_a_task_added_while_the_index_rescans_stays_claimable(project):
    q.create_task("first")
    store = q.get_store()
    real_scan = type(store.index)._scan

    def scan_then_add(index):
        yield from real_scan(index)  # the listing is taken; then another process adds one
        q.create_task("added meanwhile")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(store.index), "_scan", scan_then_add)
        store.index.reconcile(store._read_or_quarantine)
    assert [w.id for w in store.waiting()] == ["1", "2"]


PAUSED_CREATE = r"""
import os, sys, time
from pathlib import Path
from orchestrator.queue import machine as q
from orchestrator.queue.store.claim_index import ClaimIndex

go = Path(sys.argv[1])
real = ClaimIndex.note_own_write

def paused(self):
    while not go.exists():  # the task is linked into incoming/; its mtime not yet recorded
        time.sleep(0.01)
    real(self)

ClaimIndex.note_own_write = paused
q.create_task("in flight")
"""


def test_a_claim_waits_for_a_write_in_flight_rather_than_rescan_the_folder(project, tmp_path):
    q.create_task("first")
    store = q.get_store()
    assert not store.index.is_stale()
    go = tmp_path / "go"
    child = subprocess.Popen([sys.executable, "-c", PAUSED_CREATE, str(go)], env=child_env(project))
    incoming = project / ".octopoid/runtime/queue/incoming"
    try:
        for _ in range(500):
            if (incoming / "TASK-2.md").exists() or child.poll() is not None:
                break
            time.sleep(0.01)
        assert (incoming / "TASK-2.md").exists(), "the child never linked its task"
        answer: list[bool] = []
        checker = threading.Thread(target=lambda: answer.append(store.index.is_stale()))
        checker.start()
        checker.join(0.5)
        assert checker.is_alive(), "the claim did not wait for the write in flight"
        go.touch()
        checker.join(30)
        assert answer == [False]  # the write recorded its mtime: no rescan needed
    finally:
        go.touch()
        assert child.wait(30) == 0
    assert [w.id for w in store.waiting()] == ["1", "2"]


GATE_SQUATTER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_SH)  # a hostile (or stopped) process holding the gate for ever
print("holding", flush=True)
time.sleep(600)
"""


def test_a_process_squatting_on_the_writer_gate_delays_claims_but_never_stalls_them(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.model import defaults

    monkeypatch.setattr(defaults, "WRITER_GATE_WAIT_SECONDS", 0.3)
    q.create_task("first", priority="P2")
    store = q.get_store()
    squatter = subprocess.Popen(
        [sys.executable, "-c", GATE_SQUATTER, str(store.index.writes.path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert squatter.stdout.readline().strip() == "holding"
        drop_by_hand(project, "90", "dropped in", priority="P0")
        got: list[str] = []
        started = time.monotonic()
        claimer = threading.Thread(target=lambda: got.append(q.claim_task(None, "a").id))
        claimer.start()
        claimer.join(10)
        assert not claimer.is_alive(), "the claim stalled behind the squatter"
        assert got == ["90"]  # rescanned after the wait, so the dropped task was found
        assert time.monotonic() - started >= 0.3
    finally:
        squatter.kill()
        squatter.wait(10)


def test_a_task_sent_back_twice_with_the_same_refusal_is_called_bouncing(project: Path) -> None:
    tid = q.create_task("loops on a conflict").id
    conflict = f"merging agent/TASK-{tid} conflicts in: README.md; rebase it"
    for _ in range(2):
        q.submit_completion(q.claim_task(None, "impl-1"), 1, 1)
        review.reject(tid, conflict, "bob")
    said = f"TASK-{tid} keeps coming back with the same refusal (2 times in a row: {conflict})"
    assert [line for line in doctor.examine() if said in line]  # waiting in incoming
    assert "octopoid close" in next(line for line in doctor.examine() if said in line)

    q.claim_task(None, "impl-1")  # in flight again: status says it too
    status = invoke("status")
    assert said in status.output
    found = json.loads(invoke("status", "--json").output)["bouncing"]
    assert found == [{"id": f"TASK-{tid}", "times": 2, "refusal": conflict}]
    q.submit_completion(q.get_task(tid), 1, 1)
    review.reject(tid, "the tests are missing", "bob")  # another refusal: no longer a loop
    assert not [line for line in doctor.examine() if "keeps coming back" in line]

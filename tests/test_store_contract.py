"""The QueueStore contract: every store (the folder store and PostgreSQL) passes this.

Add a store by adding a factory to STORES; nothing else here may know which store it tests.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.model.exceptions import (
    IllegalTransition,
    JournalBusy,
    LostRace,
    RecordChanged,
    TaskNotFound,
)
from orchestrator.model.tasks import Task, TaskState, new_task, utcnow
from orchestrator.queue.store import QueueStore
from orchestrator.queue.store.records import LATER, Journal, JournalKind, key_part

from .helpers.records_worker import open_store
from .support import helper_cmd, wait_for

S = TaskState


#: How each store is named to a process (``helpers/records_worker.open_store``), so that
#: other processes can race this one on the same store.
STORES: dict[str, Callable[[pytest.FixtureRequest], str]] = {
    "folder": lambda request: f"folder:{request.getfixturevalue('tmp_path') / 'queue'}",
    "postgres": lambda request: f"postgres:{request.getfixturevalue('pg_dsn')}",
}


@pytest.fixture(params=sorted(STORES))
def spec(request: pytest.FixtureRequest) -> str:
    return STORES[request.param](request)


@pytest.fixture
def store(spec: str) -> Iterator[QueueStore]:
    store = open_store(spec)
    yield store
    getattr(store, "close", lambda: None)()  # a database store's connections


def add(store: QueueStore, title: str = "t", **fields) -> Task:
    return store.add(new_task(store.allocate_id(), title, **fields), S.INCOMING)


def claim(store: QueueStore, role: str | None = None, now=None) -> Task | None:
    return store.claim(role, lambda t: t.set_header("CLAIMED_BY", "x"), now or utcnow())


def test_initialize_is_idempotent(store: QueueStore) -> None:
    store.initialize()
    store.initialize()
    assert all(store.count(state) == 0 for state in S)


def test_ids_are_sequential(store: QueueStore) -> None:
    assert [store.allocate_id() for _ in range(3)] == ["1", "2", "3"]


def test_add_get_locate_count(store: QueueStore) -> None:
    task = add(store, "hello")
    assert store.locate(task.id) is S.INCOMING and store.count(S.INCOMING) == 1
    again = store.get(task.id)
    assert again.title == "hello" and again.state is S.INCOMING
    with pytest.raises(IllegalTransition, match="already exists"):
        store.add(new_task(task.id, "dup"), S.INCOMING)
    with pytest.raises(TaskNotFound):
        store.get("nope")
    assert store.locate("nope") is None


def test_move_applies_the_change_and_reports_a_lost_race(store: QueueStore) -> None:
    task = add(store)
    moved = store.move(task.id, S.INCOMING, S.FAILED, lambda t: t.set_header("ERROR", "x"))
    assert moved.state is S.FAILED and store.get(task.id).headers["ERROR"] == "x"
    assert store.count(S.INCOMING) == 0 and store.count(S.FAILED) == 1
    with pytest.raises(LostRace):
        store.move(task.id, S.INCOMING, S.DONE, lambda t: None)


def test_a_refusing_guard_changes_nothing(store: QueueStore) -> None:
    task = add(store)
    assert store.move(task.id, S.INCOMING, S.DONE, lambda t: None, guard=lambda t: False) is None
    assert store.locate(task.id) is S.INCOMING


def test_update_rewrites_in_place(store: QueueStore) -> None:
    task = add(store)
    store.update(task.id, S.INCOMING, lambda t: t.set_header("NOTE", "kept"))
    assert store.get(task.id).headers["NOTE"] == "kept"
    with pytest.raises(LostRace):
        store.update(task.id, S.CLAIMED, lambda t: None)


def test_list_is_in_claim_order(store: QueueStore) -> None:
    base = utcnow()
    for i, prio in enumerate(["P2", "P0", "P1", "P0"]):
        add(store, f"t{i}", priority=prio, now=base + timedelta(seconds=i))
    assert [t.title for t in store.list(S.INCOMING)] == ["t1", "t3", "t2", "t0"]


def test_claim_order_role_blockers_and_not_before(store: QueueStore) -> None:
    now = utcnow()
    first = add(store, "first", priority="P3", now=now)
    add(store, "blocked", priority="P0", blocked_by=[first.id], now=now)
    add(store, "review", role="review", now=now)
    later = add(store, "backed off", priority="P0", now=now)
    store.update(
        later.id,
        S.INCOMING,
        lambda t: t.set_header(
            "NOT_BEFORE", (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
    )
    assert claim(store, "implement", now).title == "first"
    assert claim(store, "implement", now) is None  # blocked waits, backed-off waits
    store.move(first.id, S.CLAIMED, S.DONE, lambda t: None)
    assert claim(store, "implement", now).title == "blocked"
    assert claim(store, "implement", now + timedelta(hours=2)).title == "backed off"
    assert claim(store, None, now).title == "review"
    assert claim(store, None, now) is None


def test_claims_are_exclusive(store: QueueStore) -> None:
    ids = {add(store).id for _ in range(20)}
    got = [claim(store) for _ in range(25)]
    claimed = [t.id for t in got if t is not None]
    assert sorted(claimed) == sorted(ids) and store.count(S.CLAIMED) == 20


def test_quarantine_keeps_the_file_and_the_reason(store: QueueStore, tmp_path: Path) -> None:
    stray = tmp_path / "stray.md"
    stray.write_text("junk")
    store.quarantine(stray, "not a task")
    ((name, reason),) = store.list_quarantine()
    assert name == "stray.md" and reason.startswith("not a task")
    assert store.count(S.QUARANTINE) == 1  # what list_quarantine names, task file or not


def test_sweep_only_removes_old_debris(store: QueueStore) -> None:
    add(store)
    assert store.sweep(utcnow() + timedelta(days=1)) == 0
    assert store.count(S.INCOMING) == 1


def test_recent_names_the_last_tasks_into_a_state_newest_first(store: QueueStore) -> None:
    ids = [add(store, f"t{i}").id for i in range(4)]
    for task_id in (ids[2], ids[0], ids[3]):  # as every move of octopoid's does: History
        store.move(
            task_id,
            S.INCOMING,
            S.DONE,
            lambda t: t.add_history(utcnow(), "incoming", "done", "test"),
        )
    assert store.recent(S.DONE, 2) == [ids[3], ids[0]]
    assert store.recent(S.DONE) == [ids[3], ids[0], ids[2]]
    assert store.recent(S.INCOMING) == [ids[1]]
    store.rebuild()  # rebuilt from the folders alone, it still knows which is which
    assert set(store.recent(S.DONE)) == {ids[0], ids[2], ids[3]}


def test_waiting_rows_carry_what_a_list_line_shows(store: QueueStore) -> None:
    """`octopoid list` draws a waiting task from its index row: title, priority, attempts,
    role, blockers, without reading its file (a title with brackets and accents too)."""
    first = add(store, "[odd] caf\u00e9 ] title", priority="P0")
    second = add(store, "later", priority="P2", role="review", blocked_by=[first.id])
    store.update(second.id, TaskState.INCOMING, lambda t: t.set_header("ATTEMPTS", "3") or t)
    rows = {w.id: w for w in store.waiting()}
    assert rows[first.id][4:] == ("[odd] caf\u00e9 ] title", "P0", 0)
    assert rows[second.id][3:] == ("review", "later", "P2", 3)
    assert rows[second.id].blocked_by == [first.id]
    brief = {w.id: w for w in store.waiting(titled=False)}  # the same tasks, order and edges
    assert [(w.id, w.role, w.blocked_by, w.priority) for w in brief.values()] == [
        (w.id, w.role, w.blocked_by, w.priority) for w in rows.values()
    ]


def test_the_waiting_digest_agrees_with_the_rows(store: QueueStore) -> None:
    """What status reads in three queries is what the whole list of rows says."""
    from orchestrator.queue.store.queries import WaitingDigest

    first = add(store, "first", priority="P2")
    add(store, "second", role="review")
    add(store, "blocked", blocked_by=[first.id])
    add(store, "third", priority="P0")
    digest, whole = store.waiting_digest(), WaitingDigest.of(store.waiting())
    for got in (digest, whole):
        assert [w.id for w in got.with_blockers] == [w.id for w in whole.with_blockers]
        assert got.roles == whole.roles and got.oldest_free.id == whole.oldest_free.id
    assert digest.roles == {"implement": 3, "review": 1}
    assert [w.blocked_by for w in digest.with_blockers] == [[first.id]]


def test_waiting_pages_in_claim_order_and_by_role(store: QueueStore) -> None:
    made = [add(store, f"t{i}", role="review" if i % 3 == 0 else "implement") for i in range(10)]
    whole = [w.id for w in store.waiting()]
    assert whole == [t.id for t in made]
    assert [w.id for w in store.waiting(skip=3, limit=4)] == whole[3:7]
    assert [w.id for w in store.waiting(skip=8, limit=4)] == whole[8:]
    reviews = [t.id for t in made if t.role == "review"]
    assert [w.id for w in store.waiting("review")] == reviews
    assert [w.id for w in store.waiting("review", 1, 1)] == reviews[1:2]


# --- records ---------------------------------------------------------------------------


def test_a_record_is_written_by_compare_and_swap(store: QueueStore) -> None:
    records = store.records
    assert records.read("agents/a") is None
    first = records.write("agents/a", {"n": 1}, None)
    assert records.read("agents/a") == ({"n": 1}, first)
    with pytest.raises(RecordChanged, match="exists already"):
        records.write("agents/a", {"n": 9}, None)  # "must not exist"
    second = records.write("agents/a", {"n": 2}, first)
    with pytest.raises(RecordChanged, match="changed since"):
        records.write("agents/a", {"n": 9}, first)  # someone wrote in between
    with pytest.raises(RecordChanged):
        records.delete("agents/a", first)
    assert records.read("agents/a") == ({"n": 2}, second)
    assert records.delete("agents/a", second) and not records.delete("agents/a")
    again = records.write("agents/a", {"n": 3}, None)  # made anew: never an old version
    assert again not in (first, second)
    with pytest.raises(RecordChanged):
        records.write("agents/a", {"n": 9}, second)


def test_update_changes_keeps_and_deletes(store: QueueStore) -> None:
    records = store.records
    made = records.update("k", lambda v: {"n": 1} if v is None else None)
    assert made is not None and made.value == {"n": 1}
    assert records.update("k", lambda v: v) == made  # unchanged: nothing written
    assert records.update("k", lambda v: None) is None and records.read("k") is None


def test_list_by_prefix_is_the_key_and_what_is_beneath_it(store: QueueStore) -> None:
    keys = ["agents", "agents/a", "agents/b/c", "agents-old", "agentsx", "other/agents"]
    for n, key in enumerate(keys):
        store.records.write(key, {"n": n}, None)
    assert list(store.records.list("agents")) == ["agents", "agents/a", "agents/b/c"]
    assert list(store.records.list("agents/b")) == ["agents/b/c"]
    assert store.records.list("agents/a")["agents/a"].value == {"n": 1}
    assert sorted(store.records.list()) == sorted(keys)
    assert store.records.list("none") == {}


def test_keys_are_checked_and_any_name_can_be_made_one(store: QueueStore) -> None:
    for bad in ("", "/a", "a/", "a//b", ".hidden", "a/../b", "a b"):
        with pytest.raises(ValueError, match="not a record key"):
            store.records.read(bad)
    for name in ("../../etc", ".x", "a b/c", "é"):
        key = f"agents/{key_part(name)}"
        store.records.write(key, {"name": name}, None)
        assert store.records.read(key).value == {"name": name}
    assert len(store.records.list("agents")) == 4


def _race(argvs: list[list[str]], go: Path) -> None:
    """Start every worker, release them together once all are ready, and wait for all
    to succeed."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for argv in argvs]
    try:
        assert [proc.stdout.readline().strip() for proc in procs] == ["ready"] * len(procs)
        go.touch()
        for proc in procs:
            assert proc.wait(timeout=240) == 0
    finally:
        for proc in procs:
            proc.kill()


def test_racing_writers_lose_no_update(store: QueueStore, spec: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    _race([helper_cmd("records_worker", spec, "update", "counter", "25", str(go))] * 4, go)
    assert store.records.read("counter").value == {"n": 100}


# --- journals --------------------------------------------------------------------------


def test_a_journal_is_begun_once_and_finished_by_its_holder(store: QueueStore) -> None:
    journals = store.journals
    first = journals.begin("test", "12", ["merge", "move", "clean"], {"tip": "abc"})
    assert first.left == ("merge", "move", "clean") and first.data == {"tip": "abc"}
    for steps in ([], ["a", "a"]):
        with pytest.raises(ValueError, match="distinct names"):
            journals.begin("test", "13", steps)
    again = journals.begin("test", "12", ["other"], {"tip": "zzz"})  # continues the open one
    assert (again.steps, again.data) == (first.steps, first.data)
    with pytest.raises(JournalBusy, match="not held"):
        journals.mark_done(first, "merge")
    with journals.take("test", "12") as held:
        assert held == first
        held = journals.mark_done(journals.mark_done(held, "merge"), "merge")  # once
        with pytest.raises(ValueError):
            journals.mark_done(held, "nope")
        with journals.take("test", "12"):  # its holder may take it again
            pass
        assert held.done == ("merge",) and held.left == ("move", "clean")
    journals.begin("other", "12", ["x"])
    assert [(j.kind, j.left) for j in journals.pending("test")] == [("test", ("move", "clean"))]
    assert {j.kind for j in journals.pending()} == {"test", "other"}
    with journals.take("test", "12") as held:
        journals.finish(held)
    assert journals.get("test", "12") is None and journals.pending("test") == []
    with journals.take("test", "12") as held:
        assert held is None  # nothing open: begin one here, atomically with the take
        assert journals.begin("test", "12", ["a"]).steps == ("a",)


def test_a_killed_runner_leaves_its_journal_to_the_next_taker(store: QueueStore, spec: str) -> None:
    journals = store.journals
    journals.begin("test", "7", ["merge", "move"])
    proc = subprocess.Popen(
        helper_cmd("records_worker", spec, "hold", "7"), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(JournalBusy, match="another process"), journals.take("test", "7"):
            pass
    finally:
        proc.kill()  # SIGKILL: no clean-up of its own
        proc.wait()

    def taken() -> Journal | None:
        with contextlib.suppress(JournalBusy), journals.take("test", "7") as held:
            return journals.mark_done(held, "move")
        return None

    resumed = wait_for("the dead holder's journal to be free", taken)
    assert resumed.done == ("merge", "move")


def test_two_sweepers_never_run_a_step_at_once(
    store: QueueStore, spec: str, tmp_path: Path
) -> None:
    steps = ("one", "two", "three")
    for key in "abcdef":
        store.journals.begin("test", key, steps)
    log, go = tmp_path / "steps.log", tmp_path / "go"
    _race([helper_cmd("records_worker", spec, "sweep", str(log), str(go))] * 3, go)
    running: dict[str, str] = {}
    ran = []
    for line in log.read_text().splitlines():
        what, key, step, pid = line.split()
        if what == "start":
            assert key not in running, f"{key} ran {step} while {running[key]} ran"
            running[key] = f"{step} in {pid}"
            ran.append((key, step))
        else:
            assert running.pop(key) == f"{step} in {pid}"
    assert sorted(ran) == sorted((key, step) for key in "abcdef" for step in steps)
    assert store.journals.pending() == []


def test_the_one_runner_runs_what_is_left_and_keeps_what_failed_or_waits(
    store: QueueStore,
) -> None:
    """``Journals.run``, the runner of every kind: steps run in order and are marked done; a
    tolerant step that fails and one that answers LATER stay for the next finisher while
    the rest go on; ``create-2`` runs the table's ``create``; a failure of any other step
    stops the run with what is left still journaled."""
    ran: list[str] = []

    def step(journal: Journal, name: str) -> object:
        ran.append(name)
        if name == "clean":
            raise OSError("disk gone")
        return LATER if name == "wait" else name.upper()

    kind = JournalKind("test", {"create": step, "clean": step, "wait": step, "move": step})
    journals = store.journals
    journals.begin("test", "1", ["create-1", "create-2", "clean", "wait", "move"])
    with journals.take("test", "1") as held:
        done = journals.run(held, kind._replace(tolerant=frozenset({"clean"})))
    assert ran == ["create-1", "create-2", "clean", "wait", "move"]
    assert done.results == {"create-1": "CREATE-1", "create-2": "CREATE-2", "move": "MOVE"}
    assert done.errors == ["clean: disk gone"]
    assert journals.get("test", "1").left == ("clean", "wait")  # not finished: kept

    with journals.take("test", "1") as held, pytest.raises(OSError, match="disk gone"):
        journals.run(held, kind)  # clean is not tolerated here: the run stops at it
    assert journals.get("test", "1").left == ("clean", "wait")

"""The QueueStore contract: every store (the folder store and PostgreSQL) passes this.

Add a store by adding a factory to STORES; nothing else here may know which store it tests.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.exceptions import IllegalTransition, LostRace, TaskNotFound
from orchestrator.store import FolderStore, QueueStore
from orchestrator.tasks import Task, TaskState, new_task, utcnow

S = TaskState


def folder_store(tmp_path: Path) -> QueueStore:
    store = FolderStore(tmp_path / "queue")
    store.initialize()
    return store


def postgres_store(request: pytest.FixtureRequest) -> QueueStore:
    from orchestrator.store.postgres import PostgresStore

    store = PostgresStore(request.getfixturevalue("pg_dsn"))
    store.initialize()
    request.addfinalizer(store.close)
    return store


STORES: dict[str, Callable[[pytest.FixtureRequest], QueueStore]] = {
    "folder": lambda request: folder_store(request.getfixturevalue("tmp_path")),
    "postgres": postgres_store,
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest) -> QueueStore:
    return STORES[request.param](request)


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
    from orchestrator.store.claim_index import WaitingDigest

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

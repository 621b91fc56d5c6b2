"""NotesManager: QQ's API, with the original's weaknesses fixed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orchestrator.memory.notes import SECTIONS, NotesManager, get_notes_manager
from orchestrator.model.exceptions import InvalidNotesId, MemoryStoreError

from .support import helper_cmd, run_all, start_then_kill


@pytest.fixture
def mem(tmp_path: Path) -> Path:
    return tmp_path / "memory"


def test_main_and_ephemeral_files_and_properties(mem: Path, monkeypatch) -> None:
    main = NotesManager(mem)
    assert main.notes_id is None and not main.is_ephemeral
    assert main.notes_file == mem / "notes.md" and main.lock_file == mem / "notes.lock"
    eph = NotesManager.create_ephemeral("TASK-7", "Fix the login bug\nin auth.py", mem)
    assert eph.is_ephemeral and eph.notes_file == mem / "notes.TASK-7.md"
    text = eph.notes_file.read_text()
    assert text.startswith("# Agent Notes (TASK-7)\n\nLast updated: ")
    assert "## Task Context\n> Fix the login bug\n> in auth.py\n" in text  # quoted: never parsed
    assert eph.task_context() == "Fix the login bug\nin auth.py"
    for section in SECTIONS:  # every section, People & Entities included
        assert f"## {section}\n" in text
    monkeypatch.setenv("OCTOPOID_NOTES_ID", "TASK-7")
    assert get_notes_manager(mem).notes_file == eph.notes_file
    monkeypatch.delenv("OCTOPOID_NOTES_ID")
    assert get_notes_manager(mem).notes_file == mem / "notes.md"


def test_create_ephemeral_keeps_an_existing_file(mem: Path) -> None:
    eph = NotesManager.create_ephemeral("TASK-7", "first", mem)
    eph.add_item("Important Facts", "kept across retries")
    NotesManager.create_ephemeral("TASK-7", "second", mem)
    assert eph.get_section_items("Important Facts") == ["kept across retries"]
    assert eph.task_context() == "first"


def test_read_operations(mem: Path) -> None:
    m = NotesManager(mem)
    m.add_item("Key Topics", "retry notes")
    m.add_item("File Knowledge", "orchestrator/queue_utils.py: the state machine")
    assert m.get_all_items() == [
        {"section": "Key Topics", "item": "retry notes"},
        {"section": "File Knowledge", "item": "orchestrator/queue_utils.py: the state machine"},
    ]
    assert m.count_items() == 2 and "## Key Topics\n- retry notes" in m.get_notes()
    assert m.load_notes() == m.notes_file.read_text()


def test_duplicates_are_whole_items_not_substrings(mem: Path) -> None:
    m = NotesManager(mem)
    assert m.add_item("Important Facts", "the cache is stale after deploys")
    assert not m.add_item("Important Facts", "The  cache is STALE after deploys")
    assert m.add_item("Important Facts", "cache")  # a substring of another item: not a dup
    assert m.add_item("Key Topics", "the cache is stale after deploys")  # other section
    assert m.get_section_items("Important Facts") == ["the cache is stale after deploys", "cache"]


def test_remove_item_honours_its_section(mem: Path) -> None:
    m = NotesManager(mem)
    m.add_item("Key Topics", "database migrations")
    m.add_item("Important Facts", "migrations run on deploy")
    assert m.remove_item("Important Facts", "MIGRATIONS")
    assert m.get_section_items("Key Topics") == ["database migrations"]
    assert m.get_section_items("Important Facts") == []
    assert not m.remove_item("Important Facts", "migrations")


def test_remove_exact_update_and_rebuild(mem: Path) -> None:
    eph = NotesManager.create_ephemeral("T1", "the context", mem)
    eph.add_item("Key Topics", "alpha")
    eph.add_item("Key Topics", "alpha beta")
    assert eph.remove_exact_item("ALPHA") and eph.get_section_items("Key Topics") == ["alpha beta"]
    eph.update_section("Ongoing Threads", ["one", "two"])
    assert eph.get_section_items("Ongoing Threads") == ["one", "two"]
    eph.rebuild_with_items([{"section": "File Knowledge", "item": "a.py: entry point"}])
    assert eph.get_all_items() == [{"section": "File Knowledge", "item": "a.py: entry point"}]
    assert eph.task_context() == "the context"
    assert eph.get_notes().startswith("# Agent Notes (T1)\n")


def test_rebuild_refuses_unknown_sections_and_changes_nothing(mem: Path) -> None:
    m = NotesManager(mem)
    m.add_item("Key Topics", "keep me")
    before = m.notes_file.read_text()
    with pytest.raises(MemoryStoreError, match="unknown section 'Gossip'"):
        m.rebuild_with_items(
            [{"section": "Key Topics", "item": "x"}, {"section": "Gossip", "item": "y"}]
        )
    assert m.notes_file.read_text() == before
    with pytest.raises(MemoryStoreError, match="unknown section"):
        m.add_item("Nope", "x")


def test_apply_diff_adds_and_removes_in_one_write(mem: Path) -> None:
    m = NotesManager(mem)
    m.add_item("Key Topics", "old")
    m.apply_diff(
        [{"section": "Key Topics", "item": "new"}, {"section": "Important Facts", "item": "fact"}],
        ["old"],
    )
    assert m.get_all_items() == [
        {"section": "Key Topics", "item": "new"},
        {"section": "Important Facts", "item": "fact"},
    ]


def test_only_the_last_updated_line_is_rewritten(mem: Path) -> None:
    m = NotesManager(mem)
    m.add_item("Key Topics", "a")
    text = m.notes_file.read_text().replace("## Key Topics\n", "## Key Topics\n<!-- mine -->\n")
    text += "\nA paragraph a person wrote.\n"
    m.notes_file.write_text(text)
    m.add_item("Key Topics", "b")
    after = m.notes_file.read_text()

    def without_stamp(t: str) -> list[str]:
        return [ln for ln in t.splitlines() if not ln.startswith("Last updated: ")]

    lines = without_stamp(after)
    lines.remove("- b")
    assert lines == without_stamp(text)  # nothing else moved or changed
    assert "<!-- mine -->" in after and "A paragraph a person wrote." in after


def test_writes_keep_the_file_mode(mem: Path) -> None:
    m = NotesManager(mem)
    m.add_item("Key Topics", "a")
    m.notes_file.chmod(0o600)
    m.add_item("Key Topics", "b")
    assert m.notes_file.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", "x\x00y", "", "/etc", "a..b", ".hidden"])
def test_hostile_notes_ids_are_refused(mem: Path, bad: str) -> None:
    with pytest.raises(InvalidNotesId):
        NotesManager(mem, bad)


def test_cleanup_is_for_ephemeral_notes_and_keeps_the_lock_file(mem: Path) -> None:
    assert NotesManager(mem).cleanup() is False
    eph = NotesManager.create_ephemeral("T2", "ctx", mem)
    assert eph.cleanup() is True and not eph.notes_file.exists()
    assert eph.lock_file.exists()  # another process may hold it: never deleted under it
    assert eph.cleanup() is False


@pytest.mark.slow
def test_four_processes_adding_items_lose_none(project: Path) -> None:
    run_all(project, [helper_cmd("memory_writer", f"w{n}", "40", "add") for n in range(4)])
    items = NotesManager().get_section_items("Important Facts")
    assert sorted(items) == sorted(f"w{n} fact {i}" for n in range(4) for i in range(40))


@pytest.mark.slow
def test_apply_diff_killed_mid_way_is_all_or_nothing(project: Path) -> None:
    m = NotesManager()
    m.apply_diff(
        [{"section": "Important Facts", "item": f"batch seed item {j}"} for j in range(10)], []
    )
    rng = random.Random(5)
    for _ in range(12):
        start_then_kill(
            project, helper_cmd("memory_writer", "d", "1000", "diff"), rng.uniform(0, 0.2)
        )
        facts = m.get_section_items("Important Facts")
        # each diff replaces batch k with batch k+1 (10 items): never none, never a mix
        batches = {item.split(" ")[1] for item in facts}
        assert len(batches) == 1 and len(facts) == 10, facts

"""Malformed task files go to quarantine with a reason; the other tasks keep flowing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.base.text import ascii_int
from orchestrator.model.exceptions import TaskParseError
from orchestrator.model.tasks import WHOLE_NUMBER_HEADERS, utcnow
from orchestrator.queue import machine as q

BAD_FILES = {
    "no-title": ("TASK-50.md", b"just some words\n"),
    "binary": ("TASK-51.md", b"# [TASK-51] x\n\x00\x01\x02\xff"),
    "huge": ("TASK-52.md", b"# [TASK-52] big\n\n## Context\n" + b"x" * (10 * 1024 * 1024)),
    "invalid-utf8": ("TASK-53.md", b"# [TASK-53] caf\xe9\n"),
    "duplicate-header": ("TASK-54.md", b"# [TASK-54] t\n\nROLE: a\nROLE: b\n"),
    "wrong-id": ("TASK-55.md", b"# [TASK-99] claims another id\n"),
    "bad-name": ("notes.txt", b"hello"),
    "bad-priority": ("TASK-56.md", b"# [TASK-56] t\n\nPRIORITY: yesterday\n"),
    "empty": ("TASK-57.md", b""),
    "attempts-overflow": ("TASK-58.md", b"# [TASK-58] t\n\nATTEMPTS: 9999999999999999999999\n"),
    "bad-time": ("TASK-59.md", b"# [TASK-59] t\n\nNOT_BEFORE: 10000-01-01T00:00:00Z\n"),
}
REASONS = {
    "no-title": "line 1",
    "binary": "NUL",
    "huge": "limited to",
    "invalid-utf8": "UTF-8",
    "duplicate-header": "twice",
    "wrong-id": "TASK-99",
    "bad-name": "not TASK-<id>.md",
    "bad-priority": "PRIORITY",
    "empty": "empty",
    "attempts-overflow": "ATTEMPTS must be from 0 to 1000000",
    "bad-time": "NOT_BEFORE must be an ISO-8601 time",
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_file_is_quarantined_and_good_tasks_flow(project: Path, kind: str) -> None:
    good = q.create_task("good task")
    name, data = BAD_FILES[kind]
    incoming = project / ".octopoid/runtime/queue/incoming"
    (incoming / name).write_bytes(data)
    assert [t.id for t in q.list_tasks("incoming")] == [good.id]
    claimed = q.claim_task(None, "agent")
    assert claimed is not None and claimed.id == good.id
    quarantine = project / ".octopoid/runtime/queue/quarantine"
    assert (quarantine / name).read_bytes() == data  # kept as it was, for a person to fix
    reason = (quarantine / f"{name}.error").read_text()
    assert REASONS[kind] in reason and f"incoming/{name}" in reason
    assert q.get_store().list_quarantine()[0][0] == name


def test_a_bad_file_found_by_the_claim_index_is_quarantined(project: Path) -> None:
    q.create_task("first")
    q.claim_task(None, "a")  # index built
    incoming = project / ".octopoid/runtime/queue/incoming"
    (incoming / "TASK-60.md").write_bytes(b"\xff\xfe garbage")
    good = q.create_task("second")  # our write hides the drop from the mtime check...
    q.get_store().sweep(utcnow() + timedelta(minutes=2))  # ...until the housekeeping rescan
    assert q.claim_task(None, "a").id == good.id
    assert (project / ".octopoid/runtime/queue/quarantine/TASK-60.md").exists()


def test_a_file_corrupted_while_claimed_is_quarantined_on_get(project: Path) -> None:
    task = q.create_task("t")
    claimed = q.claim_task(None, "a")
    claimed.path.write_bytes(b"\x00\x00")
    with pytest.raises(TaskParseError, match="quarantined"):
        q.get_task(task.id)
    assert q.list_tasks("claimed") == []


def test_two_bad_files_with_one_name_are_both_kept(project: Path) -> None:
    incoming = project / ".octopoid/runtime/queue/incoming"
    for data in (b"one", b"two"):
        (incoming / "TASK-70.md").write_bytes(data)
        q.list_tasks("incoming")
    quarantine = project / ".octopoid/runtime/queue/quarantine"
    assert (quarantine / "TASK-70.md").read_bytes() == b"one"
    assert (quarantine / "TASK-70.md.1").read_bytes() == b"two"


def test_leftover_temp_files_are_ignored_then_swept(project: Path) -> None:
    from datetime import timedelta

    from orchestrator.model.tasks import utcnow

    incoming = project / ".octopoid/runtime/queue/incoming"
    (incoming / ".TASK-1.md.deadbeef.tmp").write_text("# [TASK-1] half written")
    assert q.list_tasks("incoming") == [] and q.get_store().count(q.S.INCOMING) == 0
    assert q.get_store().sweep(utcnow()) == 0  # too young: it may be a live write
    assert q.get_store().sweep(utcnow() + timedelta(hours=2)) == 1
    assert not (incoming / ".TASK-1.md.deadbeef.tmp").exists()


def test_quarantine_file_moves_any_file_aside_with_its_reason(project: Path) -> None:
    incoming = project / ".octopoid/runtime/queue/incoming"
    (incoming / "TASK-80.md").write_text("# [TASK-80] fine, but a person says no\n")
    target = q.quarantine_file(incoming / "TASK-80.md", "held back by hand")
    assert target.read_text().startswith("# [TASK-80]") and not (incoming / "TASK-80.md").exists()
    assert q.get_store().list_quarantine() == [
        ("TASK-80.md", "held back by hand\n(from incoming/TASK-80.md)")
    ]


def test_a_number_from_text_is_ascii_digits_within_any_header_s_range() -> None:
    """``ascii_int`` refuses what ``int`` would refuse or misread, and reads every whole-number
    header's range: a cap below the longest (``PID_START``, 19 digits) would drop real ones."""
    for low, high in WHOLE_NUMBER_HEADERS.values():
        assert (ascii_int(str(low)), ascii_int(str(high))) == (low, high)
    for hostile in ("", "²", "\u0661", " 1", "-1", "1.0", "9" * 21, "9" * 5000):
        assert ascii_int(hostile) is None, hostile

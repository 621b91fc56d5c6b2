"""Task ids, the task file format, and id allocation."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.exceptions import InvalidTaskId, TaskParseError
from orchestrator.tasks import (
    ID_RE,
    Task,
    allocate_id,
    normalize_task_id,
    parse_task,
    render_task,
    utcnow,
)

ID_CHARS = string.ascii_letters + string.digits + "-_"


@pytest.mark.parametrize(
    ("raw", "bare"),
    [
        ("TASK-12", "12"),
        ("task-12", "12"),
        ("12", "12"),
        (" 12 ", "12"),
        ("TASK-a1b2c3d4", "a1b2c3d4"),
        ("Task-fix_login-2", "fix_login-2"),
        ("TASK-12 ", "12"),
    ],
)
def test_ids_accept_every_typable_form(raw: str, bare: str) -> None:
    assert normalize_task_id(raw) == bare


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "TASK-",
        "../x",
        "TASK-../../etc/passwd",
        "/etc/passwd",
        "a/b",
        "a\\b",
        "1\x002",
        "-12",
        "_x",
        ".hidden",
        "x" * 65,
        "12.md",
        "ta sk",
        "é",
        "12\n13",
    ],
)
def test_ids_refuse_path_tricks_and_junk(raw: str) -> None:
    with pytest.raises(InvalidTaskId):
        normalize_task_id(raw)


@given(st.text(max_size=80))
def test_any_accepted_id_is_a_safe_file_name(raw: str) -> None:
    try:
        bare = normalize_task_id(raw)
    except InvalidTaskId:
        return
    assert ID_RE.fullmatch(bare)
    assert "/" not in bare and "\x00" not in bare and ".." not in bare
    assert not bare.startswith(("-", "_"))


@given(st.binary(max_size=40))
def test_binary_ids_are_refused_or_safe(raw: bytes) -> None:
    try:
        bare = normalize_task_id(raw.decode("latin-1"))
    except InvalidTaskId:
        return
    assert ID_RE.fullmatch(bare)


line_text = (
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
        min_size=1,
        max_size=40,
    )
    .map(lambda s: s.strip())
    .filter(bool)
)
body_lines = st.lists(line_text.filter(lambda s: not s.startswith(("#", "`", "~"))), max_size=4)


@st.composite
def tasks(draw: st.DrawFn) -> Task:
    task = Task(id=draw(st.from_regex(ID_RE, fullmatch=True)), title=draw(line_text))
    keys = draw(
        st.lists(st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True), unique=True, max_size=5)
    )
    for key in keys:
        if key not in {"PRIORITY", "ROLE", "ATTEMPTS", "CREATED", "LEASE_EXPIRES", "BLOCKED_BY"}:
            task.headers[key] = draw(line_text)
    task.headers["PRIORITY"] = draw(st.sampled_from(["P0", "P1", "P2", "P3"]))
    for name in draw(
        st.lists(st.sampled_from(["Context", "Acceptance Criteria", "History"]), unique=True)
    ):
        lines = draw(body_lines)
        task.sections.append((name, "".join(f"{ln}\n" for ln in lines) + "\n"))
    return task


@given(tasks())
def test_render_then_parse_gives_the_same_task(task: Task) -> None:
    text = render_task(task)
    again = parse_task(text)
    assert again == task
    assert render_task(again) == text


def test_parse_reads_design_example_exactly() -> None:
    text = (
        "# [TASK-12] Add retry notes to the gatekeeper\n\nROLE: implement\nPRIORITY: P1\n"
        "BRANCH: main\nCREATED: 2026-11-21T22:47:26Z\nCREATED_BY: human\nBLOCKED_BY: TASK-9\n"
        "ATTEMPTS: 1\nCLAIMED_BY: impl-agent-1\nLEASE_EXPIRES: 2026-11-21T23:47:26Z\n\n"
        "## Context\nSome context.\n\n```\n## not a heading inside a fence\n```\n\n"
        "## Acceptance Criteria\n- [ ] one\n- [x] two\n\n"
        "## History\n- 2026-11-21T22:47:26Z  new → incoming  (human)\n"
    )
    task = parse_task(text)
    assert render_task(task) == text
    assert task.id == "12" and task.priority == "P1" and task.blocked_by == ["9"]
    assert task.attempts == 1 and task.lease_expires.tzinfo is not None
    assert "## not a heading" in task.context
    assert task.criteria == ["one", "two"]
    assert task.history == ["2026-11-21T22:47:26Z  new → incoming  (human)"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("no title here\n", "line 1"),
        ("# [TASK-1]\n", "no title"),
        ("# [TASK-../x] Hi\n", "invalid task id"),
        ("# [TASK-1] T\n\nROLE: a\nROLE: b\n", "appears twice"),
        ("# [TASK-1] T\n\nthis is not a header\n", "KEY: value"),
        ("# [TASK-1] T\n\nPRIORITY: urgent\n", "PRIORITY"),
        ("# [TASK-1] T\n\nATTEMPTS: many\n", "ATTEMPTS"),
        ("# [TASK-1] T\n\nLEASE_EXPIRES: tomorrow\n", "bad header"),
        ("# [TASK-1] T\n\nBLOCKED_BY: TASK-2, ../x\n", "bad header"),
    ],
)
def test_malformed_task_text_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(TaskParseError, match=message):
        parse_task(text)


def test_history_lines_are_single_line_and_capped() -> None:
    task = Task(id="1", title="t")
    task.add_history(utcnow(), "claimed", "failed", "agent\nx", "line one\nline two " + "z" * 500)
    (line,) = task.history
    assert "\n" not in line and len(line) < 300 and "line one line two" in line


def test_naive_times_are_refused_when_written() -> None:
    from datetime import datetime

    from orchestrator.tasks import format_time

    with pytest.raises(ValueError, match="naive"):
        format_time(datetime(2026, 1, 1))


def test_ids_are_sequential_and_skip_ids_present_in_any_queue(tmp_path) -> None:
    for state in ("incoming", "done"):
        (tmp_path / state).mkdir()
    assert [allocate_id(tmp_path) for _ in range(3)] == ["1", "2", "3"]
    (tmp_path / "done" / "TASK-4.md").write_text("x")
    assert allocate_id(tmp_path) == "5"


def test_lost_id_counter_is_rebuilt_from_the_folders(tmp_path) -> None:
    (tmp_path / "failed").mkdir()
    (tmp_path / "failed" / "TASK-41.md").write_text("x")
    (tmp_path / "failed" / "TASK-abc.md").write_text("x")
    assert allocate_id(tmp_path) == "42"
    (tmp_path / ".last_id").write_text("garbage")
    assert allocate_id(tmp_path) == "42"  # 42 is not on disk yet; nothing is reused

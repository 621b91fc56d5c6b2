"""Task ids, the task file format, and id allocation."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.model.exceptions import InvalidTask, InvalidTaskId, TaskParseError
from orchestrator.model.tasks import (
    ID_RE,
    Task,
    escape_text,
    new_task,
    normalize_task_id,
    parse_task,
    render_task,
    unescape_text,
    utcnow,
)
from orchestrator.queue.store.files import FolderStore

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
    task = Task(id=draw(st.from_regex(ID_RE.pattern, fullmatch=True)), title=draw(line_text))
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


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("ATTEMPTS: 9999999999999999999999", "ATTEMPTS must be from 0 to 1000000"),
        ("ATTEMPTS_AT_RETRY: 1000001", "ATTEMPTS_AT_RETRY must be from 0 to 1000000"),
        ("INTERRUPTED: ²", "INTERRUPTED must be a whole number"),  # isdigit() says yes
        ("BURNED_OUT: -1", "BURNED_OUT must be a whole number"),
        ("TURNS_TOTAL: 1.5", "TURNS_TOTAL must be a whole number"),
        ("COMMITS: ٣", "COMMITS must be a whole number"),  # an Arabic-Indic three
        ("TURNS: 0x10", "TURNS must be a whole number"),
        ("PID: 0", "PID must be from 1 to 4194303"),
        ("PID: 4194304", "PID must be from 1 to 4194303"),
        ("PID_START: 99999999999999999999", "PID_START must be from 0"),
        ("COST_USD_TOTAL: nan", "COST_USD_TOTAL must be a decimal number"),
        ("COST_USD_TOTAL: inf", "COST_USD_TOTAL"),
        ("COST_USD_TOTAL: -0.50", "COST_USD_TOTAL"),
        ("COST_USD_TOTAL: 1e400", "COST_USD_TOTAL"),
        ("CLAIMED_AT: yesterday", "CLAIMED_AT must be an ISO-8601 time"),
        ("STARTED_AT: 2026-13-01T00:00:00Z", "STARTED_AT"),
        ("SUBMITTED_AT: 2026-11-21T25:00:00Z", "SUBMITTED_AT"),
        ("COMPLETED_AT: 0001-01-01T00:00:00+01:00", "COMPLETED_AT"),  # overflows into UTC
        ("DEADLINE: 1969-12-31T23:59:59Z", "DEADLINE"),
        ("NOT_BEFORE: soon", "NOT_BEFORE"),
        ("CREATED: 2026-01-01T00:00:00Z\nATTEMPTS: 3 ", "ATTEMPTS must be a whole number"),
        ("BRANCH: --upload-pack=evil", "BRANCH must be a git branch name"),
        ("BRANCH: main..other", "BRANCH"),
        ("BRANCH: feature branch", "BRANCH"),
    ],
)
def test_hand_edited_header_values_out_of_range_are_refused(header: str, message: str) -> None:
    with pytest.raises(TaskParseError, match=f"bad header: {message}"):
        parse_task(f"# [TASK-1] T\n\n{header}\n")


def test_every_header_octopoid_writes_is_accepted() -> None:
    text = (
        "# [TASK-1] T\n\nROLE: implement\nPRIORITY: P0\nBRANCH: feature/x-1.2\n"
        "CREATED: 2026-11-21T22:47:26Z\nATTEMPTS: 1000000\nATTEMPTS_AT_RETRY: 0\n"
        "INTERRUPTED: 2\nBURNED_OUT: 1\nTURNS_TOTAL: 40\nTURNS: 7\nCOMMITS: 3\n"
        "COST_USD_TOTAL: 0.5000\nCLAIMED_BY: impl-1\nCLAIM_TOKEN: 9f86d081884c7d65\n"
        "HOST: build-1\nBOOT_ID: 0b3e8c4e-2f9a-4c1e-9d7b-1a2b3c4d5e6f\nPID: 4194303\n"
        "PID_START: 9223372036854775807\nCLAIMED_AT: 2026-11-21T23:17:26Z\n"
        "LEASE_EXPIRES: 2026-11-21T23:47:26+00:00\nSTARTED_AT: 2026-11-21T23:17:27\n"
        "DEADLINE: 2026-11-22T00:17:27Z\nNOT_BEFORE: \nSUBMITTED_AT: 2026-11-21T23:30:00Z\n"
        "COMPLETED_AT: 2026-11-21T23:40:00Z\nMERGED: 2fd4e1c67a2d28fced849ee1bb76e7391b93eb12\n"
    )
    task = parse_task(text)
    assert render_task(task) == text and task.attempts == 1_000_000


def test_only_a_newline_ends_a_line() -> None:
    """U+2028 and friends are text to Python's splitlines, not to the task format."""
    task = new_task("1", "t", context="one\u2028## History\x0b## Acceptance Criteria")
    again = parse_task(render_task(task))
    assert again == task and [h for h, _ in again.sections].count("History") == 1


tricky_lines = st.lists(
    st.one_of(
        st.sampled_from(["## History", "\\## x", "\\\\## y", "```", "````py", "~~~", "- [ ] c"]),
        st.sampled_from(["", " ", "\r", "## ", "#", "text"]),
        line_text,
    ),
    max_size=12,
).map("\n".join)


@given(tricky_lines)
def test_escaping_is_undone_exactly(text: str) -> None:
    assert unescape_text(escape_text(text)) == text


@given(tricky_lines)
def test_a_context_round_trips_through_the_file_or_is_refused(context: str) -> None:
    try:
        task = new_task("1", "t", context=context, criteria=["done"])
    except InvalidTask as exc:
        assert "never closes" in str(exc)  # an unclosed fence: the only refusal here
        return
    again = parse_task(render_task(task))
    assert again == task
    assert again.context == context.replace("\r\n", "\n").replace("\r", "\n").strip()
    assert again.criteria == ["done"] and len(again.history) == 1


def test_a_file_written_before_escaping_reads_as_it_always_did() -> None:
    text = (
        "# [TASK-3] old\n\nATTEMPTS: 0\n\n## Context\nSee:\n~~~\n## Steps\n~~~\n\n"
        "## Acceptance Criteria\n- [ ] one\n\n"
        "## History\n- 2025-01-01T00:00:00Z  new → incoming  (h)\n"
    )
    task = parse_task(text)
    assert render_task(task) == text
    assert task.context == "See:\n~~~\n## Steps\n~~~" and task.criteria == ["one"]


def test_history_lines_are_single_line_and_capped() -> None:
    task = Task(id="1", title="t")
    task.add_history(utcnow(), "claimed", "failed", "agent\nx", "line one\nline two " + "z" * 500)
    (line,) = task.history
    assert "\n" not in line and len(line) < 300 and "line one line two" in line


def test_naive_times_are_refused_when_written() -> None:
    from datetime import datetime

    from orchestrator.model.tasks import format_time

    with pytest.raises(ValueError, match="naive"):
        format_time(datetime(2026, 1, 1))


def test_ids_are_sequential_and_skip_ids_present_in_any_queue(tmp_path) -> None:
    for state in ("incoming", "done"):
        (tmp_path / state).mkdir()
    assert [FolderStore(tmp_path).allocate_id() for _ in range(3)] == ["1", "2", "3"]
    (tmp_path / "done" / "TASK-4.md").write_text("x")
    assert FolderStore(tmp_path).allocate_id() == "5"


def test_lost_id_counter_is_rebuilt_from_the_folders(tmp_path) -> None:
    (tmp_path / "failed").mkdir()
    (tmp_path / "failed" / "TASK-41.md").write_text("x")
    (tmp_path / "failed" / "TASK-abc.md").write_text("x")
    assert FolderStore(tmp_path).allocate_id() == "42"
    (tmp_path / ".last_id").write_text("garbage")
    assert FolderStore(tmp_path).allocate_id() == "42"  # 42 is not on disk yet; nothing is reused

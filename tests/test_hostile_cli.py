"""Any text or bytes at any text option: a clean exit (0, 2, or 3 for an unknown id), never a
traceback, and every task that is created reads back exactly as it was given."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.model.tasks import parse_task, render_task
from orchestrator.queue import machine as q

from . import support

# What the format and the prompt give meaning to, so the generator hits them often.
TRICKS = ["## History", "## Acceptance Criteria", "```", "~~~~", "\\## x", "- [ ] forged"]
TRICKS += ["# [TASK-1] x", "ATTEMPTS: 99", "\r\n", "\r", "\u2028", "\t", " ", "x", "é"]

storable = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40),
    st.lists(st.sampled_from(TRICKS), max_size=8).map("\n".join),
    st.lists(st.sampled_from(TRICKS), max_size=8).map("".join),
)
hostile = st.one_of(
    st.text(max_size=40),  # control characters included
    st.binary(max_size=12).map(os.fsdecode),  # undecodable argv bytes, as click receives them
)
texts = st.one_of(storable, hostile)


def mostly(good: st.SearchStrategy) -> st.SearchStrategy:
    """Usable five times in six, so that many tasks get created despite six fields."""
    return st.integers(0, 5).flatmap(lambda dice: texts if dice == 5 else good)


HOSTILE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # one project for all
)


def invoke(*args: str) -> Result:
    result = support.invoke(*args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result


def flat(text: str) -> str:
    return " ".join(text.split())


@HOSTILE
@given(
    title=mostly(storable.filter(str.strip)),
    context=mostly(storable),
    criteria=st.lists(mostly(storable), max_size=3),
    blocked_by=st.lists(mostly(st.just("TASK-1")), max_size=2),
    branch=mostly(st.sampled_from([None, "main"])),
    role=mostly(st.none()),
)
def test_enqueue_takes_any_text_and_what_it_stores_reads_back_exactly(
    git_project: Path,
    title: str,
    context: str,
    criteria: list[str],
    blocked_by: list[str],
    branch: str | None,
    role: str | None,
) -> None:
    if not q.list_tasks("incoming"):  # first example: TASK-1, a blocker that exists
        q.create_task("a blocker that exists")
    args = ["enqueue", "--context", context]
    for option, values in (("--criterion", criteria), ("--blocked-by", blocked_by)):
        args += [part for value in values for part in (option, value)]
    args += ["--branch", branch] if branch is not None else []
    args += ["--role", role] if role is not None else []
    result = invoke(*args, "--", title)  # "--": a title may start with "-"
    assert result.exit_code in (0, 2), result.output
    if result.exit_code != 0:
        assert result.output.startswith(("octopoid: ", "Usage: "))
        return
    task = q.get_task(result.output.strip())
    assert parse_task(render_task(task)) == dataclasses.replace(task, state=None, path=None)
    assert task.title == flat(title)
    assert task.context == re.sub(r"\r\n?", "\n", context).strip()
    assert task.criteria == [flat(c) for c in criteria if c.strip()]
    assert task.branch == (branch if branch is not None else "main")


@HOSTILE
@given(
    text=texts.filter(str.strip),  # blank text is memory's own MemoryStoreError (exit 1)
    tag=texts,
    section=st.sampled_from(["Important Facts", "Key Topics"]),
)
def test_memory_takes_any_text_without_a_traceback(
    git_project: Path, text: str, tag: str, section: str
) -> None:
    added = invoke("memory", "add", section, text, "--tag", tag)
    assert added.exit_code in (0, 2), added.output
    assert invoke("memory", "search", text).exit_code in (0, 2)
    assert invoke("memory", "show").exit_code == 0


@HOSTILE
@given(raw=st.one_of(texts, st.sampled_from(["1", "TASK-1", " task-1 ", "TASK-1\n"])))
def test_commands_taking_an_id_take_any_text(git_project: Path, raw: str) -> None:
    if not q.list_tasks("incoming"):
        q.create_task("never attempted")
    for command in (["notes", raw], ["show", raw], ["memory", "show", raw]):
        result = invoke(*command)
        assert result.exit_code in (0, 2, 3), result.output
    diff = invoke("diff", raw)
    assert diff.exit_code in (2, 3) or "TASK-1 has no branch yet" in diff.output
    assert invoke("reject", raw, "--reason", raw).exit_code in (1, 2, 3)

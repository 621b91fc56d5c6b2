"""A question an attempt asks a person (the channel's ``ask_human``), and its answer.

The open question of a task is ``runtime/questions/TASK-<id>.json``: the question, the
attempt that asked, and once given the answer and who gave it. The board and
`octopoid answer` answer it; alerts announce it (``notify``, event ``question``).

The attempt that asks waits for the answer up to ``questions.wait_seconds``. Answered in
time, the answer is what the tool returns. Otherwise the attempt ends "needs input": the
runner gives the task back to incoming, not counted as an attempt, with the question in
its notes, a ``QUESTION`` header, and a ``NOT_BEFORE`` no claim reaches. The answer
releases it (both headers dropped) and goes into the notes, so the next prompt carries it.
An answer and the end of an attempt at the same instant are serialised by the question's
lock: whichever comes second sees the other, so a task is never held with its answer given.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import config, queue_utils
from .exceptions import IllegalTransition, InvalidInput, LostRace
from .fsutil import atomic_write, read_json_object
from .lazy import lazy_import
from .locks import holding
from .tasks import (
    FILE_RE,
    Task,
    TaskState,
    format_time,
    normalize_task_id,
    one_line,
    task_label,
    utcnow,
)

# at first use: status and the board read questions, only writers check and note them
intake = lazy_import("orchestrator.intake")
task_notes = lazy_import("orchestrator.task_notes")
log = logging.getLogger("octopoid.questions")
MAX_QUESTION_CHARS = 2000
MAX_ANSWER_CHARS = 4000
#: NOT_BEFORE of a task waiting for an answer: no claim reaches it, an answer removes it
NEVER = "9999-12-31T00:00:00Z"
HOLD_HEADERS = ("QUESTION", "NOT_BEFORE")


def folder() -> Path:
    return config.get_orchestrator_dir() / "questions"


def _path(task_id: str) -> Path:
    return folder() / f"{task_label(task_id)}.json"


def _lock(task_id: str) -> contextlib.AbstractContextManager:
    folder().mkdir(parents=True, exist_ok=True)
    return holding(folder() / f".{task_label(task_id)}.lock")


def read(task_id: str) -> dict[str, Any]:
    """The task's question ({} for none)."""
    return read_json_object(_path(normalize_task_id(task_id)))


def ask(task_id: str, attempt: int, question: str) -> dict[str, Any]:
    """Record an attempt's question (replacing an older attempt's). One an attempt: a
    second while its first waits is refused, so an agent cannot flood people with them."""
    question = intake.clean_text(question, "the question").strip()
    if not question:
        raise InvalidInput("a question needs words")
    if len(question) > MAX_QUESTION_CHARS:
        raise InvalidInput(f"a question is at most {MAX_QUESTION_CHARS} characters")
    asked = {"task": task_label(task_id), "attempt": attempt, "question": question}
    asked["asked_at"] = format_time(utcnow())
    with _lock(task_id):
        before = read(task_id)
        if before.get("attempt") == attempt and "answer" not in before:
            raise InvalidInput(
                "this attempt asked already and has no answer yet: stop and finish; "
                "the next attempt reads the answer"
            )
        atomic_write(_path(task_id), json.dumps(asked))
    log.info("%s asks: %s", task_label(task_id), one_line(question, 200))
    return asked


def open_questions() -> list[dict[str, Any]]:
    """Every question still waiting for its answer, oldest first."""
    try:
        names = sorted(p.name for p in folder().iterdir() if FILE_RE.fullmatch(p.stem + ".md"))
    except FileNotFoundError:
        return []
    found = [read_json_object(folder() / name) for name in names]
    waiting = [q for q in found if q.get("question") and "answer" not in q]
    return sorted(waiting, key=lambda q: q.get("asked_at", ""))


def wait_for_answer(
    task_id: str, seconds: float, tick: Callable[[], None], stop: Callable[[], bool]
) -> str | None:
    """The answer, once given within ``seconds``; None after. ``tick`` keeps the claim
    alive meanwhile; ``stop`` ends the wait early (the attempt is over)."""
    deadline = time.monotonic() + seconds
    while True:
        if "answer" in (found := read(task_id)):
            return str(found["answer"])
        if time.monotonic() >= deadline or stop():
            return None
        tick()
        time.sleep(0.25)


def answer(task_id: str, text: str, answered_by: str = "human") -> dict[str, Any]:
    """Answer a task's open question: into its notes (the next prompt reads it), and a task
    held for it is released. ``InvalidInput`` when it has none, ``TaskNotFound`` when no
    queue holds the task."""
    task_id = queue_utils.known_task_id(task_id)
    text = intake.clean_text(text, "the answer").strip()
    if not text:
        raise InvalidInput("an answer needs words")
    if len(text) > MAX_ANSWER_CHARS:
        raise InvalidInput(f"an answer is at most {MAX_ANSWER_CHARS} characters")
    with _lock(task_id):
        asked = read(task_id)
        if not asked.get("question") or "answer" in asked:
            raise InvalidInput(f"{task_label(task_id)} has no open question")
        asked.update(answer=text, answered_by=answered_by, answered_at=format_time(utcnow()))
        heading = f"Answer — {one_line(answered_by, 80)} ({asked['answered_at']})"
        task_notes.add_notes_section(task_id, heading, f"Q: {asked['question']}\n\nA: {text}")
        atomic_write(_path(task_id), json.dumps(asked))
        _release(task_id)
    return asked


def _release(task_id: str) -> None:
    """A task waiting in incoming for this answer may be claimed again."""
    store = queue_utils.get_store()
    if store.locate(task_id) is not TaskState.INCOMING:
        return  # still asking (its attempt takes the answer), or moved on

    def release(t: Task) -> None:
        if "QUESTION" in t.headers:  # not a rate limit's NOT_BEFORE: only the hold's
            t.drop_header(*HOLD_HEADERS)

    with contextlib.suppress(LostRace, IllegalTransition):  # claimed or moved meanwhile
        store.update(task_id, TaskState.INCOMING, release)


def unanswered(task: Task) -> str | None:
    """The question this attempt asked and nobody answered yet, or None."""
    asked = read(task.id)
    if asked.get("attempt") == task.attempts and "answer" not in asked:
        return asked.get("question")
    return None


def hold_for_answer(task: Task, question: str, reason: str) -> Task:
    """End an attempt as "needs input": back to incoming, not counted, held until answered
    (unless the answer arrived meanwhile: then only back to incoming)."""
    with _lock(task.id):
        answered = "answer" in read(task.id)
        if not answered:
            task_notes.add_notes_section(task.id, f"Question — attempt {task.attempts}", question)
        hold = {} if answered else {"QUESTION": one_line(question, 300), "NOT_BEFORE": NEVER}
        return queue_utils.requeue_task(
            task, f"needs input: {one_line(question, 120)}; {reason}", "octopoid",
            counted=False, set_headers=hold,
        )  # fmt: skip


def forget(task_id: str) -> None:
    """The task finished: its question file goes."""
    _path(normalize_task_id(task_id)).unlink(missing_ok=True)

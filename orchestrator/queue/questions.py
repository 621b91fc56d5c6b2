"""A question an attempt asks a person (the channel's ``ask_human``), and its answer.

The open question of a task is the store's record ``questions/TASK-<id>``: the question,
the attempt that asked, and once given the answer and who gave it. On PostgreSQL every
machine shares it: an attempt on one machine is answered from another's board or CLI.
The board and `octopoid answer` answer it; alerts announce it (``notify``, event
``question``).

The attempt that asks waits for the answer up to ``questions.wait_seconds``. Answered in
time, the answer is what the tool returns. Otherwise the attempt ends "needs input": the
runner gives the task back to incoming, not counted as an attempt, with the question in
its notes and held (``queue_utils.hold_for_question``). The answer releases it
(``queue_utils.release_question``) and goes into the notes, so the next prompt carries it.
An answer and the end of an attempt at the same instant are serialised by the task's own
lock: the hold asks for the answer under it, and the answer is written before the release
takes it, so a task is never held with its answer given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..base.lazy import lazy_import
from ..base.text import clean_text
from ..model.exceptions import InvalidInput
from ..model.tasks import Task, format_time, one_line, task_label, utcnow
from . import adopt

# at first use: status and the board read questions, only writers check, note and move them
queue_utils = lazy_import("orchestrator.queue.machine")
task_notes = lazy_import("orchestrator.queue.task_notes")
MAX_QUESTION_CHARS = 2000
MAX_ANSWER_CHARS = 4000
FAMILY = "questions"


def read(task_id: str) -> dict[str, Any]:
    """The task's question ({} for none)."""
    return adopt.task_record(FAMILY, task_id)


def ask(task_id: str, attempt: int, question: str) -> dict[str, Any]:
    """Record an attempt's question (replacing an older attempt's). One an attempt: a
    second while its first waits is refused, so an agent cannot flood people with them."""
    question = clean_text(question, "the question").strip()
    if not question:
        raise InvalidInput("a question needs words")
    if len(question) > MAX_QUESTION_CHARS:
        raise InvalidInput(f"a question is at most {MAX_QUESTION_CHARS} characters")
    asked = {"task": task_label(task_id), "attempt": attempt, "question": question}
    asked["asked_at"] = format_time(utcnow())

    def replace(before: dict[str, Any] | None) -> dict[str, Any]:
        if before and before.get("attempt") == attempt and "answer" not in before:
            raise InvalidInput(
                "this attempt asked already and has no answer yet: stop and finish; "
                "the next attempt reads the answer"
            )
        return asked

    adopt.store().records.update(adopt.task_key(FAMILY, task_id), replace)
    import logging  # ~9 ms: status and the board read questions, asking one logs

    logging.getLogger("octopoid.questions").info(
        "%s asks: %s", task_label(task_id), one_line(question, 200)
    )
    return asked


def open_questions() -> list[dict[str, Any]]:
    """Every question still waiting for its answer, oldest first (one read of the store)."""
    found = [record.value for record in adopt.store().records.list(FAMILY).values()]
    waiting = [q for q in found if q.get("question") and "answer" not in q]
    return sorted(waiting, key=lambda q: q.get("asked_at", ""))


def wait_for_answer(
    task_id: str, seconds: float, tick: Callable[[], None], stop: Callable[[], bool]
) -> str | None:
    """The answer, once given within ``seconds`` (on any machine); None after. ``tick``
    keeps the claim alive meanwhile; ``stop`` ends the wait early (the attempt is over)."""
    deadline = time.monotonic() + seconds
    while True:
        if "answer" in (found := read(task_id)):
            return str(found["answer"])
        if time.monotonic() >= deadline or stop():
            return None
        tick()
        time.sleep(0.25)


def answer(task_id: str, text: str, answered_by: str = "human") -> dict[str, Any]:
    """Answer a task's open question: kept with it (an attempt waiting for it takes it),
    into its notes (the next prompt reads it), and a task held for it is released.
    ``InvalidInput`` when it has none, ``TaskNotFound`` when no queue holds the task."""
    task_id = queue_utils.known_task_id(task_id)
    text = clean_text(text, "the answer").strip()
    if not text:
        raise InvalidInput("an answer needs words")
    if len(text) > MAX_ANSWER_CHARS:
        raise InvalidInput(f"an answer is at most {MAX_ANSWER_CHARS} characters")
    given = {"answer": text, "answered_by": answered_by, "answered_at": format_time(utcnow())}

    def answered(asked: dict[str, Any] | None) -> dict[str, Any]:
        if not asked or not asked.get("question") or "answer" in asked:
            raise InvalidInput(f"{task_label(task_id)} has no open question")
        return {**asked, **given}

    record = adopt.store().records.update(adopt.task_key(FAMILY, task_id), answered)
    assert record is not None  # ``answered`` never deletes
    asked = record.value
    heading = f"Answer — {one_line(answered_by, 80)} ({asked['answered_at']})"
    task_notes.add_notes_section(task_id, heading, f"Q: {asked['question']}\n\nA: {text}")
    queue_utils.release_question(task_id, answered_by)
    return asked


def unanswered(task: Task) -> str | None:
    """The question this attempt asked and nobody answered yet, or None."""
    asked = read(task.id)
    if asked.get("attempt") == task.attempts and "answer" not in asked:
        return asked.get("question")
    return None


def hold_for_answer(task: Task, question: str, reason: str) -> Task:
    """End an attempt as "needs input": back to incoming, not counted, held until answered
    (unless the answer arrived meanwhile: then only back to incoming)."""
    if "answer" not in read(task.id):
        task_notes.add_notes_section(task.id, f"Question — attempt {task.attempts}", question)
    return queue_utils.hold_for_question(task, question, reason, lambda: "answer" in read(task.id))

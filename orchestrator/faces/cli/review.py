"""A person's verdicts on tasks: `accept`, `reject`, `close`, `approve`, `retry`,
`requeue` and `answer`. Those taking several ids act on each in turn (`each`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ...base.text import clean_text
from ...model.exceptions import InvalidInput, InvalidTaskId, OctopoidError
from ...model.ids import TaskId
from ...model.tasks import Task, TaskState, plural
from ...queue import budgets, machine, questions, recovery
from ...review import comments as line_comments
from ...review import verdicts
from . import render
from .params import TASK_ID

T = TypeVar("T")

#: The ids a verdict acts on, as given: `each` parses them one at a time.
several_ids = click.argument("task_ids", nargs=-1, required=True)


def each(
    task_ids: tuple[str, ...],
    act: Callable[[TaskId], T],
    line: Callable[[T], str] = str,
    row: Callable[[T], dict[str, Any]] | None = None,
) -> None:
    """``act`` on every id in turn, printing ``line`` of what it returns (with ``row``: one
    JSON list at the end, a row per id, failures too); one that fails is named on stderr
    and the others go on; exit with the worst failure's code (0 if none).

    Each id is parsed here, one by one, not by ``TASK_ID`` as click reads them: a bad id is
    one failure among the others (`accept 1 ../x 2` still accepts 1 and 2)."""
    failures, rows = 0, []
    for raw in task_ids:
        try:
            done = act(TaskId(raw))
        except OctopoidError as exc:
            failures = max(failures, render.error(exc))
            rows.append(_failed_row(raw, exc))
            continue
        if row is None:
            click.echo(line(done))
        else:
            rows.append({"ok": True, "error": None} | row(done))
    if row is not None:
        render.emit_json(rows)
    sys.exit(failures)


def _failed_row(raw: str, exc: OctopoidError) -> dict[str, Any]:
    """The JSON row of an id whose move failed: named as given when it is no task id."""
    label = raw if isinstance(exc, InvalidTaskId) else TaskId(raw).label
    return {"id": label, "ok": False, "error": str(exc), "exit_code": exc.exit_code}


@click.command()
@several_ids
@click.option("--by", "actor", default="human", show_default=True, help="Who accepts.")
@click.option(
    "--expect",
    metavar="SHA",
    help="Accept only if the branch is still at this commit (the head `show` printed when "
    "you judged it); with several tasks, it applies to each.",
)
@click.option(
    "--forget",
    multiple=True,
    type=click.IntRange(1),
    metavar="N",
    help="Strike learning N (as `show` numbers them): it is not kept in memory (repeatable).",
)
@click.option(
    "--edit",
    "edits",
    multiple=True,
    type=(click.IntRange(1), str),
    metavar="N TEXT",
    help="Keep learning N as TEXT instead (repeatable).",
)
@click.option(
    "--keep",
    multiple=True,
    type=click.IntRange(1),
    metavar="N",
    help="Keep learning N though it reads as an instruction: prompts may then carry it "
    "(repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: one list.")
def accept(
    task_ids: tuple[str, ...],
    actor: str,
    expect: str | None,
    forget: tuple[int, ...],
    edits: tuple[tuple[int, str], ...],
    keep: tuple[int, ...],
    as_json: bool,
) -> None:
    """Accept provisional tasks: merge each branch into its base, mark done, clean up.

    The merge follows merge.strategy in config.yaml (merge, squash, ff-only, or none to
    leave the branch for a pull request). A conflict or a dirty checkout changes nothing.
    What the accepted attempt learned is kept in project memory, as `show` lists it.
    """
    actor = clean_text(actor, "--by")
    if (forget or edits or keep) and len(task_ids) > 1:
        raise click.UsageError(
            "--forget, --edit and --keep take one task (their numbers are its own)"
        )
    rewritten = {n: clean_text(text, "--edit") for n, text in edits}

    def one(task_id: TaskId) -> verdicts.Accepted:
        done = verdicts.accept(task_id, actor, expect, forget=forget, edits=rewritten, keep=keep)
        if done.cleanup_error:
            click.echo(f"octopoid: cleanup: {done.cleanup_error}", err=True)
        return done

    each(task_ids, one, _accepted_line, verdicts.accepted_row if as_json else None)


def _accepted_line(done: verdicts.Accepted) -> str:
    if done.strategy == "finished":
        return f"{done.task.label} was done already: finished what its accept left"
    if done.strategy == "pull-request" and done.task.state is TaskState.PROVISIONAL:
        pull = f"#{done.task.headers.get('PR_NUMBER', '?')} {done.task.headers.get('PR_URL', '')}"
        return (
            f"{done.task.label}: pull request {pull.strip()} is open; the task waits in review "
            "until it is merged there (then it is done) or closed"
        )
    how = {
        "merge": "merged",
        "squash": "squashed",
        "ff-only": "fast-forwarded",
        "no-change": "no change needed, nothing merged",
    }.get(done.strategy, "branch left in place")
    when = "when its pull request merges" if done.strategy == "pull-request" else "now"
    kept = render.learning_lines(done.learnings, f"learnings kept in project memory {when}")
    return "\n".join([f"{done.task.label} accepted ({how}): done", *kept])


@click.command()
@several_ids
@click.option("--reason", required=True, help="What to fix; the next attempt reads it.")
@click.option(
    "--comment",
    "comments",
    multiple=True,
    metavar="PATH:LINE:TEXT",
    help="A comment on a line of a file on the task's branch (agent/TASK-<id>), e.g. "
    "'src/a.py:42:handle None', or on a range, 'src/a.py:42-45:...': PATH relative to the "
    "repository (it ends at the first ':<number>:', so it may hold colons), LINE numbered "
    "from 1 as in the file on the branch, then the text (colons too). Repeatable. Each goes "
    "into the notes with the lines it is about. Only with a single task. (Comments on "
    "removed lines: the review page.)",
)
@click.option("--by", "actor", default="human", show_default=True, help="Who rejects.")
@click.option("--expect", metavar="SHA", help="Reject only if the branch is still at this commit.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output: one list.")
def reject(
    task_ids: tuple[str, ...],
    reason: str,
    comments: tuple[str, ...],
    actor: str,
    expect: str | None,
    as_json: bool,
) -> None:
    """Send provisional tasks back to incoming, with the reason in their retry notes.

    A bad --comment (no such file or line on the branch) rejects nothing.
    """
    reason = machine.rejection_reason(clean_text(reason, "--reason"))
    actor = clean_text(actor, "--by")
    if comments and len(task_ids) > 1:
        raise InvalidInput("--comment names lines of one task's branch: reject one task with it")
    parsed = [line_comments.parse_line_comment(spec) for spec in comments]
    noted = (
        f"the reason and {plural(len(parsed), 'line comment')} are" if parsed else "the reason is"
    )

    def line(task: Task) -> str:
        return f"{task.label} rejected: back in {task.state.value}; {noted} in its notes"

    def row(task: Task) -> dict[str, Any]:
        return {"id": task.label, "state": task.state.value, "comments": len(parsed)}

    def one(task_id: TaskId) -> Task:
        return verdicts.reject(task_id, reason, actor, parsed, expect)

    each(task_ids, one, line, row if as_json else None)


@click.command()
@several_ids
@click.option("--reason", required=True, help="Why; kept in the task's History.")
@click.option(
    "--wont-do",
    "wont_do",
    is_flag=True,
    help="Close as won't do (its learnings are dropped) instead of as done.",
)
@click.option("--by", "actor", default="human", show_default=True, help="Who closes.")
def close(task_ids: tuple[str, ...], reason: str, wont_do: bool, actor: str) -> None:
    """Move tasks to done without merging anything.

    As done (the default): nothing needed changing, or it was done elsewhere; the task's
    learnings go into memory as at accept. With --wont-do: it will not be done. Works from
    incoming, provisional, failed, rejected and breakdown; a claimed task is requeued
    first. The branch is kept; `octopoid worktrees --prune` deletes it once merged.
    """
    reason, actor = clean_text(reason, "--reason"), clean_text(actor, "--by")
    kind = "wont-do" if wont_do else "done"

    def one(task_id: TaskId) -> str:
        closed = verdicts.close(task_id, kind, reason, actor).task
        return f"{closed.label} closed as {kind} (nothing merged)"

    each(task_ids, one)


@click.command()
@click.argument("task_id", type=TASK_ID)
@click.option("--by", "actor", default="human", show_default=True, help="Who approves.")
def approve(task_id: TaskId, actor: str) -> None:
    """Create the subtasks of a proposed breakdown (breakdown.approve: true in config.yaml).

    `octopoid reject TASK-N --reason ...` sends the proposal back to breakdown instead.
    """
    created = verdicts.approve(task_id, clean_text(actor, "--by"))
    click.echo(f"created {', '.join(t.label for t in created)}; they run in order")


@click.command()
@several_ids
@click.option(
    "--budget",
    default="",
    help="Give the tasks this budget from now on, e.g. 'usd=10 turns=200' (one a budget "
    "stopped waits in failed/ for this).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Start again from the base branch: earlier attempts' commits are set aside "
    "(kept as refs/octopoid/replaced/agent/TASK-<id>-<sha>), not built on.",
)
def retry(task_ids: tuple[str, ...], fresh: bool, budget: str) -> None:
    """Move failed, rejected or breakdown tasks back to incoming, with fresh attempts.

    Their retry notes are kept, so the next attempt reads what the last ones found, and
    its prompt lists the commits the branch already holds. From breakdown/, the task is
    tried whole again instead of being split.
    """
    how = " (from its base)" if fresh else ""
    limits = budgets.given(budget)
    each(
        task_ids,
        lambda task_id: (
            f"{verdicts.retry(task_id, fresh, budget=limits).label} back in incoming{how}"
        ),
    )


@click.command()
@several_ids
@click.option("--reason", default="requeued by hand", show_default=True)
def requeue(task_ids: tuple[str, ...], reason: str) -> None:
    """Move claimed tasks back to incoming (their retry notes are kept).

    The claim is taken back at once; a running attempt is told to stop, gets the shutdown
    grace to stop its agent and save its notes, and whatever is left of it is killed. The
    attempt counts.
    """
    reason = clean_text(reason, "--reason")

    def one(task_id: TaskId) -> str:
        task, how = recovery.requeue_running(task_id, reason)
        return f"{task.label} back in incoming; {how}"

    each(task_ids, one)


@click.command()
@click.argument("task_id", type=TASK_ID)
@click.argument("text")
@click.option("--by", "actor", default="human", show_default=True, help="Who answers.")
def answer(task_id: TaskId, text: str, actor: str) -> None:
    """Answer the question an attempt of TASK_ID asked (its agent's ask_human).

    The answer goes into the task's notes, so the next attempt's prompt carries it; a task
    waiting for it ("needs input") may be claimed again at once. An attempt still waiting
    for the answer gets it as its tool's reply.
    """
    asked = questions.answer(task_id, text, clean_text(actor, "--by"))
    click.echo(f"{asked['task']}: answered ({asked['question'][:60]})")

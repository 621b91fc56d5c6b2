"""`octopoid mcp`: octopoid's queue as Model Context Protocol tools, for a person's session.

Each tool calls what its CLI command calls and answers with its ``--json`` rows; refusals,
redaction and hints are as docs/mcp.md says. Tools run one at a time: they are the CLI's
functions, written for one call per process. Only `octopoid mcp` imports this module, so
no other command pays for the SDK.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp_types import CallToolResult, Resource, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from ..base.redaction import each_string, redact
from ..base.text import clean_text
from ..daemon import scheduler_control
from ..memory import lifecycle
from ..model.exceptions import InvalidTaskId, OctopoidError, TaskNotFound
from ..model.tasks import DEFAULT_ROLE, PRIORITIES, TaskId, TaskState, render_task
from ..queue import budgets, intake, recovery, steering
from ..queue import machine as queue_utils
from ..review import diffs
from ..review import verdicts as review
from ..review.comments import line_comment
from . import listing, reports

ACTOR = "mcp"  #: who a move made here is recorded as, as the review page records "web"
F = TypeVar("F", bound=Callable[..., Any])
_ONE_AT_A_TIME = threading.Lock()

# The schema a client sees lists the allowed values, as the CLI's click.Choice does.
Priority = Literal[tuple(PRIORITIES)]  # type: ignore[valid-type]
State = Literal[tuple(s.value for s in TaskState)]  # type: ignore[valid-type]
TaskIdArg = Annotated[str, Field(description="TASK-12, task-12 or 12")]
ExpectArg = Annotated[
    str | None,
    Field(
        description="The branch head you judged (`show` gives it as head): refused if the "
        "branch has moved since"
    ),
]


class LineCommentArg(BaseModel):
    """A comment on lines of a file on the task's branch, as the review page sends one."""

    path: str = Field(description="Relative to the repository")
    line: int = Field(description="From 1, as in the file on the branch (or its base: side old)")
    end: int | None = Field(default=None, description="The last line of a range")
    side: Literal["new", "old"] = "new"
    text: str


def guarded(fn: F) -> F:
    """``fn`` run alone, its answer redacted, and an ``OctopoidError`` answered as a tool
    error holding the CLI's line (redacted too), without the SDK's "Error executing tool"
    before it: the line says what to do, as the CLI's does."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _ONE_AT_A_TIME:
            try:
                if "task_id" in kwargs:  # a tool's task id enters here, and is parsed once
                    kwargs["task_id"] = TaskId(kwargs["task_id"])
                return each_string(fn(*args, **kwargs), redact)
            except OctopoidError as exc:
                line = TextContent(type="text", text=redact(str(exc)))
                return CallToolResult(content=[line], is_error=True)

    return call  # type: ignore[return-value]


# --- tools: each is its CLI command's call, answered with its --json row ----------------


def enqueue(
    title: str,
    context: str = "",
    criteria: list[str] | None = None,
    priority: Priority = "P1",
    blocked_by: list[str] | None = None,
    checks: list[str] | None = None,
    role: str = DEFAULT_ROLE,
    branch: Annotated[str | None, Field(description="Default: the one checked out")] = None,
    budget: Annotated[str, Field(description="e.g. 'usd=5 turns=100'")] = "",
) -> dict[str, Any]:
    """Add a task to incoming (as `octopoid enqueue`); blockers must exist."""
    task = intake.enqueue(
        title,
        role=role,
        priority=priority,
        branch=branch,
        blocked_by=blocked_by or (),
        context=context,
        criteria=criteria or (),
        checks=checks or (),
        budget=budget,
    )
    return listing.Line.of_task(task).as_json()


def list_tasks(
    state: State | None = None,
    role: str | None = None,
    page: Annotated[int, Field(ge=1)] = 1,
    limit: Annotated[int, Field(ge=1, le=100_000)] = listing.PAGE,
) -> dict[str, Any]:
    """A page of each queue (default: every queue but done), as `octopoid list --json`;
    ``more`` says how many each queue holds past this page."""
    states = listing.queues(state)
    sections = listing.page(states, role, limit, page)
    return {
        "tasks": [line.as_json() for section in sections for line in section.lines],
        "more": {s.state.value: s.more for s in sections if s.more},
    }


def show(task_id: TaskIdArg) -> dict[str, Any]:
    """A task as `octopoid show --json` gives it (head, headers, notes counts, usage,
    History), and its file."""
    task = queue_utils.get_task(task_id)
    return reports.task_details(task) | {"file": render_task(task)}


def notes(task_id: TaskIdArg) -> dict[str, Any]:
    """A task's retry notes (what earlier attempts and reviews left for the next one),
    as `octopoid notes --json`: null when it has none."""
    return reports.notes_details(task_id)


def diff_summary(task_id: TaskIdArg) -> dict[str, Any]:
    """Lines added and removed per file on the task's branch against its base, as
    `octopoid diff --stat --json`."""
    return diffs.stat_summary(task_id)


def accept(task_id: TaskIdArg, expect: ExpectArg = None) -> dict[str, Any]:
    """Merge a provisional task's branch into its base and mark it done (as `octopoid
    accept --expect`)."""
    return review.accepted_row(review.accept(task_id, ACTOR, expect))


def reject(
    task_id: TaskIdArg,
    reason: Annotated[str, Field(description="What to fix; the next attempt reads it")],
    comments: list[LineCommentArg] | None = None,
    expect: ExpectArg = None,
) -> dict[str, Any]:
    """Send a provisional task back to incoming with the reason and line comments in its
    notes (as `octopoid reject`); a comment on no such file or line rejects nothing."""
    reason = queue_utils.rejection_reason(clean_text(reason, "--reason"))
    parsed = [
        line_comment(c.path, str(c.line), c.text, None if c.end is None else str(c.end), c.side)
        for c in comments or ()
    ]
    task = review.reject(task_id, reason, ACTOR, parsed, expect)
    return {"id": task.label, "state": task.state.value, "comments": len(parsed)}


def requeue(task_id: TaskIdArg, reason: str = "requeued by hand") -> dict[str, Any]:
    """Take a claimed task back to incoming, stopping its attempt (as `octopoid requeue`)."""
    task, how = recovery.requeue_running(task_id, clean_text(reason, "--reason"), ACTOR)
    return listing.Line.of_task(task).as_json() | {"how": how}


def say(task_id: TaskIdArg, text: str) -> dict[str, Any]:
    """Send a message to a task's running attempt, or its next one if none runs; it goes
    into the retry notes too (as `octopoid say`)."""
    return steering.say(task_id, text, ACTOR)


def retry(
    task_id: TaskIdArg,
    fresh: Annotated[bool, Field(description="Start again from the base branch")] = False,
    budget: Annotated[str, Field(description="A new budget, e.g. 'usd=10 turns=200'")] = "",
) -> dict[str, Any]:
    """Move a failed, rejected or breakdown task back to incoming with fresh attempts; its
    notes are kept (as `octopoid retry`)."""
    task = review.retry(task_id, fresh, actor=ACTOR, budget=budgets.given(budget))
    return listing.Line.of_task(task).as_json()


def close(
    task_id: TaskIdArg,
    reason: Annotated[str, Field(description="Why; kept in the task's History")],
    wont_do: Annotated[bool, Field(description="Won't do (learnings dropped), not done")] = False,
) -> dict[str, Any]:
    """Move a task to done without merging anything (as `octopoid close`)."""
    kind = "wont-do" if wont_do else "done"
    done = review.close(task_id, kind, clean_text(reason, "--reason"), ACTOR)
    return review.accepted_row(done) | {"closed_as": kind}


def memory_search(
    query: str,
    tags: list[str] | None = None,
    limit: Annotated[int, Field(ge=1, le=1000)] = 10,
) -> dict[str, Any]:
    """Search long-term memory, BM25 ranked (as `octopoid memory search --json`)."""
    query = clean_text(query, "QUERY")
    found = lifecycle.search(query, [clean_text(t, "--tag") for t in tags or ()], limit)
    return {"hits": found}


def memory_add(
    section: Annotated[
        str,
        Field(
            description="Key Topics, Important Facts, People & Entities, Ongoing Threads or "
            "File Knowledge"
        ),
    ],
    text: str,
    tags: list[str] | None = None,
    topic: str | None = None,
) -> dict[str, Any]:
    """Record a learning in the project's notes and long-term memory (as `octopoid memory
    add`)."""
    return lifecycle.add_learning(section, text, tags or (), topic)


def status() -> dict[str, Any]:
    """Tasks per queue, running claims, the oldest waiting task, blocked and stuck tasks,
    usage, the scheduler (as `octopoid status --json`)."""
    return reports.status_summary() | {"scheduler": scheduler_control.scheduler_status()}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "enqueue": enqueue,
    "list": list_tasks,
    "show": show,
    "notes": notes,
    "diff_summary": diff_summary,
    "accept": accept,
    "reject": reject,
    "requeue": requeue,
    "say": say,
    "retry": retry,
    "close": close,
    "memory_search": memory_search,
    "memory_add": memory_add,
    "status": status,
}

#: What a client may run without asking (they change nothing), and what it should confirm
#: (it merges into the base branch, or ends a task).
READ_ONLY = frozenset({"list", "show", "notes", "diff_summary", "memory_search", "status"})
DESTRUCTIVE = frozenset({"accept", "close"})


# --- resources: the list of tasks, and each task's file --------------------------------

TASKS_URI = "octopoid://tasks"


def task_file(task_id: str) -> str:
    """A task's file, as it is kept (redacted); the resource error says why if not."""
    try:
        with _ONE_AT_A_TIME:
            return redact(render_task(queue_utils.get_task(task_id)))
    except (InvalidTaskId, TaskNotFound) as exc:
        raise ResourceNotFoundError(redact(str(exc))) from None
    except OctopoidError as exc:
        raise ResourceError(redact(str(exc))) from None


def task_list() -> str:
    """The first page of each queue but done, as the ``list`` tool answers."""
    try:
        with _ONE_AT_A_TIME:
            return json.dumps(each_string(list_tasks(), redact), indent=2, sort_keys=True)
    except OctopoidError as exc:
        raise ResourceError(redact(str(exc))) from None


class OctopoidMCP(MCPServer):
    """The SDK's server, whose resource list also names each task of the first page of
    every queue but done, so a client can offer them without knowing the template."""

    async def list_resources(self) -> list[Resource]:
        listed = await super().list_resources()
        try:
            rows = json.loads(await anyio.to_thread.run_sync(task_list))["tasks"]
        except ResourceError:
            return listed  # reading the list says why
        return listed + [
            Resource(
                uri=f"{TASKS_URI}/{row['id']}",
                name=row["id"],
                title=f"{row['id']}: {row['title']}",
                mime_type="text/markdown",
            )
            for row in rows
        ]


def build_server() -> MCPServer:
    """octopoid's tools and resources on one MCP server (not yet running)."""
    server = OctopoidMCP(
        "octopoid",
        instructions="octopoid's task queue: enqueue tasks for coding agents, review what "
        "they did (show, diff_summary, notes), then accept or reject with the head you saw.",
        log_level="WARNING",
    )
    for name, fn in TOOLS.items():
        hints = ToolAnnotations(
            read_only_hint=name in READ_ONLY, destructive_hint=name in DESTRUCTIVE
        )
        server.add_tool(guarded(fn), name=name, annotations=hints)
    server.resource(TASKS_URI, name="tasks", mime_type="application/json")(task_list)
    server.resource(f"{TASKS_URI}/{{task_id}}", name="task", mime_type="text/markdown")(task_file)
    return server


def serve() -> None:
    """Answer MCP requests on stdin and stdout until the client closes them."""
    build_server().run("stdio")

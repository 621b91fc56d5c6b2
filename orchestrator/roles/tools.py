"""The tools an attempt's agent calls through its channel, each scoped to the runner's own
task and attempt: none moves a task, accepts, or names another. docs/mcp.md tells what
each does; ``draft_task`` and ``draft_dependency`` are a planner's, only when the attempt
carries a plan.

The runner makes them (``roles/attempt.py``) and hands them to the box, which serves them
on its socket (``box/channel.py``) and knows nothing of the queue. Every text an agent stores goes
through ``redaction.scrub`` here, where it enters: redacted and cleaned of control
characters.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from .. import config
from ..base.redaction import each_string, scrub
from ..box.channel import INVALID_PARAMS, REFUSED, ChannelError, Tools
from ..memory import lifecycle
from ..memory.notes import NotesManager
from ..memory.provenance import Origin
from ..model.exceptions import InvalidTask
from ..model.tasks import TaskId, one_line, render_task, task_label
from ..queue import machine as queue_utils
from ..queue import questions, steering
from . import breakdown, plans

MAX_TEXT_CHARS = 4000  # one remembered item, as one review comment
MAX_PROGRESS_CHARS = 300
MAX_REMEMBERED = 200  # items one attempt may add: notes reach every later prompt
MAX_RESULTS = 50

STRING: dict[str, Any] = {"type": "string"}
STRINGS: dict[str, Any] = {"type": "array", "items": STRING}


def _tool(name: str, description: str, required: tuple[str, ...] = (), **props: Any) -> dict:
    """One tool's MCP spec: its arguments' JSON schemas, ``required`` among them."""
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    return {"name": name, "description": description, "inputSchema": schema}


TOOLS: list[dict[str, Any]] = [
    _tool(
        "remember",
        "Record a learning in this task's working notes (project memory once the task is "
        "accepted). section: Key Topics, Important Facts, People & Entities, Ongoing Threads "
        "or File Knowledge.",
        ("section", "text"),
        section=STRING,
        text=STRING,
    ),
    _tool(
        "search_memory",
        "Search the project's long-term memory (BM25 ranked).",
        ("query",),
        query=STRING,
        limit={"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
        tags=STRINGS,
    ),
    _tool("read_task", "This attempt's task: its file, context and acceptance criteria."),
    _tool("read_notes", "This task's retry notes: what earlier attempts and reviewers said."),
    _tool(
        "report_progress",
        "Say in one line what you are doing now (shown live to people).",
        ("text",),
        text=STRING,
    ),
    _tool(
        "propose_split",
        "The task is too big for one attempt: propose subtasks instead of doing it. The "
        "attempt ends and a person approves or rejects the split. Each subtask: title, "
        "context, criteria (list), depends_on (earlier subtask numbers).",
        ("subtasks",),
        subtasks={"type": "array", "items": {"type": "object"}},
    ),
    _tool(
        "inbox",
        "Messages a person sent to steer this attempt that you have not read yet (empty "
        "when none). Check it now and then, and follow what they say.",
    ),
    _tool(
        "ask_human",
        "Ask a person a question you cannot answer from the task, the code or memory. Waits "
        "a while for the answer; if none comes, stop and finish: the task waits for the "
        "answer and the next attempt reads it.",
        ("question",),
        question=STRING,
    ),
]

#: A planner's drafting tools (``octopoid plan``): offered only when the channel carries a plan
PLAN_TOOLS: list[dict[str, Any]] = [
    _tool(
        "draft_task",
        "Draft one task of the plan; returns its key (T1, T2, ...). Do not implement "
        "anything: a person reviews the plan before any task is created.",
        ("title",),
        title=STRING,
        context=STRING,
        criteria=STRINGS,
        priority={"type": "string", "enum": ["P0", "P1", "P2", "P3"]},
        role=STRING,
    ),
    _tool(
        "draft_dependency",
        "Say that drafted task `task` must wait until `blocked_by` is done (both keys that "
        "draft_task returned).",
        ("task", "blocked_by"),
        task=STRING,
        blocked_by=STRING,
    ),
]


class AttemptTools(Tools):
    """One attempt's tools: what its agent may ask of the runner, about its own task."""

    DIRECT = ("remember", "search_memory", "read_task", "read_notes", "report_progress", "inbox")
    WAITS = ("ask_human",)  # waits without the channel's lock: other tools go on meanwhile

    def __init__(
        self,
        task_id: TaskId,
        attempt: int,
        agent: str = "agent",
    ) -> None:
        super().__init__()
        self.task_id = task_id
        self.attempt = attempt
        self.agent = agent
        self.progress: str | None = None  # the latest line reported, until the runner takes it
        self.remembered = 0
        self.proposed: list[Any] | None = None  # propose_split's subtasks, for the runner
        self.plan: Any = None  # a planner's draft (plans.Plan), when it carries one
        self.calls = {spec["name"]: getattr(self, spec["name"]) for spec in TOOLS + PLAN_TOOLS}

    def specs(self) -> list[dict[str, Any]]:
        """The tools this attempt has: the drafting ones only for a planner."""
        return TOOLS + (PLAN_TOOLS if self.plan is not None else [])

    def instructions(self) -> str:
        return f"Tools for {task_label(self.task_id)} only."

    def remember(self, section: str, text: str) -> dict[str, Any]:
        text = _said(text, "text", MAX_TEXT_CHARS, multiline=False)
        if self.remembered >= MAX_REMEMBERED:
            raise ChannelError(REFUSED, f"this attempt already remembered {MAX_REMEMBERED} items")
        label = task_label(self.task_id)
        origin = Origin(label, self.attempt, self.agent)
        manager = NotesManager(notes_id=label)
        added = manager.add_item(_text(section, "section", 100), text, origin)
        self.remembered += added
        return {"added": added, "file": manager.notes_file.name}

    def search_memory(self, query: str, limit: int = 10, tags: list | None = None) -> list:
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_RESULTS:
            raise ChannelError(
                INVALID_PARAMS, f"limit must be a whole number from 1 to {MAX_RESULTS}"
            )
        tags = tags or []
        if not isinstance(tags, list) or len(tags) > 20:
            raise ChannelError(INVALID_PARAMS, "tags must be a list of at most 20 strings")
        tag_list = [_text(tag, "tag", 100) for tag in tags]
        return lifecycle.search(_text(query, "query", 1000), tag_list, limit)

    def read_task(self) -> str:
        task = queue_utils.get_task(self.task_id)
        task.drop_header("CLAIM_TOKEN")  # the runner's, not the agent's
        return render_task(task)

    def read_notes(self) -> str:
        return queue_utils.get_task_notes(self.task_id) or ""

    def report_progress(self, text: str) -> dict[str, bool]:
        self.progress = one_line(_said(text, "text", 10 * MAX_PROGRESS_CHARS), MAX_PROGRESS_CHARS)
        return {"ok": True}

    def take_progress(self) -> str | None:
        """The latest progress line the agent reported since the last call, if any."""
        text, self.progress = self.progress, None
        return text

    def inbox(self) -> str:
        """A person's messages not read yet (``octopoid say``), now delivered to this attempt."""
        return steering.as_turn(steering.take(self.task_id))

    def propose_split(self, subtasks: object) -> dict[str, Any]:
        if not isinstance(subtasks, list):
            raise ChannelError(INVALID_PARAMS, "subtasks must be a list")
        try:  # the breakdown role's rules: fields, limits, only earlier dependencies
            said = json.dumps(each_string(subtasks, scrub))
            parsed = breakdown.parse_answer(f"```subtasks\n{said}\n```")
            breakdown.check(queue_utils.get_task(self.task_id), parsed)
        except InvalidTask as exc:
            raise ChannelError(INVALID_PARAMS, f"the split is refused: {exc}") from None
        self.proposed = parsed
        return {
            "proposed": len(parsed),
            "next": "stop now: the attempt ends and a person approves or rejects the split",
        }

    def draft_task(
        self,
        title: object,
        context: object = "",
        criteria: object = None,
        priority: object = "P1",
        role: object = "implement",
    ) -> dict[str, Any]:
        plan = self._drafting()
        fields = each_string(
            {"title": title, "context": context, "criteria": criteria or []}, scrub
        )
        fields |= {"priority": priority, "role": role}
        key = plans.add_task(plan, **fields)  # type: ignore[arg-type]
        try:
            plans.validate(plan)
        except InvalidTask as exc:
            plans.drop_task(plan, key)
            raise ChannelError(INVALID_PARAMS, f"the task is refused: {exc}") from None
        return {"key": key, "tasks": len(plan.tasks)}

    def draft_dependency(self, task: object, blocked_by: object) -> dict[str, Any]:
        plan = self._drafting()
        try:
            plans.add_edge(plan, str(blocked_by), str(task))
            plans.validate(plan)
        except InvalidTask as exc:
            with contextlib.suppress(InvalidTask):
                plans.task_of(plan, str(task)).blocked_by.remove(str(blocked_by))
            raise ChannelError(INVALID_PARAMS, f"the dependency is refused: {exc}") from None
        return {"task": task, "blocked_by": plans.task_of(plan, str(task)).blocked_by}

    def _drafting(self) -> Any:
        if self.plan is None:
            raise ChannelError(REFUSED, "only a planner's attempt drafts tasks")
        return self.plan

    def ask_human(self, question: object) -> str:
        asked = questions.ask(self.task_id, self.attempt, _said(question, "question", 10**6))
        wait = config.load_config()["questions"]["wait_seconds"]
        found = questions.wait_for_answer(self.task_id, wait, self.tick, self.closed)
        if found is not None:
            return f"The answer: {found}"
        return (
            f"No answer yet (asked at {asked['asked_at']}). The question is saved and shown "
            "to people. Stop now and finish without further changes: the task waits for the "
            "answer, and the next attempt reads it in its notes."
        )


def _said(value: object, name: str, limit: int, multiline: bool = True) -> str:
    """Free text an agent says (an item, a progress line, a question), as octopoid keeps
    it: bounded, then ``scrub``bed (redacted, control characters out), and not blank."""
    if not isinstance(value, str) or len(value) > limit:
        raise ChannelError(INVALID_PARAMS, f"{name} must be a string of at most {limit} characters")
    return _text(scrub(value, multiline), name, limit)


def _text(value: object, name: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ChannelError(INVALID_PARAMS, f"{name} must be a non-empty string")
    if len(value) > limit or "\x00" in value:
        raise ChannelError(INVALID_PARAMS, f"{name} must be at most {limit} characters, no NUL")
    return value

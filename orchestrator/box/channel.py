"""The one way back from a box: a Unix socket the runner serves for one task and attempt.

It speaks JSON-RPC 2.0, one JSON object per line, and is an MCP server (the framing of
MCP's stdio transport: ``octopoid mcp`` inside the box relays stdin to it, so Claude Code
takes it with ``--mcp-config``, and the Anthropic API backend calls the same tools in its
loop). Its vocabulary is fixed and scoped by construction: every tool acts on the
runner's own task, and none moves a task, accepts, or names another.

- ``remember {section, text}``: an item in the task's working notes, stamped with the task,
  attempt and agent (promoted to project memory only if this attempt's work is accepted).
  What ``octopoid memory add`` does inside an attempt.
- ``search_memory {query, limit?, tags?}``: long-term memory, BM25 ranked.
- ``read_task {}``: the task's own file (without its claim token).
- ``read_notes {}``: its own retry notes.
- ``report_progress {text}``: one line saying what the agent is doing (kept as the task's
  ``PROGRESS`` header by the runner, shown live on the board).
- ``inbox {}``: a person's messages to this attempt (``octopoid say``) not read yet.
- ``propose_split {subtasks}``: the task is too big; the attempt ends with the subtasks
  held for a person's approval (as a breakdown's are).
- ``ask_human {question}``: the question goes to the board and the alerts; the answer
  comes back if given within ``questions.wait_seconds``, else the attempt ends "needs
  input" and the next one reads the answer (``questions``).

MCP clients call them through ``tools/call``; the CLI client inside the box calls the
first six by name. A hostile client gets an error, never the runner's attention: lines are
capped, idle connections closed, at most ``MAX_CONNECTIONS`` served at once, requests
handled one at a time (but for a question's wait), and every text it stores goes through
``redaction.scrub`` here, where it enters: redacted and cleaned of control characters.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import config
from ..base.redaction import redact, scrub
from ..memory import lifecycle
from ..memory.notes import NotesManager
from ..memory.provenance import Origin
from ..model.exceptions import InvalidTask, OctopoidError
from ..model.tasks import one_line, render_task, task_label
from ..queue import machine as queue_utils
from ..queue import questions, steering
from ..roles import breakdown, plans
from .box import SOCKET_NAME

MAX_LINE_BYTES = 64 * 1024
DRAIN_BYTES = 1 << 20  # of an overlong request read (and dropped) before closing
MAX_CONNECTIONS = 8
IDLE_SECONDS = 600.0
MAX_TEXT_CHARS = 4000  # one remembered item, as one review comment
MAX_PROGRESS_CHARS = 300
MAX_REMEMBERED = 200  # items one attempt may add: notes reach every later prompt
MAX_RESULTS = 50
HIDDEN_HEADERS = ("CLAIM_TOKEN",)

PARSE_ERROR, INVALID_REQUEST, NO_METHOD, INVALID_PARAMS = -32700, -32600, -32601, -32602
INTERNAL_ERROR, REFUSED = -32603, -32000


class ChannelError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


PROTOCOL_VERSION = "2025-06-18"  # MCP's, as this server speaks it

TOOLS: list[dict[str, Any]] = [
    {
        "name": "remember",
        "description": "Record a learning in this task's working notes (project memory once "
        "the task is accepted). section: Key Topics, Important Facts, People & Entities, "
        "Ongoing Threads or File Knowledge.",
        "inputSchema": {
            "type": "object",
            "properties": {"section": {"type": "string"}, "text": {"type": "string"}},
            "required": ["section", "text"],
        },
    },
    {
        "name": "search_memory",
        "description": "Search the project's long-term memory (BM25 ranked).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        },
    },
    {
        "name": "read_task",
        "description": "This attempt's task: its file, context and acceptance criteria.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "read_notes",
        "description": "This task's retry notes: what earlier attempts and reviewers said.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "report_progress",
        "description": "Say in one line what you are doing now (shown live to people).",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "propose_split",
        "description": "The task is too big for one attempt: propose subtasks instead of "
        "doing it. The attempt ends and a person approves or rejects the split. Each "
        "subtask: title, context, criteria (list), depends_on (earlier subtask numbers).",
        "inputSchema": {
            "type": "object",
            "properties": {"subtasks": {"type": "array", "items": {"type": "object"}}},
            "required": ["subtasks"],
        },
    },
    {
        "name": "inbox",
        "description": "Messages a person sent to steer this attempt that you have not read "
        "yet (empty when none). Check it now and then, and follow what they say.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "ask_human",
        "description": "Ask a person a question you cannot answer from the task, the code or "
        "memory. Waits a while for the answer; if none comes, stop and finish: the task "
        "waits for the answer and the next attempt reads it.",
        "inputSchema": {
            "type": "object",
            "properties": {"question": {"type": "string"}},
            "required": ["question"],
        },
    },
]


#: A planner's drafting tools (``octopoid plan``): offered only when the channel carries a plan
PLAN_TOOLS: list[dict[str, Any]] = [
    {
        "name": "draft_task",
        "description": "Draft one task of the plan; returns its key (T1, T2, ...). Do not "
        "implement anything: a person reviews the plan before any task is created.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "title": {"type": "string"},
                "context": {"type": "string"},
                "criteria": {"type": "array", "items": {"type": "string"}},
                "priority": {"type": "string", "enum": ["P0", "P1", "P2", "P3"]},
                "role": {"type": "string"},
            },
            "required": ["title"],
        },
    },
    {
        "name": "draft_dependency",
        "description": "Say that drafted task `task` must wait until `blocked_by` is done "
        "(both keys that draft_task returned).",
        "inputSchema": {
            "type": "object",
            "properties": {"task": {"type": "string"}, "blocked_by": {"type": "string"}},
            "required": ["task", "blocked_by"],
        },
    },
]


class ChannelServer:
    """Serves one attempt's channel in threads of the runner until ``close``."""

    def __init__(
        self,
        folder: Path,
        task_id: str,
        attempt: int,
        on_progress: Callable[[str], None],
        agent: str = "agent",
    ) -> None:
        self.path = folder / SOCKET_NAME
        self.task_id = task_id
        self.attempt = attempt
        self.agent = agent
        self.on_progress = on_progress
        self.remembered = 0
        self.proposed: list[Any] | None = None  # propose_split's subtasks, for the runner
        self.plan: Any = None  # a planner's draft (plans.Plan), when it carries one
        self.tick: Callable[[], None] = lambda: None  # keeps the claim alive in a long wait
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._sock.listen(MAX_CONNECTIONS)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="channel", daemon=True)
        self.methods: dict[str, Callable[..., Any]] = {
            "remember": self.remember,
            "search_memory": self.search_memory,
            "read_task": self.read_task,
            "read_notes": self.read_notes,
            "report_progress": self.report_progress,
            "inbox": self.inbox,
            "initialize": self.initialize,
            "ping": dict,
            "tools/list": lambda **_: {"tools": self.tool_specs()},
            "tools/call": self.tools_call,
        }
        self.tools: dict[str, Callable[..., Any]] = {
            **{name: self.methods[name] for name in ("remember", "search_memory")},
            **{name: self.methods[name] for name in ("read_task", "read_notes")},
            "report_progress": self.report_progress,
            "inbox": self.inbox,
            "propose_split": self.propose_split,
            "ask_human": self.ask_human,
            "draft_task": self.draft_task,
            "draft_dependency": self.draft_dependency,
        }

    def start(self) -> ChannelServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)
        self.path.unlink(missing_ok=True)

    # --- connections ------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                _send(conn, _error(None, REFUSED, "too many connections to the channel"))
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(IDLE_SECONDS)
            with conn, conn.makefile("rb") as lines:
                while not self._closed:
                    line = lines.readline(MAX_LINE_BYTES + 1)
                    if not line:
                        return
                    if len(line) > MAX_LINE_BYTES:
                        _send(conn, _error(None, INVALID_REQUEST, "request line too long"))
                        conn.shutdown(socket.SHUT_WR)
                        lines.read(DRAIN_BYTES)  # let the client read why before it is cut off
                        return
                    if line.strip() and (reply := self.handle(line)) is not None:
                        _send(conn, reply)
        except OSError:
            return  # the client went away, or idled out
        finally:
            self._slots.release()

    def handle(self, line: bytes) -> dict[str, Any] | None:
        """One request line in, one response object out (none for a notification, a
        message without an id, as MCP's ``notifications/initialized``); never raises."""
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):
            return _error(None, PARSE_ERROR, "not JSON")
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return _error(None, INVALID_REQUEST, "a request is an object with a 'method'")
        if "id" not in request:
            return None
        rid = request.get("id")
        rid = rid if isinstance(rid, int | str) and not isinstance(rid, bool) else None
        method = self.methods.get(request["method"])
        if method is None:
            known = ", ".join(self.methods)
            return _error(rid, NO_METHOD, f"no method {request['method'][:80]!r} (known: {known})")
        params = request.get("params", {})
        if not isinstance(params, dict):
            return _error(rid, INVALID_PARAMS, "params must be an object")
        try:
            if method == self.tools_call:  # its own lock: a question's wait holds none
                return {"jsonrpc": "2.0", "id": rid, "result": method(**params)}
            with self._lock:
                return {"jsonrpc": "2.0", "id": rid, "result": method(**params)}
        except TypeError as exc:
            return _error(rid, INVALID_PARAMS, f"bad params for {request['method']}: {exc}")
        except ChannelError as exc:
            return _error(rid, exc.code, str(exc))
        except OctopoidError as exc:
            return _error(rid, REFUSED, redact(str(exc)))
        except Exception:
            traceback.print_exc()
            return _error(rid, INTERNAL_ERROR, "the channel failed; the runner's log says why")

    # --- MCP ----------------------------------------------------------------------------

    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools this attempt has: the drafting ones only for a planner."""
        return TOOLS + (PLAN_TOOLS if self.plan is not None else [])

    def initialize(self, **_: Any) -> dict[str, Any]:
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "octopoid-attempt", "version": "1"},
            "instructions": f"Tools for {task_label(self.task_id)} only.",
        }

    def tools_call(self, name: object = None, arguments: object = None, **_: Any) -> dict:
        """MCP's ``tools/call``: a tool's failure is its result (``isError``), as MCP says."""
        text, is_error = self.call_tool(name, arguments)
        return {"content": [{"type": "text", "text": text}], "isError": is_error}

    def call_tool(self, name: object, arguments: object) -> tuple[str, bool]:
        """Run tool ``name``; (its answer as text, whether it failed). For MCP and for the
        Anthropic API backend's loop alike."""
        tool = self.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return f"no tool {str(name)[:80]!r} (known: {', '.join(self.tools)})", True
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return "arguments must be an object", True
        try:
            if name == "ask_human":  # waits without the lock: other tools go on meanwhile
                result = tool(**arguments)
            else:
                with self._lock:
                    result = tool(**arguments)
        except TypeError as exc:
            return f"bad arguments for {name}: {exc}", True
        except (ChannelError, OctopoidError) as exc:
            return redact(str(exc)), True
        except Exception:
            traceback.print_exc()
            return "the tool failed; the runner's log says why", True
        return (result if isinstance(result, str) else json.dumps(result, indent=1)), False

    # --- the methods ------------------------------------------------------------------

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
        task.drop_header(*HIDDEN_HEADERS)
        return render_task(task)

    def read_notes(self) -> str:
        return queue_utils.get_task_notes(self.task_id) or ""

    def report_progress(self, text: str) -> dict[str, bool]:
        self.on_progress(one_line(_said(text, "text", 10 * MAX_PROGRESS_CHARS), MAX_PROGRESS_CHARS))
        return {"ok": True}

    def inbox(self) -> str:
        """A person's messages not read yet (``octopoid say``), now delivered to this attempt."""
        return steering.as_turn(steering.take(self.task_id))

    def propose_split(self, subtasks: object) -> dict[str, Any]:
        if not isinstance(subtasks, list):
            raise ChannelError(INVALID_PARAMS, "subtasks must be a list")
        try:  # the breakdown role's rules: fields, limits, only earlier dependencies
            said = json.dumps(_scrubbed(subtasks))
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
        fields = _scrubbed({"title": title, "context": context, "criteria": criteria or []})
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
        found = questions.wait_for_answer(self.task_id, wait, self.tick, lambda: self._closed)
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


def _scrubbed(value: Any) -> Any:
    """Every string in a JSON value ``scrub``bed (a proposed split, a drafted task)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrubbed(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(v) for k, v in value.items()}
    return value


def _text(value: object, name: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ChannelError(INVALID_PARAMS, f"{name} must be a non-empty string")
    if len(value) > limit or "\x00" in value:
        raise ChannelError(INVALID_PARAMS, f"{name} must be at most {limit} characters, no NUL")
    return value


def _error(rid: int | str | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")

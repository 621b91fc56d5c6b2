"""The one way back from a box: a Unix socket the runner serves for one task and attempt.

It speaks JSON-RPC 2.0, one JSON object per line (the framing of MCP's stdio transport,
so the MCP tools can reuse it). Its vocabulary is fixed and scoped by construction: every
method acts on the runner's own task, and none moves a task, accepts, or names another.

- ``remember {section, text}``: an item in the task's working notes (promoted to project
  memory when the task is accepted). What ``octopoid memory add`` does inside an attempt.
- ``search_memory {query, limit?, tags?}``: long-term memory, BM25 ranked.
- ``read_task {}``: the task's own file (without its claim token).
- ``read_notes {}``: its own retry notes.
- ``report_progress {text}``: one line saying what the agent is doing (kept as the task's
  ``PROGRESS`` header by the runner).

A hostile client gets an error, never the runner's attention: lines are capped, idle
connections closed, at most ``MAX_CONNECTIONS`` served at once, requests handled one at a
time, and every text redacted before it is stored.
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

from .. import queue_utils
from ..exceptions import OctopoidError
from ..memory import lifecycle
from ..memory.notes import NotesManager
from ..redaction import redact
from ..tasks import one_line, render_task, task_label
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


class ChannelServer:
    """Serves one attempt's channel in threads of the runner until ``close``."""

    def __init__(self, folder: Path, task_id: str, on_progress: Callable[[str], None]) -> None:
        self.path = folder / SOCKET_NAME
        self.task_id = task_id
        self.on_progress = on_progress
        self.remembered = 0
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
                    if line.strip():
                        _send(conn, self.handle(line))
        except OSError:
            return  # the client went away, or idled out
        finally:
            self._slots.release()

    def handle(self, line: bytes) -> dict[str, Any]:
        """One request line in, one response object out; never raises."""
        try:
            request = json.loads(line)
        except (ValueError, RecursionError):
            return _error(None, PARSE_ERROR, "not JSON")
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return _error(None, INVALID_REQUEST, "a request is an object with a 'method'")
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

    # --- the methods ------------------------------------------------------------------

    def remember(self, section: str, text: str) -> dict[str, Any]:
        text = _text(text, "text", MAX_TEXT_CHARS)
        if self.remembered >= MAX_REMEMBERED:
            raise ChannelError(REFUSED, f"this attempt already remembered {MAX_REMEMBERED} items")
        manager = NotesManager(notes_id=task_label(self.task_id))
        added = manager.add_item(_text(section, "section", 100), redact(text))
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
        self.on_progress(
            one_line(redact(_text(text, "text", 10 * MAX_PROGRESS_CHARS)), MAX_PROGRESS_CHARS)
        )
        return {"ok": True}


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

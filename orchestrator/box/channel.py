"""The one way back from a box: a Unix socket the runner serves for one task and attempt.

It speaks JSON-RPC 2.0, one JSON object per line, and is an MCP server (the framing of
MCP's stdio transport: ``octopoid mcp`` inside the box relays stdin to it, so Claude Code
takes it with ``--mcp-config``, and the Anthropic API backend calls the same tools in its
loop). What it serves is a ``Tools``: the runner's (``roles/tools.py``: remember, inbox,
ask_human, ...), each scoped to the runner's own task; this module knows nothing of the
queue, and none of its tools moves a task.

MCP clients call them through ``tools/call``; the CLI client inside the box calls the
``Tools.DIRECT`` ones by name. A hostile client gets an error, never the runner's
attention: lines are capped, idle connections closed, at most ``MAX_CONNECTIONS`` served
at once, requests handled one at a time (but for a ``Tools.WAITS`` tool's wait).
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

from ..base.redaction import redact
from ..model.exceptions import OctopoidError
from .box import SOCKET_NAME

MAX_LINE_BYTES = 64 * 1024
DRAIN_BYTES = 1 << 20  # of an overlong request read (and dropped) before closing
MAX_CONNECTIONS = 8
IDLE_SECONDS = 600.0

PARSE_ERROR, INVALID_REQUEST, NO_METHOD, INVALID_PARAMS = -32700, -32600, -32601, -32602
INTERNAL_ERROR, REFUSED = -32603, -32000


class ChannelError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


PROTOCOL_VERSION = "2025-06-18"  # MCP's, as this server speaks it


class Tools:
    """What a channel serves: ``calls`` by name (their specs, MCP's ``tools/list``), the
    ``DIRECT`` ones also as JSON-RPC methods, the ``WAITS`` ones run without the lock. This
    one has none (a box with nothing to ask); the runner's are ``roles.tools.AttemptTools``."""

    DIRECT: tuple[str, ...] = ()
    WAITS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.calls: dict[str, Callable[..., Any]] = {}
        self.tick: Callable[[], None] = lambda: None  # keeps the claim alive in a long wait
        self.closed: Callable[[], bool] = lambda: False  # the channel's, once it serves them

    def specs(self) -> list[dict[str, Any]]:
        return []

    def instructions(self) -> str:
        """What MCP's ``initialize`` says of them."""
        return "No tools."


class ChannelServer:
    """Serves one attempt's channel in threads of the runner until ``close``."""

    def __init__(self, folder: Path, toolbox: Tools) -> None:
        self.path = folder / SOCKET_NAME
        self.toolbox = toolbox
        toolbox.closed = lambda: self._closed
        self.tools = toolbox.calls
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._sock.listen(MAX_CONNECTIONS)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="channel", daemon=True)
        self.methods: dict[str, Callable[..., Any]] = {
            **{name: self.tools[name] for name in toolbox.DIRECT},
            "initialize": self.initialize,
            "ping": dict,
            "tools/list": lambda **_: {"tools": toolbox.specs()},
            "tools/call": self.tools_call,
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
        # tools/call takes its own lock: a question's wait holds none
        held = contextlib.nullcontext() if method == self.tools_call else self._lock
        try:
            with held:
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

    def initialize(self, **_: Any) -> dict[str, Any]:
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "octopoid-attempt", "version": "1"},
            "instructions": self.toolbox.instructions(),
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
        # a tool that waits runs without the lock: other tools go on meanwhile
        held = contextlib.nullcontext() if name in self.toolbox.WAITS else self._lock
        try:
            with held:
                result = tool(**arguments)
        except TypeError as exc:
            return f"bad arguments for {name}: {exc}", True
        except (ChannelError, OctopoidError) as exc:
            return redact(str(exc)), True
        except Exception:
            traceback.print_exc()
            return "the tool failed; the runner's log says why", True
        return (result if isinstance(result, str) else json.dumps(result, indent=1)), False


def _error(rid: int | str | None, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")

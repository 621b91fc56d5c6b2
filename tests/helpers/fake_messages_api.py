"""A scripted Anthropic Messages API on 127.0.0.1, for the real SDK and the real claude CLI.

Each POST /v1/messages takes the next scripted reply: a message (content blocks, stop
reason, usage) or an HTTP error (e.g. 529 overloaded). Streaming requests get the same
message as server-sent events. Every request body is kept for assertions. Run as a script
(``python fake_messages_api.py SCRIPT.json``) it prints its base URL and serves until killed.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_REPLY = {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}


def text(message: str, stop: str = "end_turn") -> dict[str, Any]:
    return {"content": [{"type": "text", "text": message}], "stop_reason": stop}


def tool_use(name: str, arguments: dict[str, Any], say: str = "", tool_id: str = "") -> dict:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": say}] if say else []
    blocks.append(
        {
            "type": "tool_use",
            "id": tool_id or f"toolu_{name}_{id(arguments)}",
            "name": name,
            "input": arguments,
        }
    )
    return {"content": blocks, "stop_reason": "tool_use"}


def error(status: int, kind: str = "overloaded_error", message: str = "Overloaded") -> dict:
    return {"status": status, "error": {"type": kind, "message": message}}


class FakeMessagesAPI:
    """``on_request(n, body)``, when given, runs as request ``n`` (from 0) arrives, before
    its reply: a test acts while the agent waits for the model (a person's message)."""

    def __init__(
        self,
        script: list[dict[str, Any]],
        model: str = "claude-test-1",
        on_request: Callable[[int, dict[str, Any]], None] | None = None,
    ) -> None:
        self.script = list(script)
        self.model = model
        self.on_request = on_request
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._count = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def do_GET(self) -> None:
                self._json(200, {"data": [], "has_more": False})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                api.paths.append(self.path)
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    self._json(200, {"input_tokens": 10})
                    return
                reply = api._next(body)
                if "status" in reply:
                    self._json(reply["status"], {"type": "error", "error": reply["error"]})
                elif body.get("stream"):
                    self._stream(api._message(reply))
                else:
                    self._json(200, api._message(reply))

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status in (429, 529):  # try again at once (the SDK waits out a 0)
                    self.send_header("retry-after", "0")
                    self.send_header("retry-after-ms", "1")
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for event in sse_events(message):
                    self.wfile.write(
                        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
                    )
                    self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # tests.support's SHUTDOWN_POLL: shutdown() returns at once (this runs as a script too)
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            if self.on_request is not None:
                self.on_request(len(self.requests) - 1, body)
            return self.script.pop(0) if self.script else DEFAULT_REPLY

    def _message(self, reply: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._count += 1
            n = self._count
        usage = {"input_tokens": 1000, "output_tokens": 200, **reply.get("usage", {})}
        return {
            "id": f"msg_{n:04d}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": reply["content"],
            "stop_reason": reply["stop_reason"],
            "stop_sequence": None,
            "usage": usage,
        }

    def __enter__(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def sse_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The Messages API streaming events that spell out ``message``."""
    start = dict(
        message,
        content=[],
        stop_reason=None,
        usage={"input_tokens": message["usage"]["input_tokens"], "output_tokens": 1},
    )
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            events.append(
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "text", "text": ""},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {"type": "text_delta", "text": block["text"]},
                }
            )
        else:
            events.append(
                {"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}}
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": i,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(block["input"]),
                    },
                }
            )
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return events


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        steps = json.load(f)
    with FakeMessagesAPI(steps) as fake:
        print(fake.base_url, flush=True)
        threading.Event().wait()

"""``octopoid`` inside an attempt: the agent's side of the channel (``channel.py``).

This file runs inside the box on the runner's Python with ``-I -S``, so it imports the
standard library only. It knows the channel's socket from ``OCTOPOID_CHANNEL``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

CHANNEL_ENV = "OCTOPOID_CHANNEL"
REPLY_BYTES = 16 * 1024 * 1024
TIMEOUT_SECONDS = 60.0
IDLE_TIMEOUT_SECONDS = 3600.0  # of one MCP request: ask_human waits for a person
USAGE_EXIT, REFUSED_EXIT = 2, 1


class ChannelFailure(Exception):
    def __init__(self, message: str, code: int = REFUSED_EXIT) -> None:
        super().__init__(message)
        self.exit_code = code


def round_trip(socket_path: str, line: bytes, timeout: float = TIMEOUT_SECONDS) -> bytes:
    """One request line to the channel, on a connection of its own; its reply line."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(socket_path)
            sock.sendall(line.rstrip(b"\n") + b"\n")
            with sock.makefile("rb") as replies:
                return replies.readline(REPLY_BYTES)
    except OSError as exc:
        raise ChannelFailure(f"cannot reach octopoid's channel at {socket_path}: {exc}") from None


def request(socket_path: str, method: str, params: dict[str, Any] | None = None) -> Any:
    """Send one request and return its result; ``ChannelFailure`` with the channel's error."""
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}})
    reply = round_trip(socket_path, line.encode())
    try:
        answer = json.loads(reply)
    except ValueError:
        raise ChannelFailure("octopoid's channel sent no answer") from None
    if "error" in answer:
        error = answer["error"]
        code = USAGE_EXIT if error.get("code") in (-32602, -32601) else REFUSED_EXIT
        raise ChannelFailure(str(error.get("message")), code)
    return answer.get("result")


def serve_mcp(socket_path: str) -> int:
    """``octopoid mcp``: an MCP server on stdio for the agent (Claude Code's
    ``--mcp-config``), relaying each request line to the channel, which answers it. A
    notification (no id) wants no answer and is not sent: the channel keeps no session."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    for line in iter(lambda: stdin.readline(REPLY_BYTES), b""):
        try:
            message = json.loads(line)
        except ValueError:
            message = None  # the channel says what is wrong with it
        if isinstance(message, dict) and "id" not in message:
            continue
        rid = message.get("id") if isinstance(message, dict) else None
        try:  # a question may wait for its answer: no timeout short of the channel's own
            answer = json.loads(round_trip(socket_path, line, timeout=IDLE_TIMEOUT_SECONDS))
        except (ChannelFailure, ValueError) as exc:
            answer = {"jsonrpc": "2.0", "error": {"code": -32603, "message": str(exc)}}
        if isinstance(answer, dict) and answer.get("id") is None:  # refused before it was read
            answer["id"] = rid  # (too long a line): the client waits for this id
        stdout.write(json.dumps(answer).encode() + b"\n")
        stdout.flush()
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="octopoid",
        description="octopoid inside an attempt: what the agent may ask of octopoid. "
        "Other commands (accept, enqueue, ...) are not available here.",
    )
    commands = top.add_subparsers(dest="command", required=True)
    memory = commands.add_parser("memory", help="working notes and long-term memory")
    memory_commands = memory.add_subparsers(dest="action", required=True)
    add = memory_commands.add_parser(
        "add", help="record a learning in this task's notes (project memory once accepted)"
    )
    add.add_argument("section", help="Key Topics, Important Facts, People & Entities, "
                     "Ongoing Threads or File Knowledge")  # fmt: skip
    add.add_argument("text")
    ignored = "accepted as outside an attempt, and ignored: a task's notes keep no tags"
    add.add_argument("--tag", action="append", default=[], help=ignored)
    add.add_argument("--topic", help=ignored)
    search = memory_commands.add_parser("search", help="search long-term memory")
    search.add_argument("query")
    search.add_argument("--tag", action="append", default=[], help="only notes with this tag")
    search.add_argument("--limit", type=int, default=10)
    search.add_argument("--json", action="store_true", help="machine-readable output")
    commands.add_parser("task", help="print this attempt's task")
    commands.add_parser("notes", help="print the task's retry notes")
    progress = commands.add_parser("progress", help="say in one line what you are doing")
    progress.add_argument("text")
    commands.add_parser("inbox", help="print a person's messages to this attempt not read yet")
    commands.add_parser(
        "mcp", help="serve this attempt's tools over MCP on stdio (for an agent's MCP config)"
    )
    return top


def run(args: argparse.Namespace, socket_path: str) -> str:
    """What to print for ``args``."""
    if args.command == "task":
        return request(socket_path, "read_task")
    if args.command == "notes":
        return request(socket_path, "read_notes") or "no retry notes yet\n"
    if args.command == "inbox":
        said = request(socket_path, "inbox")
        return f"{said}\n" if said else ""
    if args.command == "progress":
        request(socket_path, "report_progress", {"text": args.text})
        return ""
    if args.action == "add":
        done = request(socket_path, "remember", {"section": args.section, "text": args.text})
        return f"{'added to' if done['added'] else 'already in'} {done['file']} ({args.section})\n"
    hits = request(
        socket_path, "search_memory", {"query": args.query, "limit": args.limit, "tags": args.tag}
    )
    if args.json:
        return json.dumps(hits, indent=2, sort_keys=True) + "\n"
    return "".join(f"#{hit['id']:<5} {hit['content']}\n" for hit in hits) or "no matching notes\n"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    socket_path = os.environ.get(CHANNEL_ENV)
    if not socket_path:
        print(f"octopoid: {CHANNEL_ENV} is not set: this runs inside an attempt", file=sys.stderr)
        return USAGE_EXIT
    if args.command == "mcp":
        return serve_mcp(socket_path)
    try:
        sys.stdout.write(run(args, socket_path))
    except ChannelFailure as exc:
        print(f"octopoid: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``claude-code`` backend: the ``claude`` CLI in print mode, streaming JSON events.

Its argv, its stdin (kept open for a person's messages until the session's result) and
how each NDJSON event is read and counted: docs/backends.md, "``claude-code``".
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .. import config
from ..base.fsutil import TailBuffer
from .base import AgentRequest, AgentResult, clipped, count_of, unreadable
from .process import run_agent_process

CREDENTIALS = ".claude/.credentials.json"  # where `claude login` keeps its token, under $HOME
DEFAULT_TOOLS = ("Bash", "Edit", "Write", "Read", "Glob", "Grep")
#: The attempt's channel as an MCP server (``octopoid mcp`` in the box: sandbox/client.py);
#: only it: --strict-mcp-config leaves out MCP servers of the user's own settings.
MCP_CONFIG = json.dumps(
    {"mcpServers": {"octopoid": {"type": "stdio", "command": "octopoid", "args": ["mcp"]}}}
)
MCP_TOOLS = "mcp__octopoid"  # every tool of that server
RATE_LIMIT_RE = re.compile(r"rate.?limit|overloaded|credit balance|quota|\b(429|529)\b", re.I)
#: What Claude Code says when the API never answered (it names no HTTP status then).
UNREACHABLE_RE = re.compile(r"unable to connect to API|connection error", re.I)
#: Claude Code's subscription limit: "Claude AI usage limit reached|<epoch of the reset>",
#: or "... limit reached ... resets 3pm" (the machine's local time).
USAGE_LIMIT_RE = re.compile(r"usage limit reached\|(\d{9,11})", re.I)
RESETS_AT_RE = re.compile(
    r"limit.{0,40}?resets?(?: at)? (\d{1,2})(?::(\d{2}))? ?(am|pm)?(?: ?\(([\w/+-]{1,40})\))?",
    re.I | re.S,
)


def usage_limit_reset(text: str, now: datetime | None = None) -> datetime | None:
    """When a usage limit Claude Code reports resets (UTC), or None if it reports none."""
    if match := USAGE_LIMIT_RE.search(text):
        return datetime.fromtimestamp(int(match.group(1)), UTC)
    if match := RESETS_AT_RE.search(text):
        hour, minute, half = int(match.group(1)), int(match.group(2) or 0), match.group(3)
        if half:
            hour = hour % 12 + (12 if half.lower() == "pm" else 0)
        if hour > 23 or minute > 59:
            return None
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # only a usage limit asks

        try:  # "resets 3pm (Europe/London)": that zone's 3pm; unnamed or unknown, this machine's
            zone = ZoneInfo(match.group(4)) if match.group(4) else None
        except (ZoneInfoNotFoundError, ValueError):
            zone = None
        local = (now or datetime.now(UTC)).astimezone(zone)
        reset = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if reset <= local:
            reset += timedelta(days=1)
        return reset.astimezone(UTC)
    return None


SUBTYPE_OUTCOMES = {
    "success": "success",
    "error_max_turns": "max_turns",
    "error_max_budget_usd": "budget",
    "error_during_execution": "error",
}
MAX_LINE_BYTES = 1 << 20  # a longer line is kept as text, not parsed (bounded memory)


def find_claude(agent: dict[str, Any]) -> str | None:
    return shutil.which(agent.get("claude_path") or "claude")


def claude_argv(executable: str, request: AgentRequest) -> list[str]:
    agent = request.options
    argv = [executable, "-p", "--input-format", "stream-json", "--output-format", "stream-json"]
    argv += ["--verbose", "--max-turns", str(request.max_turns)]
    argv += ["--permission-mode", agent.get("permission_mode") or "acceptEdits"]
    tools = [*(agent.get("allowed_tools") or DEFAULT_TOOLS), MCP_TOOLS]
    argv += ["--allowedTools", ",".join(tools), "--mcp-config", MCP_CONFIG, "--strict-mcp-config"]
    if agent.get("disallowed_tools"):
        argv += ["--disallowedTools", ",".join(agent["disallowed_tools"])]
    if request.max_budget_usd is not None:
        argv += ["--max-budget-usd", f"{request.max_budget_usd:g}"]
    if agent.get("model"):
        argv += ["--model", agent["model"]]
    return argv + list(agent.get("extra_args") or [])


def _shown(tool_input: object) -> str:
    """A tool call's input as text, values unescaped (JSON escaping would hide a secret's
    value from redaction by value)."""
    if isinstance(tool_input, dict):
        return ", ".join(f"{key}={value}" for key, value in tool_input.items())
    return json.dumps(tool_input, ensure_ascii=False)


class StreamJsonParser:
    """Turns claude's NDJSON stream into readable text and a final tally."""

    def __init__(self, output: TailBuffer) -> None:
        self.output = output
        self.message_ids: set[str] = set()
        self.result: dict[str, Any] | None = None
        self.session_id: str | None = None
        self.last_text = ""
        self.api_error: str | None = None  # an assistant message's ``error`` (its API's)
        self.earlier_turns = 0  # of results before the last: a message's turn after one
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        if len(self._partial) > MAX_LINE_BYTES:
            self._text(self._partial)
            self._partial = b""
        for line in lines:
            self._line(line)

    def finish(self) -> None:
        """Handle a last line without a newline (often cut off by a kill)."""
        if self._partial.strip():
            self._line(self._partial)
        self._partial = b""

    @property
    def turns(self) -> int:
        if self.result and isinstance(self.result.get("num_turns"), int):
            return self.earlier_turns + self.result["num_turns"]
        return len(self.message_ids)

    def _line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            event = json.loads(raw)
        except (ValueError, RecursionError):
            event = None  # kept as text
        if not isinstance(event, dict):
            self._text(raw)
            return
        if isinstance(event.get("session_id"), str):
            self.session_id = event["session_id"]
        handler = getattr(self, f"_on_{event.get('type')}", None)
        if handler is None:
            return
        try:
            handler(event)
        except (AttributeError, TypeError, ValueError, KeyError) as exc:  # a shape not expected
            unreadable(self.output, "a stream event", raw.decode("utf-8", "replace"), exc)

    def _text(self, raw: bytes) -> None:
        self.output.feed(raw.rstrip(b"\n") + b"\n")

    def _on_system(self, event: dict[str, Any]) -> None:
        if event.get("subtype") == "init":
            self.output.say(
                f"[claude session {event.get('session_id')} model {event.get('model')}]"
            )

    def _on_assistant(self, event: dict[str, Any]) -> None:
        if isinstance(event.get("error"), str):
            self.api_error = event["error"]
        message = event.get("message") or {}
        if message.get("id"):
            self.message_ids.add(message["id"])
        content = message.get("content")
        if isinstance(content, str):  # a plain string is the message's text
            content = [{"type": "text", "text": content}]
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                self.last_text = block["text"]
                self.output.say(block["text"])
            elif block.get("type") == "tool_use":
                shown = clipped(_shown(block.get("input")), 300, self.output)
                self.output.say(f"→ {block.get('name')}: {shown}")

    def _on_user(self, event: dict[str, Any]) -> None:
        for block in (event.get("message") or {}).get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                content = block.get("content")
                if isinstance(content, list):
                    content = " ".join(
                        str(c.get("text", "")) for c in content if isinstance(c, dict)
                    )
                mark = "✗" if block.get("is_error") else "←"
                self.output.say(f"{mark} {clipped(str(content), 500, self.output)}")

    def _on_result(self, event: dict[str, Any]) -> None:
        if self.result is not None:  # a message came as the session ended: a turn of its own
            self.earlier_turns = self.turns
        self.result = event
        cost = _number(event.get("total_cost_usd"))
        self.output.say(
            f"[result: {event.get('subtype')}, {event.get('num_turns')} turns, "
            f"${cost if cost is not None else '?'}] {event.get('result') or ''}"
        )
        denials = event.get("permission_denials")
        for denial in denials if isinstance(denials, list) else []:
            self.output.say(f"[permission denied: {clipped(json.dumps(denial), 300, self.output)}]")

    def to_result(self, exit_code: int | None, timed_out: bool) -> AgentResult:
        if self.result is None:
            outcome = "timeout" if timed_out else "error"
            why = "timed out" if timed_out else f"claude exited {exit_code} without a result"
            return AgentResult(
                exit_code,
                outcome,
                turns=self.turns,
                session_id=self.session_id,
                summary=f"{why} after {self.turns} turns",
            )
        r = self.result
        usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
        text = str(r.get("result") or self.last_text)
        subtype = r.get("subtype")
        outcome = SUBTYPE_OUTCOMES.get(subtype, "error") if isinstance(subtype, str) else "error"
        if r.get("is_error") and outcome == "success":
            outcome = "error"
        reset = usage_limit_reset(text) if r.get("is_error") else None
        if r.get("is_error") and (
            reset or r.get("api_error_status") in (429, 529) or RATE_LIMIT_RE.search(text)
        ):
            outcome = "rate_limited"
        denials = r.get("permission_denials")
        denials = denials if isinstance(denials, list) else []
        return AgentResult(
            exit_code,
            outcome,
            cause=_cause(r, text, self.api_error) if r.get("is_error") and not reset else None,
            turns=self.turns,
            cost_usd=_number(r.get("total_cost_usd")),
            tokens_in=count_of(usage.get("input_tokens")),
            tokens_out=count_of(usage.get("output_tokens")),
            session_id=self.session_id,
            summary=clipped(text, 500, self.output),
            details=({"permission_denials": denials} if denials else {})
            | ({"reset_at": reset.isoformat()} if reset else {}),
        )


def _cause(result: dict[str, Any], text: str, api_error: str | None) -> str | None:
    """Which failure no task could have avoided a failed session reports (``base.CAUSES``):
    the HTTP status Claude Code gives up on, else its own words for it."""
    status = result.get("api_error_status")
    if status in (401, 403) or api_error == "authentication_failed":
        return "auth"
    if status == 529 or (status is None and re.search(r"overloaded", text, re.I)):
        return "overloaded"
    if status is None and UNREACHABLE_RE.search(text):
        return "unreachable"
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def user_turn(text: str) -> bytes:
    """A user message as ``--input-format stream-json`` reads it: one JSON line."""
    message = {"type": "user", "message": {"role": "user", "content": text}}
    return (json.dumps(message) + "\n").encode()


class ClaudeCodeBackend:
    def needs(self, options: dict) -> list[str]:
        """``claude`` itself and, when the environment has no API key, the credentials of
        ``claude login`` (read-only: a refreshed token cannot be saved from the box)."""
        found = find_claude(options)
        env = {**os.environ, **(options.get("env") or {})}
        login = [] if env.get("ANTHROPIC_API_KEY") else [str(Path.home() / CREDENTIALS)]
        return [*([found] if found else []), *login]

    def run(self, request: AgentRequest, output: TailBuffer) -> AgentResult:
        executable = find_claude(request.options)
        if executable is None:
            name = request.options.get("claude_path") or "claude"
            why = f"'{name}' is not on PATH; {config.CLAUDE_INSTALL_HINT}"
            return AgentResult(None, "error", summary=why, cause="cannot-start")
        parser = StreamJsonParser(output)

        def more() -> bytes | None:
            """A person's message as they come (the CLI sends each with its next request),
            b"" for none, or None: close stdin once the session has its result, or the CLI
            would wait for more input instead of exiting."""
            if parser.result is not None:
                return None
            said = request.inbox()
            if not said:
                return b""
            output.feed(f"[a person says] {said}\n".encode())
            return user_turn(said)

        done = run_agent_process(
            claude_argv(executable, request),
            request,
            output,
            parser.feed,
            stdin=user_turn(request.prompt),
            more=more,
        )
        parser.finish()
        if done.start_error:
            return AgentResult(None, "error", summary=done.start_error, cause=done.cause)
        return parser.to_result(done.exit_code, done.timed_out)

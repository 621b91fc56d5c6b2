"""The ``anthropic`` backend: a tool-using agent loop on the official SDK's Messages API.

The conversation with the API stays in the runner (with the key); the tools run in the
attempt's box, served by ``worktree_tools.py`` there (``ToolServer``). What is counted,
when the loop stops and what is retried: docs/backends.md, "``anthropic``".
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic

from .. import config
from ..base.fsutil import TailBuffer
from ..base.processes import in_new_session_dying_with_parent, signal_group
from ..base.redaction import redact
from ..box.box import Box
from ..model import defaults
from . import worktree_tools
from .base import AgentRequest, AgentResult, clipped, count_of, unreadable
from .process import readable
from .worktree_tools import COMMIT, TOOL_SPECS

SYSTEM = (
    "You are a software engineer working in a git repository. Use the tools to read, change "
    "and test the code. Paths are relative to the repository. When the task is done, call "
    "finish with a short summary; uncommitted changes are then committed for you."
)
TOOL_NAMES = {spec["name"] for spec in TOOL_SPECS}


def channel_specs(channel: Any) -> list[dict[str, Any]]:
    """The channel's tools (remember, search_memory, ask_human, ...) as the API takes them."""
    return [
        {"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}
        for t in channel.toolbox.specs()
    ]


#: Keys the tools' box never gets: the API call is the runner's, not the tools'.
API_KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
SERVER_GRACE_SECONDS = 30.0  # beyond a command's own timeout, before the server is stuck


class ToolServer:
    """``worktree_tools.py`` running in the box; restarted if it dies (the agent can kill
    it with run_command) or stops answering."""

    def __init__(self, box: Box, command_timeout: float) -> None:
        self.box = box
        self.timeout = command_timeout
        self.env = {k: v for k, v in box.env.items() if k not in API_KEYS}
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        script = self.box.carry(Path(worktree_tools.__file__))
        argv = [sys.executable, "-I", "-S", str(script), str(self.box.workspace), str(self.timeout)]
        return subprocess.Popen(
            self.box.wrap(argv),
            cwd=self.box.cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=in_new_session_dying_with_parent(),
        )

    def call(self, name: str, arguments: Any) -> tuple[str, bool]:
        """(text, is_error) of one tool call; the model's mistakes are tool errors."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self.proc = self._start()
        line = json.dumps({"name": name, "input": arguments}).encode() + b"\n"
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
            if not readable(self.proc.stdout.fileno(), self.timeout + SERVER_GRACE_SECONDS):
                raise TimeoutError
            answer = json.loads(self.proc.stdout.readline())  # b"" (it closed its output) too
            return str(answer["text"]), bool(answer["is_error"])
        except (OSError, ValueError, KeyError, TypeError, TimeoutError):
            self.close()
            return "the tool server in the sandbox stopped; it is restarted at the next call", True

    def close(self) -> None:
        if self.proc is not None:
            signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            self.proc = None


def price_per_token(model: str) -> tuple[float, float] | None:
    """USD per input and output token for ``model``, or None when it has no known price."""
    prices = config.load_config()["prices"]
    if model in prices:
        p = prices[model]
        return p["input_per_mtok"] / 1e6, p["output_per_mtok"] / 1e6
    for known, (inp, out) in defaults.MODEL_PRICES.items():
        if model.startswith(known):
            return inp / 1e6, out / 1e6
    return None


class _Tally:
    def __init__(self, model: str) -> None:
        self.turns = self.tokens_in = self.tokens_out = 0
        self.price = price_per_token(model)
        self.cost = 0.0 if self.price else None

    def add(self, usage: Any) -> None:
        self.turns += 1
        self.tokens_in += count_of(getattr(usage, "input_tokens", 0))
        self.tokens_out += count_of(getattr(usage, "output_tokens", 0))
        if self.price:
            self.cost = self.tokens_in * self.price[0] + self.tokens_out * self.price[1]

    def result(self, outcome: str, summary: str, cause: str | None = None) -> AgentResult:
        return AgentResult(
            0 if outcome == "success" else None,
            outcome,
            turns=self.turns,
            cost_usd=self.cost,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            summary=clipped(summary, 500),
            cause=cause,
        )


def _failure(exc: anthropic.APIError, deadline: float) -> tuple[str, str, str | None]:
    """(outcome, summary, cause) of a call the API (or the way to it) refused: an overload
    or a rate limit waits and is tried again without spending the attempt; credentials
    refused, an overload or no answer at all are no task's fault (``base.CAUSES``)."""
    if isinstance(exc, anthropic.APITimeoutError) and time.monotonic() >= deadline - 1:
        return "timeout", "the API did not answer before the attempt's time ran out", None
    if isinstance(exc, anthropic.APIConnectionError):
        return "error", f"cannot reach the API: {exc}", "unreachable"
    if not isinstance(exc, anthropic.APIStatusError):
        return "error", f"API error: {exc}", None
    said = f"API {exc.status_code}: {exc.message}"
    if isinstance(exc, anthropic.OverloadedError):
        return "rate_limited", said, "overloaded"
    if isinstance(exc, anthropic.RateLimitError):
        return "rate_limited", said, None
    if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
        return "error", said, "auth"
    return "error", said, None


class AnthropicBackend:
    def needs(self, options: dict) -> list[str]:
        return []  # the tool server runs on this Python, which every box shows

    def run(self, request: AgentRequest, output: TailBuffer) -> AgentResult:
        agent = request.options
        key = request.box.env.get("ANTHROPIC_API_KEY")
        tally = _Tally(agent["model"])
        if not key:
            return tally.result("error", "ANTHROPIC_API_KEY is not set", "auth")
        client = anthropic.Anthropic(
            api_key=key, base_url=agent.get("base_url") or request.box.env.get("ANTHROPIC_BASE_URL")
        )
        tools = ToolServer(request.box, agent["command_timeout_seconds"])
        if request.channel is not None:  # a question's wait keeps the claim alive
            request.channel.toolbox.tick = request.on_tick
        try:
            return self._loop(client, request, tally, tools, output)
        finally:
            tools.close()

    def _loop(
        self,
        client: anthropic.Anthropic,
        request: AgentRequest,
        tally: _Tally,
        tools: ToolServer,
        output: TailBuffer,
    ) -> AgentResult:
        agent = request.options
        deadline = time.monotonic() + request.timeout_seconds
        messages: list[dict[str, Any]] = [{"role": "user", "content": request.prompt}]
        specs = [*TOOL_SPECS, *(channel_specs(request.channel) if request.channel else [])]
        while True:
            stop = self._limit_reached(request, tally, deadline)
            if stop:
                return tally.result(*stop)
            request.on_tick()
            if said := request.inbox():  # a person's message: a user turn before the call
                joined(messages, said)
                output.say(f"[a person says] {said}")
            try:
                response = client.messages.create(
                    model=agent["model"],
                    max_tokens=agent["max_tokens"],
                    system=SYSTEM,
                    tools=specs,
                    messages=messages,
                    timeout=max(1.0, deadline - time.monotonic()),
                )
            except anthropic.APIError as exc:  # after the SDK's own retries
                return tally.result(*_failure(exc, deadline))
            tally.add(response.usage)
            finished = self._turn(response, messages, tools, output, request.channel)
            if finished is not None:
                committed, is_error = tools.call(COMMIT, {"summary": redact(finished)})
                if committed:
                    output.say(f"[{'commit failed' if is_error else 'committed'}: {committed}]")
                return tally.result("success", finished)

    @staticmethod
    def _limit_reached(
        request: AgentRequest, tally: _Tally, deadline: float
    ) -> tuple[str, str] | None:
        if tally.turns >= request.max_turns:
            return "max_turns", f"stopped after {tally.turns} turns (max_turns)"
        if time.monotonic() >= deadline:
            return "timeout", f"timed out after {request.timeout_seconds:g}s"
        budget = request.max_budget_usd
        if budget is not None and tally.cost is not None and tally.cost >= budget:
            return "budget", f"spent ${tally.cost:.2f} of a ${budget:.2f} budget"
        tokens = request.max_tokens_total
        if tokens is not None and tally.tokens_in + tally.tokens_out >= tokens:
            return "budget", f"used {tally.tokens_in + tally.tokens_out} of {tokens} tokens"
        return None

    def _turn(
        self,
        response: Any,
        messages: list[dict[str, Any]],
        tools: ToolServer,
        output: TailBuffer,
        channel: Any = None,
    ) -> str | None:
        """Log a response, run its tool calls (the box's, or the channel's: ``channel``);
        the finish summary ends the loop."""
        blocks, results, finished = [], [], None
        for block in read_blocks(getattr(response, "content", None), output):
            blocks.append(block)
            if block["type"] == "text":
                output.say(block["text"])
                continue
            name, tool_input = block["name"], block["input"]
            output.say(
                f"→ {name}: {clipped(json.dumps(tool_input, ensure_ascii=False), 300, output)}"
            )
            if name == "finish":
                finished = str(tool_input.get("summary") or "finished")
                text, is_error = "ok", False
            elif name in TOOL_NAMES:
                text, is_error = tools.call(name, tool_input)
            elif channel is not None and name in channel.tools:
                text, is_error = channel.call_tool(name, tool_input)
            else:
                text, is_error = f"unknown tool {name!r}", True
            output.say(f"{'✗' if is_error else '←'} {clipped(text, 300, output)}")
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block["id"],
                    "content": text,
                    "is_error": is_error,
                }
            )
        messages.append({"role": "assistant", "content": blocks})
        if finished is None and not results:  # the model ended without calling finish
            return next((b["text"] for b in reversed(blocks) if b["type"] == "text"), "done")
        if finished is None:
            messages.append({"role": "user", "content": results})
        return finished


def joined(messages: list[dict[str, Any]], said: str) -> None:
    """``said`` added to the user turn that ends ``messages`` (the prompt, or the tool
    results the model waits for), as a text block after them: a conversation alternates
    turns, so it joins that turn rather than starting one of its own."""
    last = messages[-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    last["content"] = [*blocks, {"type": "text", "text": said}]


def read_blocks(content: Any, output: TailBuffer) -> list[dict[str, Any]]:
    """A response's content as plain blocks (text; tool_use with a str name and id and a
    dict input); a block of another shape, or one the SDK built without its fields (it
    does not validate), is noted and skipped."""
    blocks = []
    for block in content if isinstance(content, list) else []:
        try:
            if block.type == "text":
                blocks.append({"type": "text", "text": _text(block.text)})
            elif block.type == "tool_use":
                tool_input = block.input if isinstance(block.input, dict) else {}
                name, use_id = _text(block.name), _text(block.id)
                blocks.append({"type": "tool_use", "id": use_id, "name": name, "input": tool_input})
        except (AttributeError, TypeError) as exc:
            unreadable(output, "a content block", repr(block), exc)
    return blocks


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value

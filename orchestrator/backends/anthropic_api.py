"""The ``anthropic`` backend: a tool-using agent loop on the official SDK's Messages API.

Turns, tokens and cost are counted per response (prices from config.yaml ``prices`` or
``defaults.MODEL_PRICES``); the loop stops at ``finish``, max turns, timeout or budget.
Transient HTTP errors are retried by the SDK; an overload or rate limit that outlasts
those retries is reported as ``rate_limited``, so the task is retried later without
spending an attempt. On ``finish``, uncommitted work is committed with the summary.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic

from .. import config, defaults
from ..fsutil import TailBuffer
from ..git_utils import open_repo
from ..redaction import redact
from .base import AgentRequest, AgentResult
from .worktree_tools import TOOL_SPECS, WorktreeTools

SYSTEM = (
    "You are a software engineer working in a git worktree. Use the tools to read, change "
    "and test the code. Paths are relative to the worktree. When the task is done, call "
    "finish with a short summary; uncommitted changes are then committed for you."
)


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
        self.tokens_in += usage.input_tokens or 0
        self.tokens_out += usage.output_tokens or 0
        if self.price:
            self.cost = self.tokens_in * self.price[0] + self.tokens_out * self.price[1]

    def result(self, outcome: str, summary: str, **details: Any) -> AgentResult:
        return AgentResult(
            0 if outcome == "success" else None,
            outcome,
            turns=self.turns,
            cost_usd=self.cost,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            summary=summary[:500],
            details=details,
        )


class AnthropicBackend:
    def run(self, request: AgentRequest, output: TailBuffer) -> AgentResult:
        agent = request.options
        key = request.env.get("ANTHROPIC_API_KEY")
        tally = _Tally(agent["model"])
        if not key:
            return tally.result("error", "ANTHROPIC_API_KEY is not set")
        client = anthropic.Anthropic(
            api_key=key, base_url=agent.get("base_url") or request.env.get("ANTHROPIC_BASE_URL")
        )
        tools = WorktreeTools(request.worktree, agent["command_timeout_seconds"], request.env)
        deadline = time.monotonic() + request.timeout_seconds
        messages: list[dict[str, Any]] = [{"role": "user", "content": request.prompt}]
        while True:
            stop = self._limit_reached(request, tally, deadline)
            if stop:
                return tally.result(*stop)
            request.on_tick()
            try:
                response = client.messages.create(
                    model=agent["model"],
                    max_tokens=agent["max_tokens"],
                    system=SYSTEM,
                    tools=TOOL_SPECS,
                    messages=messages,
                    timeout=max(1.0, deadline - time.monotonic()),
                )
            except (anthropic.RateLimitError, anthropic.OverloadedError) as exc:
                return tally.result("rate_limited", f"API {exc.status_code}: {exc.message}")
            except anthropic.APIStatusError as exc:
                return tally.result("error", f"API {exc.status_code}: {exc.message}")
            except anthropic.APIConnectionError as exc:
                return tally.result("error", f"cannot reach the API: {exc}")
            tally.add(response.usage)
            finished = self._turn(response, messages, tools, output)
            if finished is not None:
                self._commit(request, finished, output)
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
        return None

    def _turn(
        self,
        response: Any,
        messages: list[dict[str, Any]],
        tools: WorktreeTools,
        output: TailBuffer,
    ) -> str | None:
        """Log a response, run its tool calls; the finish summary ends the loop."""
        blocks, results, finished = [], [], None
        for block in response.content:
            if block.type == "text":
                blocks.append({"type": "text", "text": block.text})
                _say(output, block.text)
            elif block.type == "tool_use":
                blocks.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
                )
                _say(output, f"→ {block.name}: {json.dumps(block.input, ensure_ascii=False)[:300]}")
                if block.name == "finish":
                    finished = str((block.input or {}).get("summary") or "finished")
                    text, is_error = "ok", False
                else:
                    text, is_error = tools.call(block.name, block.input)
                _say(output, f"{'✗' if is_error else '←'} {text[:300]}")
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": block.id,
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

    @staticmethod
    def _commit(request: AgentRequest, summary: str, output: TailBuffer) -> None:
        summary = redact(summary)
        repo = open_repo(request.worktree)  # hooks off: octopoid's commit, not the agent's
        if not repo.is_dirty(untracked_files=True):
            return
        repo.git.add("-A")
        identity = []
        with repo.config_reader() as cfg:
            if not cfg.get_value("user", "email", ""):
                identity = [
                    "-c",
                    "user.name=octopoid agent",
                    "-c",
                    "user.email=agent@octopoid.invalid",
                ]
        message = summary.strip().splitlines()[0][:72] if summary.strip() else "octopoid agent"
        repo.git.execute(["git", *identity, "commit", "-q", "-m", message, "-m", summary])
        _say(output, f"[committed: {message}]")


def _say(output: TailBuffer, text: str) -> None:
    output.feed((text.rstrip("\n") + "\n").encode("utf-8", errors="replace"))

"""The ``command`` backend: any program is an agent.

``argv`` from agents.yaml, with ``{prompt_file}``, ``{worktree}`` and ``{task_id}`` filled
in; no shell unless the user writes ``sh -c`` themselves. The prompt is also on stdin. A
command cannot report turns or cost, so those are 0 and unknown.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..base.fsutil import TailBuffer
from .base import AgentRequest, AgentResult
from .process import run_agent_process

PLACEHOLDER = re.compile(r"\{(prompt_file|worktree|task_id)\}")


def expand_argv(argv: list[str], request: AgentRequest) -> list[str]:
    """Fill in the three placeholders; any other braces (inline code, awk) are left alone."""
    values = {
        "prompt_file": str(request.prompt_file),
        "worktree": str(request.box.workspace),
        "task_id": request.task_id,
    }
    return [PLACEHOLDER.sub(lambda found: values[found[1]], arg) for arg in argv]


class CommandBackend:
    def needs(self, options: dict) -> list[str]:
        """Its program, and each file its argv names by absolute path (a script it runs).
        A folder named in argv is not shown (``sandbox.expose``)."""
        argv = options["argv"]
        return [argv[0], *(arg for arg in argv[1:] if arg.startswith("/") and Path(arg).is_file())]

    def run(self, request: AgentRequest, output: TailBuffer) -> AgentResult:
        argv = expand_argv(request.options["argv"], request)
        done = run_agent_process(argv, request, output)
        if done.start_error:
            return AgentResult(None, "error", summary=done.start_error, cause=done.cause)
        if done.timed_out:
            return AgentResult(
                None, "timeout", summary=f"timed out after {request.timeout_seconds:g}s"
            )
        outcome = "success" if done.exit_code == 0 else "error"
        return AgentResult(done.exit_code, outcome, summary=f"exit status {done.exit_code}")

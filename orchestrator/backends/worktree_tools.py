"""The anthropic backend's tools, served from inside the attempt's box.

Every tool call (files and shell alike) is carried out by this file running as a small
server *in the box*, one JSON object per line on its stdin and stdout (``serve``), so the
tools reach exactly what the agent's box reaches (docs/backends.md, "``anthropic``").
Standard library only: the box runs it on the runner's Python with ``-I -S``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

COMMIT = "octopoid_commit"  # the runner's, never the model's: commit what finish left
MAX_READ_CHARS = 100_000
MAX_TOOL_OUTPUT = 20_000
MAX_MATCHES = 200


class ToolError(Exception):
    """A tool call the model got wrong; the message goes back to it as ``is_error``."""


def _string(name: str) -> dict[str, Any]:
    return {"type": "string", "description": name}


def _schema(required: list[str], **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


TOOL_SPECS: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Read a text file in the worktree.",
        "input_schema": _schema(["path"], path=_string("path relative to the worktree")),
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a file in the worktree.",
        "input_schema": _schema(["path", "content"], path=_string("path"), content=_string("text")),
    },
    {
        "name": "replace_in_file",
        "description": "Replace one exact occurrence of old_text with new_text in a file.",
        "input_schema": _schema(
            ["path", "old_text", "new_text"],
            path=_string("path"),
            old_text=_string("exact text, must occur once"),
            new_text=_string("replacement"),
        ),
    },
    {
        "name": "list_dir",
        "description": "List a directory of the worktree.",
        "input_schema": _schema([], path=_string("directory, default '.'")),
    },
    {
        "name": "search_text",
        "description": "Search files for a regular expression.",
        "input_schema": _schema(
            ["pattern"],
            pattern=_string("Python regular expression"),
            path=_string("directory or file, default '.'"),
        ),
    },
    {
        "name": "run_command",
        "description": "Run a shell command in the worktree (tests, git). Output is capped.",
        "input_schema": _schema(["command"], command=_string("shell command")),
    },
    {
        "name": "finish",
        "description": "Finish the task. Uncommitted changes are committed.",
        "input_schema": _schema(["summary"], summary=_string("what was done, one paragraph")),
    },
]


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class WorktreeTools:
    def __init__(self, worktree: Path, command_timeout: float, env: dict[str, str]) -> None:
        self.root = worktree.resolve()
        self.command_timeout = command_timeout
        self.env = env
        served = [spec["name"] for spec in TOOL_SPECS if spec["name"] != "finish"]  # the runner's
        self._tools = {COMMIT: self.commit, **{name: getattr(self, name) for name in served}}

    def call(self, name: str, arguments: Any) -> tuple[str, bool]:
        """Run a tool; (text, is_error). Never raises for the model's mistakes."""
        tool = self._tools.get(name)
        if tool is None:
            return f"unknown tool {name!r}", True
        if not isinstance(arguments, dict):
            return "tool input must be an object", True
        try:
            return tool(**arguments), False
        except ToolError as exc:
            return str(exc), True
        except TypeError as exc:
            return f"bad arguments for {name}: {exc}", True
        except OSError as exc:
            return f"{name} failed: {exc.strerror or exc}", True

    def resolve(self, path: str) -> Path:
        """The real path inside the worktree, or ``ToolError``."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise ToolError("path must be a non-empty string")
        if Path(path).is_absolute():
            raise ToolError(f"refused: {path!r} is absolute; use a path inside the worktree")
        target = (self.root / path).resolve()
        if target != self.root and self.root not in target.parents:
            raise ToolError(f"refused: {path!r} leads outside the worktree")
        if ".git" in target.relative_to(self.root).parts[:1]:
            raise ToolError("refused: .git is off limits; use run_command with git")
        return target

    def read_file(self, path: str) -> str:
        text = self.resolve(path).read_text(encoding="utf-8", errors="replace")
        if len(text) > MAX_READ_CHARS:
            return text[:MAX_READ_CHARS] + f"\n[...{len(text) - MAX_READ_CHARS} more chars]"
        return text

    def write_file(self, path: str, content: str) -> str:
        target = self.resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {len(content)} chars to {path}"

    def replace_in_file(self, path: str, old_text: str, new_text: str) -> str:
        target = self.resolve(path)
        text = target.read_text(encoding="utf-8")
        count = text.count(old_text) if old_text else 0
        if count != 1:
            raise ToolError(f"old_text occurs {count} times in {path}; it must occur once")
        target.write_text(text.replace(old_text, new_text), encoding="utf-8")
        return f"replaced 1 occurrence in {path}"

    def list_dir(self, path: str = ".") -> str:
        target = self.resolve(path)
        entries = sorted(
            p.name + ("/" if p.is_dir() else "") for p in target.iterdir() if p.name != ".git"
        )
        return "\n".join(entries) or "(empty)"

    def search_text(self, pattern: str, path: str = ".") -> str:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"bad pattern: {exc}") from None
        hits = []
        for file in self._files_under(self.resolve(path)):
            try:
                lines = file.read_text(encoding="utf-8").splitlines()
            except (UnicodeDecodeError, OSError):
                continue
            rel = file.relative_to(self.root)
            hits += [f"{rel}:{n}: {ln[:200]}" for n, ln in enumerate(lines, 1) if regex.search(ln)]
            if len(hits) >= MAX_MATCHES:
                return "\n".join(hits[:MAX_MATCHES]) + "\n[...more matches]"
        return "\n".join(hits) or "no matches"

    def _files_under(self, base: Path) -> list[Path]:
        """Regular files at or under ``base`` that resolve inside the worktree, outside .git.

        Symlinks are not followed out: each file is resolved and checked like a path the
        model gave, and a link that leads outside is skipped.
        """
        if base.is_file():
            return [base]
        found = []
        for folder, dirs, names in os.walk(base):  # followlinks=False: no symlinked folders
            dirs[:] = sorted(d for d in dirs if d != ".git")
            for name in sorted(names):
                try:
                    file = self.resolve(str((Path(folder) / name).relative_to(self.root)))
                except ToolError:
                    continue
                if file.is_file():
                    found.append(file)
        return found

    def run_command(self, command: str) -> str:
        """The shell in its own process group; a timeout kills the whole group, not the shell."""
        proc = subprocess.Popen(
            command,
            shell=True,
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            stdout, _ = proc.communicate(timeout=self.command_timeout)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.stdout.close()  # a child that left the group may hold the pipe: don't wait
            proc.wait()
            raise ToolError(f"command timed out after {self.command_timeout:g}s") from None
        signal_group(proc.pid, signal.SIGKILL)  # whatever it left running in the background
        out = stdout.decode("utf-8", errors="replace")
        if len(out) > MAX_TOOL_OUTPUT:
            out = f"[...{len(out) - MAX_TOOL_OUTPUT} chars cut...]\n" + out[-MAX_TOOL_OUTPUT:]
        return f"exit status {proc.returncode}\n{out}"

    def commit(self, summary: str) -> str:
        """Commit what the agent left uncommitted, with ``summary`` as the message (no hook:
        octopoid's commit, not the agent's); what was committed, or that nothing was."""
        status = self._git("status", "--porcelain")
        if not status.strip():
            return ""
        self._git("add", "-A")
        subject = summary.strip().splitlines()[0][:72] if summary.strip() else "octopoid agent"
        self._git("commit", "-q", "--no-verify", "-m", subject, "-m", summary)
        return subject

    def _git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-c", f"core.hooksPath={os.devnull}", "-c", "core.fsmonitor=false", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=self.command_timeout,
        )
        if done.returncode != 0:
            raise ToolError(f"git {args[0]} failed: {done.stderr.strip()[-500:]}")
        return done.stdout


def serve(root: Path, command_timeout: float) -> None:
    """Answer tool calls, one JSON line each way, until stdin closes."""
    tools = WorktreeTools(root, command_timeout, dict(os.environ))
    for line in sys.stdin:
        try:
            call = json.loads(line)
            text, is_error = tools.call(call["name"], call["input"])
        except (ValueError, KeyError, TypeError):
            text, is_error = "a tool call is an object with a name and an input", True
        sys.stdout.write(json.dumps({"text": text, "is_error": is_error}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), float(sys.argv[2]))

"""Learnings and tasks derived from a real project's public git history, for the memory
relevance benchmark (``bench_memory.py --repo``). Nothing derived here is ever written into
this repository: it lives in memory, or in a cache folder outside it.

Written down before any retrieval ran (issue 41):

- **Projects.** Tuned on encode/httpx (1,481 commits that are not merges, to ae1b9f6);
  reported on pallets/click (2,146, to 2c8cd3a), held out: no constant was chosen while
  looking at it. Filler: pytest-dev/pytest (13,110, to df87db7), derived the same way.
- **Tasks.** The last ``tasks`` commits (not merges) of the project that changed a function
  or class (below), oldest first. A task's title is the commit's subject; its context is the
  rest of the message (trailers such as ``Co-authored-by:`` dropped), then
  ``Files: a.py, b.py``, the Python files it changed (at most 6: a person filing a task
  names where to look). The functions it changed are not given; its files as they were
  before it (at the commit's parent) are, as a real task's checkout has them at its base.
- **Learnings.** Every earlier commit (not a merge) of the project, and every commit of
  the filler, yields what an agent would record: for each Python file it changed (at most 3,
  most lines changed first) a *File Knowledge* learning ``<path>: <subject> (changed
  <names>)`` naming up to 4 of the functions or classes it changed there; and, when its
  message has a paragraph after the subject of at least 60 characters, an *Important
  Facts* learning ``<subject>: <that paragraph>`` (at most 400 characters).
- **The relevance rule.** Commits *changed the same function or class* when a line each
  changed (added in the new file, or removed from the old one) lies in the same innermost
  ``def`` or ``class`` (by indentation; qualified by the enclosing classes and functions,
  and by the file's path: a moved file is another file). Lines outside any ``def`` or
  ``class`` change none. A File Knowledge learning is relevant to a task when its commit
  and the task's changed the same function or class in that file; an Important Facts
  learning, when they changed the same one anywhere. Filler is never relevant.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TRAILER_RE = re.compile(r"^[A-Za-z-]+-by: |^Signed-off-by|^Change-Id: ", re.I)
DEF_RE = re.compile(r"^(\s*)(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
TOKEN_RE = re.compile(r"'''|\"\"\"|'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|#.*|[()\[\]{}]")
MAX_TASK_FILES = 6
MAX_LEARNING_FILES = 3
MAX_NAMES = 4
MIN_PARAGRAPH = 60
MAX_PARAGRAPH = 400


@dataclass
class Commit:
    sha: str
    subject: str
    body: str
    changed: dict[str, set[str]] = field(default_factory=dict)  # path -> qualified names
    lines: dict[str, int] = field(default_factory=dict)  # path -> lines changed

    def pairs(self, path: str | None = None) -> set[tuple[str, str]]:
        """(path, name) of each function or class it changed (in ``path`` only, if given)."""
        return {(p, n) for p, names in self.changed.items() if path in (None, p) for n in names}


@dataclass
class Learning:
    text: str
    section: str
    sha: str
    path: str | None  # a File Knowledge learning's file


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir(repo)}", *args], check=True, capture_output=True, text=True,
        errors="replace",
    ).stdout  # fmt: skip


def git_dir(repo: Path) -> Path:
    return repo / ".git" if (repo / ".git").exists() else repo


def history(repo: Path) -> list[Commit]:
    """Every commit that is not a merge, oldest first, with what it changed."""
    log = git(repo, "log", "--no-merges", "--reverse", "--format=%x1e%H%x00%B")
    commits = {}
    for entry in log.split("\x1e")[1:]:
        sha, _, message = entry.partition("\x00")
        subject, _, body = message.strip().partition("\n")
        commits[sha] = Commit(sha, " ".join(subject.split()), clean_body(body))
    with Blobs(repo) as blobs:
        for sha, path, old, new in hunks(repo):
            commit = commits[sha]
            names = commit.changed.setdefault(path, set())
            commit.lines[path] = commit.lines.get(path, 0) + len(old) + len(new)
            if old:
                names |= scopes_at(blobs.read(f"{sha}^:{path}"), old)
            if new:
                names |= scopes_at(blobs.read(f"{sha}:{path}"), new)
    return list(commits.values())


def clean_body(body: str) -> str:
    lines = [line for line in body.strip().splitlines() if not TRAILER_RE.match(line)]
    return "\n".join(lines).strip()


def hunks(repo: Path) -> Iterator[tuple[str, str, list[int], list[int]]]:
    """(commit, path, old line numbers, new line numbers) of each Python file a commit
    changed, all of a file's hunks together."""
    out = subprocess.Popen(
        ["git", f"--git-dir={git_dir(repo)}", "log", "--no-merges", "-p", "-U0", "--no-renames",
         "--no-color", "--no-ext-diff", "--format=%x1e%H", "--", "*.py"],
        stdout=subprocess.PIPE, text=True, errors="replace",
    )  # fmt: skip
    sha = path = None
    old: list[int] = []
    new: list[int] = []
    for line in out.stdout:
        if line.startswith("\x1e") or line.startswith("diff --git "):
            if path is not None:
                yield sha, path, old, new
            path, old, new = None, [], []
            if line.startswith("\x1e"):
                sha = line[1:].strip()
        elif line.startswith("+++ ") and line[4:].startswith("b/"):
            path = line[6:].rstrip("\n")
        elif (found := HUNK_RE.match(line)) and path is not None:
            a, b, c, d = found.groups()
            old += range(int(a), int(a) + (1 if b is None else int(b)))
            new += range(int(c), int(c) + (1 if d is None else int(d)))
    if path is not None:
        yield sha, path, old, new
    out.wait()


def scopes_at(text: str | None, numbers: list[int]) -> set[str]:
    """The innermost def/class (qualified) around each of the 1-based line ``numbers``."""
    if not text:
        return set()
    scope = scopes(text.splitlines())
    return {scope[n - 1] for n in numbers if 0 < n <= len(scope) and scope[n - 1]}


def scopes(lines: list[str]) -> list[str]:
    """Each line's innermost def or class, by indentation ("" outside any): lines inside a
    triple-quoted string or an open bracket continue the scope they are in."""
    stack: list[tuple[int, str]] = []
    out = []
    in_string, depth = "", 0
    for line in lines:
        stripped = line.strip()
        if not in_string and depth == 0 and stripped and not stripped.startswith("#"):
            indent = len(line) - len(line.lstrip())
            while stack and indent <= stack[-1][0]:
                stack.pop()
            if found := DEF_RE.match(line):
                stack.append((indent, found.group(2)))
        out.append(".".join(name for _, name in stack))
        in_string, depth = _carry(line, in_string, depth)
    return out


def _carry(line: str, in_string: str, depth: int) -> tuple[str, int]:
    """Whether a triple-quoted string is open, and how many brackets, after ``line``."""
    pos = 0
    while True:
        if in_string:
            end = line.find(in_string, pos)
            if end < 0:
                return in_string, depth
            pos, in_string = end + 3, ""
        found = TOKEN_RE.search(line, pos)
        if found is None:
            return in_string, depth
        token, pos = found.group(), found.end()
        if token in ("'''", '"""'):
            in_string = token
        elif token in "([{":
            depth += 1
        elif token in ")]}":
            depth = max(0, depth - 1)


class Blobs:
    """``git cat-file --batch``: a file's text at a revision (None when absent)."""

    def __init__(self, repo: Path) -> None:
        self.proc = subprocess.Popen(
            ["git", f"--git-dir={git_dir(repo)}", "cat-file", "--batch"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip

    def __enter__(self) -> Blobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()

    def read(self, spec: str) -> str | None:
        self.proc.stdin.write(spec.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if len(header) < 3 or header[1] != b"blob":
            return None
        data = self.proc.stdout.read(int(header[2]) + 1)[:-1]
        return data.decode(errors="replace")


def learnings(commit: Commit) -> list[Learning]:
    """What an agent would have recorded of ``commit`` (the module's docstring)."""
    out = []
    files = sorted(commit.changed, key=lambda p: (-commit.lines[p], p))[:MAX_LEARNING_FILES]
    for path in files:
        names = sorted(commit.changed[path])[:MAX_NAMES]
        text = f"{path}: {commit.subject}" + (f" (changed {', '.join(names)})" if names else "")
        out.append(Learning(text, "File Knowledge", commit.sha, path))
    paragraph = " ".join(commit.body.split("\n\n")[0].split())
    if len(paragraph) >= MIN_PARAGRAPH:
        text = f"{commit.subject}: {paragraph[:MAX_PARAGRAPH]}"
        out.append(Learning(text, "Important Facts", commit.sha, None))
    return out


def task_of(commit: Commit) -> dict:
    files = sorted(commit.changed, key=lambda p: (-commit.lines[p], p))[:MAX_TASK_FILES]
    context = f"{commit.body}\n\nFiles: {', '.join(files)}".strip()
    return {"title": commit.subject, "context": context, "criteria": [], "sha": commit.sha}


def relevant(learning: Learning, by: dict[str, Commit], task: Commit) -> bool:
    """The relevance rule (the module's docstring)."""
    return bool(by[learning.sha].pairs(learning.path) & task.pairs())


def split(commits: list[Commit], tasks: int) -> tuple[list[Commit], list[Commit]]:
    """The commits learnings come from, and the last ``tasks`` that changed a function or
    class (every commit after the first of them is a task or not used)."""
    changing = [i for i, c in enumerate(commits) if c.pairs()]
    first = changing[-tasks] if len(changing) >= tasks else changing[0]
    return commits[:first], [c for c in commits[first:] if c.pairs()]

"""Checks see the task's code, not the person's checkout (docs/workspace.md): they run in a
fresh clone of the branch, shown at the project's own path, with a ``src/`` layout's
``src`` first on Python's path. The person's checkout here holds other, uncommitted code
in the same files: a check that read it would fail."""

from __future__ import annotations

import sys
from pathlib import Path

import git
import pytest

from orchestrator import box as sandbox
from orchestrator import config
from orchestrator.queue import machine as q
from orchestrator.roles import checks

from .support import commit_on_branch, set_config

PROJECTS = {
    "python-src": (
        "src/demo/__init__.py",
        'WHO = "{who}"\n',
        {"pyproject.toml": b'[project]\nname = "demo"\nversion = "0"\n'},
        f"{sys.executable} -c 'import demo, sys; sys.exit(demo.WHO != \"branch\")'",
    ),
    "node": (
        "lib/who.js",
        'module.exports = "{who}";\n',
        {
            "package.json": b'{"name": "demo", "version": "0.0.0", "scripts": {"test": '
            b"\"node -e \\\"process.exit(require('./lib/who.js') === 'branch' ? 0 : 1)\\\"\"}}\n"
        },
        "npm test --silent",
    ),
    "makefile": (
        "who.txt",
        "{who}\n",
        {"Makefile": b'check:\n\ttest "$$(cat who.txt)" = branch\n'},
        "make -s check",
    ),
}


@pytest.mark.parametrize("kind", PROJECTS)
def test_checks_run_the_branch_code_not_the_checkout(
    git_project: Path, kind: str, bwrap_ok: None
) -> None:
    path, text, files, check = PROJECTS[kind]
    repo = git.Repo(git_project)
    for name, data in {path: text.format(who="base").encode(), **files}.items():
        (git_project / name).parent.mkdir(parents=True, exist_ok=True)
        (git_project / name).write_bytes(data)
        repo.index.add([name])
    repo.index.commit(f"a {kind} project")
    set_config(git_project, checks={"commands": [check]})
    task = q.create_task("change who")
    repo.git.branch(f"agent/TASK-{task.id}", "main")
    commit_on_branch(git_project, task.id, {path: text.format(who="branch").encode()}, "who")
    (git_project / path).write_text(text.format(who="checkout"))  # the person's own edit
    with sandbox.checks_box(task) as box:
        verdict = checks.verify(task, box, config.load_config(), lambda: None)
    assert verdict.passed, [r.output for r in verdict.results]

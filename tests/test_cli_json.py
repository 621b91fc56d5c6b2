"""What scripts read from the installed `octopoid` executable: click's usage errors as one
line on stderr with exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator import queue_utils as q

from .test_intake import octopoid as installed
from .test_review import provisional_with_commit


def octopoid(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed command (test_intake's), its output read as UTF-8 text."""
    done = installed(root, *args, timeout=120)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["reject", "1"], "octopoid: reject: Missing option '--reason' (`octopoid reject --help`)"),
        (["accept"], "octopoid: accept: Missing argument 'TASK_IDS...' (`octopoid accept --help`)"),
        (["list", "--bogus"], "octopoid: list: No such option '--bogus' (`octopoid list --help`)"),
        (["list", "nowhere"], "'nowhere' is not one of 'incoming'"),
        (["nosuch"], "octopoid: No such command 'nosuch' (`octopoid --help`)"),
        (["--bogus"], "octopoid: No such option '--bogus' (`octopoid --help`)"),
        (["memory", "show", "--x"], "octopoid: memory show: No such option '--x' (`octopoid"),
        (["scheduler", "run", "extra"], "octopoid: scheduler run: Got unexpected extra argument"),
    ],
)
def test_a_usage_error_is_one_line_on_stderr_and_exits_2(
    git_project: Path, args: list[str], expected: str
) -> None:
    done = octopoid(git_project, *args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("octopoid: ") and expected in done.stderr, done.stderr


def test_a_blank_reason_is_refused_in_one_line(git_project: Path) -> None:
    tid = provisional_with_commit(git_project)
    done = octopoid(git_project, "reject", tid, "--reason", "  ")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "octopoid: a rejection needs a reason: the next attempt reads it\n"
    assert q.get_task(tid).state.value == "provisional"


def test_help_is_still_clicks_own(git_project: Path) -> None:
    done = octopoid(git_project, "reject", "--help")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("Usage: octopoid reject [OPTIONS] TASK_IDS...\n\n")
    assert "\nOptions:\n" in done.stdout and "--reason TEXT" in done.stdout
    bare = octopoid(git_project, "memory")  # a group without a command shows its help
    assert bare.stderr.startswith("Usage: octopoid memory [OPTIONS] COMMAND [ARGS]...")
    assert "\nCommands:\n" in bare.stderr

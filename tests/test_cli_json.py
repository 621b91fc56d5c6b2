"""What scripts read from the installed `octopoid` executable: click's usage errors as one
line on stderr with exit 2, and the --json of notes, diff --stat, accept and reject."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import git
import pytest

from orchestrator.git import branches, diffs
from orchestrator.queue import machine as q

from .support import octopoid, provisional_with_commit


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
        (["diff", "1", "--json"], "octopoid: diff: --json goes with --stat"),
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
    several = octopoid(git_project, "reject", tid, "99", "--reason", " ")  # before any id
    assert (several.returncode, several.stderr) == (2, done.stderr)


def test_help_is_still_clicks_own(git_project: Path) -> None:
    done = octopoid(git_project, "reject", "--help")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("Usage: octopoid reject [OPTIONS] TASK_IDS...\n\n")
    assert "\nOptions:\n" in done.stdout and "--reason TEXT" in done.stdout
    bare = octopoid(git_project, "memory")  # a group without a command shows its help
    assert bare.stderr.startswith("Usage: octopoid memory [OPTIONS] COMMAND [ARGS]...")
    assert "\nCommands:\n" in bare.stderr


def test_notes_json_has_the_text_or_null_and_where_it_lives(git_project: Path) -> None:
    rejected, untouched = provisional_with_commit(git_project), q.create_task("fresh").id
    assert octopoid(git_project, "reject", rejected, "--reason", "needs tests").returncode == 0
    doc = json.loads(octopoid(git_project, "notes", f"task-{rejected}", "--json").stdout)
    assert doc["id"] == f"TASK-{rejected}" and "needs tests" in doc["notes"]
    assert doc["path"].endswith(f"shared/notes/TASK-{rejected}.md")
    doc = json.loads(octopoid(git_project, "notes", untouched, "--json").stdout)
    assert doc["notes"] is None and doc["id"] == f"TASK-{untouched}"


def test_diff_stat_names_files_as_they_are(git_project: Path) -> None:
    tid = provisional_with_commit(git_project, "feature.txt", "new\n")
    work = git.Repo(branches.worktree_for(tid))
    work.git.mv("README.md", "notes: ü.md")  # renamed unchanged: git pairs the two names
    where = Path(work.working_tree_dir)
    (where / "café.py").write_text("a = 1\nb = 2\n")
    (where / "a:b.txt").write_text("colon\n")
    (where / "logo.bin").write_bytes(b"\x00\x01\x02\xff" * 10)
    work.git.add("-A")
    work.git.commit("-q", "-m", "more")

    done = octopoid(git_project, "diff", tid, "--stat", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    files = {f["path"]: f for f in doc["files"]}
    assert files == {
        "feature.txt": stat("feature.txt", 1),
        "café.py": stat("café.py", 2),
        "a:b.txt": stat("a:b.txt", 1),
        "logo.bin": stat("logo.bin", 0, binary=True, size=40),
        "notes: ü.md": stat("notes: ü.md", 0, old_path="README.md"),
    }
    assert doc["totals"] == {"files": 5, "added": 4, "removed": 0}
    assert doc["id"] == f"TASK-{tid}"

    table = octopoid(git_project, "diff", tid, "--stat").stdout.splitlines()
    assert table[0].split() == ["ADDED", "REMOVED", "FILE"]
    assert ["2", "0", "café.py"] in [row.split() for row in table]
    assert ["-", "-", "logo.bin"] in [row.split() for row in table]
    assert any(row.endswith("README.md -> notes: ü.md") for row in table)
    assert table[-1] == "5 files changed, +4 -0"


def test_diff_prints_what_git_diff_prints_whatever_the_bytes(git_project: Path) -> None:
    tid = provisional_with_commit(git_project, "feature.txt", "new\n")
    work = git.Repo(branches.worktree_for(tid))
    where = Path(work.working_tree_dir)
    (where / "café.py").write_text("a = 1\n")
    (where / "latin1.txt").write_bytes(b"caf\xe9\n")  # not UTF-8: shown, not a traceback
    work.git.add("-A")
    work.git.commit("-q", "-m", "more")
    git_project.joinpath(".gitattributes").write_text("*.py diff=shout\n")
    work.git.config("diff.shout.textconv", "tr a-z A-Z")  # the diff's text is the branch's own

    done = octopoid(git_project, "diff", tid, text=False)
    assert (done.returncode, done.stderr) == (0, b"")
    argv = ["git", *diffs.DIFF_ARGS, f"main...agent/TASK-{tid}", "--"]
    expected = subprocess.run(argv, cwd=git_project, capture_output=True, check=True).stdout
    assert done.stdout == expected
    assert b"+++ b/caf\xc3\xa9.py\n@@ -0,0 +1 @@\n+a = 1\n" in done.stdout  # no textconv
    assert b"+caf\xe9\n" in done.stdout


def stat(
    path: str,
    added: int,
    binary: bool = False,
    old_path: str | None = None,
    size: int | None = None,
) -> dict:
    return {
        "path": path,
        "added": added,
        "removed": 0,
        "binary": binary,
        "old_path": old_path,
        "size": size,
    }


def test_diff_stat_of_a_task_never_attempted_says_why(git_project: Path) -> None:
    q.create_task("not yet")
    done = octopoid(git_project, "diff", "1", "--stat", "--json")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "octopoid: TASK-1 has no branch yet (it is in incoming); its first attempt makes one\n"
    )


def test_accept_json_covers_every_id_and_exits_with_the_worst(git_project: Path) -> None:
    tid = provisional_with_commit(git_project)
    done = octopoid(git_project, "accept", tid, "TASK-99", "--json")
    assert done.returncode == 3
    assert done.stderr == "octopoid: no task TASK-99 in any queue\n"
    merged = git.Repo(git_project).heads.main.commit.hexsha
    assert json.loads(done.stdout) == [
        {
            "id": f"TASK-{tid}",
            "ok": True,
            "state": "done",
            "strategy": "merge",
            "merged": merged,
            "pull_request": None,
            "cleanup_error": None,
            "error": None,
            "learnings": [],  # what its attempt remembered, as kept (none here)
            "promoted": 0,
        },
        {"id": "TASK-99", "ok": False, "error": "no task TASK-99 in any queue", "exit_code": 3},
    ]


def test_reject_json_covers_every_id_and_exits_with_the_worst(git_project: Path) -> None:
    tid = provisional_with_commit(git_project)
    done = octopoid(git_project, "reject", "99", tid, "--reason", "redo", "--json")
    assert done.returncode == 3
    assert json.loads(done.stdout) == [
        {"id": "TASK-99", "ok": False, "error": "no task TASK-99 in any queue", "exit_code": 3},
        {"id": f"TASK-{tid}", "ok": True, "state": "incoming", "comments": 0, "error": None},
    ]
    assert q.get_task(tid).state.value == "incoming"

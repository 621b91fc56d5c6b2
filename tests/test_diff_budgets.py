"""`octopoid diff` and the review page stay within their budgets whatever a branch holds: a
file of millions of empty lines, many large text files, a binary file, thousands of files
(memory measured, generously; a file past ``DIFF_TEXT_BYTES`` is never diffed: `diff`
shows it as git does, binary, and the page names it with its size)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from orchestrator.faces.web import diffview
from orchestrator.git import branches
from orchestrator.model import defaults

from .support import commit_on_branch, peak_rss_kib, provisional_with_commit

MB = 1024 * 1024
DRAW = """
import sys
from pathlib import Path
from orchestrator.faces.web import diffview
view = diffview._draw(Path(sys.argv[1]), "main", sys.argv[2])
print(view.total_files, sum(len(f.rows) for f in view.files),
      [(f.path, f.size) for f in view.too_big if f.path == "huge.txt"])
"""


@pytest.fixture
def heavy(git_project: Path) -> str:
    """A task whose branch holds what costs a diff most."""
    tid = provisional_with_commit(git_project)
    files = {f"text/{i}.txt": b"x\n" * (3 * MB // 2) for i in range(10)}  # 45 MB of diff
    files["huge.txt"] = b"\n" * (20 * MB)  # 20 million lines: gigabytes to diff as text
    files["image.bin"] = bytes(range(256)) * 4096
    files.update({f"many/{i}.py": f"n = {i}\n".encode() for i in range(2000)})
    commit_on_branch(git_project, tid, files, "heavy")
    return tid


def test_octopoid_diff_streams_and_shows_a_huge_file_as_binary(
    git_project: Path, heavy: str, tmp_path: Path
) -> None:
    out = tmp_path / "diff.out"
    octopoid = os.path.join(os.path.dirname(sys.executable), "octopoid")
    kib = peak_rss_kib(git_project, out, octopoid, "diff", heavy)
    assert kib < 150 * 1024, f"{kib} KiB"  # not the 45 MB diff held, nor git's gigabytes
    assert out.stat().st_size > 45 * MB  # all of it, streamed
    text = out.read_bytes()
    assert b"Binary files /dev/null and b/huge.txt differ" in text
    assert b"Binary files /dev/null and b/image.bin differ" in text
    assert text.count(b"diff --git a/many/") == 2000


def test_the_review_page_draws_within_its_budgets(
    git_project: Path, heavy: str, tmp_path: Path
) -> None:
    head = branches.branch_head(git_project, f"agent/TASK-{heavy}")
    kib = peak_rss_kib(
        git_project, tmp_path / "out", sys.executable, "-c", DRAW, str(git_project), head
    )
    files, rows, huge = (tmp_path / "out").read_text().split(" ", 2)
    assert kib < 150 * 1024, f"{kib} KiB"
    assert int(files) == 2013 and int(rows) <= diffview.MAX_ROWS
    assert "'huge.txt'" in huge  # named with its size, not drawn: git does not even diff it
    assert defaults.DIFF_TEXT_BYTES < 20 * MB

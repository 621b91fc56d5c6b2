"""The review page's diff: read within a budget, cached by head, names as they are.

Real git repositories; the parser is fed what git prints, and cut where the budget cuts.
"""

from __future__ import annotations

import threading
from pathlib import Path

import git
import pytest

from orchestrator.faces.web import diffview
from orchestrator.faces.web.diffview import OnceCache, render_diff, task_diff_view
from orchestrator.git import diffs
from orchestrator.model.exceptions import GitError

ODD_NAMES = {
    "a:b.py": b"x = 1\n",
    "caf\u00e9.py": b"y = 2\n",
    "sp ace.txt": b"q\n",
    'qu"ote.py': b"z = 3\n",
    "tab\tname.txt": b"t\n",
    "dir/\u00fcber/m\u00f6de.md": b"# hi\n",
}


def repo_with(tmp_path: Path, files: dict[str, bytes], removed: tuple[str, ...] = ()) -> tuple:
    """A repository whose branch ``feat`` adds ``files`` (and removes ``removed``) on main."""
    root = tmp_path / "r"
    repo = git.Repo.init(root, initial_branch="main")
    repo.git.config("user.email", "t@example.com")
    repo.git.config("user.name", "t")
    (root / "old.py").write_text("a = 1\nb = 2\nc = 3\n")
    (root / "gone.py").write_text("bye = 1\n")
    (root / "moved.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    repo.git.add("-A")
    repo.git.commit("-qm", "base")
    repo.git.checkout("-qb", "feat")
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    for name in removed:
        (root / name).unlink()
    repo.git.add("-A")
    repo.git.commit("-qm", "feat")
    return root, repo.commit("main").hexsha, repo.commit("feat").hexsha


def by_path(view: diffview.DiffView) -> dict[str, diffview.FileDiff]:
    return {f.path: f for f in view.files}


def test_file_names_are_shown_as_they_are_not_as_git_quotes_them(tmp_path) -> None:
    root, base, head = repo_with(tmp_path, ODD_NAMES)
    view = task_diff_view(root, base, head)
    assert set(by_path(view)) == set(ODD_NAMES)
    assert not view.truncated and view.left_out == ""
    assert [r.new for r in by_path(view)["caf\u00e9.py"].rows if r.kind == "add"] == [1]


def test_renames_removals_binaries_and_edits_are_each_named_once(tmp_path) -> None:
    moved = "".join(f"line {i}\n" for i in range(40)).replace("line 7\n", "line seven\n")
    files = {"old.py": b"a = 1\nB = 2\nc = 3\n", "bin.dat": b"\x00\x01\x02", "new.txt": b"n\n"}
    root, base, head = repo_with(tmp_path, files, removed=("gone.py",))
    repo = git.Repo(root)
    repo.git.mv("moved.txt", "renamed.txt")
    (root / "renamed.txt").write_text(moved)
    repo.git.commit("-qam", "rename")
    head = repo.commit("feat").hexsha
    found = by_path(task_diff_view(root, base, head))
    assert {p: f.status for p, f in found.items()} == {
        "old.py": "modified",
        "bin.dat": "binary",
        "new.txt": "added",
        "gone.py": "removed",
        "renamed.txt": "renamed",
    }
    assert found["renamed.txt"].old_path == "moved.txt"
    edit = [(r.kind, r.old, r.new) for r in found["old.py"].rows if r.kind in ("add", "del")]
    assert edit == [("del", 2, None), ("add", None, 2)]
    assert [(r.kind, r.old) for r in found["gone.py"].rows if r.kind == "del"] == [("del", 1)]


def test_a_huge_file_is_named_with_its_size_and_the_rest_is_drawn(tmp_path) -> None:
    """An agent's 400,000-line commit: the page draws the other files and names the big
    one (its size, and the git command that shows it), having read a bounded part."""
    huge = "".join(f"x_{i} = {i}\n" for i in range(400_000)).encode()
    root, base, head = repo_with(tmp_path, {"big.py": huge, "small.py": b"s = 1\n"})
    view = task_diff_view(root, base, head)
    assert set(by_path(view)) == {"small.py"}
    assert [(f.path, f.added, f.removed) for f in view.too_big] == [("big.py", 400_000, 0)]
    assert view.truncated and view.left_out.startswith("Showing 1 of 2 files")
    assert "400,001 changed lines" in view.left_out


def test_a_diff_past_the_byte_budget_draws_what_came_before(tmp_path, monkeypatch) -> None:
    """Many files, each under the per-file limit, together past the byte budget."""
    body = "".join(f"v{j} = {j}\n" for j in range(500)).encode()
    files = {f"f{i:03}.py": body for i in range(60)}
    root, base, head = repo_with(tmp_path, files)
    monkeypatch.setattr(diffview, "MAX_BYTES", 64 * 1024)
    view = task_diff_view(root, base, head)
    assert 0 < len(view.files) < 60 and view.truncated
    assert view.left_out.endswith("of 30,000 changed lines")
    assert [f.path for f in view.files] == sorted(files)[: len(view.files)]


def test_read_diff_stops_git_at_the_budget(tmp_path) -> None:
    huge = "".join(f"x_{i} = {i}\n" for i in range(200_000)).encode()
    root, base, head = repo_with(tmp_path, {"big.py": huge})
    data, more = diffs.read_diff(root, base, head, 10_000)
    assert more and len(data) == 10_000 and data.startswith(b"diff --git a/big.py b/big.py")
    whole, more = diffs.read_diff(root, base, head, 10_000_000)
    assert not more and len(whole) > 2_000_000
    with pytest.raises(GitError, match="git diff"):
        diffs.read_diff(root, base, "0" * 40, 100)


def test_a_diff_cut_at_any_byte_draws_a_prefix_and_never_fails(tmp_path) -> None:
    root, base, head = repo_with(tmp_path, {**ODD_NAMES, "old.py": b"a = 1\nB = 2\nc = 3\n"})
    whole, _ = diffs.read_diff(root, base, head, 1_000_000)
    full = render_diff(whole.decode())
    drawn = [(f.path, len(f.rows)) for f in full.files]
    for cut in range(0, len(whole), 7):
        view = render_diff(whole[:cut].decode("utf-8", errors="replace"), cut=True)
        got = [(f.path, len(f.rows)) for f in view.files]
        for (path, rows), (want_path, want_rows) in zip(got, drawn, strict=False):
            assert rows <= want_rows and (path == want_path or rows == 0)


def test_the_split_view_pairs_each_removed_run_with_the_added_run_after_it() -> None:
    text = (
        "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1,5 +1,4 @@\n"
        " keep\n-old 1\n-old 2\n+new 1\n ctx\n-gone\n+added 1\n+added 2\n"
    )
    (entry,) = render_diff(text).files
    numbered = [(r.kind, r.old, r.new) for r in entry.rows]
    assert numbered[1:] == [
        ("ctx", 1, 1), ("del", 2, None), ("del", 3, None), ("add", None, 2), ("ctx", 4, 3),
        ("del", 5, None), ("add", None, 4), ("add", None, 5),
    ]  # fmt: skip
    assert (entry.added, entry.removed) == (3, 3)
    pairs = [(a and (a.kind, a.old), b and (b.kind, b.new)) for a, b in entry.pairs]
    assert pairs[1:] == [
        (("ctx", 1), ("ctx", 1)), (("del", 2), ("add", 2)), (("del", 3), None),
        (("ctx", 4), ("ctx", 3)), (("del", 5), ("add", 4)), (None, ("add", 5)),
    ]  # fmt: skip


def test_html_in_a_diff_is_escaped(tmp_path) -> None:
    evil = b"<script>alert(1)</script>\n<img src=x onerror=alert(2)>\n"
    root, base, head = repo_with(tmp_path, {"<b>x</b>.html": evil})
    (page,) = task_diff_view(root, base, head).files
    html = "".join(str(r.html) for r in page.rows)
    assert "<script" not in html and "<img" not in html and html.count("&lt;") == 3


def test_eight_readers_at_once_make_one_drawing() -> None:
    cache: OnceCache = OnceCache(4)
    made, started = [], threading.Barrier(8)
    release = threading.Event()

    def make() -> str:
        made.append(1)
        release.wait(30)
        return "drawn"

    answers: list[str] = []

    def ask() -> None:
        started.wait(30)
        answers.append(cache.get("k", make))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(30)
    assert answers == ["drawn"] * 8 and made == [1]


def test_a_failed_drawing_is_not_cached_and_the_cache_stays_small() -> None:
    cache: OnceCache = OnceCache(2)

    def fail() -> str:
        raise RuntimeError("git went away")

    with pytest.raises(RuntimeError):
        cache.get("k", fail)
    assert cache.get("k", lambda: "second try") == "second try"
    for key in "abc":
        cache.get(key, lambda key=key: key)
    assert list(cache.found) == ["b", "c"]

"""A branch never deletes or replaces what git does not track in the person's checkout.

git treats ignored files as expendable: merging a branch that adds ``.env`` or the path
``.octopoid/runtime`` silently deletes the person's file or octopoid's whole state. Accept
refuses such a branch naming the paths, at every depth, and the merge pre-check, `list`,
`status` and the review page say so before anyone clicks.
"""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from orchestrator import config
from orchestrator.git import core, merge_guard, remote
from orchestrator.model.exceptions import MergeRefused
from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q
from orchestrator.review import verdicts as review
from orchestrator.roles import checks

from .support import cli_output, commit_on_branch, provisional_with_commit

IGNORED = ".env\n*.db\nvenv/\nnode_modules/\ndata/\n"
#: What the person's checkout holds that git does not track, path -> bytes.
MINE = {
    ".env": b"API_KEY=the person's own\n",
    "local.db": b"SQLite format 3\x00 the person's rows",
    "venv/bin/python": b"#!the person's interpreter\n",
    "node_modules/pkg/index.js": b"module.exports = 1\n",
    "data/cache.bin": b"\x00\x01 a big cache\n",
}


@pytest.fixture
def checkout(git_project: Path) -> Path:
    """The person's checkout as a real project's: .gitignore and .octopoid/ committed (its
    .gitignore keeps runtime/ out), ignored files of theirs in place."""
    (git_project / ".gitignore").write_text(IGNORED)
    repo = git.Repo(git_project)
    repo.git.add(".gitignore", ".octopoid")
    repo.index.commit("ignore local files; octopoid's config")
    for name, data in MINE.items():
        (git_project / name).parent.mkdir(parents=True, exist_ok=True)
        (git_project / name).write_bytes(data)
    return git_project


def kept(root: Path) -> dict[str, bytes]:
    """The person's files byte for byte, a canary in octopoid's runtime, and the names of
    the runtime's queue files (their headers change as a refused accept says why)."""
    runtime = config.get_orchestrator_dir()
    canary = runtime / "canary.bin"
    if not canary.exists():
        canary.write_bytes(b"octopoid's state \x00\x01")
    files = {n: (root / n).read_bytes() for n in MINE if (root / n).is_file()}
    files["canary"] = canary.read_bytes()
    files["queue"] = "\n".join(sorted(p.name for p in runtime.glob("queue/*/TASK-*"))).encode()
    return files


CASES = {
    "the runtime itself, as a symlink": (
        {}, {".octopoid/runtime": "/tmp"}, [".octopoid/runtime/"]
    ),
    ".octopoid itself, as a symlink": (
        {}, {".octopoid": "/tmp"}, [".octopoid", ".octopoid/runtime/"]
    ),
    ".octopoid itself, as a file": ({".octopoid": b"x\n"}, {}, [".octopoid", ".octopoid/runtime/"]),
    "ignored files": (
        {".env": b"API_KEY=the agent's\n", "local.db": b"the agent's rows"}, {},
        [".env", "local.db"],
    ),
    "an ignored directory made a file": ({"venv": b"a file\n"}, {}, ["venv/"]),
    "a parent turned into a symlink": ({}, {"data": "/etc"}, ["data/"]),
    "an ignored file made a parent": ({"local.db/table": b"rows\n"}, {}, ["local.db"]),
    "a file inside an ignored directory": (
        {"node_modules/pkg/index.js": b"evil()\n"}, {}, ["node_modules/pkg/index.js"]
    ),
    "octopoid's queue, planted": (
        {".octopoid/runtime/queue/done/TASK-99.md": b"# [TASK-99] planted\n"}, {},
        [".octopoid/runtime/queue/done/TASK-99.md"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_accept_refuses_a_branch_that_replaces_what_git_does_not_track(
    checkout: Path, case: str
) -> None:
    files, links, named = CASES[case]
    tid = provisional_with_commit(checkout)
    gone = (".octopoid",) if ".octopoid" in {*files, *links} else ()
    commit_on_branch(checkout, tid, files, "the agent's paths", links=links, remove=gone)
    before, main = kept(checkout), git.Repo(checkout).head.commit.hexsha
    with pytest.raises(MergeRefused) as refused:
        review.accept(tid)
    for path in named:
        assert f"  {path}\n" in str(refused.value)
    assert kept(checkout) == before  # byte for byte, the runtime's queue included
    assert git.Repo(checkout).head.commit.hexsha == main  # nothing merged
    assert q.get_task(tid).state is TaskState.PROVISIONAL
    assert checks.merge_precheck(q.get_task(tid)) == (None, named)  # said before the click


def test_a_branch_beside_ignored_files_is_merged_and_leaves_them_alone(checkout: Path) -> None:
    tid = provisional_with_commit(checkout)
    commit_on_branch(checkout, tid, {"node_modules/other/index.js": b"ok\n"}, "vendored")
    before = kept(checkout)
    assert checks.merge_precheck(q.get_task(tid)) == (None, [])
    review.accept(tid)
    assert kept(checkout) == before
    assert (checkout / "node_modules/other/index.js").read_bytes() == b"ok\n"


def test_a_branch_into_a_base_checked_out_elsewhere_is_judged_there_too(
    checkout: Path, tmp_path: Path
) -> None:
    """The base checked out in another worktree of the person's: its files count too."""
    repo = git.Repo(checkout)
    repo.git.checkout("-q", "-b", "elsewhere")
    other = tmp_path / "main-checkout"
    repo.git.worktree("add", "-q", str(other), "main")
    (other / "local.db").write_bytes(b"rows of the other checkout")
    tid = provisional_with_commit(checkout)
    commit_on_branch(checkout, tid, {"local.db": b"the agent's"}, "a database")
    (checkout / "local.db").unlink()  # not in the project's checkout: only in main's
    with pytest.raises(MergeRefused, match=r"local\.db"):
        review.accept(tid)
    assert (other / "local.db").read_bytes() == b"rows of the other checkout"


def test_the_guard_reads_what_git_lists_not_a_list_of_names(tmp_path: Path) -> None:
    """Every depth, judged from ``git ls-files --others --directory`` and the paths written."""
    entries = [".env", "venv/", "data", ".octopoid/runtime/"]
    written = [".env", "venv", "data/x", ".octopoid", "src/ok.py", "venv2"]
    assert merge_guard.replaced(tmp_path, written, entries) == [
        ".env", ".octopoid/runtime/", "data", "venv/",
    ]  # fmt: skip


def test_list_status_and_the_pre_check_show_the_refusal_before_accept(checkout: Path) -> None:
    clean = provisional_with_commit(checkout, "fine.txt")
    tid = provisional_with_commit(checkout, "feature.txt")
    assert "refused" not in cli_output("list") + cli_output("status")
    commit_on_branch(checkout, tid, {".env": b"mine now\n"}, "an env", links={"venv": "/"})
    listed = cli_output("list")
    assert f"TASK-{tid}  provisional (refused)" in listed
    line = f"TASK-{tid} is refused: merging it would replace or write what git does not track"
    assert f"{line} in the checkout: .env, venv/" in listed
    assert line in cli_output("status")
    rows = {r["id"]: r for r in json.loads(cli_output("list", "--json"))}
    assert rows[f"TASK-{tid}"]["refused"] == [".env", "venv/"]
    assert rows[f"TASK-{clean}"]["refused"] == []
    status = json.loads(cli_output("status", "--json"))
    assert status["unmergeable"] == [
        {"id": f"TASK-{tid}", "conflicts": None, "refused": [".env", "venv/"]}
    ]
    (checkout / ".env").unlink()  # the person's file gone: judged again, not from the cache
    assert ".env" not in cli_output("status") and "venv/" in cli_output("status")
    shown = cli_output("checks", f"TASK-{tid}", code=1)
    assert "merge pre-check: refused: merging it would replace" in shown


def test_the_review_page_says_the_branch_is_refused(checkout: Path, client) -> None:
    tid = provisional_with_commit(checkout)
    commit_on_branch(checkout, tid, {".env": b"mine now\n"}, "an env")
    _, _, page = client.request(f"/tasks/TASK-{tid}")
    assert "refused: merging it would replace or write what git does not track" in page
    assert "Accept will be refused" in page


def test_a_fast_forward_of_the_person_s_base_leaves_their_files_alone(checkout: Path) -> None:
    """Another machine's merge brought in by ``adopt`` (git.remote) is a fast-forward of
    the checkout: it is left undone rather than replace an ignored file."""
    repo = git.Repo(checkout)
    before = repo.head.commit.hexsha
    repo.git.checkout("-q", "-b", "theirs")
    (checkout / "ok.txt").write_text("fine\n")
    repo.git.add("ok.txt")
    repo.git.add("-f", ".env")
    repo.git.commit("-q", "-m", "their env")
    theirs = repo.head.commit.hexsha
    repo.git.checkout("-q", "main")
    (checkout / ".env").write_bytes(MINE[".env"])  # checkout -q main removed it: put back
    with core.repo_admin_lock():
        assert remote.adopt(repo, "main", theirs) is False
    assert repo.head.commit.hexsha == before
    assert (checkout / ".env").read_bytes() == MINE[".env"]

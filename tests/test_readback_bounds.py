"""What an attempt brings back is bounded: a pack of zeros, an object-count bomb and a
clone that fills the disk are refused within ``sandbox`` limits, and the host's memory
and disk stay bounded while octopoid reads them (measured, generously)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import git
import pytest

from orchestrator import config
from orchestrator.box import bwrap as walls
from orchestrator.box import clone
from orchestrator.box.bounds import Bounds, ReadBackRefused, disk_use
from orchestrator.box.bwrap import Mounts, command_line

from .support import peak_rss_kib
from .support.walls import in_box

MB = 1024 * 1024
#: A bomb: a sparse file of zeros (no disk), hashed by streaming, committed; it packs
#: into a few hundred kilobytes.
ZEROS = (
    "truncate -s {size} zeros.bin && git -c core.bigFileThreshold=1m add zeros.bin"
    " && rm zeros.bin && git commit -qm zeros"
)
#: Many small distinct objects: one commit of ``count`` files.
MANY = (
    "mkdir many && i=0; while [ $i -lt {count} ]; do echo $i > many/$i; i=$((i+1)); done"
    " && git add many && git commit -qm many"
)


def agent_clone(git_project: Path, script: str) -> tuple[git.Repo, Path, list[str]]:
    """TASK-1's clone after an agent ran ``script`` in it; the read-back's box."""
    repo = git.Repo(git_project)
    repo.git.branch("agent/TASK-1", "main")
    dest = config.get_worktrees_dir() / "TASK-1"
    clone.make(repo, "1", "main", repo.commit("main").hexsha, dest)
    in_box(repo, dest, script)
    mounts = Mounts(dest, dest, (git_project,), clone.object_mounts(repo), False, False)
    return repo, dest, command_line(walls.find_bwrap(), mounts, walls.probe()[1])


#: The read-back, run by a fresh process (``peak_rss_kib`` measures it and what it ran).
READ_BACK = """
import json, sys
import git
from orchestrator.box import clone
from orchestrator.box.bounds import Bounds, ReadBackRefused
root, dest, box, bounds = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
try:
    clone.read_back(git.Repo(root), "1", dest, box, Bounds(*map(int, bounds)))
    print("nothing refused")
except ReadBackRefused as exc:
    print(exc)
"""


def read_back_measured(
    root: Path, dest: Path, box: list[str], bounds: Bounds, out: Path
) -> tuple[str, int]:
    """What ``clone.read_back`` said (its refusal), and the peak memory in KiB of it and
    every git it ran."""
    numbers = [str(n) for n in (bounds.pack_bytes, bounds.objects, bounds.branch_bytes)]
    argv = [sys.executable, "-c", READ_BACK, str(root), str(dest), json.dumps(box)]
    kib = peak_rss_kib(root, out, *argv, *numbers, str(bounds.clone_bytes))
    return out.read_text(), kib


def objects_bytes(repo: git.Repo) -> int:
    return disk_use(Path(repo.git_dir) / "objects", 1 << 62)


def test_a_pack_of_zeros_is_refused_unpacked_and_costs_no_memory(
    git_project: Path, bwrap_ok: None, tmp_path: Path
) -> None:
    repo, dest, box = agent_clone(git_project, ZEROS.format(size="300M"))
    before = objects_bytes(repo)
    bounds = Bounds(pack_bytes=64 * MB, objects=1000, branch_bytes=100 * MB, clone_bytes=MB)
    said, peak_kib = read_back_measured(git_project, dest, box, bounds, tmp_path / "out")
    assert "over 104857600 (sandbox.max_branch_bytes)" in said, said
    assert repo.commit("agent/TASK-1").hexsha == repo.commit("main").hexsha  # not moved
    assert "refs/octopoid/fetched/" not in repo.git.for_each_ref()
    assert objects_bytes(repo) - before < 5 * MB  # the pack: zeros compress to nothing
    assert peak_kib < 150 * 1024  # git streamed the 300 MB, never held it


def test_a_pack_over_its_size_is_stopped_as_it_arrives(git_project: Path, bwrap_ok: None) -> None:
    script = "head -c 3000000 /dev/urandom > noise.bin && git add noise.bin && git commit -qm n"
    repo, dest, box = agent_clone(git_project, script)
    before = objects_bytes(repo)
    bounds = Bounds(pack_bytes=MB, objects=1000, branch_bytes=100 * MB, clone_bytes=MB)
    with pytest.raises(ReadBackRefused, match=r"over 1048576 bytes \(sandbox.max_pack_bytes\)"):
        clone.read_back(repo, "1", dest, box, bounds)
    assert objects_bytes(repo) - before < 2 * MB  # what came before the stop, at most
    assert repo.commit("agent/TASK-1").hexsha == repo.commit("main").hexsha


def test_an_object_count_bomb_is_stopped_at_the_pack_header(
    git_project: Path, bwrap_ok: None
) -> None:
    repo, dest, box = agent_clone(git_project, MANY.format(count=600))
    bounds = Bounds(pack_bytes=64 * MB, objects=500, branch_bytes=100 * MB, clone_bytes=MB)
    with pytest.raises(ReadBackRefused, match=r"holds 60\d new objects, over 500"):
        clone.read_back(repo, "1", dest, box, bounds)
    assert repo.commit("agent/TASK-1").hexsha == repo.commit("main").hexsha
    within = Bounds(pack_bytes=64 * MB, objects=700, branch_bytes=100 * MB, clone_bytes=MB)
    sha = clone.read_back(repo, "1", dest, box, within)  # the same work, within its bounds
    assert repo.commit(sha).message.strip() == "many"


def test_disk_use_counts_blocks_not_links_and_stops_past_its_bound(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * (3 * MB))
    (tmp_path / "sparse").touch()
    (tmp_path / "sparse").open("r+b").truncate(100 * MB)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"y" * MB)
    (tmp_path / "link").symlink_to("/usr")
    assert 4 * MB <= disk_use(tmp_path, 1 << 62) < 5 * MB

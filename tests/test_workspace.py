"""Each attempt starts in a working world (config.yaml ``workspace:``, docs/workspace.md):
set-up in the task's box before the agent, with its own network; files copied from the
checkout, their values redacted; caches the agent sees read-only; a cached environment
reused while its key files hold; the attempt's own ports."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import config
from orchestrator.base import ports
from orchestrator.box import setup
from orchestrator.queue import machine as q

from .support import branch_file, commit_on_branch, run_claimed, set_config, write_agents

#: The scripted agent: says what its box holds, then commits it.
AGENT = r"""
import os, socket, subprocess, sys
from pathlib import Path
seen = []
for name in ("made.txt", "fetched.txt", ".env.test"):
    seen.append(f"{name}: {Path(name).read_text().strip() if Path(name).exists() else '-'}")
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2)
    seen.append("agent reached the server")
except OSError:
    seen.append("agent reached nothing")
cache = os.environ.get("PIP_CACHE_DIR", "")
seen.append(f"cache holds: {sorted(os.listdir(cache)) if cache else '-'}")
try:
    Path(cache, "planted").write_text("by the agent")
    seen.append("agent wrote the cache")
except OSError as exc:
    seen.append(f"agent cannot write the cache: {exc.strerror}")
seen.append(f"port {os.environ.get('OCTOPOID_PORT')} of {os.environ.get('OCTOPOID_PORTS')}")
seen.append(f"caches {os.environ.get('OCTOPOID_CACHES')}")
print("\n".join(seen))
Path("seen.txt").write_text("\n".join(seen) + "\n")
subprocess.run(["git", "add", "seen.txt"], check=True)
subprocess.run(["git", "commit", "-qm", "what the box held"], check=True)
"""
FETCH = (
    f'{sys.executable} -c "import sys, urllib.request; '
    'print(urllib.request.urlopen(sys.argv[1]).read().decode().strip())" '
    "http://127.0.0.1:{port}/ > fetched.txt"
)


def agent_without_network(root: Path, *args: str) -> None:
    write_agents(root, argv=[sys.executable, "-c", AGENT, *args])
    doc = yaml.safe_load((root / ".octopoid/agents.yaml").read_text())
    doc["agents"][0]["sandbox"] = {"network": "none"}
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))


def attempt():
    return run_claimed(q.claim_task(None, "impl-1"), "impl-1")


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's cache folder, this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_setup_runs_in_the_box_before_the_agent_with_a_network_of_its_own(
    git_project: Path, loopback_servers, cache_home: Path, bwrap_ok: None
) -> None:
    server = loopback_servers[0]
    (git_project / ".env.test").write_text("API_SECRET=s3cr3t-from-the-checkout\n")
    agent_without_network(git_project, str(server.port))
    set_config(
        git_project,
        workspace={
            "setup": [FETCH.format(port=server.port), "echo built $OCTOPOID_CACHES > made.txt"],
            "network": {"allow": [f"127.0.0.1:{server.port}"]},
            "caches": ["pip"],
            "copy": [".env.test"],
        },
    )
    (cache_home / "octopoid").mkdir(parents=True)
    tid = q.create_task("look around").id
    report = attempt()
    assert report.next_state == "provisional", q.get_task_notes(tid)
    seen = branch_file(git_project, tid, "seen.txt")
    assert "made.txt: built writable" in seen  # set-up ran in the clone before the agent
    assert "caches read-only" in seen  # reviewed code's set-up writes them; the agent cannot
    assert "fetched.txt: a page of a server" in seen  # through set-up's own network
    assert "agent reached nothing" in seen  # the agent's box has none
    assert "agent cannot write the cache: Read-only file system" in seen
    port, _, span = seen.split("port ", 1)[1].split("\n")[0].partition(" of ")
    assert span == f"{port}-{int(port) + 9}"
    notes = q.get_task_notes(tid)
    assert "[octopoid] set-up $ echo built $OCTOPOID_CACHES > made.txt" in notes
    assert "set-up: done in" in notes
    assert ".env.test: API_SECRET=s3cr3t-from-the-checkout" in seen  # copied in
    assert ".env.test: API_SECRET=[REDACTED" in notes  # and its values are secrets
    assert "s3cr3t-from-the-checkout" not in notes


def test_a_copy_never_follows_what_the_branch_put_in_its_way(
    git_project: Path, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    (clone / "config").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (clone / "fixtures").symlink_to(outside)  # the branch made the folder a link out
    (clone / "config" / ".env.test").symlink_to(outside / "victim")
    (git_project / "fixtures").mkdir()
    (git_project / "fixtures" / "db.sqlite").write_bytes(b"rows")
    (git_project / "config").mkdir()
    (git_project / "config" / ".env.test").write_text("A=1\n")
    setup.copy_in(["fixtures/db.sqlite", "config/.env.test"], git_project, clone)
    assert (clone / "fixtures" / "db.sqlite").read_bytes() == b"rows"
    assert not (clone / "fixtures").is_symlink() and list(outside.iterdir()) == []
    assert (clone / "config" / ".env.test").read_text() == "A=1\n"


def test_an_environment_is_built_once_and_reused_while_its_key_holds(
    git_project: Path, cache_home: Path, bwrap_ok: None
) -> None:
    (git_project / "requirements.txt").write_text("demo==1\n")
    import git

    repo = git.Repo(git_project)
    repo.index.add(["requirements.txt"])
    repo.index.commit("requirements")
    build = "echo run >> .venv/builds && echo $(cat requirements.txt) > .venv/made-from"
    set_config(
        git_project,
        workspace={
            "setup": [build],
            "environment": {"paths": [".venv"], "key": ["requirements*.txt"]},
        },
    )
    agent_without_network(git_project, "1")
    first, second = q.create_task("first").id, q.create_task("second").id
    attempt()
    attempt()
    envs = setup.project_cache(git_project) / "environments"
    (built,) = [p for p in envs.iterdir() if not p.name.startswith(".")]
    assert (built / ".venv" / "builds").read_text() == "run\n"  # the second one reused it
    assert "set-up skipped: its environment" in q.get_task_notes(second)
    assert "set-up $" in q.get_task_notes(first)
    # A branch with an agent's commit that changes the key builds for itself alone.
    commit_on_branch(git_project, second, {"requirements.txt": b"demo==2\n"}, "bump")
    q.reject_completion(second, "again", "reviewer")
    attempt()
    assert "set-up $" in q.get_task_notes(second).rsplit("## Attempt 2", 1)[1]
    assert [p.name for p in envs.iterdir() if not p.name.startswith(".")] == [built.name]
    assert (built / ".venv" / "builds").read_text() == "run\n"


def test_two_port_ranges_held_at_once_never_overlap() -> None:
    first, second = ports.reserve(10), ports.reserve(10)
    try:
        assert not set(range(first.first, first.last + 1)) & set(
            range(second.first, second.last + 1)
        )
        assert first.env()["OCTOPOID_PORTS"] == f"{first.first}-{first.first + 9}"
    finally:
        first.release()
        second.release()
    again = ports.reserve(10, first.first, first.last)  # released: free again
    again.release()


def test_workspace_names_are_checked_when_the_config_is_read(git_project: Path) -> None:
    from orchestrator.model.exceptions import ConfigError

    for bad, said in [
        ({"caches": ["node_modules"]}, "neither a known name"),
        ({"copy": ["../secrets"]}, "must be a path inside the project"),
        ({"copy": [".git/config"]}, "inside .git"),
        ({"environment": {"paths": [".venv"]}}, "no workspace.setup builds them"),
        ({"services": [{"name": "db"}]}, "missing key 'workspace.services[0].command'"),
    ]:
        set_config(git_project, workspace=bad)
        with pytest.raises(ConfigError, match=re.escape(said)):
            config.load_config()
    assert os.environ.get("OCTOPOID_ROOT")

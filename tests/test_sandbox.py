"""The sandbox's parts: the bwrap command line, a real box's walls, the clone read back as
data, the environment a box gets, and whether agents may start at all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import git
import pytest

from orchestrator import box as sandbox
from orchestrator import config
from orchestrator.box import bwrap as walls
from orchestrator.box import clone
from orchestrator.box.bounds import Bounds
from orchestrator.box.box import environment
from orchestrator.box.bwrap import Mounts, command_line
from orchestrator.daemon.scheduler import Scheduler
from orchestrator.faces import doctor
from orchestrator.model.exceptions import GitError
from orchestrator.queue import machine as q

from .support import (
    child_env,
    logged_tool,
    run_claimed,
    set_config,
    wait_for,
    write_agents,
)
from .support.walls import in_box


def test_binds_land_after_the_tmpfs_that_hides_their_parent() -> None:
    tool = Path("/root/.pyenv/versions/3.11.7")
    mounts = Mounts(
        workspace=Path("/srv/proj/.octopoid/runtime/worktrees/TASK-1"),
        inside=Path("/srv/proj"),
        hide=(Path("/srv/proj"), Path("/root")),
        read_only=((tool, tool), (Path("/srv/proj/.git/objects"), Path("/run/octopoid-objects"))),
        network=False,
    )
    argv = command_line("bwrap", mounts, userns=True)
    assert argv[-3:] == ["--chdir", "/srv/proj", "--"]
    assert {"--unshare-net", "--unshare-user", "--disable-userns", "--die-with-parent"} <= set(argv)
    assert argv[argv.index("--cap-drop") + 1] == "ALL"

    def at(*op: str) -> int:
        return next(i for i in range(len(argv)) if argv[i : i + len(op)] == list(op))

    assert (
        at("--ro-bind", "/", "/") < at("--tmpfs", "/root") < at("--ro-bind", str(tool), str(tool))
    )
    assert at("--tmpfs", "/run") < at(
        "--ro-bind", "/srv/proj/.git/objects", "/run/octopoid-objects"
    )
    assert at("--tmpfs", "/srv/proj") < at("--bind", str(mounts.workspace), "/srv/proj")
    assert "--unshare-net" not in command_line("bwrap", Mounts(Path("/w"), Path("/w")), False)


def test_the_box_environment_carries_no_octopoid_secret_or_path(project: Path) -> None:
    host = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "OCTOPOID_ROOT": "/srv/proj",
        "OCTOPOID_DATABASE_URL": "postgresql://o:pw@db/q",
        "OCTOPOID_CLAIM_TOKEN": "tok",
        "PGPASSWORD": "pw",
        "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
        "TMPDIR": "/home/me/tmp",
    }
    task = q.create_task("seven")
    env = environment(host, {"MY_KEY": "k"}, task, "tok", {"OCTOPOID_WORKTREE": "/srv/proj"}, True)
    assert not {"OCTOPOID_ROOT", "OCTOPOID_DATABASE_URL", "PGPASSWORD", "SSH_AUTH_SOCK"} & set(env)
    assert "tok" not in env.values() and env["OCTOPOID_CLAIM_MARK"] != "tok"
    assert env["MY_KEY"] == "k" and env["TMPDIR"] == "/tmp" and env["OCTOPOID_TASK_ID"] == "TASK-1"
    assert env["GIT_COMMITTER_EMAIL"] == "TASK-1@agents.octopoid.invalid"
    trusted = environment(host, {}, task, "tok", {}, False)
    assert trusted["SSH_AUTH_SOCK"] == host["SSH_AUTH_SOCK"]  # sandbox: none hides nothing
    assert "OCTOPOID_DATABASE_URL" not in trusted


PROBE = r"""
import os, socket, subprocess, sys
root, runtime, home, runner = sys.argv[1:5]
def attempt(what, fn):
    try:
        fn()
        print("CAN", what)
    except Exception as exc:
        print("CANNOT", what, type(exc).__name__)
attempt("list-runtime", lambda: os.listdir(runtime))
attempt("read-home", lambda: os.listdir(os.path.join(home, ".ssh")))
attempt("read-users-git", lambda: open(os.path.join(root, ".git", "users-own")).read())
attempt("write-etc", lambda: open("/etc/octopoid-was-here", "w"))
attempt("write-own-tmp", lambda: open("/tmp/octopoid-probe-marker", "w").write("x"))
attempt("signal-runner", lambda: os.kill(int(runner), 0))
attempt("write-workspace", lambda: open("probe.txt", "w").write("x"))
attempt("reach-network", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[5])), 2))
subprocess.Popen(["setsid", "sleep", "31337"])
print("PROCESSES", len([p for p in os.listdir("/proc") if p.isdigit()]))
"""


def test_a_box_sees_only_its_workspace_and_leaves_nothing_running(
    git_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ok: None
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_test").write_text("PRIVATE")
    monkeypatch.setenv("HOME", str(home))
    listener = __import__("socket").create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    runtime = config.get_orchestrator_dir()
    (git_project / ".git" / "users-own").write_text("the user's, not the clone's")
    argv = [
        sys.executable,
        "-c",
        PROBE,
        str(git_project),
        str(runtime),
        str(home),
        str(os.getpid()),
    ]
    write_agents(git_project, argv=[*argv, str(port)])
    doc = (git_project / ".octopoid/agents.yaml").read_text()
    (git_project / ".octopoid/agents.yaml").write_text(
        doc.replace("  role: implement", "  role: implement\n  sandbox: {network: none}")
    )
    tid = q.create_task("probe the walls").id
    run_claimed(q.claim_task(None, "impl-1"), "impl-1")
    listener.close()
    notes = q.get_task_notes(tid)
    for what in ("list-runtime", "read-home", "read-users-git", "write-etc"):
        assert f"CANNOT {what}" in notes, notes
    assert "CAN write-own-tmp" in notes  # a /tmp of its own, gone with the box
    assert "CANNOT signal-runner ProcessLookupError" in notes  # not even in its PID namespace
    assert "CANNOT reach-network" in notes and "CAN write-workspace" in notes
    assert int(notes.split("PROCESSES ", 1)[1].split()[0]) < 10  # its own, not the host's
    assert not Path("/tmp/octopoid-probe-marker").exists()
    assert not Path("/etc/octopoid-was-here").exists()
    running = subprocess.run(["pgrep", "-f", "sleep 31337"], capture_output=True, text=True)
    assert running.stdout == ""  # its daemon died with the box


def test_an_agent_program_in_dev_shm_runs_in_its_box(git_project: Path, bwrap_ok: None) -> None:
    """A box's /dev is its own: a program kept under /dev/shm (a tmpfs, where the suite
    keeps its files) is bound in as one under /tmp is, not missing there."""
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no /dev/shm here")
    folder = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        program = folder / "agent"
        program.write_text(f"#!{sys.executable}\nprint('the agent ran in its box')\n")
        program.chmod(0o755)
        write_agents(git_project, argv=[str(program)])
        tid = q.create_task("run from /dev/shm").id
        run_claimed(q.claim_task(None, "impl-1"), "impl-1")
        assert "the agent ran in its box" in q.get_task_notes(tid)
    finally:
        shutil.rmtree(folder)


def hostile_clone(git_project: Path, tmp_path: Path) -> tuple[git.Repo, Path, Path]:
    """A task clone whose agent made every hostile change it could to its own .git."""
    repo = git.Repo(git_project)
    repo.git.branch("agent/TASK-1", "main")
    dest = config.get_worktrees_dir() / "TASK-1"
    clone.make(repo, "1", "main", repo.commit("main").hexsha, dest)
    marker = tmp_path / "ran-on-the-host"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {marker}\n")
    evil.chmod(0o755)
    in_box(
        repo,
        dest,
        "echo 'agent work' > feature.txt && git add feature.txt && git commit -qm 'agent work'"
        f" && git config core.fsmonitor {evil} && git config uploadpack.packObjectsHook {evil}"
        f" && git config core.hooksPath {tmp_path} && mkdir -p .git/hooks"
        f" && for h in pre-upload-pack post-checkout reference-transaction;"
        f" do ln -s {evil} .git/hooks/$h; done",
    )
    return repo, dest, marker


def test_the_clone_comes_back_as_data_whatever_its_config_says(
    git_project: Path, tmp_path: Path, bwrap_ok: None
) -> None:
    repo, dest, marker = hostile_clone(git_project, tmp_path)
    expected = in_box(repo, dest, "git rev-parse refs/heads/agent/TASK-1")
    bwrap, userns = walls.find_bwrap(), walls.probe()[1]
    box = Mounts(dest, dest, (git_project,), clone.object_mounts(repo), False, False)
    bounds = Bounds.of(config.load_config())
    sha = clone.read_back(repo, "1", dest, command_line(bwrap, box, userns), bounds)
    assert sha == expected and repo.commit(sha).message.strip() == "agent work"
    assert not marker.exists()  # nothing of the clone's config or hooks ran here
    assert "refs/octopoid/fetched/TASK-1" not in repo.git.for_each_ref()
    in_box(repo, dest, "git update-ref -d refs/heads/agent/TASK-1")  # the agent deleted it
    with pytest.raises(GitError, match="reading agent/TASK-1 back"):
        clone.read_back(repo, "1", dest, command_line(bwrap, box, userns), bounds)


def test_the_clone_reads_history_through_the_users_objects_read_only(
    git_project: Path, bwrap_ok: None
) -> None:
    repo = git.Repo(git_project)
    repo.git.branch("agent/TASK-1", "main")
    dest = config.get_worktrees_dir() / "TASK-1"
    clone.make(repo, "1", "main", repo.commit("main").hexsha, dest)
    alternates = (dest / ".git/objects/info/alternates").read_text()
    assert alternates.strip() == str(walls.OBJECTS_INSIDE)
    assert not any((dest / ".git/objects/pack").iterdir())  # nothing was copied
    assert clone.head_of(dest) == "refs/heads/agent/TASK-1"
    (dest / ".git" / "HEAD").unlink()
    (dest / ".git" / "HEAD").symlink_to(git_project / ".git" / "HEAD")
    assert clone.head_of(dest) is None  # a link is not followed out


def test_agents_do_not_start_where_bwrap_cannot_run(
    git_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(walls.BWRAP_ENV, "/nonexistent/bwrap")
    write_agents(git_project)
    tid = q.create_task("t").id
    sched = Scheduler()
    sched.initialize()
    try:
        report = sched.loop_once()
    finally:
        sched.shutdown(grace=0)
    assert report.skipped.startswith("sandbox unavailable: /nonexistent/bwrap is not installed")
    assert report.started == [] and q.get_store().locate(tid).value == "incoming"
    described = sandbox.describe()
    assert not described["usable"] and "`sandbox: none`" in described["summary"]
    assert any("sandbox unavailable" in line for line in doctor.examine())
    set_config(git_project, sandbox="none")
    assert sandbox.problem() is None
    assert "agents are NOT sandboxed" in sandbox.describe()["summary"]
    assert any("NOT sandboxed" in line for line in doctor.examine())


def test_a_probe_started_ahead_is_under_way_meanwhile_and_is_the_one_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ok: None
) -> None:
    """`octopoid doctor` starts bwrap's probe before reading the queue: the call returns
    while the probe's box is still starting, and the answer asked for later is that
    probe's, made now (one box, not two)."""
    log, go = tmp_path / "calls", tmp_path / "go"
    monkeypatch.setenv(walls.BWRAP_ENV, str(logged_tool(tmp_path, "bwrap", log, hold=go)))
    walls.probe_ahead()
    wait_for("the probe's box to start", log.exists)  # held there: this thread went on
    go.touch()
    assert walls.probe()[0] is None
    assert len(log.read_text().splitlines()) == 1


LEAVER = r"""
import time
from orchestrator import config, box as sandbox
from orchestrator.queue import machine as q
task = q.claim_task(None, "impl-1")
space = sandbox.prepare(task, {}, config.load_config(), "a-token", [])
with sandbox.checks_box(task) as box:
    print(task.id, space.channel_host, box.cwd, flush=True)
    time.sleep(3600)
"""


def test_the_sweep_removes_what_a_killed_runner_left_and_nothing_of_a_live_one(
    git_project: Path, bwrap_ok: None
) -> None:
    q.create_task("left behind")
    runner = subprocess.Popen(
        [sys.executable, "-c", LEAVER],
        env=child_env(git_project),
        stdout=subprocess.PIPE,
        text=True,
    )
    with runner:
        try:
            tid, channel, checks = runner.stdout.readline().split()
            left = [config.get_worktrees_dir() / f"TASK-{tid}", Path(channel), Path(checks)]
            assert sandbox.sweep(lambda task_id: True) == []  # its task runs, its runner lives
            assert all(path.is_dir() for path in left)
        finally:
            runner.kill()
    assert sandbox.sweep(lambda task_id: task_id != tid) == [
        f"removed the clone of TASK-{tid} (its runner is gone)"
    ]
    assert not any(path.exists() for path in left)

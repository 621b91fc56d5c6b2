"""The suite's one package of test support (plain functions; the fixtures live in
conftest.py, where pytest finds them without an import). Here: run the installed CLI or
click in-process, wait until a condition, and build projects, agents and branches. Beside
it, one module an idea: daemon (the daemon, runners and agents as processes), web (the
review page's forms), journals (a split or an accept killed half-way), history (a scripted
queue for stats), walls (a box from outside, leaked secrets), notify (a webhook). No test
module imports another (tests/test_layout.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner, Result

#: The installed console script (beside this interpreter when PATH does not name it).
OCTOPOID = shutil.which("octopoid") or str(Path(sys.executable).with_name("octopoid"))


def octopoid(
    root: Path | None, *args: str | bytes, timeout: float = 240, text: bool = True, **kw
) -> subprocess.CompletedProcess:
    """The installed command in a process of its own, in ``root`` with OCTOPOID_ROOT set to
    it (``root=None``: the caller's ``env``/``cwd``); output captured, as text unless
    ``text=False`` (argv bytes pass as a shell would). ``timeout`` bounds a hang only."""
    if root is not None:
        kw.setdefault("cwd", root)
        kw.setdefault("env", child_env(root))
    if text:
        kw.setdefault("encoding", "utf-8")
    return subprocess.run([OCTOPOID, *args], capture_output=True, timeout=timeout, **kw)


def octopoid_output(root: Path | None, *args: str, code: int = 0, **kw) -> str:
    """What the installed ``octopoid *args`` printed, once it exited with ``code``."""
    done = octopoid(root, *args, **kw)
    assert done.returncode == code, (args, done.stdout, done.stderr)
    return done.stdout


def invoke(*args: str, code: int | None = None, **kw) -> Result:
    """``octopoid *args`` through click's CliRunner in this process (``input``, ``env``
    pass on); with ``code``, assert that exit code and that no traceback was printed."""
    from orchestrator.faces.cli.main import cli

    result = CliRunner().invoke(cli, list(args), **kw)
    if code is not None:
        assert result.exit_code == code, result.output
        assert "Traceback" not in result.output, result.output
    return result


def cli_output(*args: str, code: int = 0, **kw) -> str:
    """What ``octopoid *args`` prints in-process, once it exited with ``code``."""
    return invoke(*args, code=code, **kw).output


HELPERS = Path(__file__).parents[1] / "helpers"  # tests/helpers


def helper_cmd(name: str, *args: str) -> list[str]:
    """argv that runs ``tests/helpers/<name>.py`` with this interpreter."""
    return [sys.executable, str(HELPERS / f"{name}.py"), *args]


def logged_tool(folder: Path, name: str, log: Path, hold: Path | str | None = None) -> Path:
    """``folder/name``: the real ``name`` (as PATH finds it now), each call first written to
    ``log`` as a line ``name ARGS`` (and, with ``hold``, held until a file it names exists:
    a path or a shell pattern, without spaces). Put ``folder`` first on PATH to count the
    processes a command starts."""
    real = shutil.which(name)
    wait = f"until ls -d {hold} >/dev/null 2>&1; do sleep 0.01; done\n" if hold else ""
    wrapper = folder / name
    wrapper.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n{wait}exec {real} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def child_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["OCTOPOID_ROOT"] = str(root)
    return env


def run_all(root: Path, argvs: list[list[str]], timeout: float = 120) -> None:
    """Start every helper at once against ``root`` and wait for all to succeed."""
    procs = [
        subprocess.Popen(argv, env=child_env(root), stdout=subprocess.PIPE, text=True)
        for argv in argvs
    ]
    for proc in procs:
        proc.communicate(timeout=timeout)
        assert proc.returncode == 0


#: How often a test's server thread looks for shutdown(): at socketserver's 0.5 s default,
#: each server stopped cost its test 0.25 s on average, waiting for the loop to notice.
SHUTDOWN_POLL = 0.01


def serve_in_thread(server: socketserver.BaseServer) -> threading.Thread:
    """Serve ``server`` on a daemon thread, started; ``server.shutdown()`` returns at once."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL}, daemon=True
    )
    thread.start()
    return thread


def wait_for(what: str, check: Callable[[], object], timeout: float = 30.0) -> object:
    """Wait until ``check()`` is true (a condition, never a fixed window) and return it;
    past ``timeout`` s fail, saying ``what`` was waited for. It looks again after 5 ms,
    then less often, up to every 50 ms: a condition met soon is seen soon, without
    checking a long wait 200 times a second."""
    deadline, pause = time.monotonic() + timeout, 0.005
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(pause)
        pause = min(pause * 1.5, 0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def settle(sched, timeout: float = 60) -> None:
    """Scheduler passes (in this process) until no runner is left."""

    def passed() -> bool:
        sched.loop_once()
        return not sched.runners

    wait_for("the runners to finish", passed, timeout)


def peak_rss_kib(root: Path, out: Path, *argv: str) -> int:
    """KiB at the peak of ``argv`` and all it ran (its stdout goes to ``out``), measured by
    a fresh small process: a child's peak counts its parent's memory at the fork, so one
    measured from a test worker would be the worker's."""
    done = subprocess.run(
        [sys.executable, str(HELPERS / "peak_rss.py"), str(out), *argv],
        env=child_env(root), cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(done.stdout)


def start_then_kill(root: Path, argv: list[str], delay: float, done: int = 0) -> None:
    """Start a helper, wait until it says ready and then that it did ``done`` pieces of
    work (a line each: a condition, however slow the machine), let it work ``delay`` s
    more, then kill -9 it."""
    proc = subprocess.Popen(argv, env=child_env(root), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    for _ in range(done):
        assert proc.stdout.readline(), "the helper ended before it was killed"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def race_claimers(root: Path, go: Path, n: int = 8, timeout: float = 240) -> list[str]:
    """Start ``n`` claimer processes (tests/helpers/claimer.py) against ``root``, release
    them together, and return each one's output: the ids it claimed, one per line."""
    procs = [
        subprocess.Popen(
            helper_cmd("claimer", f"claimer-{i}", str(go)),
            env=child_env(root),
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    for p in procs:  # every interpreter started and waiting, however slow: then go
        assert p.stdout.readline() == "ready\n"
    go.touch()
    outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outputs


def git(cwd: Path, *args: str) -> str:
    """Run git with an identity of its own, as a person would in a fresh repository."""
    cmd = ["git", "-c", "user.name=T", "-c", "user.email=t@example.invalid", *args]
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_git_repo(root: Path) -> None:
    """A repository on ``main`` with one commit, octopoid's runtime ignored."""
    import git

    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as cfg:
        cfg.set_value("user", "name", "Test User")
        cfg.set_value("user", "email", "test@example.invalid")
    (root / "README.md").write_text("# demo project\n")
    repo.index.add(["README.md"])
    repo.index.commit("initial commit")


def write_agents(
    root: Path, *, argv: list[str] | None = None, env: dict | None = None, **top: object
) -> None:
    """agents.yaml with one command agent running tests/helpers/agent.py (or ``argv``),
    with ``env`` as its own environment."""
    import yaml

    agent = {
        "name": "impl-1",
        "role": "implement",
        "backend": "command",
        "argv": argv or [sys.executable, str(HELPERS / "agent.py")],
        "max_concurrent": int(top.pop("max_concurrent", 1)),
        "timeout_seconds": int(top.pop("timeout_seconds", 60)),
        "max_turns": 10,
        **({"env": env} if env else {}),
    }
    doc = {"lease_seconds": 30, **top, "agents": [agent]}
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))


def set_config(root: Path, **sections: object) -> None:
    """Set top-level keys of the project's config.yaml (``sandbox="none"``, ``checks={...}``),
    keeping the others."""
    import yaml

    path = root / ".octopoid/config.yaml"
    doc = yaml.safe_load(path.read_text()) or {}
    doc.update(sections)
    path.write_text(yaml.safe_dump(doc))


def branch_file(root: Path, task_id: str, path: str) -> str:
    """``path`` as the task's branch holds it (its workspace is gone once the attempt ends)."""
    import git

    return git.Repo(root).git.show(f"agent/TASK-{task_id}:{path}")


def branch_head(root: Path, task_id: str):
    """The tip commit of the task's branch in the user's repository."""
    import git

    return git.Repo(root).commit(f"agent/TASK-{task_id}")


def commit_on_branch(
    root: Path,
    task_id: str,
    files: dict[str, bytes],
    message: str,
    links: dict[str, str] | None = None,
    remove: tuple[str, ...] = (),
) -> None:
    """Commit ``files`` (and symlinks ``links``: path -> target; paths ``remove``d first)
    onto the task's branch, as a later attempt would have (in a scratch worktree: the
    attempt's own clone is gone)."""
    import tempfile

    import git

    repo = git.Repo(root)
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(scratch) / "wt"
        repo.git.worktree("add", "-q", "-f", str(where), f"agent/TASK-{task_id}")
        try:
            for name in remove:
                git.Repo(where).git.rm("-r", "-q", name)
            for name, data in files.items():
                (where / name).parent.mkdir(parents=True, exist_ok=True)
                (where / name).write_bytes(data)
            for name, target in (links or {}).items():
                (where / name).parent.mkdir(parents=True, exist_ok=True)
                (where / name).symlink_to(target)
            wt = git.Repo(where)
            wt.git.add("-A", "-f")
            wt.git.commit("-q", "--allow-empty", "-m", message)
        finally:
            repo.git.worktree("remove", "--force", str(where))


def remembered(task_id: str, text: str, attempt: int = 1, section: str = "Important Facts"):
    """``text`` in the task's working notes as attempt ``attempt``'s channel writes it
    (stamped with the task, attempt and agent); the notes manager."""
    from orchestrator.memory.notes import NotesManager
    from orchestrator.memory.provenance import Origin

    label = f"TASK-{task_id}"
    notes = NotesManager.create_ephemeral(label, "the task")
    notes.add_item(section, text, Origin(label, attempt, "agent"))
    return notes


def prompt_of(task_id: str, attempt: int) -> str:
    """The prompt attempt ``attempt`` of the task was given (kept in its logs)."""
    from orchestrator import config

    path = config.get_logs_dir() / f"TASK-{task_id}" / f"attempt-{attempt}.prompt.md"
    return path.read_text()


def run_claimed(task, agent: str):
    """Run one attempt in this process for a task just claimed, as its runner would."""
    from orchestrator.roles.implementer import run_attempt

    return run_attempt(task.id, agent, task.headers["CLAIM_TOKEN"])


def provisional_with_commit(root: Path, filename: str = "feature.txt", text: str = "new\n") -> str:
    """A task in provisional whose branch has one commit, made and submitted as a runner would
    (the claimed task carries its token: a fenced submit)."""
    import git

    from orchestrator.git import branches
    from orchestrator.queue import machine as q

    created = q.create_task(f"add {filename}")
    task = q.claim_task(None, "agent")
    assert task.id == created.id
    worktree = branches.ensure_worktree(git.Repo(root), task.id, "main")
    (worktree / filename).write_text(text)
    wt = git.Repo(worktree)
    wt.index.add([filename])
    wt.index.commit(f"agent work on {filename}")
    q.save_task_notes(task.id, "agent", "did it", 1, 1)
    q.submit_completion(task, 1, 1)
    return task.id


class Machines:
    """Clones ``a`` and ``b`` of ``origin`` (bare) sharing one PostgreSQL queue, as two
    machines would; ``on(x)`` makes x the current project."""

    def __init__(self, tmp: Path, monkeypatch, dsn: str) -> None:
        import git

        from orchestrator.faces.scaffold import init_project

        seed = tmp / "seed"
        seed.mkdir()
        make_git_repo(seed)
        self.origin = tmp / "origin.git"
        git.Repo.clone_from(seed, self.origin, bare=True)
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("OCTOPOID_DATABASE_URL", dsn)
        monkeypatch.setenv("GIT_AUTHOR_NAME", "Test User")
        monkeypatch.setenv("GIT_AUTHOR_EMAIL", "test@example.invalid")
        monkeypatch.setenv("GIT_COMMITTER_NAME", "Test User")
        monkeypatch.setenv("GIT_COMMITTER_EMAIL", "test@example.invalid")
        self.roots = {}
        for name in ("a", "b"):
            root = tmp / name
            git.Repo.clone_from(self.origin, root)
            init_project(root)
            (root / ".octopoid/config.yaml").write_text("git:\n  remote: origin\n")
            write_agents(root)
            self.roots[name] = root

    def on(self, name: str) -> Path:
        self.monkeypatch.setenv("OCTOPOID_ROOT", str(self.roots[name]))
        self.monkeypatch.chdir(self.roots[name])
        return self.roots[name]

    def remote_branch(self, name: str) -> str | None:
        return self.listed().get(f"refs/heads/{name}")

    def carried(self, task_id: str) -> str | None:
        """The remote's copy of a task's branch, where octopoid carries it."""
        return self.listed().get(f"refs/octopoid/tasks/TASK-{task_id}")

    def listed(self) -> dict[str, str]:
        """Every ref of the remote, as ``git ls-remote`` lists them: {ref: commit}."""
        import git

        out = git.Git().ls_remote(str(self.origin))
        return {ref: sha for sha, ref in (line.split("\t") for line in out.splitlines())}


def attempt(machines: Machines, name: str, task_id: str) -> str:
    """One attempt at ``task_id`` on machine ``name``, in this process: its next state."""
    from orchestrator.queue import machine as q

    machines.on(name)
    claimed = q.claim_task(None, "impl-1")
    assert claimed is not None and claimed.id == task_id
    return run_claimed(claimed, "impl-1").next_state


def exited_pid() -> int:
    """The PID of a process that has already exited (an agent that died)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


PAGE = b"a page of a server on this machine's loopback\n"


@dataclass
class Served:
    port: int
    seen: list[str] = field(default_factory=list)  # the request lines it got


#: Debian's Chromium (apt-get install -y chromium); Playwright's own download is not used.
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",  # as root, Chromium refuses to start with its sandbox
    "--disable-gpu",
    "--disable-background-networking",  # this machine's network is closed
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def require_chromium() -> None:
    """Skip without Debian's Chromium (fail, with OCTOPOID_REQUIRE_BROWSER=1, as in CI).

    A page's expectations then wait for their condition up to 60 s, not Playwright's 5:
    under the whole suite on 2 cores a draft's save has taken longer than 5 s."""
    import pytest

    if not os.path.exists(CHROMIUM):
        if os.environ.get("OCTOPOID_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    from playwright.sync_api import expect

    expect.set_options(timeout=60_000)

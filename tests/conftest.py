"""Shared fixtures: a real project folder per test, found through OCTOPOID_ROOT."""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator.faces.scaffold import init_project

HELPERS = Path(__file__).parent / "helpers"
# The suite starts hundreds of octopoid processes (runners, the CLI, daemons): let them
# keep their bytecode (__pycache__ is git-ignored) instead of compiling octopoid each time.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# The scripted agents and recorded sessions must be readable in their boxes wherever this
# checkout is (under /tmp or /home a box sees nothing of it).
os.environ["OCTOPOID_SANDBOX_EXPOSE"] = str(HELPERS.parent)


@pytest.fixture(autouse=True)
def _no_hidden_secrets_between_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner run in-process adds its agent's env to redaction; tests must not share it."""
    from orchestrator.base import redaction

    monkeypatch.setattr(redaction, "_ALSO_HIDDEN", {})


@pytest.fixture(autouse=True)
def _no_process_left_behind(tmp_path_factory: pytest.TempPathFactory):
    """A test fails if a process it started outlives it: a child of this process, or
    anything working in this session's projects (runners and agents in sessions of their
    own), that was not there when it began. Processes on their way out get a while to go
    (a condition, not a window); what is left is named, then killed so it cannot disturb
    the next test."""
    base = str(tmp_path_factory.getbasetemp())
    before = set(
        _left_behind(base)
    )  # a wider fixture's (the browser, a server) are not this test's
    yield
    deadline = time.monotonic() + 30
    while (left := {p: c for p, c in _left_behind(base).items() if p not in before}) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


#: GitPython keeps a `git cat-file --batch` per open Repo of this process (not a leak).
GITPYTHON_HELPER = b"git cat-file --batch"


def _left_behind(base: str) -> dict[int, str]:
    """Live processes (not zombies) that are children of this one or carry a project of
    this session in OCTOPOID_ROOT; pid -> command line."""
    needle = f"OCTOPOID_ROOT={base}".encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            ours = int(ppid) == os.getpid() or any(
                var.startswith(needle)
                for var in Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            )
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
            if ours and state != "Z" and not cmd.startswith(GITPYTHON_HELPER):
                found[int(name)] = cmd.decode(errors="replace")[:200]
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An initialised octopoid project in a temp dir; every API call below uses it."""
    root = tmp_path / "proj"
    root.mkdir()
    init_project(root)
    monkeypatch.setenv("OCTOPOID_ROOT", str(root))
    monkeypatch.chdir(root)
    return root


def helper_cmd(name: str, *args: str) -> list[str]:
    """argv that runs ``tests/helpers/<name>.py`` with this interpreter."""
    return [sys.executable, str(HELPERS / f"{name}.py"), *args]


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


def wait_for(what: str, check: Callable[[], object], timeout: float = 30.0) -> object:
    """Wait until ``check()`` is true (a condition, never a fixed window) and return it;
    past ``timeout`` s fail, saying ``what`` was waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


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
    time.sleep(0.5)  # let every interpreter start, then release them together
    go.touch()
    outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outputs


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


@pytest.fixture
def git_project(project: Path) -> Path:
    """``project`` that is also a git repository with a first commit on main."""
    make_git_repo(project)
    return project


@pytest.fixture
def web(git_project: Path):
    """`octopoid web` serving ``git_project`` (with the scripted command agent)."""
    from .web_server import start_web  # it imports this module

    write_agents(git_project)
    server = start_web(git_project)
    yield server
    server.stop()


@pytest.fixture
def client(web):
    """A plain HTTP client signed in to ``web``."""
    return web.client()


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


def run_claimed(task, agent: str):
    """Run one attempt in this process for a task just claimed, as its runner would."""
    from orchestrator.roles.implementer import run_attempt

    return run_attempt(task.id, agent, task.headers["CLAIM_TOKEN"])


def exited_pid() -> int:
    """The PID of a process that has already exited (an agent that died)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


@pytest.fixture
def bwrap_ok() -> None:
    """bubblewrap can make a box here. Without it the tests using it skip, unless
    OCTOPOID_REQUIRE_BWRAP=1 (CI) fails them."""
    from orchestrator.box.bwrap import probe

    problem, _ = probe()
    if problem is not None:
        if os.environ.get("OCTOPOID_REQUIRE_BWRAP") == "1":
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(scope="session")
def pg_server():
    """One throwaway PostgreSQL server for the session (tests/pg_server.py). Without the
    binaries the tests using it skip, unless OCTOPOID_REQUIRE_POSTGRES=1 (CI) fails them."""
    from .pg_server import PgServer, find_bin

    if find_bin("initdb") is None or find_bin("pg_ctl") is None:
        if os.environ.get("OCTOPOID_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL's initdb is not installed (apt-get install postgresql)")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    server = PgServer()
    server.start()
    yield server
    server.stop()


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def pg_dsn(pg_server) -> str:
    """A new empty database on the session's server, for this test alone."""
    return pg_server.create_database(f"t{os.getpid()}_{next(_databases)}")


PAGE = b"a page of a server on this machine's loopback\n"


class _Page(http.server.BaseHTTPRequestHandler):
    """Answers every GET with PAGE (``X-Size: n``: n bytes instead), keeps its request line,
    and says in ``X-Seen`` what request line and proxy credentials it got."""

    def do_GET(self) -> None:
        self.server.seen.append(self.requestline)
        size = int(self.headers.get("X-Size", "0"))
        body = b"x" * size if size else PAGE
        self.send_response(200)
        self.send_header("X-Seen", f"{self.requestline} {self.headers.get('Proxy-Authorization')}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class Served:
    port: int
    seen: list[str] = field(default_factory=list)  # the request lines it got


@pytest.fixture
def loopback_servers():
    """Two HTTP servers on this machine's 127.0.0.1 (what a box must not reach unless its
    list names it), each keeping the request lines it got."""
    started = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page) for _ in range(2)]
    served = []
    for server in started:
        server.seen = []
        served.append(Served(server.server_address[1], server.seen))
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served
    for server in started:
        server.shutdown()
        server.server_close()

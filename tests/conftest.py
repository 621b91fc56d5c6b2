"""The suite's fixtures (pytest finds them here; plain helpers live in tests/support/): a
real project folder per test, found through OCTOPOID_ROOT, one PostgreSQL server a worker
and one Chromium a module; every test fails if it leaves a process behind."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from orchestrator.faces.scaffold import init_project

from .support import (
    ARGS,
    CHROMIUM,
    HELPERS,
    PAGE,
    Machines,
    Served,
    make_git_repo,
    require_chromium,
    serve_in_thread,
    write_agents,
)

#: The forge tests' fixtures (``github_forge``/``gitlab_forge``, ``forge``, ``forged``), found
#: by every test module without an import.
pytest_plugins = ["tests.forge_fakes.fixtures", "tests.forge_driver"]

# The suite starts hundreds of octopoid processes (runners, the CLI, daemons): let them
# keep their bytecode (__pycache__ is git-ignored) instead of compiling octopoid each time.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# The scripted agents and recorded sessions must be readable in their boxes wherever this
# checkout is (under /tmp or /home a box sees nothing of it).
os.environ["OCTOPOID_SANDBOX_EXPOSE"] = str(HELPERS.parent)
# Every test's files in memory where there is a tmpfs (unless TMPDIR says where): a project
# fsyncs each file it writes, 2-5 ms apiece on this machine's disk, ~0.03 ms on tmpfs. Set
# before pytest makes its base folder, and inherited by every process a test starts.
if "TMPDIR" not in os.environ and os.access("/dev/shm", os.W_OK | os.X_OK):
    os.environ["TMPDIR"] = "/dev/shm"
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker a core and one more. The suite mostly waits on the real
    processes it starts (daemons, runners, agents, git, bwrap), so on two cores a third
    worker fills the waits: 413 s against 477-508 s with two, the same code (README). The
    cores are those this process may run on (a container's or ``taskset``'s), as xdist counts."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return cores + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (a stable sort: each file's order holds). xdist hands tests
    out in this order, so a long one never starts near the end, keeping one worker busy
    while the other has nothing left to do."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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


#: pid -> whether it is ours, for every live process seen that is not: that verdict holds
#: while the process lives (a stranger never becomes a child; an environment is fixed at
#: exec), so a scan reads only the processes it has not seen, and checks ours afresh. A pid
#: gone from /proc is forgotten; all are when the kernel's pid numbers wrap around (its
#: last pid goes down), as a pid may then name another process.
_verdicts: dict[int, bool] = {}
_last_pid = 0


def _left_behind(base: str) -> dict[int, str]:
    """Live processes (not zombies) that are children of this one or carry a project of
    this session in OCTOPOID_ROOT; pid -> command line."""
    global _verdicts, _last_pid
    needle, me = f"OCTOPOID_ROOT={base}/".encode(), os.getpid()  # not pytest-50 for pytest-5
    last = int(Path("/proc/loadavg").read_text().split()[-1])
    if last < _last_pid:
        _verdicts = {}
    _last_pid = last
    pids = {int(name) for name in os.listdir("/proc") if name.isdigit()} - {me}
    _verdicts = {pid: _verdicts[pid] for pid in pids & _verdicts.keys()}
    found = {}
    for pid in pids - _verdicts.keys():
        try:
            state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
            ours = int(ppid) == me or _carries(pid, needle)
            if not ours:
                _verdicts[pid] = False
                continue
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            if state != "Z" and not cmd.startswith(GITPYTHON_HELPER):
                found[pid] = cmd.decode(errors="replace")[:200]
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return found


def _carries(pid: int, needle: bytes) -> bool:
    """Whether the process's environment has ``needle`` (False if it may not be read)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(var.startswith(needle) for var in environ)


@pytest.fixture(scope="session")
def _templates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Built once a worker and copied per test: an initialised project's ``.octopoid``
    (without the queue's claim index, which ``init_project`` then makes in place), and a
    git repository with its first commit (``make_git_repo``). A copy is what building
    would leave, at a tenth of the cost (a project fsyncs every file it writes)."""
    made = tmp_path_factory.mktemp("templates")
    init_project(made / "project")
    for index in (made / "project/.octopoid/runtime/queue").glob(".claim-index*"):
        index.unlink()
    (made / "git").mkdir()
    make_git_repo(made / "git")
    return made / "project/.octopoid", made / "git"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _templates) -> Path:
    """An initialised octopoid project in a temp dir; every API call below uses it."""
    root = tmp_path / "proj"
    shutil.copytree(_templates[0], root / ".octopoid", symlinks=True)
    init_project(root)
    monkeypatch.setenv("OCTOPOID_ROOT", str(root))
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def git_project(project: Path, _templates) -> Path:
    """``project`` that is also a git repository with a first commit on main."""
    shutil.copytree(_templates[1], project, symlinks=True, dirs_exist_ok=True)
    return project


@pytest.fixture
def agent_project(git_project: Path) -> Path:
    """``git_project`` with the scripted agents of ``write_agents``."""
    write_agents(git_project)
    return git_project


@pytest.fixture
def web(agent_project: Path):
    """`octopoid web`'s server for ``git_project`` (with the scripted command agent), on a
    thread of this process (``start_web`` runs the command as a process of its own)."""
    from .web_server import serve_here  # it imports this module

    server = serve_here(agent_project)
    yield server
    server.stop()


@pytest.fixture
def client(web):
    """A plain HTTP client signed in to ``web``."""
    return web.client()


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


#: The real claude CLI, from npm into a project-local folder (`.ci/run` puts it there first).
CLAUDE_PACKAGE = "@anthropic-ai/claude-code@2.1.197"
CLAUDE_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "claude-code"


@pytest.fixture(scope="session")
def claude_cli() -> Path:
    """The real claude executable, installed from npm into .cache/claude-code if missing."""
    exe = CLAUDE_CACHE / "node_modules" / ".bin" / "claude"
    if exe.exists():
        return exe
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed, so the real claude CLI cannot be installed")
    done = subprocess.run(
        [npm, "install", "--prefix", str(CLAUDE_CACHE), "--no-audit", "--no-fund", CLAUDE_PACKAGE],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and exe.exists(), f"npm install failed:\n{done.stderr[-2000:]}"
    return exe


@pytest.fixture
def loop(git_project: Path, tmp_path: Path):
    """A repo with a command agent; yields a function that starts the daemon on it."""
    from orchestrator.base.processes import marked_processes

    from .support.daemon import Daemon, agent_runs

    runs = tmp_path / "runs.txt"
    runs.touch()
    write_agents(
        git_project, max_concurrent=3, max_claimed=6, lease_seconds=3, shutdown_grace_seconds=1
    )
    daemons: list[Daemon] = []

    def start(**env: str) -> Daemon:
        daemons.append(Daemon(git_project, runs, env))
        return daemons[-1]

    start.runs = agent_runs
    yield start
    for d in daemons:
        if d.proc.poll() is None:
            d.stop(signal.SIGKILL)
    for pid in marked_processes(OCTOPOID_ROOT=str(git_project)):  # runners outlive a daemon
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def sched(git_project: Path):
    """Makes in-process schedulers on ``git_project`` (two agent slots), shut down after."""
    from orchestrator.daemon import scheduler

    write_agents(git_project, max_concurrent=2)
    made = []

    def start() -> scheduler.Scheduler:
        made.append(scheduler.Scheduler())
        made[-1].initialize()
        return made[-1]

    yield start
    for s in made:
        if s._lock_fd is not None:
            s.shutdown(grace=5)


@pytest.fixture
def hook():
    """A webhook on 127.0.0.1 recording the alerts posted to it (tests/support/notify.py)."""
    from .support.notify import Hook

    hook = Hook()
    yield hook
    hook.hold.set()
    hook.server.shutdown()


@pytest.fixture
def served(project: Path, tmp_path: Path):
    """A claimed task (another waits beside it) and its channel, served from this process."""
    from orchestrator.box import channel
    from orchestrator.box.box import SOCKET_NAME
    from orchestrator.queue import machine as q
    from orchestrator.roles.tools import AttemptTools

    other = q.create_task("someone else's task", role="review", context="OTHER-SECRET")
    q.save_task_notes(other.id, "agent", "OTHER-NOTES", 0, 0)
    q.create_task("mine", context="my context")
    mine = q.claim_task("implement", "agent", lease_seconds=600)
    folder = tmp_path / "chan"
    folder.mkdir()
    tools = AttemptTools(mine.id, mine.attempts)
    server = channel.ChannelServer(folder, tools).start()
    server.attempt_tools = tools  # what the runner reads back: the latest progress line
    yield str(folder / SOCKET_NAME), mine, other, server
    server.close()


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


@pytest.fixture(params=["folder", "postgres"])
def store_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs twice: on the folder store, and with the queue in PostgreSQL."""
    if request.param == "postgres":
        monkeypatch.setenv("OCTOPOID_DATABASE_URL", request.getfixturevalue("pg_dsn"))
    return request.param


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def pg_dsn(pg_server):
    """A new empty database on the session's server, for this test alone."""
    name = f"t{os.getpid()}_{next(_databases)}"
    yield pg_server.create_database(name)
    pg_server.drop_database(name)


@pytest.fixture
def machines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> Machines:
    """Machines a and b: two clones of one remote, each a project on one PostgreSQL."""
    return Machines(tmp_path, monkeypatch, pg_dsn)


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


@pytest.fixture
def loopback_servers():
    """Two HTTP servers on this machine's 127.0.0.1 (what a box must not reach unless its
    list names it), each keeping the request lines it got."""
    started = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page) for _ in range(2)]
    served = []
    for server in started:
        server.seen = []
        served.append(Served(server.server_address[1], server.seen))
        serve_in_thread(server)
    yield served
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def playwright_chromium():
    """Playwright's Chromium launcher for a module. Not for the session: its sync API keeps
    an event loop running in this thread until it stops, and every later asyncio.run of
    the worker (the MCP and web tests) would then be refused."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        yield pw.chromium


@pytest.fixture(scope="module")
def browser(playwright_chromium):
    """One headless Chromium a module; each test opens its own context (its own cookies
    and pages), so sharing the browser shares no state between tests."""
    chromium = playwright_chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
    yield chromium
    chromium.close()


@pytest.fixture(params=["sqlite", "postgres"])
def memory_store(project: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """The project's long-term memory, once on each kind: its SQLite file and PostgreSQL."""
    from orchestrator.memory.open import open_memory

    if request.param == "postgres":
        monkeypatch.setenv("OCTOPOID_DATABASE_URL", request.getfixturevalue("pg_dsn"))
    store = open_memory()
    kind = {"sqlite": "MemoryStore", "postgres": "PostgresMemoryStore"}[request.param]
    assert type(store).__name__ == kind
    yield store
    store.close()

"""CLI start-up: each command imports only what it uses; runners reuse their bytecode.

Whole processes, as a user runs them; what a command imported is read from ``sys.modules``
when it ends (a lazy module not yet used does not count). Timings are the benchmark's
(scripts/bench_startup.py), never asserted here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.base import bytecode
from orchestrator.base.patterns import LazyPattern

from .support import logged_tool, write_agents

#: Run a command in-process, then print its exit code, the modules it really loaded, and of
#: octopoid's loaded modules the patterns compiled and the frozen dataclasses built (by
#: ``type()``: ``isinstance`` would read ``__class__`` and run a lazy module's body).
PROBE = """
import json, re, sys
from orchestrator.faces.cli.main import main
from orchestrator.base.lazy import is_loaded
from orchestrator.base.patterns import LazyPattern
sys.argv = ["octopoid", *sys.argv[1:]]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code or 0
loaded = [n for n, m in list(sys.modules.items()) if is_loaded(m)]
ours = [m for n, m in list(sys.modules.items()) if n.startswith("orchestrator") and is_loaded(m)]
def compiled(value):
    if type(value) is tuple:
        return any(compiled(v) for v in value)
    return type(value) is re.Pattern or (type(value) is LazyPattern and "compiled" in vars(value))
def frozen(value, module):
    params = vars(value).get("__dataclass_params__") if type(value) is type else None
    return params is not None and params.frozen and value.__module__ == module.__name__
def named(test):
    return [f"{m.__name__}.{a}" for m in ours for a, v in list(vars(m).items()) if test(v, m)]
found = {
    "code": code,
    "loaded": loaded,
    "compiled": named(lambda value, _: compiled(value)),
    "frozen": named(frozen),
}
print(json.dumps(found), file=sys.stderr)
"""
HEAVY = {
    "PyYAML": "yaml",
    "GitPython": "git",
    "importlib.metadata": "importlib.metadata",
    "the store": "orchestrator.queue.store",
    "the backends": "orchestrator.backends",
    "the scheduler": "orchestrator.daemon.scheduler",
    "the redaction": "orchestrator.base.redaction",
    "secrets": "secrets",  # hmac and OpenSSL: a temp file's or a claim's random name
    "the state machine": "orchestrator.queue.machine",  # the moves: readers need none
    "the roles": "orchestrator.roles",  # what an attempt does: a pause is a record
    "git machinery": "orchestrator.git",  # merge checks: none with nothing in review
    "the network policy": "orchestrator.base.netpolicy",  # config: for allow entries only
    "shutil": "shutil",  # and bz2, lzma: removing a tree, never writing a file
    "the verdicts": "orchestrator.review.verdicts",  # accept, reject, prune: no reader's
    "retry notes": "orchestrator.queue.task_notes",  # `memory show` reads working notes
    "working notes": "orchestrator.memory",  # `notes` reads retry notes
    "ctypes": "ctypes",  # prctl, for a process a command starts: readers start none
    "logging": "logging",  # the daemon's log, a journal step's failure: no command's answer
    "random": "random",  # a record's update that lost a race waits a random while
    "the memory index": "orchestrator.memory.store",  # SQLite: search, promotion
    "hashlib": "hashlib",  # OpenSSL: a note's content hash, when one is written or looked up
    "importlib.resources": "importlib.resources",  # zipfile, tempfile: init's templates
    "the budgets": "orchestrator.queue.budgets",  # a task's own limits; the stalls' spend
}
#: What no command that only reads the queue has a use for. PyYAML: config.yaml's parse
#: is the user cache's (base/usercache.py) once any command has read it unchanged.
WRITERS_ONLY = {
    "importlib.metadata",
    "the scheduler",
    "the redaction",
    "secrets",
    "PyYAML",
    "logging",
    "random",
}
#: What no command that reads the queue without moving a task has a use for.
READ_ONLY = {"GitPython", "the backends", "the state machine", "the network policy", "ctypes"}
#: What each command may not import: it has no use for it.
NOT_NEEDED = {
    ("--help",): set(HEAVY) - {"shutil"},  # click's help measures the terminal with it
    ("--version",): set(HEAVY),  # the version is the package's, not importlib.metadata's
    ("web", "--help"): set(HEAVY) - {"shutil"},
    ("scheduler", "status"): set(HEAVY),
    ("memory", "show", "TASK-1"): set(HEAVY) - {"working notes"},
    ("memory", "show", "TASK-2"): set(HEAVY) - {"the store", "working notes"},  # a task?
    ("memory", "search", "fact"): set(HEAVY) - {"working notes", "the memory index"},
    ("pause",): set(HEAVY) - {"the store"},  # a record written, no move
    ("resume",): set(HEAVY) - {"the store"},
    ("notes", "TASK-1"): set(HEAVY) - {"retry notes"},
    ("notes", "TASK-2"): set(HEAVY) - {"the store", "retry notes"},  # a task at all?
    ("list",): WRITERS_ONLY | READ_ONLY | {"git machinery", "shutil"},
    # its branch's head through one git call: no merge machinery, no move
    # its pending learnings from the task's notes file: no memory index
    ("show", "TASK-1"): WRITERS_ONLY | READ_ONLY | {"the verdicts", "shutil", "the memory index"},
    ("diff", "TASK-1"): WRITERS_ONLY | READ_ONLY | {"the verdicts", "shutil"},  # one git diff
    ("worktrees",): WRITERS_ONLY | READ_ONLY | {"the verdicts", "git machinery", "shutil"},
    # These ask whether `claude` is on PATH (not here: a stall, with config's install hint,
    # not the backend's), and say whose network is open (its mode's name, not the policy).
    ("status",): WRITERS_ONLY | READ_ONLY | {"git machinery"},
    ("agents",): WRITERS_ONLY | READ_ONLY,
    # the checkout's branch through git, and the sandbox's summary: no task is created
    ("init",): (WRITERS_ONLY - {"PyYAML"}) | READ_ONLY | {"the verdicts", "importlib.resources"},
    # CI files (GitPython, PyYAML) for a forge's project only
    ("doctor",): WRITERS_ONLY | {"GitPython", "git machinery", "ctypes", "the backends"},
    # No check configured: the merge pre-check alone, git as plain processes, and no box.
    ("checks", "TASK-1"): set(HEAVY)
    - {"the store", "git machinery", "the roles", "random"},  # roles.checks: recheck
    ("enqueue", "a task"): {
        "importlib.metadata",
        "the backends",
        "the scheduler",
        "GitPython",
        "the network policy",
        "secrets",  # a temp file's name is os.urandom's, as secrets' is
        "the verdicts",
        "logging",
        "random",
        "the budgets",  # the task has none of its own
    },
}


def _env(root: Path) -> dict[str, str]:
    """The environment a command runs in: a user cache of the project's own, beside it, so
    no other test's project can take its parse cache's slot (``base/usercache.py``) and make
    a command parse ``config.yaml`` with PyYAML again."""
    env = {k: v for k, v in os.environ.items() if k != "OCTOPOID_ROOT"}
    return {**env, "XDG_CACHE_HOME": str(root.parent / f"{root.name}-cache")}


def _probe(root: Path, args: tuple[str, ...]) -> dict[str, list[str]]:
    """What the command imported, compiled and built, once it has succeeded (a failure may
    stop short of them)."""
    env = _env(root)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=root, env=env, capture_output=True, text=True
    )
    found = json.loads(done.stderr.strip().splitlines()[-1])
    assert found["code"] == 0, done.stderr
    return found


def _loaded(root: Path, args: tuple[str, ...]) -> set[str]:
    return set(_probe(root, args)["loaded"])


@pytest.fixture(scope="module")
def startup_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("startup")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "start"], cwd=root, check=True)
    octopoid = [sys.executable, "-m", "orchestrator.faces.cli.main"]
    env = _env(root)  # init and enqueue leave config.yaml's parse in it
    for args in (["init"], ["enqueue", "a task to show"], ["enqueue", "a task without notes"]):
        subprocess.run([*octopoid, *args], cwd=root, env=env, check=True, capture_output=True)
    # TASK-1 has retry notes and working notes: `notes` and `memory show` that find them
    # ask no store (finding none, they ask it whether the task exists: exit 3 if not)
    noted = "from orchestrator.queue import machine as q; q.save_task_notes('1', 'agent', 'out')"
    subprocess.run([sys.executable, "-c", noted], cwd=root, env=env, check=True)
    working = {**env, "OCTOPOID_NOTES_ID": "TASK-1"}
    remember = [*octopoid, "memory", "add", "Important Facts", "a fact"]
    subprocess.run(remember, cwd=root, env=working, check=True, capture_output=True)
    (root / "work.txt").write_text("TASK-1's work, for `diff` to show\n")
    for argv in (
        ["checkout", "-q", "-b", "agent/TASK-1"],
        ["add", "work.txt"],
        ["commit", "-q", "-m", "work"],
        ["checkout", "-q", "-"],
    ):
        subprocess.run([*git, *argv], cwd=root, check=True)
    return root


@pytest.mark.parametrize("args", list(NOT_NEEDED), ids=" ".join)
def test_a_command_does_not_import_what_it_does_not_use(
    startup_project: Path, args: tuple[str, ...]
):
    loaded = _loaded(startup_project, args)
    found = {
        label
        for label in NOT_NEEDED[args]
        if any(n == HEAVY[label] or n.startswith(HEAVY[label] + ".") for n in loaded)
    }
    assert "orchestrator.faces.cli.main" in loaded  # the probe ran the command
    assert found == set()


def test_an_agent_s_program_is_looked_for_without_the_process_runner(git_project: Path):
    """`doctor`, `status` and `agents` ask whether each agent's program is there as its box
    sees it (``box.program_problem``); that needs neither the backends nor the code that
    runs their processes (selectors, queue), once the program is found."""
    write_agents(git_project)  # a command agent: this interpreter, found
    loaded = _loaded(git_project, ("doctor",))
    assert "orchestrator.roles.agent_status" in loaded  # the agent's readiness was asked
    assert not {n for n in loaded if n.startswith("orchestrator.backends")}


#: The CLI's own modules every command loads: the group, its registry, the output.
CLI_CORE = {"main", "registry", "render"}


@pytest.mark.parametrize(
    ("args", "own"),
    [
        (("--help",), set()),
        (("scheduler", "status"), {"scheduler"}),
        (("list",), {"tasks"}),
        (("worktrees",), {"worktrees"}),  # not `checks`' module (the verdicts)
        (("memory", "show", "TASK-1"), {"working", "params"}),  # not `notes`' (retry notes)
    ],
    ids=lambda value: " ".join(
        sorted(value) if isinstance(value, set) else value
    ),  # same on every worker
)
def test_a_command_imports_only_its_own_command_module(
    startup_project: Path, args: tuple[str, ...], own: set[str]
):
    """The registry lists every command without importing their modules (`--help`), and
    a command imports the module that defines it, no other."""
    prefix = "orchestrator.faces.cli."
    loaded = {
        n.removeprefix(prefix) for n in _loaded(startup_project, args) if n.startswith(prefix)
    }
    assert loaded - CLI_CORE == own


def test_list_compiles_no_pattern_it_does_not_use(startup_project: Path):
    """`list` reads the claim index and parses no task file, id or config key: the
    patterns of the modules it loads (task headers, ids, config names, record keys) stay
    uncompiled (``base/patterns.py``), where they were ~10 M instructions of its start."""
    assert _probe(startup_project, ("list",))["compiled"] == []


#: Frozen dataclasses a command may still build at import (~4.6 M instructions each, a
#: NamedTuple ~0.8 M): ``review.diffs``' are the review part's.
FROZEN_KEPT = {"orchestrator.review.diffs.DiffRead", "orchestrator.review.diffs.FileStat"}


@pytest.mark.parametrize(
    "args",
    [
        ("show", "TASK-1"),
        ("memory", "search", "fact"),
        ("memory", "show", "TASK-1"),
        ("enqueue", "a task"),
        ("doctor",),
        ("notes", "TASK-1"),
    ],
    ids=" ".join,
)
def test_a_command_builds_no_frozen_dataclass_it_can_do_without(
    startup_project: Path, args: tuple[str, ...]
):
    """NamedTuples, each compared only with its own kind: a working note's ``Item`` and its
    ``Origin`` (`show` lists a task's learnings, `memory` reads notes), the memory index's
    ``Dialect``, the redaction's ``Detector`` (every writer) and the network policy's
    ``Entry`` and ``Policy`` (`doctor`'s network lines); and a review's ``LineComment``
    in a module of its own, which readers of retry notes do not load."""
    assert set(_probe(startup_project, args)["frozen"]) - FROZEN_KEPT == set()


def test_a_lazy_pattern_is_the_compiled_pattern_once_used():
    pattern = LazyPattern(rb"k(e+)y", re.I)
    assert pattern.pattern == rb"k(e+)y" and "compiled" not in vars(pattern)
    assert pattern.sub(b"-", b"a KEEy b") == b"a - b"
    assert pattern.compiled is re.compile(rb"k(e+)y", re.I)  # re's own cache: one compile
    assert pattern.groups == 1
    assert pattern.fullmatch(b"key").re is pattern.compiled
    assert pickle.loads(pickle.dumps(LazyPattern("k"))).fullmatch("k")  # before first use


@pytest.mark.parametrize("args", [("init",), ("enqueue", "a task")], ids=" ".join)
def test_init_and_enqueue_ask_git_one_question(
    startup_project: Path, tmp_path: Path, args: tuple[str, ...]
):
    """Where the branch checked out has a commit, `init` learns that it is at the top of a
    work tree and which branch it is, and `enqueue` the branch a task starts from, from
    one git process (~3 ms of their start each), not two."""
    log, tools = tmp_path / "calls", tmp_path / "bin"
    tools.mkdir()
    logged_tool(tools, "git", log)
    env = {**_env(startup_project), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.faces.cli.main", *args],
        cwd=startup_project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert len(log.read_text().splitlines()) == 1, log.read_text()


def test_version_still_prints_the_installed_version(startup_project: Path):
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.faces.cli.main", "--version"],
        cwd=startup_project,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == f"octopoid, version {importlib.metadata.version('octopoid')}"


def test_without_a_private_cache_runners_compile_as_the_user_says(tmp_path: Path, monkeypatch):
    """A cache folder that is a link (or another user's) is never where runners load
    octopoid's code from."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "caches" / "octopoid").mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "caches"))
    name = bytecode.cache_dir().name  # type: ignore[union-attr]
    (tmp_path / "caches" / "octopoid" / name).rmdir()
    (tmp_path / "caches" / "octopoid" / name).symlink_to(tmp_path / "elsewhere")
    assert bytecode.cache_dir() is None
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode.runner_env(env, None) == env


def test_runner_env_is_unchanged_where_bytecode_is_written(tmp_path: Path):
    env = {"PATH": "/bin", "PYTHONDONTWRITEBYTECODE": ""}
    assert bytecode.runner_env(env, tmp_path) == env


def test_runner_env_and_user_env_are_inverses(tmp_path: Path):
    for env in (
        {"PATH": "/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        {"PATH": "/bin", "PYTHONDONTWRITEBYTECODE": "x", "PYTHONPYCACHEPREFIX": "/theirs"},
    ):
        changed = bytecode.runner_env(env, tmp_path / "cache")
        assert "PYTHONDONTWRITEBYTECODE" not in changed
        assert changed["PYTHONPYCACHEPREFIX"] == str(tmp_path / "cache")
        assert bytecode.runner_env(changed, tmp_path / "other") == changed  # applied once
        bytecode.user_env(changed)
        assert changed == env


RUNNER_LIKE = """
import os, subprocess, sys
import orchestrator.base.bytecode
orchestrator.base.bytecode.user_env(os.environ)
print(sys.dont_write_bytecode, sys.pycache_prefix)
subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"])
"""


def test_a_second_runner_reads_the_bytecode_the_first_wrote(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "caches"))
    cache = bytecode.cache_dir()
    assert cache is not None and cache.parent == tmp_path / "caches" / "octopoid"
    user = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env = bytecode.runner_env(user, cache)
    first = subprocess.run(
        [sys.executable, "-c", RUNNER_LIKE], env=env, capture_output=True, text=True, check=True
    )
    # The runner wrote into the cache; what it started got the user's setting back.
    assert first.stdout.split() == ["False", str(cache), "True"]
    ours = cache / Path(bytecode.__file__).parent.relative_to("/")  # the prefix's layout
    written = {p: p.stat().st_mtime_ns for p in ours.glob("bytecode.*.pyc")}
    everything = {p: p.stat().st_mtime_ns for p in cache.rglob("*.pyc")}
    assert written and len(everything) > len(written)  # the standard library's too

    second = subprocess.run(
        [sys.executable, "-v", "-c", RUNNER_LIKE], env=env, capture_output=True, text=True
    )
    assert {p: p.stat().st_mtime_ns for p in written} == written  # read, not rewritten
    assert f"code object from '{next(iter(written))}'" in second.stderr

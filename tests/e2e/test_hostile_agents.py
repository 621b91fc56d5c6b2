"""Hostile agents through the real scheduler: every attack fails or is contained.

A ``command`` agent (tests/helpers/hostile_agent.py) that knows every path and pid tries
to accept its own work, commit onto main, forge octopoid's records, kill its runner, edit
other tasks and agents.yaml, read secrets, write outside its clone, signal the scheduler,
leave daemons behind and link its clone to the queue. Afterwards the user's repository,
the other tasks, their notes and the configuration are byte for byte what they were.
The same attacks come through the anthropic backend's tools and the real Claude Code CLI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import git
import pytest
import yaml

from orchestrator import config
from orchestrator.box import containment
from orchestrator.box.bounds import disk_use
from orchestrator.daemon import notify
from orchestrator.faces import reports
from orchestrator.memory import lifecycle
from orchestrator.queue import machine as q
from orchestrator.queue import questions

from ..helpers.fake_messages_api import FakeMessagesAPI, text, tool_use
from ..support import (
    HELPERS,
    OCTOPOID,
    Served,
    child_env,
    octopoid,
    octopoid_output,
    set_config,
    wait_for,
)
from ..support.daemon import QUIET, Daemon, state_of, write_agent

pytestmark = pytest.mark.slow

SECRETS = {
    "ssh": "SSH-KEY-0f3a9c",
    "victim": "VICTIM-CONTEXT-77d1",
    "victim notes": "VICTIM-NOTES-5e2b",
    "memory": "MEMORY-NOTE-b41c",
}
ATTACKS = [
    "accept-self",
    "commit-main",
    "forge-journal",
    "kill-runner",
    "edit-queue",
    "read-secrets",
    "write-outside",
    "signal-scheduler",
    "leave-daemon",
    "symlink-queue",
]
LEFT_BEHIND = ("sleep 31337", "sleep 31338", "sleep 31339")
DEPLOY_KEY = "dk-9f8e7d6c5b4a"
TOKEN = "ghp_" + "Q7w" * 12  # what say-things says, with DEPLOY_KEY and terminal escapes
UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def protected(root: Path, victims: list[str], checkout: bool = True) -> dict[str, bytes]:
    """What no agent may change: the user's repository (every ref but octopoid's and the
    attackers' own branches, HEAD, config, hooks, info/ and, with ``checkout``, the
    checkout's files), the other tasks and their notes, and octopoid's configuration."""
    repo = git.Repo(root)
    refs = repo.git.for_each_ref("--format=%(refname) %(objectname)").splitlines()
    own = [f"refs/heads/agent/{task.label} " for task in q.list_tasks(q.TaskState.PROVISIONAL)]
    own += [f"refs/heads/agent/{task.label} " for task in q.list_tasks(q.TaskState.FAILED)]
    kept = [r for r in refs if not r.startswith(("refs/octopoid/", *own))]
    state = {"refs": "\n".join(kept).encode()}
    git_dir = root / ".git"
    for path in [
        git_dir / "HEAD",
        *(f for d in ("config", "hooks", "info") for f in _files(git_dir / d)),
    ]:
        state[str(path.relative_to(root))] = path.read_bytes()
    if checkout:
        state["status"] = repo.git.status("--porcelain", "--untracked-files=all").encode()
        for name in repo.git.ls_files().splitlines():
            state[name] = (root / name).read_bytes()
    for name in ("agents.yaml", "config.yaml"):
        state[name] = (root / ".octopoid" / name).read_bytes()
    for tid in victims:
        task = q.get_task(tid)
        state[f"TASK-{tid}"] = f"{task.state.value}\n".encode() + task.path.read_bytes()
        notes = config.get_notes_dir() / f"TASK-{tid}.md"
        state[f"TASK-{tid} notes"] = notes.read_bytes() if notes.exists() else b""
    state["beside the checkout"] = (
        b"" if not (root.parent / "beside-the-checkout.txt").exists() else b"!"
    )
    return state


def _files(top: Path) -> list[Path]:
    if top.is_file():
        return [top]
    return sorted(p for p in top.rglob("*") if p.is_file() or p.is_symlink())


def left_behind() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if any(s in ln for s in LEFT_BEHIND) and " Z" not in ln]


@pytest.fixture
def arena(git_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A project with secrets to steal, another task to attack (and one blocked on it), a
    running scheduler, and agents.yaml giving the attacker every address it could want."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_test").write_text(SECRETS["ssh"])
    outside = tmp_path / "outside"
    outside.mkdir()
    lifecycle.add_learning("Important Facts", f"the vault code is {SECRETS['memory']}", [], None)
    victim = q.create_task("the victim", role="review", context=SECRETS["victim"])
    q.save_task_notes(victim.id, "agent", SECRETS["victim notes"], 0, 0)
    dependant = q.create_task("runs once the victim is done", role="review", blocked_by=[victim.id])
    (git_project / ".octopoid/agents.yaml").write_text(yaml.safe_dump({"agents": []}))
    daemons: list[Daemon] = []

    def start(
        attacks: list[str], checkout: bool = True, at_once: int = 4, **more: object
    ) -> tuple[Daemon, list[str], dict[str, bytes]]:
        """Start the scheduler and the attacks; (it, their task ids, the state before).
        ``more``: the agent's ``sandbox`` and ``network`` (ATTACK_NETWORK's targets)."""
        daemon = Daemon(git_project, tmp_path / "runs", {"HOME": str(home)})
        daemons.append(daemon)
        env = {
            "ATTACK_ROOT": str(git_project),
            "ATTACK_OCTOPOID": OCTOPOID,
            "ATTACK_HOME": str(home),
            "ATTACK_OUTSIDE": str(outside),
            "ATTACK_VICTIM": str(victim.id),  # a TaskId: PyYAML's safe dumper takes only a str
            "ATTACK_SCHEDULER": str(daemon.proc.pid),
            "ATTACK_DEPLOY_KEY": DEPLOY_KEY,  # a value whose name does not look secret
            "ATTACK_NETWORK": str(more.pop("network", "")),
        }
        doc = {
            "max_attempts": 1,
            "lease_seconds": 30,
            "max_claimed": 10,
            "shutdown_grace_seconds": 1,
            "agents": [
                {
                    "name": "hostile",
                    "role": "implement",
                    "backend": "command",
                    "argv": [sys.executable, str(HELPERS / "hostile_agent.py")],
                    "max_concurrent": at_once,
                    "timeout_seconds": 60,
                    "env": env,
                    **more,
                }
            ],
        }
        (git_project / ".octopoid/agents.yaml").write_text(yaml.safe_dump(doc))
        before = protected(git_project, start.victims, checkout)
        ids = [q.create_task(f"attack {name}").id for name in attacks]
        return daemon, ids, before

    start.root, start.victims, start.outside = git_project, [victim.id, dependant.id], outside
    yield start
    for daemon in daemons:
        if daemon.proc.poll() is None:
            daemon.stop()
    subprocess.run(["pkill", "-9", "-f", "sleep 3133"], check=False)


def settled(ids: list[str]) -> bool:
    return all(state_of(t) not in ("incoming", "claimed") for t in ids)


def test_no_attack_gets_through_the_walls(arena, bwrap_ok) -> None:
    daemon, ids, before = arena(ATTACKS)
    wait_for("every attack to end", lambda: settled(ids), 120)
    wait_for("nothing left running", lambda: not left_behind(), 15)
    assert daemon.proc.poll() is None and "\tT" not in _state(daemon.proc.pid)  # never stopped
    assert protected(arena.root, arena.victims) == before
    assert not any(arena.outside.iterdir())
    for tid, name in zip(ids, ATTACKS, strict=True):
        log = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()
        assert log.startswith("[octopoid] sandbox: bwrap;"), log
        steps = dict(ln.split(": ", 1) for ln in log.splitlines() if ln.startswith("ATTACK "))
        assert steps, log  # the attack ran
        for step in MUST_FAIL.get(name, ()):
            assert steps[f"ATTACK {step}"].startswith("refused ("), log
        assert not any(secret in log for secret in SECRETS.values()), log
        moves = q.get_task(tid).moves()
        assert ("provisional", "done") not in moves and moves[0] == ("new", "incoming")
    assert daemon.stop() == 0


#: Steps that cannot succeed in a box at all (the others reach only its own clone, its own
#: /tmp or its own processes, and may "succeed" there).
MUST_FAIL = {
    "accept-self": ("move-to-provisional", "accept"),
    "edit-queue": ("rewrite-task", "move-to-done", "forge-review", "rewrite-agents"),
    "read-secrets": ("victim-notes", "memory-db", "ssh-key", "environment"),
    "signal-scheduler": ("stop-it", "term-it"),
    "write-outside": ("host-tmp",),
}


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/status").read_text()


def test_without_a_sandbox_routes_2_to_4_are_contained(arena) -> None:
    """``sandbox: none`` is best effort, but the routes through git are closed: a commit
    onto main in the user's checkout, a move of main behind a forged journal line, and a
    runner killed after planting a hook and leaving a daemon that shed its marks. One at a
    time, so each check finds its own agent's doing (test_git_containment: at once)."""
    set_config(arena.root, sandbox="none")
    attacks = ["commit-main", "forge-journal", "kill-runner"]
    daemon, ids, before = arena(attacks, checkout=False, at_once=1)
    wait_for("every attack to end", lambda: settled(ids), 120)
    wait_for("the dead runner's leftovers checked", lambda: not containment.orphaned(), 30)
    wait_for("its daemon killed", lambda: not left_behind(), 15)
    assert protected(arena.root, arena.victims, checkout=False) == before  # files: docs/security
    (arena.outside / "hook-ran").unlink(missing_ok=True)  # (it may have run in an agent's commit)
    subprocess.run(
        ["git", "-C", arena.root, "commit", "-q", "--allow-empty", "-m", "mine"], check=True
    )
    assert not (arena.outside / "hook-ran").exists()  # the user's next commit runs no planted hook
    for tid in ids:
        notes = q.get_task_notes(tid)
        assert "the agent moved refs/heads/main; octopoid put it back" in notes, notes
        assert state_of(tid) == "failed"
    dead = q.get_task_notes(ids[2])
    assert "## Containment — attempt 1 (its runner had died)" in dead
    assert "the agent added .git/hooks/pre-commit; octopoid put it back" in dead
    assert daemon.stop() == 0


@pytest.fixture
def metadata_standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A listener standing in for a cloud's metadata service: an HTTP server on a
    link-local address in a network namespace the test makes, joined to this machine by a
    veth pair, so that this machine reaches it as a cloud machine reaches 169.254.169.254
    (not that address itself: on a cloud machine the test would hide the real service).
    (its address, the log of what it was asked). Making a namespace takes root."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        why = "a network namespace with a veth pair takes root and iproute2"
        if os.environ.get("OCTOPOID_REQUIRE_NETNS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    tag, net = os.getpid() % 100_000, f"169.254.{os.getpid() % 250 + 1}"
    ns, outer, inner = f"octo-md-{tag}", f"omd{tag}h", f"omd{tag}n"
    inside = ["ip", "netns", "exec", ns]
    log = tmp_path_factory.mktemp("metadata") / "asked.log"
    setup = [
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns],
        ["ip", "addr", "add", f"{net}.1/30", "dev", outer],
        ["ip", "link", "set", outer, "up"],
        [*inside, "ip", "addr", "add", f"{net}.2/30", "dev", inner],
        [*inside, "ip", "link", "set", inner, "up"],
    ]
    server = None
    try:
        for argv in setup:
            subprocess.run(argv, check=True, capture_output=True)
        serve = [sys.executable, "-m", "http.server", "--bind", f"{net}.2", "80"]
        with open(log, "wb") as out:
            server = subprocess.Popen([*inside, *serve], stderr=out, stdout=out)
        wait_for("the stand-in to answer", lambda: _answers(f"{net}.2"), 30)
        yield f"{net}.2", log
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)  # its end of the pair with it
        subprocess.run(["ip", "link", "del", outer], check=False, capture_output=True)


def _answers(address: str) -> bool:
    try:
        with socket.create_connection((address, 80), 2) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return conn.recv(20).startswith(b"HTTP/1.0 200")
    except OSError:
        return False


def test_an_attempt_reaches_only_the_hosts_its_list_names(
    arena, metadata_standin, loopback_servers: list[Served], bwrap_ok
) -> None:
    """The default box (network: allow) of a hostile command agent: this machine's loopback,
    the metadata stand-in and an unlisted host are refused, by address, by proxy and by a
    name that resolves home; the server its list names is reached; every refusal is in
    its notes and counted for its agent."""
    meta, asked = metadata_standin
    host, allowed = (served.port for served in loopback_servers)
    sandbox = {"network": {"allow": [f"127.0.0.1:{allowed}", "localhost"]}}
    daemon, [tid], _ = arena(["reach-network"], network=f"{host} {meta} {allowed}", sandbox=sandbox)
    wait_for("the attack to end", lambda: settled([tid]), 90)
    assert daemon.stop() == 0
    log = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()
    assert f"network allow: only 127.0.0.1:{allowed}, localhost;" in log.splitlines()[0]
    steps = dict(ln.split(": ", 1) for ln in log.splitlines() if ln.startswith("ATTACK "))
    assert steps.pop("ATTACK allowed") == "ok" and steps.pop("ATTACK allowed-by-proxy") == "ok"
    assert len(steps) == 6 and all(s.startswith("refused (") for s in steps.values()), log
    assert loopback_servers[0].seen == [] and len(loopback_servers[1].seen) == 2
    assert "/latest" not in asked.read_text()  # it answered the test's sanity check only
    notes = q.get_task_notes(tid)
    for refused in (f"127.0.0.1:{host}", f"{meta}:80", "example.com:443", f"localhost:{host}"):
        assert f"[octopoid] network: refused {refused}: " in notes, notes
    assert f"localhost:{host}: it resolves to " in notes
    [row] = reports.agents_overview()
    assert row["refused_today"] == 4 and row["network"] == "allow"
    assert reports.status_summary()["refused_today"] == 4


PLANT = 'printf "#!/bin/sh\\ntouch {outside}/hook-ran\\n" > {root}/.git/hooks/post-merge'
TOOL_ATTACKS = [
    ("run_command", {"command": "rm -rf {root}/.octopoid/runtime/queue && echo gone"}),
    ("run_command", {"command": PLANT}),
    ("run_command", {"command": "git -C {root} update-ref refs/heads/main HEAD"}),
    ("run_command", {"command": "cat {home}/.ssh/id_test; env | grep -i anthropic"}),
    ("run_command", {"command": "setsid sleep 31337 > /dev/null 2>&1 < /dev/null &"}),
    ("run_command", {"command": "echo escaped > {outside}/escaped"}),
    ("write_file", {"path": "{root}/.octopoid/agents.yaml", "content": "agents: []\n"}),
    ("write_file", {"path": "../../../../agents.yaml", "content": "x"}),
    ("write_file", {"path": "work.txt", "content": "honest work\n"}),
]


def _script(arena, port: int) -> list[dict]:
    """The tools' attacks, then the network's (this machine's loopback server on ``port``)."""
    where = {"root": arena.root, "home": arena.root.parent / "home", "outside": arena.outside}
    steps = [
        tool_use(name, {k: v.format(**where) for k, v in args.items()})
        for name, args in TOOL_ATTACKS
    ]
    probes = tool_use("run_command", {"command": network_probes(port)})
    return [*steps, probes, tool_use("finish", {"summary": "done"})]


def test_the_anthropic_backends_tools_run_in_the_box(
    arena, loopback_servers: list[Served], bwrap_ok
) -> None:
    host = loopback_servers[0].port
    with FakeMessagesAPI(_script(arena, host)) as api:
        write_agent(
            arena.root,
            backend="anthropic",
            model="claude-haiku-4-5",
            base_url=api.base_url,
            max_turns=20,
        )
        before = protected(arena.root, arena.victims)
        daemon = Daemon(arena.root, arena.root.parent / "runs", {"ANTHROPIC_API_KEY": "sk-ant-x"})
        tid = q.create_task("anything").id
        wait_for("the attempt to end", lambda: settled([tid]), 60)
        daemon.stop()
    wait_for("nothing left running", lambda: not left_behind(), 15)
    assert protected(arena.root, arena.victims) == before
    assert not any(arena.outside.iterdir())
    results = [m["content"][0]["content"] for m in (r["messages"][-1] for r in api.requests[1:])]
    assert "gone" in results[0]  # it emptied a queue folder: its own box's, an empty tmpfs
    assert SECRETS["ssh"] not in "".join(results) and "sk-ant-x" not in "".join(results)
    assert results[-1].count("refused (") == 3 and loopback_servers[0].seen == []
    assert state_of(tid) == "provisional"
    # the API is the runner's to call: the tools' box names nothing and reached nothing
    log = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()
    assert "network allow, naming nothing" in log.splitlines()[0]
    notes = q.get_task_notes(tid)
    assert refusals(notes) == [f"127.0.0.1:{host}", "example.com:80"], notes
    assert "] network: reached" not in notes


def network_probes(port: int) -> str:
    """Shell lines that try this machine's loopback server on ``port``, straight and through
    the box's proxy, and a host on no list (tests/helpers/net_probe.py)."""
    probe = f"{sys.executable} {HELPERS / 'net_probe.py'}"
    return (
        f"{probe} 127.0.0.1 {port}; {probe} - - 'CONNECT 127.0.0.1:{port} HTTP/1.1'; "
        f"{probe} - - 'GET http://example.com/ HTTP/1.1'"
    )


def refusals(notes: str) -> list[str]:
    """The destinations the notes say were refused, in order."""
    mark = "] network: refused "
    return [ln.split(mark, 1)[1].split(": ", 1)[0] for ln in notes.splitlines() if mark in ln]


def test_the_real_claude_cli_works_and_is_walled_in(
    arena, claude_cli: Path, loopback_servers: list[Served], bwrap_ok
) -> None:
    where = {"root": arena.root, "home": arena.root.parent / "home", "outside": arena.outside}
    attack = "\n".join(args["command"].format(**where) for name, args in TOOL_ATTACKS[:6])
    host = loopback_servers[0].port
    script = [
        tool_use("Bash", {"command": attack, "description": "look around"}, say="Looking."),
        tool_use("Bash", {"command": network_probes(host), "description": "reach out"}),
        tool_use(
            "Bash",
            {
                "command": "echo hi > hello.txt && git add hello.txt && git commit -qm hello",
                "description": "commit",
            },
        ),
        text("Done."),
    ]
    with FakeMessagesAPI(script) as api:
        env = QUIET | {"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": "sk-ant-y"}
        write_agent(
            arena.root,
            backend="claude-code",
            claude_path=str(claude_cli),
            allowed_tools=["Bash", "Read", "Edit", "Write"],
        )
        before = protected(arena.root, arena.victims)
        daemon = Daemon(arena.root, arena.root.parent / "runs", env)
        tid = q.create_task("add hello.txt").id
        wait_for("the attempt to end", lambda: settled([tid]), 90)
        daemon.stop()
    wait_for("nothing left running", lambda: not left_behind(), 15)
    assert state_of(tid) == "provisional", q.get_task_notes(tid)
    assert protected(arena.root, arena.victims) == before
    assert not any(arena.outside.iterdir())
    log = (config.get_logs_dir() / f"TASK-{tid}" / "attempt-1.log").read_text()
    assert log.startswith("[octopoid] sandbox: bwrap;") and SECRETS["ssh"] not in log
    api_host = api.base_url.removeprefix("http://")
    assert f"network allow: only {api_host};" in log.splitlines()[0]
    # it reached the scripted API through the runner's proxy, and tried nothing else
    notes = q.get_task_notes(tid)
    assert f"[octopoid] network: reached {api_host} (" in notes, notes
    assert refusals(notes) == [f"127.0.0.1:{host}", "example.com:80"], notes
    assert loopback_servers[0].seen == []
    assert git.Repo(arena.root).commit(f"agent/TASK-{tid}").summary == "hello"
    assert os.environ.get("OCTOPOID_ROOT") == str(arena.root)
    assert child_env(arena.root)["OCTOPOID_ROOT"] == str(arena.root)


# --- a branch is data: what it carries past the walls ---------------------------------------

MB = 1024 * 1024
#: The person's own files that git does not track (.gitignore names them).
MINE = {
    ".env": b"API_KEY=the person's own\n",
    "local.db": b"SQLite format 3\x00 the person's rows",
    "data/cache.bin": b"\x00\x01 the person's cache",
}


def test_a_hostile_branch_replaces_nothing_that_git_does_not_track(arena, bwrap_ok) -> None:
    """Branches that add the person's ignored files, a symlink where their ignored folder is,
    the path ``.octopoid/runtime`` or ``.octopoid`` as a file: the pre-check refuses the
    last two (the runtime is always there), the first reaches review and is shown refused
    once the person's files exist, and accept refuses it; every byte survives."""
    root = arena.root
    (root / ".gitignore").write_text(".env\n*.db\ndata/\n")
    repo = git.Repo(root)
    repo.git.add(".gitignore", ".octopoid")  # as a real project: its config is committed
    repo.index.commit("the project's config")
    canary = config.get_orchestrator_dir() / "canary.bin"
    canary.write_bytes(b"octopoid's state \x00\x01")
    daemon, ids, _ = arena(["smuggle-ignored", "replace-runtime", "replace-octopoid"])
    smuggle, runtime, octopoid_dir = ids
    wait_for("every attack to end", lambda: settled(ids), 120)
    assert daemon.stop() == 0
    for tid, named in ((runtime, ".octopoid/runtime/"), (octopoid_dir, ".octopoid")):
        assert state_of(tid) == "failed"  # refused before review: it never got there
        notes = q.get_task_notes(tid)
        assert "which a merge would delete or replace" in notes and f"  {named}\n" in notes
        assert any("refused: merging it would replace" in h for h in q.get_task(tid).history)
    assert canary.read_bytes() == b"octopoid's state \x00\x01" and config.get_queue_dir().is_dir()
    assert state_of(smuggle) == "provisional"  # nothing of the person's was there yet
    for name, data in MINE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    main = repo.head.commit.hexsha
    listed, status = octopoid(root, "list").stdout, octopoid(root, "status").stdout
    assert f"TASK-{smuggle}  provisional (refused)" in listed
    said = f"TASK-{smuggle} is refused: merging it would replace or write what git does not "
    assert f"{said}track in the checkout: .env, data/, local.db" in listed and said in status
    accepted = octopoid(root, "accept", smuggle)
    assert accepted.returncode == 1
    assert all(f"  {p}\n" in accepted.stderr for p in (".env", "data/", "local.db"))
    for name, data in MINE.items():
        assert (root / name).read_bytes() == data  # byte for byte
    assert canary.read_bytes() == b"octopoid's state \x00\x01"
    assert repo.head.commit.hexsha == main and state_of(smuggle) == "provisional"
    assert "Traceback" not in accepted.stderr


def test_read_back_bombs_are_refused_within_their_bounds(arena, bwrap_ok) -> None:
    """300 MB of zeros (a few hundred KB packed), 3,000 objects and a clone filling its
    disk, against low limits: each attempt fails saying which bound, its branch stays
    where it was, and the host's disk and memory stay bounded (measured)."""
    limits = {"max_branch_bytes": 50 * MB, "max_objects": 1000, "max_clone_bytes": 40 * MB}
    set_config(arena.root, sandbox=limits)
    objects = arena.root / ".git" / "objects"
    before = disk_use(objects, 1 << 62)
    daemon, ids, _ = arena(["zero-bomb", "object-bomb", "fill-clone"], at_once=3)
    # the clone filler sleeps 120 s: only its bound stops it before the wait is over
    wait_for("every attack to end", lambda: settled(ids), 60)
    assert daemon.stop() == 0
    why = ["(sandbox.max_branch_bytes)", "(sandbox.max_objects)", "(sandbox.max_clone_bytes)"]
    for tid, bound in zip(ids, why, strict=True):
        task = q.get_task(tid)
        assert task.state.value == "failed" and bound in task.headers["ERROR"], task.headers
        assert "octopoid refused the attempt's work: nothing was read back" in task.headers["ERROR"]
        assert bound in (q.get_task_notes(tid) or "")
        main = git.Repo(arena.root).commit("main")
        assert git.Repo(arena.root).commit(f"agent/TASK-{tid}") == main  # nothing came back
        report = (config.get_logs_dir() / f"TASK-{tid}" / "runner.log").read_text()
        usage = json.loads(report.strip().splitlines()[-1])
        assert usage["peak_rss_kib"] < 250 * 1024, usage
        assert usage["peak_children_rss_kib"] < 250 * 1024, usage  # git streamed the zeros
    assert disk_use(objects, 1 << 62) - before < 10 * MB  # the pack of zeros, at most
    assert not any(config.get_worktrees_dir().glob("TASK-*"))  # the clones went with them


def test_what_an_attempt_says_is_data_cleaned_and_kept_only_once_accepted(arena, bwrap_ok) -> None:
    """Through the channel, from the default box: a failed attempt's remembered lie never
    reaches memory when a later attempt of its task is accepted; a progress line and a
    question holding a token, an agents.yaml value and terminal escapes reach the task,
    the question's file, `status`, `show` and the alert without any of them."""
    set_config(arena.root, questions={"wait_seconds": 0})
    daemon, (liar, speaker), _ = arena(["poison-memory", "say-things"])
    wait_for("the liar to fail", lambda: state_of(liar) == "failed", 120)
    wait_for("the question", lambda: "QUESTION" in q.get_task(speaker).headers, 120)
    octopoid_output(arena.root, "retry", liar)
    wait_for("the retry to reach review", lambda: state_of(liar) == "provisional", 120)
    shown = octopoid_output(arena.root, "show", liar)
    assert "HONEST: tests run with pytest" in shown and "POISON" not in shown
    octopoid_output(arena.root, "accept", liar)
    found = octopoid_output(arena.root, "memory", "search", "push main review tests pytest")
    assert "HONEST: tests run with pytest" in found and "POISON" not in found
    assert f"TASK-{liar} attempt 2 by hostile, accepted by human" in found
    log = (config.get_logs_dir() / f"TASK-{speaker}" / "attempt-1.log").read_text()
    kept = [ln for ln in log.splitlines() if ln.startswith("ATTACK kept-progress: ")]
    assert kept and "progress" in kept[0] and "ATTACK ask: False" in log, log
    texts = {
        "progress header, as read back": kept[0].encode().decode("unicode_escape"),
        "task file": q.get_task(speaker).path.read_text(),
        "question record": json.dumps(questions.read(speaker)),
        "status": octopoid_output(arena.root, "status"),
        "show": octopoid_output(arena.root, "show", speaker),
        "alert": "\n".join(notify._message("question", speaker)),
        "log": log,
    }
    assert "may I?" in texts["status"] and questions.read(speaker)["question"].startswith("may I?")
    assert not [(w, m.group()) for w, t in texts.items() for m in UNSHOWN.finditer(t)]
    assert not [w for w, t in texts.items() if TOKEN in t or DEPLOY_KEY in t]
    assert daemon.stop() == 0

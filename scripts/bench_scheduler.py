"""Scheduler benchmark: enqueue-to-start latency, idle CPU, and per-attempt overhead.

Run by hand:  python scripts/bench_scheduler.py [--tasks 50] [--idle 60] [--attempts 40]
              [--postgres] [--sandbox bwrap,none] [--network allow,none] [--base COMMIT]
              [--latency-only] [--download-mb 200]
Each part starts the real daemon (`octopoid scheduler run`) on a scratch git repository
with a command agent that does (almost) nothing, so what is measured is octopoid itself.
"Agent start" is the moment the agent is exec'd: the agent is bash, whose first act is to
print ``$EPOCHREALTIME`` (a builtin: no interpreter to load, no child; bash's own start is
measured alone and shown). The latency part runs one daemon per ``--sandbox`` mode (and,
with ``--base``, per version: the code of COMMIT, extracted with `git archive`, against
this working tree) side by side, enqueueing into each in turn, so they are compared on the
same machine at the same moments; the other parts use the first mode and this tree.
``--network`` adds the box's network modes to the latency part (a bwrap daemon per mode,
compared per round: what the proxy and the box's bridge add to an attempt's start), and
a download from a server on this machine, through the proxy and straight, interleaved.
``--postgres`` keeps the queue in a throwaway PostgreSQL server (tests/pg_server.py, a
fresh database per daemon): tasks are enqueued by this process, so only the database's
NOTIFY can wake the idle daemon, as when another machine enqueues.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this tree's octopoid

from orchestrator.model.tasks import TaskState
from orchestrator.queue import machine as q

HERE = Path(__file__).resolve().parent.parent
DATABASE = None  # a tests.pg_server.PgServer with --postgres

# The agent says when it was exec'd (its output is its attempt log: a box writes nowhere
# else), then makes an empty commit so the attempt succeeds.
AGENT = "echo BENCH_START $EPOCHREALTIME; exec git commit -q --allow-empty -m bench"
INIT = """
import sys
from pathlib import Path
from orchestrator.faces.scaffold import init_project
init_project(Path(sys.argv[1]))
if sys.argv[2]:
    from orchestrator.pg.schema import upgrade_database
    upgrade_database(sys.argv[2])
"""
DAEMON = (
    "import sys; from orchestrator.faces.cli.main import main; sys.argv[0] = 'octopoid'; main()"
)


def started_at(root: Path, label: str) -> float:
    """When the agent of ``label``'s first attempt was exec'd."""
    log = root / ".octopoid/runtime/logs" / label / "attempt-1.log"
    return float(log.read_text().split("BENCH_START ", 1)[1].split()[0])


def scratch(
    concurrency: int, sandbox: str = "bwrap", code: Path = HERE, network: str = "allow"
) -> tuple[Path, dict[str, str]]:
    """A fresh project (and database with --postgres), made by the version in ``code``;
    the environment that selects it."""
    root = Path(tempfile.mkdtemp(prefix="octopoid-bench-"))
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    for key, value in (("user.name", "bench"), ("user.email", "bench@example.invalid")):
        subprocess.run(["git", "-C", str(root), "config", key, value], check=True)
    subprocess.run(
        ["git", "-C", str(root), "commit", "-q", "--allow-empty", "-m", "init"], check=True
    )
    env = {"OCTOPOID_ROOT": str(root)}
    if DATABASE is not None:
        env["OCTOPOID_DATABASE_URL"] = DATABASE.create_database(
            f"bench_{root.name.replace('-', '_')}"
        )
    subprocess.run(
        [sys.executable, "-c", INIT, str(root), env.get("OCTOPOID_DATABASE_URL", "")],
        env=dict(os.environ, PYTHONPATH=str(code)),
        cwd=root,  # python -c looks in its cwd first
        check=True,
    )
    agents = {
        "max_claimed": concurrency,
        "max_provisional": 10_000,
        "agents": [
            {
                "name": "bench",
                "role": "implement",
                "backend": "command",
                "argv": ["bash", "-c", AGENT],
                "max_concurrent": concurrency,
            }
        ],
    }
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump(agents))
    walls: dict = {"mode": sandbox}
    if network != "allow":  # allow is the default (a --base from before it knows no allow)
        walls["network"] = network
    (root / ".octopoid/config.yaml").write_text(yaml.safe_dump({"sandbox": walls}))
    os.environ.update(env)
    return root, env


def start_daemon(root: Path, code: Path = HERE) -> subprocess.Popen:
    """`octopoid scheduler run` on ``root``, importing octopoid from ``code``."""
    env = dict(os.environ, PYTHONPATH=str(code))
    proc = subprocess.Popen(
        [sys.executable, "-c", DAEMON, "scheduler", "run"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not (root / ".octopoid/runtime/scheduler.pid").exists():
        time.sleep(0.05)
    return proc


def stop(proc: subprocess.Popen, root: Path) -> None:
    proc.terminate()
    proc.wait(60)
    shutil.rmtree(root, ignore_errors=True)


def wait_provisional(count: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while q.get_store().count(TaskState.PROVISIONAL) < count:
        if time.monotonic() > deadline or q.get_store().count(TaskState.FAILED):
            raise SystemExit("tasks did not all reach provisional; see the runner logs")
        time.sleep(0.02)


# Enqueues for the latency part with the daemon's own code (a version's store may differ):
# on each line, one task; answers when the API call returned, when the task left incoming/
# (polled every 2 ms) and its label, once its attempt is done.
ENQUEUER = """
import sys, time
from orchestrator.queue import machine as q
from orchestrator.model.tasks import TaskState
for i, _ in enumerate(sys.stdin):
    task = q.create_task(f"latency {i}")
    enqueued = time.time()
    while q.get_store().locate(task.id) is TaskState.INCOMING:
        time.sleep(0.002)
    claimed = time.time()
    while q.get_store().count(TaskState.PROVISIONAL) <= i:
        if q.get_store().count(TaskState.FAILED):
            sys.exit("an attempt failed; see the runner logs")
        time.sleep(0.02)
    print(enqueued, claimed, task.label, flush=True)
"""


def extract(commit: str) -> Path:
    """The octopoid package as it was at ``commit`` (`git archive`: the repository's
    worktrees and index are left alone)."""
    out = Path(tempfile.mkdtemp(prefix="octopoid-base-"))
    archive = subprocess.run(
        ["git", "-C", str(HERE), "archive", commit, "orchestrator"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


@dataclass
class Daemon:
    """One daemon of the latency part: which code, which sandbox, its samples."""

    version: str
    mode: str
    code: Path
    network: str = "allow"
    root: Path = Path()
    procs: list[subprocess.Popen] = field(default_factory=list)
    claims: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)

    def start(self) -> None:
        self.root, env = scratch(1, self.mode, self.code, self.network)
        self.procs.append(start_daemon(self.root, self.code))
        enqueuer = subprocess.Popen(
            [sys.executable, "-c", ENQUEUER],
            env=dict(os.environ, **env, PYTHONPATH=str(self.code)),
            cwd=self.root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.procs.append(enqueuer)

    def sample(self) -> None:
        """One task enqueued into the idle daemon, timed to its claim and its agent's exec."""
        enqueuer = self.procs[1]
        enqueuer.stdin.write("\n")
        enqueuer.stdin.flush()
        enqueued, claimed, label = enqueuer.stdout.readline().split()
        self.claims.append(float(claimed) - float(enqueued))
        self.starts.append(started_at(self.root, label) - float(enqueued))

    def stop(self) -> None:
        self.procs[1].stdin.close()
        self.procs[1].wait(60)
        stop(self.procs[0], self.root)


def bench_latency(
    tasks: int, modes: list[str], new: str | None, base: str | None, networks: list[str]
) -> list[Daemon]:
    """Enqueue one task at a time into each idle daemon in turn (the versions and modes
    interleaved); time until it is claimed and until its agent is exec'd."""
    versions = [(f"new {new}" if new else "new (this tree)", extract(new) if new else HERE)]
    versions += [(f"base {base}", extract(base))] if base else []
    daemons = [
        Daemon(v, m, code, n)
        for m in modes
        for n in (networks if m == "bwrap" else ["allow"])
        for v, code in versions
    ]
    for d in daemons:
        d.start()
    time.sleep(1)
    for _ in range(tasks):
        for d in daemons:
            d.sample()
            time.sleep(0.3)  # let the daemon go idle again
    for d in daemons:
        d.stop()
    for _version, code in versions:
        if code != HERE:
            shutil.rmtree(code, ignore_errors=True)
    return daemons


def quartiles(samples: list[float]) -> str:
    """p50 (p25–p75, p90) in ms."""
    cuts = statistics.quantiles(samples, n=20)
    p25, p50, p75, p90 = (f"{cuts[k] * 1e3:.0f}" for k in (4, 9, 14, 17))
    return f"{p50} ms ({p25}-{p75}, p90 {p90})"


def agent_alone(runs: int = 30, boxed: bool = False) -> list[float]:
    """How long the agent takes from fork to its first builtin, bare or in a box of the
    runner's own making (bwrap's own start): the floor under "agent exec'd"."""
    from orchestrator.box import bwrap

    box: list[str] = []
    if boxed:
        _problem, userns = bwrap.probe()
        workspace = Path(tempfile.mkdtemp(prefix="octopoid-box-"))
        mounts = bwrap.Mounts(workspace=workspace, inside=workspace)
        box = bwrap.command_line(bwrap.find_bwrap() or "bwrap", mounts, userns)
    out = []
    for _ in range(runs):
        before = time.time()
        said = subprocess.run(
            [*box, "bash", "-c", "echo $EPOCHREALTIME"], capture_output=True, text=True
        ).stdout
        out.append(float(said) - before)
    if boxed:
        shutil.rmtree(workspace, ignore_errors=True)
    return out


def network_rows(daemons: list[Daemon]) -> list[tuple[str, str]]:
    """What ``allow`` (the proxy, the box's bridge) adds to an agent's start over each other
    network mode of the same version: the difference of the same round's two samples."""
    rows = []
    for d in daemons:
        if d.mode != "bwrap" or d.network == "allow":
            continue
        [walled] = [
            a for a in daemons if (a.mode, a.version, a.network) == ("bwrap", d.version, "allow")
        ]
        added = [a - b for a, b in zip(walled.starts, d.starts, strict=True)]
        rows.append((f"agent exec'd: allow minus {d.network}, paired per round", quartiles(added)))
    return rows


#: Inside a box: one download from the server, straight or (argv[3] == "proxy") through
#: the box's proxy by CONNECT; prints its bytes per second.
CLIENT = r"""
import os, socket, sys, time
host, port, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
started = time.perf_counter()
if how == "proxy":
    conn = socket.create_connection(("127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])))
    conn.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
    assert conn.recv(100).startswith(b"HTTP/1.1 200")
else:
    conn = socket.create_connection((host, port))
conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
buffer, got = bytearray(1 << 20), 0
while n := conn.recv_into(buffer):
    got += n
print(got / (time.perf_counter() - started))
"""


def network_boxes(folder: Path, allow: list[str]) -> tuple[dict, object]:
    """Boxes on ``folder`` with each network mode (the runner's own making, as an attempt's:
    ``sandbox.box.bwrap_box``) and the proxy serving the ``allow`` one; close it after."""
    from orchestrator.base.netpolicy import Policy
    from orchestrator.box import bwrap
    from orchestrator.box.box import bwrap_box, exposures
    from orchestrator.box.proxy import NetworkProxy

    _problem, userns = bwrap.probe()
    shown = tuple((p, p) for p in exposures([], [], bwrap.HIDDEN))
    proxy = NetworkProxy(folder, Policy.of(allow)).start()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    boxes = {
        network: bwrap_box(
            bwrap.find_bwrap() or "bwrap", userns, folder, folder, (), shown, env, None,
            network=network, proxy=proxy if network == "allow" else None,
        )
        for network in ("allow", "none", "open")
    }  # fmt: skip
    return boxes, proxy


def bridge_alone(runs: int = 40) -> list[float]:
    """What ``network: allow`` adds to a box's start (its bridge, before the program), the
    same round's box with ``none`` taken from one with ``allow``: bash to its first builtin."""
    folder = Path(tempfile.mkdtemp(prefix="octopoid-box-"))
    boxes, proxy = network_boxes(folder, [])
    added = []
    for _ in range(runs):
        took = {}
        for network in ("allow", "none"):
            box = boxes[network]
            before = time.time()
            argv = box.wrap(["bash", "-c", "echo $EPOCHREALTIME"])
            said = subprocess.run(argv, env=box.env, capture_output=True, text=True).stdout
            took[network] = float(said) - before
        added.append(took["allow"] - took["none"])
    proxy.close()
    shutil.rmtree(folder, ignore_errors=True)
    return added


def bench_download(megabytes: int, rounds: int = 15) -> list[tuple[str, str]]:
    """A download of ``megabytes`` from a server on this machine (sendfile), by a box with
    ``network: open`` (straight) and by one with ``network: allow`` naming the server
    (through the proxy), interleaved round by round."""
    import socketserver
    import threading

    payload = Path(tempfile.mkdtemp(prefix="octopoid-download-")) / "payload"
    payload.write_bytes(os.urandom(1 << 20) * megabytes)

    class Send(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(4096)
            self.request.sendall(b"HTTP/1.0 200 OK\r\n\r\n")
            with open(payload, "rb") as f:
                self.request.sendfile(f)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Send)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    boxes, proxy = network_boxes(payload.parent, [f"127.0.0.1:{port}"])
    ways = {"direct": boxes["open"], "proxy": boxes["allow"]}
    rates: dict[str, list[float]] = {how: [] for how in ways}
    for _ in range(rounds):
        for how, box in ways.items():
            argv = box.wrap([sys.executable, "-c", CLIENT, "127.0.0.1", str(port), how])
            done = subprocess.run(argv, env=box.env, capture_output=True, text=True, check=True)
            rates[how].append(float(done.stdout))
    proxy.close()
    server.shutdown()
    shutil.rmtree(payload.parent, ignore_errors=True)
    direct, proxied = (statistics.median(rates[how]) for how in ("direct", "proxy"))
    ratios = sorted(p / d for p, d in zip(rates["proxy"], rates["direct"], strict=True))
    return [
        (f"download {megabytes} MB straight (network open), median", f"{direct / 1e6:.0f} MB/s"),
        (f"download {megabytes} MB through the proxy (allow), median", f"{proxied / 1e6:.0f} MB/s"),
        (
            f"through the proxy / straight, paired per round ({rounds})",
            f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})",
        ),
    ]


def bench_idle(seconds: int, mode: str) -> float:
    root, _env = scratch(1, mode)
    daemon = start_daemon(root)
    time.sleep(2)
    proc = psutil.Process(daemon.pid)
    before = proc.cpu_times()
    time.sleep(seconds)
    after = proc.cpu_times()
    stop(daemon, root)
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / seconds


def bench_overhead(attempts: int, concurrency: int, mode: str) -> float:
    """Wall time per attempt: claim, runner, workspace, prompt, agent, notes, submit."""
    root, _env = scratch(concurrency, mode)
    for i in range(attempts):
        q.create_task(f"overhead {i}")
    start = time.perf_counter()
    daemon = start_daemon(root)
    wait_provisional(attempts)
    elapsed = time.perf_counter() - start
    stop(daemon, root)
    return elapsed / attempts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--idle", type=int, default=60)
    parser.add_argument("--attempts", type=int, default=40)
    parser.add_argument("--postgres", action="store_true", help="the queue in PostgreSQL")
    parser.add_argument(
        "--sandbox", default="bwrap,none", help="modes to compare (comma-separated)"
    )
    parser.add_argument(
        "--network", default="allow", help="bwrap boxes' network modes to compare (allow,none)"
    )
    parser.add_argument("--download-mb", type=int, default=200, help="size of one download")
    parser.add_argument("--base", help="a commit whose code is measured against the new")
    parser.add_argument("--new", help="the new code's commit (default: this working tree)")
    parser.add_argument("--latency-only", action="store_true", help="skip idle and overhead")
    args = parser.parse_args()
    if args.postgres:
        global DATABASE
        from tests.pg_server import PgServer

        DATABASE = PgServer()
        DATABASE.start()
    try:
        report(args)
    finally:
        if DATABASE is not None:
            DATABASE.stop()


def report(args: argparse.Namespace) -> None:
    modes = args.sandbox.split(",")
    print(f"queue: {'PostgreSQL' if args.postgres else 'folders'}; sandbox: {', '.join(modes)}")
    rows = []
    networks = args.network.split(",")
    daemons = bench_latency(args.tasks, modes, args.new, args.base, networks)
    for d in daemons:
        what = f"{args.tasks} tasks, {d.mode}, network {d.network}, {d.version}"
        rows += [
            (f"enqueue -> claimed ({what})", quartiles(d.claims)),
            (f"enqueue -> agent exec'd ({what})", quartiles(d.starts)),
        ]
    if args.base:  # the same round's samples of both versions, taken moments apart
        for new, base in zip(daemons[::2], daemons[1::2], strict=True):
            ratios = sorted(a / b for a, b in zip(new.starts, base.starts, strict=True))
            rows.append(
                (
                    f"agent exec'd, new/base paired per round ({new.mode})",
                    f"{statistics.median(ratios):.2f}x ({ratios[len(ratios) // 4]:.2f}-"
                    f"{ratios[3 * len(ratios) // 4]:.2f})",
                )
            )
    rows += network_rows(daemons)
    if len(networks) > 1:
        rows.append(
            ("a box's start: allow minus none, paired (bash alone)", quartiles(bridge_alone()))
        )
        rows += bench_download(args.download_mb)
    rows.append(("bash alone: fork to its first builtin", quartiles(agent_alone())))
    if "bwrap" in modes:
        rows.append(("bash in a bwrap box alone: the same", quartiles(agent_alone(boxed=True))))
    if not args.latency_only:
        idle = bench_idle(args.idle, modes[0])
        one = bench_overhead(args.attempts, 1, modes[0])
        four = bench_overhead(args.attempts, 4, modes[0])
        rows += [
            (f"idle daemon CPU over {args.idle} s ({modes[0]})", f"{idle:.2f} %"),
            (
                f"wall time per attempt, 1 agent ({args.attempts}, {modes[0]})",
                f"{one * 1e3:.0f} ms",
            ),
            (
                f"wall time per attempt, 4 agents ({args.attempts}, {modes[0]})",
                f"{four * 1e3:.0f} ms",
            ),
            ("throughput ratio, 4 agents vs 1", f"{one / four:.2f}x"),
        ]
    print("p50 (p25-p75, p90)")
    for name, value in rows:
        print(f"{name:<64}{value:>30}")


if __name__ == "__main__":
    main()

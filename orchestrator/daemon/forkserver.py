"""A pre-started runner: a process that imported the runner once and forks one per attempt.

A runner started with ``python -m orchestrator.roles.implementer`` spends most of its start
importing octopoid (4x an empty interpreter). The daemon instead starts this server once,
before any thread of its own exists; the server imports the runner and stays
single-threaded, so forking it is safe. Each attempt is forked twice (the middle process
exits at once), so the runner is re-parented to the daemon, a subreaper: the daemon waits
for it, reads its exit status and signals it exactly as a runner it spawned itself, and a
runner outlives the server and the daemon as it always did. The server dies with the
daemon (``PR_SET_PDEATHSIG``) or when its socket closes; a server that fails to answer is
given up and runners are spawned as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback

from .. import box as sandbox
from .. import config
from ..base import bytecode, forge_token
from ..base.processes import PR_SET_PDEATHSIG, note_forked
from ..box import bwrap
from ..model.exceptions import OctopoidError

RUNNER_MODULE = "orchestrator.roles.implementer"
# What every attempt imports on first use (measured: a forked runner's first attempt in a
# process took 3x its second): imported once here instead. The API backend is left out.
PRELOAD = (
    RUNNER_MODULE,
    "git",
    "orchestrator.box.clone",
    "orchestrator.backends.command",
    "orchestrator.backends.claude_code",
)
# And where the queue is in PostgreSQL, its driver: importing psycopg was 95 ms of each
# runner's start (a third of enqueue -> agent exec). No connection is opened before a fork.
POSTGRES_PRELOAD = ("psycopg",)
ANSWER_SECONDS = 5.0  # a server that takes longer to fork is given up
MESSAGE_BYTES = 1 << 20  # one request: argv, cwd, log path and the runner's environment


class ForkedRunner:
    """A runner forked by the server and re-parented to this process: the part of
    ``subprocess.Popen`` the scheduler uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(RUNNER_MODULE, timeout or 0.0)
            time.sleep(0.02)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


READY = b"ready"  # said once the server's imports are done
READY_SECONDS = 120.0  # a machine so busy that its imports take longer spawns runners


class ForkServer:
    """The daemon's side: start the server, ask it for runners."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno()), str(os.getpid())],
            env=bytecode.runner_env(forge_token.without_token(os.environ), bytecode.cache_dir()),
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the daemon's group is the daemon's
        )
        theirs.close()
        self._sock.settimeout(READY_SECONDS)  # its imports, however busy the machine is
        try:
            said = self._sock.recv(MESSAGE_BYTES)
        except OSError:
            self.close()
            raise
        if said != READY:
            self.close()
            raise OSError(f"the fork server did not start: it said {said!r}")
        self._sock.settimeout(ANSWER_SECONDS)

    def spawn(self, args: list[str], env: dict[str, str], cwd: str, log: str) -> ForkedRunner:
        """A runner for ``args`` (task id, agent name); OSError if the server cannot."""
        request = {"args": args, "env": env, "cwd": cwd, "log": log}
        self._sock.sendall(json.dumps(request).encode())
        answer = self._sock.recv(MESSAGE_BYTES)
        if not answer:
            raise OSError("the fork server exited")
        reply = json.loads(answer)
        if "pid" not in reply:
            raise OSError(f"the fork server could not fork: {reply.get('error')}")
        return ForkedRunner(reply["pid"])

    def close(self) -> None:
        """Stop the server (its runners go on) and reap it."""
        self._sock.close()  # the server reads EOF and exits
        try:
            self.proc.wait(ANSWER_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- the server ---------------------------------------------------------------------------


def warm() -> None:
    """Build what every attempt's first output builds: the redaction stream's gate on
    secret shapes (detect-secrets' detectors and a Hyperscan or RE2 compile), 0.2 s of
    each runner's start otherwise (measured)."""
    from ..base import redaction, shape_gate

    if shape_gate.FASTEST is not None:
        redaction.compiled_gate(shape_gate.FASTEST)
    else:
        redaction.shape_scanner()


def keep_probe_fresh() -> None:
    """Where boxes are bwrap's, run its probe before it is stale (half its time to live
    left), between requests: every runner forked inherits the answer instead of running a
    box of its own before its agent's (10 ms quiet, up to 70 ms on a loaded machine)."""
    with contextlib.suppress(OctopoidError):  # a bad config.yaml: the runner says so
        if sandbox.mode() == "bwrap":
            bwrap.probe(margin=bwrap.PROBE_TTL_SECONDS / 2)


def serve(sock: socket.socket) -> None:
    """Answer each request with a forked runner's pid, until the daemon goes."""
    postgres = config.store_choice()[0] == "postgres"  # a folder store's daemon does not pay
    for module in PRELOAD + (POSTGRES_PRELOAD if postgres else ()):  # the point of it all
        importlib.import_module(module)
    warm()
    keep_probe_fresh()
    sock.sendall(READY)  # the daemon waits for this before it asks for a runner
    sock.settimeout(bwrap.PROBE_TTL_SECONDS / 4)  # an idle server keeps the probe fresh
    while True:
        try:
            request = sock.recv(MESSAGE_BYTES)
        except TimeoutError:
            keep_probe_fresh()
            continue
        if not request:
            return
        try:
            pid = _fork_runner(json.loads(request), sock)
            answer = {"pid": pid}
        except OSError as exc:
            answer = {"error": str(exc)}
        sock.sendall(json.dumps(answer).encode())
        keep_probe_fresh()  # after answering: off the way of the runner just forked


def _fork_runner(request: dict, sock: socket.socket) -> int:
    """Fork twice; the middle process says the runner's pid and exits, so the runner is
    re-parented to the daemon before this returns."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read_end)
        code = 0
        try:
            pid = os.fork()
            if pid == 0:
                os.close(write_end)
                _become_runner(request, sock)
            os.write(write_end, str(pid).encode())
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        said = f.read()
    os.waitpid(middle, 0)
    if not said:
        raise OSError("fork failed")
    return int(said)


def _become_runner(request: dict, sock: socket.socket) -> None:
    """In the forked child: the environment, files and session ``Popen`` would give it;
    then the runner's ``main``. Never returns."""
    code, note = 1, None
    try:
        sock.close()
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        note = note_forked(request["env"])  # found by its marks, as a spawned runner is
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        sys.argv = [RUNNER_MODULE, *request["args"]]
        code = sys.modules[RUNNER_MODULE].main(request["args"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        if note is not None:
            with contextlib.suppress(OSError):
                note.unlink()
        os._exit(code)


def main(argv: list[str]) -> None:
    """``python -m orchestrator.daemon.forkserver FD DAEMON-PID``: die with the daemon."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(argv[1]):  # it died before the line above
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(socket.socket(fileno=int(argv[0])))


if __name__ == "__main__":
    main(sys.argv[1:])

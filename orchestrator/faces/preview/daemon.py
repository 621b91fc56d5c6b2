"""One task's preview as a process of its own: ``python -m orchestrator.faces.preview.daemon TASK``.

It makes the preview's box (``sandbox.preview_box``: a fresh clone of the branch, its
set-up, ``preview.network``), starts ``preview.command`` there behind the relay
(``sandbox/portrelay.py``) on the box's ``$OCTOPOID_PORT``, and once the server answers
opens ``preview.sock`` in its folder. Each connection the review page makes there (after
its sign-in) is handed to the relay, which carries it to the server inside. It stops on
SIGTERM (``preview.stop``), when its task leaves review, after ``preview.idle_seconds``
without a connection, or when the server ends; everything it started goes with it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ... import box as sandbox
from ... import config
from ...base.fsutil import remove_tree
from ...base.processes import in_new_session_dying_with_parent, kill_claim_processes, owner_tag
from ...box.box import Box
from ...box.bwrap import CHANNEL_INSIDE
from ...model import defaults
from ...model.exceptions import OctopoidError, SetupFailed
from ...model.tasks import Task, TaskId, TaskState
from ...queue import machine as queue_utils
from . import PUBLIC_SOCKET, RELAY_SOCKET, prefix

RELAY = Path(__file__).resolve().parents[2] / "box" / "portrelay.py"
STOP_SECONDS = 5.0


class Stop(Exception):
    """Why the preview ends (a signal, its task, its idleness, its server)."""


class Preview:
    def __init__(self, task: Task, cfg: dict, folder: Path, box: Box) -> None:
        self.task, self.folder, self.box = task, folder, box
        self.command = cfg["preview"]["command"]
        self.idle = cfg["preview"]["idle_seconds"]
        self.start_seconds = cfg["preview"]["start_seconds"]
        self.proc: subprocess.Popen | None = None

    def run(self) -> str:
        """Serve until told to stop; why it stopped."""
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(self.folder / RELAY_SOCKET))
            listener.listen(1)
            self.proc = self._start_server()
            try:
                relay = self._relay(listener)
                return self._serve(relay)
            except Stop as exc:
                return str(exc)
            finally:
                self._stop_server()

    def _start_server(self) -> subprocess.Popen:
        (self.folder / "lib").mkdir(exist_ok=True)
        shutil.copyfile(RELAY, self.folder / "lib" / RELAY.name)
        inside = CHANNEL_INSIDE if self.box.sandboxed else self.folder
        port = self.box.env["OCTOPOID_PORT"]
        relay = [sys.executable, "-I", "-S", str(inside / "lib" / RELAY.name)]
        argv = [*relay, str(inside / RELAY_SOCKET), port, "--", "sh", "-c", self.command]
        print(f"[octopoid] preview of {self.task.label}: $ {self.command} (port {port})")
        sys.stdout.flush()
        return subprocess.Popen(
            self.box.wrap(argv),
            cwd=self.box.cwd,
            env=self.box.env,
            stdin=subprocess.DEVNULL,
            preexec_fn=in_new_session_dying_with_parent(),
        )

    def _relay(self, listener: socket.socket) -> socket.socket:
        """The relay's connection, once it says its server answers."""
        deadline = time.monotonic() + self.start_seconds
        listener.settimeout(0.2)
        while True:
            self._check_server(deadline)
            with contextlib.suppress(TimeoutError):
                relay, _ = listener.accept()
                break
        relay.settimeout(0.2)
        while True:
            self._check_server(deadline)
            with contextlib.suppress(TimeoutError):
                said = relay.recv(64)
                if said.startswith(b"ready"):
                    return relay
                if not said:
                    self._ended("the preview's relay closed before its server answered")

    def _check_server(self, deadline: float) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise Stop(f"the preview's server exited with status {self.proc.returncode}")
        if time.monotonic() > deadline:
            raise Stop(f"the preview's server did not answer within {self.start_seconds}s")

    def _serve(self, relay: socket.socket) -> str:
        public = socket.socket(socket.AF_UNIX)
        staged = self.folder / f".{PUBLIC_SOCKET}"
        public.bind(str(staged))
        public.listen(64)
        os.replace(staged, self.folder / PUBLIC_SOCKET)  # there once it can be served
        print(f"[octopoid] preview of {self.task.label}: ready")
        sys.stdout.flush()
        picker = selectors.DefaultSelector()
        picker.register(public, selectors.EVENT_READ, "public")
        picker.register(relay, selectors.EVENT_READ, "relay")
        last, looked = time.monotonic(), 0.0
        with public, relay, picker:
            while True:
                for key, _ in picker.select(0.5):
                    if key.data == "relay" and not relay.recv(64):
                        self._ended("the preview's relay stopped")
                    if key.data == "public":
                        conn, _ = public.accept()
                        with conn:
                            socket.send_fds(relay, [b"c"], [conn.fileno()])
                        last = time.monotonic()
                if time.monotonic() - last > self.idle:
                    raise Stop(f"no request for {self.idle}s")
                if time.monotonic() - looked > defaults.PREVIEW_WATCH_SECONDS:
                    looked = time.monotonic()
                    self._check_task()
                self._check_server(float("inf"))

    def _ended(self, why: str) -> None:
        """The relay went: the server's exit status says more, once it is in."""
        assert self.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(STOP_SECONDS)
        self._check_server(float("inf"))
        raise Stop(why)

    def _check_task(self) -> None:
        try:
            state = queue_utils.get_task(self.task.id).state
        except OctopoidError:
            state = None
        if state is not TaskState.PROVISIONAL:
            where = state.value if state is not None else "gone"
            raise Stop(f"{self.task.label} left review ({where})")

    def _stop_server(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _on_signal(signum: int, frame: object) -> None:
    raise Stop(f"stopped ({signal.Signals(signum).name})")


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m orchestrator.faces.preview.daemon TASK-ID", file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    token = secrets.token_hex(16)  # marks the preview's processes: all die with it
    task_id = TaskId(args[0])
    folder = Path(tempfile.gettempdir()) / f"{prefix(task_id)}{owner_tag()}"
    try:
        folder.mkdir(mode=0o700)
        task = queue_utils.get_task(task_id)
        with sandbox.preview_box(task, folder, token) as box:
            why = Preview(task, config.load_config(), folder, box).run()
    except Stop as exc:
        why = str(exc)
    except SetupFailed as exc:
        print(f"{exc.output}\noctopoid preview: {exc}", flush=True)
        return 1
    except OctopoidError as exc:
        print(f"octopoid preview: {exc}", flush=True)
        return 1
    finally:
        kill_claim_processes(token)
        remove_tree(folder)
    print(f"[octopoid] preview stopped: {why}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

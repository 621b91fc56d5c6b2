"""Each attempt's working world through the real scheduler (docs/workspace.md): a Python
project whose checks need a dependency its set-up installs from a package index this test
serves (CI reaches only the public registries), twice, the second time from the cache;
two attempts at once serving on their own ``$OCTOPOID_PORT`` with a declared service that
dies with each."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import os
import re
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from orchestrator.queue import machine as q

from ..support import HELPERS, branch_file, serve_in_thread, set_config, wait_for, write_agents
from ..support.daemon import Daemon, state_of

pytestmark = pytest.mark.slow
WHEEL = "demo_dep-1.0-py3-none-any.whl"
PADDING = 2 * 1024 * 1024  # incompressible bytes in the wheel: what a download costs


def wheel() -> bytes:
    """A wheel of ``demo_dep`` (``VALUE = 42``), built by hand as pip expects one."""
    files = {
        "demo_dep/__init__.py": b"VALUE = 42\n",
        "demo_dep/padding.bin": os.urandom(PADDING),
        "demo_dep-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-dep\nVersion: 1.0\n",
        "demo_dep-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    files["demo_dep-1.0.dist-info/RECORD"] = (
        "\n".join([*record, "demo_dep-1.0.dist-info/RECORD,,"]) + "\n"
    ).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


class Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 index of one wheel, served as PyPI serves files (cacheable for a year);
    the wheel's bytes sent are counted."""

    def do_GET(self) -> None:
        data, kind, cache = self.server.page, "text/html", "max-age=600"
        if self.path.endswith(".whl"):
            data, kind, cache = (
                self.server.wheel,
                "application/octet-stream",
                "max-age=31536000, immutable",
            )
            self.server.sent += len(data)
        elif not self.path.startswith("/simple/demo-dep"):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", cache)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    server.wheel, server.sent = wheel(), 0
    digest = hashlib.sha256(server.wheel).hexdigest()
    server.page = f'<a href="/files/{WHEEL}#sha256={digest}">{WHEEL}</a>\n'.encode()
    serve_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()


def setup_seconds(task_id: str) -> float:
    """What the first set-up of the task's attempt took, as its notes say."""
    return float(re.search(r"set-up: done in ([0-9.]+)s", q.get_task_notes(task_id)).group(1))


def test_the_second_attempt_s_setup_installs_from_the_cache(
    git_project: Path, tmp_path: Path, index, bwrap_ok: None
) -> None:
    port = index.server_address[1]
    install = (
        f"{sys.executable} -m pip install -q --disable-pip-version-check --no-input "
        f"--target .deps --index-url http://127.0.0.1:{port}/simple/ demo-dep "
        f"--trusted-host 127.0.0.1:{port}"  # pip caches plain http only from trusted hosts
    )
    check = f"PYTHONPATH=.deps {sys.executable} -c 'import demo_dep; assert demo_dep.VALUE == 42'"
    write_agents(git_project)
    set_config(
        git_project,
        workspace={
            "setup": [install],
            "caches": ["pip"],
            "network": {"allow": [f"127.0.0.1:{port}"]},
        },
        checks={"commands": [check]},
    )
    daemon = Daemon(git_project, tmp_path / "runs", {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    try:
        first = q.create_task("first").id
        wait_for("the first in review", lambda: state_of(first) == "provisional", timeout=180)
        downloaded = index.sent
        second = q.create_task("second").id
        wait_for("the second in review", lambda: state_of(second) == "provisional", timeout=180)
    finally:
        daemon.stop()
    assert downloaded == len(index.wheel)  # once: the checks' set-up read the cache already
    assert index.sent == downloaded  # the second attempt downloaded nothing
    cold, warm = setup_seconds(first), setup_seconds(second)
    print(f"set-up: first {cold:.1f}s, {downloaded} bytes; second {warm:.1f}s, 0 bytes")
    assert any("passed" in line for line in q.get_task(second).history)  # checks saw the dep


class Barrier:
    """Lets every agent go once ``count`` of them are up at once."""

    def __init__(self, count: int) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port, self.count = self.server.getsockname()[1], count
        threading.Thread(target=self._gather, daemon=True).start()

    def _gather(self) -> None:
        waiting = []
        while len(waiting) < self.count:
            conn, _ = self.server.accept()
            conn.makefile().readline()
            waiting.append(conn)
        for conn in waiting:
            conn.sendall(b"go\n")
            conn.close()


def test_two_attempts_serve_on_their_own_port_at_once_and_their_services_die_with_them(
    git_project: Path, tmp_path: Path, bwrap_ok: None
) -> None:
    barrier = Barrier(2)
    write_agents(
        git_project,
        argv=[sys.executable, str(HELPERS / "port_agent.py"), str(barrier.port)],
        max_concurrent=2,
    )
    mark = f"octopoid-test-service-{os.getpid()}"
    service = f"{sys.executable} {HELPERS / 'port_agent.py'} service {mark}"
    ready = f"{sys.executable} {HELPERS / 'port_agent.py'} ready"
    set_config(
        git_project,
        sandbox={"network": "open"},  # the host's loopback: where two servers could clash
        workspace={"services": [{"name": "greeter", "command": service, "ready": ready}]},
    )
    daemon = Daemon(git_project, tmp_path / "runs")
    try:
        ids = [q.create_task(f"serve {n}").id for n in range(2)]
        for tid in ids:
            wait_for(
                f"TASK-{tid} in review", lambda t=tid: state_of(t) == "provisional", timeout=120
            )
    finally:
        daemon.stop()
    said = [branch_file(git_project, tid, "served.txt") for tid in ids]
    served = {line.split(";")[0] for line in said}
    assert len(served) == 2, said  # two ports, at once (each waited for the other)
    assert all(f"hello from {mark}; barrier said go" in line for line in said)
    time.sleep(0)  # nothing to wait for: the attempts are over
    left = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True).stdout
    assert left == ""  # each service stopped with its attempt

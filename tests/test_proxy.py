"""The runner's network proxy against hostile requests, reached as a box reaches it: through
the real bridge (sandbox/netbridge.py), which hands its listening socket over and becomes
the program. The box's namespace itself is test_hostile_agents.py's part."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from orchestrator.base.netpolicy import Policy
from orchestrator.box.proxy import BRIDGE, PROXY_SOCKET, Limits, NetworkProxy

from .support import PAGE, Served, wait_for


@contextmanager
def boxed(tmp_path: Path, allow: list[str], **limits: float) -> Iterator[tuple[NetworkProxy, int]]:
    """A proxy for ``allow`` and a bridge that handed it its socket (its program waits on
    stdin); (the proxy, the port the box's programs are told to use)."""
    proxy = NetworkProxy(tmp_path, Policy.of(allow), Limits(**limits)).start()
    said = "import os; print(os.environ['HTTP_PROXY'], flush=True); input()"
    program = [sys.executable, "-c", said]
    bridge = [sys.executable, "-I", "-S", str(BRIDGE), str(tmp_path / PROXY_SOCKET)]
    box = subprocess.Popen(
        [*bridge, "--", *program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield proxy, int(box.stdout.readline().rsplit(":", 1)[1])
    finally:
        box.communicate("\n", timeout=30)
        proxy.close()


def ask(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send ``request`` to the box's proxy; everything it answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_only_named_destinations_are_reached_and_each_refusal_says_why(
    tmp_path: Path, loopback_servers: list[Served]
) -> None:
    named, other = (served.port for served in loopback_servers)
    with boxed(tmp_path, [f"127.0.0.1:{named}", "localhost"]) as (proxy, port):
        page = ask(port, f"GET http://127.0.0.1:{named}/a?b=1 HTTP/1.1\r\nHost: x\r\n"
                         "Proxy-Authorization: Basic c2VjcmV0\r\n\r\n".encode())  # fmt: skip
        assert page.startswith(b"HTTP/1.0 200") and page.endswith(PAGE)
        assert b"X-Seen: GET /a?b=1 HTTP/1.1 None" in page  # origin-form, no Proxy-* header
        with socket.create_connection(("127.0.0.1", port), 10) as tunnel:
            tunnel.sendall(f"CONNECT 127.0.0.1:{named} HTTP/1.1\r\n\r\n".encode())
            assert tunnel.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
            tunnel.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert PAGE in tunnel.makefile("rb").read()
        refused = {
            f"CONNECT 127.0.0.1:{other} HTTP/1.1": f"127.0.0.1:{other}",  # an address literal
            f"CONNECT [::ffff:127.0.0.1]:{other} HTTP/1.1": f"127.0.0.1:{other}",  # the same
            "CONNECT 169.254.169.254:80 HTTP/1.1": "169.254.169.254:80",  # cloud metadata
            "GET http://refused.example/steal HTTP/1.1": "refused.example:80",
            f"CONNECT localhost:{other} HTTP/1.1": f"localhost:{other}",  # named; resolves home
        }
        for line in refused:
            assert ask(port, f"{line}\r\n\r\n".encode()).startswith(b"HTTP/1.1 403 Forbidden")
    lines = proxy.refusals()
    assert set(proxy.refused) == set(refused.values())
    assert "network: refused refused.example:80: not on this box's list" in "\n".join(lines)
    rebound = proxy.refused[f"localhost:{other}"]
    assert rebound.startswith(("it resolves to 127.0.0.1, a loopback", "it resolves to ::1"))
    assert proxy.reached == {f"127.0.0.1:{named}": 2}


def test_what_is_not_a_proxy_request_is_refused_with_its_reason(
    tmp_path: Path, loopback_servers: list[Served]
) -> None:
    named = loopback_servers[0].port
    with boxed(tmp_path, [f"127.0.0.1:{named}"], head_bytes=2048) as (proxy, port):
        answers = {
            b"GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n": b"405",  # origin-form: no proxy
            b"GET https://example.com/ HTTP/1.1\r\n\r\n": b"405",  # TLS goes by CONNECT
            b"\x16\x03\x01 hello\r\n\r\n": b"400",  # not HTTP at all
            b"CONNECT example.com HTTP/1.1\r\n\r\n": b"400",  # no port
            b"CONNECT example.com:\xb2 HTTP/1.1\r\n\r\n": b"400",  # a digit int() refuses
            b"GET http://x/ HTTP/1.1\r\nX: " + b"a" * 4096 + b"\r\n\r\n": b"431",  # head too big
        }
        for request, status in answers.items():
            answer = ask(port, request)
            assert answer.startswith(b"HTTP/1.1 " + status), (request[:40], answer)
            assert b"octopoid: " in answer
    assert not proxy.refused and sum(proxy.problems.values()) == len(answers)


def test_a_slow_head_a_flood_and_a_download_past_the_allowance_are_cut_off(
    tmp_path: Path, loopback_servers: list[Served]
) -> None:
    named = loopback_servers[0].port
    limits = {"head_seconds": 2, "connections": 2, "bytes": 100_000}
    with boxed(tmp_path, [f"127.0.0.1:{named}"], **limits) as (proxy, port):
        slow = [socket.create_connection(("127.0.0.1", port), 10) for _ in range(2)]
        for conn in slow:
            conn.sendall(b"CONNECT 127.0.0.1:")  # ... and never the rest (slowloris)
        # a third connection, accepted after those two, finds no slot
        assert ask(port, b"CONNECT x:1 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 503")
        for conn in slow:  # each slot is given back once its head is overdue
            assert conn.makefile("rb").read().startswith(b"HTTP/1.1 408")
            conn.close()
        wait_for("the slots given back", proxy.idle, 10)
        big = f"GET http://127.0.0.1:{named}/ HTTP/1.1\r\nX-Size: 1000000\r\n\r\n".encode()
        assert len(ask(port, big)) < 1_000_000  # cut off at the attempt's allowance
    said = "\n".join(proxy.refusals())
    assert "more than 2 connections at once" in said and "not sent within 2s" in said
    assert "bytes through the proxy were spent" in said


def test_a_box_can_hand_over_only_listening_sockets_and_everything_ends_with_close(
    tmp_path: Path, loopback_servers: list[Served]
) -> None:
    named = loopback_servers[0].port
    with boxed(tmp_path, [f"127.0.0.1:{named}"]) as (proxy, port):
        with socket.socket(socket.AF_UNIX) as forger, open(__file__, "rb") as file:
            forger.connect(str(tmp_path / PROXY_SOCKET))
            socket.send_fds(forger, [b"proxy\n"], [file.fileno()])
            wait_for("the forged sockets refused", lambda: proxy.problems, 10)
        assert "a box handed over sockets octopoid did not ask for" in proxy.refusals()[0]
        tunnel = socket.create_connection(("127.0.0.1", port), 10)
        tunnel.sendall(f"CONNECT 127.0.0.1:{named} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.recv(100).startswith(b"HTTP/1.1 200")
        proxy.close()  # the attempt ends: its live tunnels with it
        assert tunnel.recv(100) == b""
        assert not (tmp_path / PROXY_SOCKET).exists()
        started = time.monotonic()
        with pytest.raises(OSError):  # nothing listens for the box any more
            ask(port, b"CONNECT x:1 HTTP/1.1\r\n\r\n", timeout=5)
        assert time.monotonic() - started < 5

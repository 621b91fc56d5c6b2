"""What a box asks the network proxy (``proxy.py``): a request's head, read within limits of
time and size and parsed into a destination, and the answer that refuses it.

Only two forms go through: ``CONNECT host:port`` (a tunnel: TLS, or anything else) and an
absolute-form ``http://`` request, forwarded as origin-form with ``Connection: close`` (a
second request on the same connection would go to the first one's destination) and
without the proxy's own headers. Everything else is refused with its reason.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..base.text import ascii_int

METHOD_RE = re.compile(r"[A-Z]{1,20}")
VERSIONS = ("HTTP/1.0", "HTTP/1.1")
#: Hop-by-hop headers of a forwarded request (and the proxy's credentials, if any).
HOP_HEADERS = {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}
REASONS = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed",
           408: "Request Timeout", 431: "Request Header Fields Too Large",
           502: "Bad Gateway", 503: "Service Unavailable"}  # fmt: skip
DRAIN_BYTES = 1 << 20  # of a refused request read (and dropped) before closing


class Refused(Exception):
    """A request not served: its status, why, and the destination when the list said no."""

    def __init__(self, status: int, why: str, destination: str | None = None) -> None:
        super().__init__(why)
        self.status, self.why, self.destination = status, why, destination


@dataclass
class Request:
    host: str
    port: int
    head: bytes = b""  # what goes to the destination first (none for a tunnel)
    rest: bytes = b""  # what the client sent after its head
    tunnel: bool = True  # CONNECT (or a forwarded port): no head of its own


def read_request(conn: socket.socket, seconds: float, max_bytes: int) -> Request:
    """The client's request, its head read within ``seconds`` and ``max_bytes``."""
    head, rest = _read_head(conn, seconds, max_bytes)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not METHOD_RE.fullmatch(parts[0]) or parts[2] not in VERSIONS:
        raise Refused(400, "not an HTTP request")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _authority(target)
        return Request(host, port, rest=rest)
    if not target.startswith("http://"):
        raise Refused(405, "only CONNECT and absolute-form http:// requests go through")
    try:
        url = urlsplit(target)
        port = url.port or 80
    except ValueError:
        raise Refused(400, "a URL that cannot be read") from None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [ln for ln in lines[1:] if ln.split(":", 1)[0].strip().lower() not in HOP_HEADERS]
    out = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
    return Request(url.hostname or "", port, out.encode("latin-1"), rest, tunnel=False)


def _read_head(conn: socket.socket, seconds: float, max_bytes: int) -> tuple[bytes, bytes]:
    """(the head, what came after it); a trickle (slowloris) or a flood is refused."""
    deadline = time.monotonic() + seconds
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > max_bytes:
            raise Refused(431, f"a request head over {max_bytes} bytes")
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused(408, f"a request head not sent within {seconds:g}s")
        conn.settimeout(left)
        try:
            chunk = conn.recv(4096)
        except TimeoutError:
            continue
        if not chunk:
            raise OSError("the client went away")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > max_bytes:
        raise Refused(431, f"a request head over {max_bytes} bytes")
    return head, rest


def _authority(target: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) of a CONNECT."""
    host, _, digits = target.rpartition(":")
    port = ascii_int(digits)
    if not host or port is None or not 0 < port < 65536:
        raise Refused(400, "a CONNECT names host:port")
    return host.removeprefix("[").removesuffix("]"), port


def answer(conn: socket.socket, status: int, why: str) -> None:
    """Say why a request was not served (a plain-text body); what the client still sends is
    read and dropped for a moment, so that closing on it does not reset the answer away."""
    body = f"octopoid: {why}\n".encode()
    head = (
        f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        conn.settimeout(1)
        conn.sendall(head.encode() + body)
        conn.shutdown(socket.SHUT_WR)
        drained = 0
        while drained < DRAIN_BYTES and (chunk := conn.recv(65536)):
            drained += len(chunk)

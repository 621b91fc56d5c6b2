"""The runner's side of a box's network (``network: allow``): a proxy that lets through only
the destinations the box's list names (``netpolicy.py``), gone with the attempt. The box's
bridge (``netbridge.py``) hands it the box's listening sockets; how a destination is judged,
what is bounded and what the log says: docs/security.md, "The network". A forwarded
loopback port is a tunnel to its one destination.

Its size: one proxy with its two request forms and the judging of each; split, the
reasons a destination is refused would be read in two places.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import shutil
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..base import netpolicy
from ..base.netpolicy import Entry, IPAddress, Policy
from ..model import defaults
from .httphead import Refused, Request, answer, read_request

PROXY_SOCKET = "proxy.sock"
BRIDGE = Path(__file__).with_name("netbridge.py")
MAX_LINES = 20  # destinations named one by one in the log and notes; the rest are counted
MAX_KEPT = 1000  # destinations remembered per attempt
MAX_BOXES = 64  # boxes one proxy serves (the anthropic backend's tools restart theirs)
MAX_FDS = 32  # sockets one box hands over: the proxy's and its forwarded ports
CHUNK = 1 << 20
TICK_SECONDS = 30  # how often a quiet tunnel looks at its idle time
TURNED_AWAY_AT_ONCE = 4  # connections over the limit told why at once; others just closed


@dataclass(frozen=True)
class Limits:
    connections: int = defaults.PROXY_MAX_CONNECTIONS
    bytes: int = defaults.PROXY_MAX_BYTES
    head_seconds: float = defaults.PROXY_HEAD_SECONDS
    head_bytes: int = defaults.PROXY_MAX_HEAD_BYTES
    idle_seconds: float = defaults.PROXY_IDLE_SECONDS
    connect_seconds: float = defaults.PROXY_CONNECT_SECONDS


@dataclass
class Tunnel:
    last: float = field(default_factory=time.monotonic)  # when a byte last went either way


class NetworkProxy:
    """Serves the boxes of one attempt (or of its checks) in threads until ``close``."""

    def __init__(self, folder: Path, policy: Policy, limits: Limits | None = None) -> None:
        self.folder, self.policy, self.limits = folder, policy, limits or Limits()
        self.refused: dict[str, str] = {}  # destination -> why
        self.reached: dict[str, int] = {}  # destination -> connections
        self.problems: dict[str, int] = {}  # what was wrong with a request -> how often
        self.moved = 0
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.limits.connections)
        self._turning_away = threading.BoundedSemaphore(TURNED_AWAY_AT_ONCE)
        self._live: set[socket.socket] = set()
        self._boxes = 0
        (folder / "lib").mkdir(exist_ok=True)
        shutil.copyfile(BRIDGE, folder / "lib" / BRIDGE.name)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(folder / PROXY_SOCKET))
        os.chmod(folder / PROXY_SOCKET, 0o600)
        self._server.listen(MAX_BOXES)
        self._wake, self._woken = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, ("register", None))
        self._selector.register(self._woken, selectors.EVENT_READ, ("stop", None))
        self._thread = threading.Thread(target=self._loop, name="network-proxy", daemon=True)

    def start(self) -> NetworkProxy:
        self._thread.start()
        return self

    def bridge(self, inside: Path) -> list[str]:
        """The argv that starts a box's bridge before its program (``--`` last), the
        proxy's folder seen in the box at ``inside``."""
        script = str(inside / "lib" / BRIDGE.name)
        forwards = [str(entry) for entry in self.policy.forwards()]
        return [sys.executable, "-I", "-S", script, str(inside / PROXY_SOCKET), *forwards, "--"]

    def close(self) -> None:
        """Stop serving: listeners, boxes and live connections are closed."""
        if self._selector.get_map() is None:
            return  # closed already
        with contextlib.suppress(OSError):
            self._wake.send(b"x")
        self._thread.join(5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()
        self._wake.close()
        with self._lock:
            live = list(self._live)
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        (self.folder / PROXY_SOCKET).unlink(missing_ok=True)

    def idle(self) -> bool:
        """Whether no connection is being served now."""
        with self._lock:
            return not self._live

    def refusals(self) -> list[str]:
        """One line per refused destination, then what was wrong with other requests."""
        with self._lock:
            refused, problems = list(self.refused.items()), dict(self.problems)
        out = [f"network: refused {dest}: {why}" for dest, why in refused[:MAX_LINES]]
        if len(refused) > MAX_LINES:
            out.append(f"network: and {len(refused) - MAX_LINES} more destinations refused")
        return out + [f"network: {n} request(s) not served: {what}" for what, n in problems.items()]

    def lines(self) -> list[str]:
        """What the attempt's log and notes say: what was refused, then what was reached."""
        with self._lock:
            reached = list(self.reached.items())
        shown = [f"network: reached {dest} ({n} connection(s))" for dest, n in reached[:MAX_LINES]]
        return self.refusals() + shown

    # --- the event loop: boxes hand their sockets over, connections are accepted --------

    def _loop(self) -> None:
        while True:
            for key, _ in self._selector.select():
                kind, data = key.data
                if kind == "stop":
                    return
                if kind == "register":
                    self._register()
                elif kind == "box":
                    self._box_gone(key.fileobj, data)
                else:
                    self._accept(key.fileobj, data)

    def _register(self) -> None:
        """A box's bridge hands over its listening sockets, a line each saying what for."""
        try:
            conn, _ = self._server.accept()
        except OSError:
            return
        try:
            conn.settimeout(1)  # a bridge says it all at once
            message, fds, _, _ = socket.recv_fds(conn, 4096, MAX_FDS)
        except OSError:
            conn.close()
            return
        sockets = [_listening(fd) for fd in fds]
        what = message.decode("ascii", "replace").splitlines()
        allowed = [str(entry) for entry in self.policy.forwards()]
        wanted = len(what) == len(fds) and what[:1] == ["proxy"] and all(sockets)
        wanted = wanted and all(name in allowed for name in what[1:])
        if not wanted or self._boxes >= MAX_BOXES:
            self._problem("a box handed over sockets octopoid did not ask for")
            for sock in [*sockets, conn]:
                if sock is not None:
                    sock.close()
            return
        self._boxes += 1
        served = [sock for sock in sockets if sock is not None]
        for sock, name in zip(served, what, strict=True):
            forward = None if name == "proxy" else self.policy.forwards()[allowed.index(name)]
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, ("listener", forward))
        conn.setblocking(False)
        self._selector.register(conn, selectors.EVENT_READ, ("box", served))

    def _box_gone(self, conn: socket.socket, served: list[socket.socket]) -> None:
        """The box's last process closed its end (or wrote to it): stop serving it."""
        for sock in [*served, conn]:
            self._selector.unregister(sock)
            sock.close()

    def _accept(self, listener: socket.socket, forward: Entry | None) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.setblocking(True)
        if self._slots.acquire(blocking=False):
            threading.Thread(target=self._serve, args=(conn, forward), daemon=True).start()
            return
        self._problem(f"more than {self.limits.connections} connections at once")
        if forward is None and self._turning_away.acquire(blocking=False):  # told why, in a
            threading.Thread(target=self._turn_away, args=(conn,), daemon=True).start()
        else:  # thread of its own (never this loop's time), while a few are
            conn.close()

    def _turn_away(self, conn: socket.socket) -> None:
        answer(conn, 503, "too many connections at once")
        conn.close()
        self._turning_away.release()

    # --- one connection --------------------------------------------------------------

    def _serve(self, conn: socket.socket, forward: Entry | None) -> None:
        upstream = None
        self._track(conn)
        try:
            request = (
                read_request(conn, self.limits.head_seconds, self.limits.head_bytes)
                if forward is None
                else Request(str(forward.address), forward.port or 0)
            )
            destination, addresses = self._judge(request.host, request.port)
            upstream = self._connect(addresses, request.port, destination)
            self._track(upstream)
            with self._lock:
                self.reached[destination] = self.reached.get(destination, 0) + 1
            if request.tunnel and forward is None:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            upstream.sendall(request.head + request.rest)
            self._relay(conn, upstream)
        except Refused as exc:
            self._note(exc)
            if forward is None:
                answer(conn, exc.status, exc.why)
        except OSError:
            pass  # either end went away
        finally:
            for sock in (conn, upstream):
                if sock is not None:
                    self._untrack(sock)
            self._slots.release()

    def _judge(self, host: str, port: int) -> tuple[str, list[IPAddress]]:
        """(the destination as the log names it, the addresses it may be connected to), or
        ``Refused``: not on the list, or resolving where only a named address may lead."""
        literal = netpolicy.address_of(host)
        try:
            name = str(literal) if literal is not None else netpolicy.host_name(host)
        except ValueError:
            raise Refused(403, "a host that is no host name") from None
        shown = f"[{name}]" if literal is not None and literal.version == 6 else name
        destination = f"{shown}:{port}"
        if not self.policy.named(name, port):
            why = "not on this box's list (sandbox.network.allow)"
            if literal is not None and not netpolicy.is_public(literal):
                why += f"; {literal} is {netpolicy.kind_of(literal)}"
            raise Refused(403, why, destination)
        addresses = [literal] if literal is not None else _resolve(name, port)
        if not addresses:
            raise Refused(502, f"{destination} does not resolve")
        usable = [addr for addr in addresses if self.policy.reachable(addr, port)]
        if not usable:
            first = addresses[0]
            why = (
                f"it resolves to {first}, {netpolicy.kind_of(first)}; only an address the "
                "list names itself is reached there"
            )
            raise Refused(403, why, destination)
        return destination, usable

    def _connect(self, addresses: list[IPAddress], port: int, destination: str) -> socket.socket:
        error: OSError | None = None
        for addr in addresses:
            try:
                return socket.create_connection((str(addr), port), self.limits.connect_seconds)
            except OSError as exc:
                error = exc
        raise Refused(502, f"could not connect to {destination}: {error}")

    # --- relaying ---------------------------------------------------------------------

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        """Both ways at once, in the kernel (``splice``), until both ends are done."""
        tick = struct.pack("ll", min(TICK_SECONDS, int(self.limits.idle_seconds) or 1), 0)
        stuck = struct.pack("ll", int(self.limits.idle_seconds) or 1, 0)
        for sock in (client, upstream):
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tick)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, stuck)
        tunnel = Tunnel()
        back = threading.Thread(target=self._pump, args=(upstream, client, tunnel), daemon=True)
        back.start()
        self._pump(client, upstream, tunnel)
        back.join()

    def _pump(self, src: socket.socket, dst: socket.socket, tunnel: Tunnel) -> None:
        """``src`` to ``dst``; at ``src``'s end, ``dst`` is told (the other way may go on);
        idle past the limit, over the byte allowance or failing, both ways are cut."""
        pipe_out, pipe_in = os.pipe()
        with contextlib.suppress(OSError):  # fewer, larger moves (the default holds 64 KiB)
            fcntl.fcntl(pipe_in, fcntl.F_SETPIPE_SZ, CHUNK)
        ended = False
        try:
            while True:
                try:
                    n = os.splice(src.fileno(), pipe_in, CHUNK)
                except BlockingIOError:  # a tick of quiet on this side
                    if time.monotonic() - tunnel.last < self.limits.idle_seconds:
                        continue
                    break
                if n == 0:
                    ended = True
                    break
                if not self._spend(n):
                    break
                tunnel.last = time.monotonic()
                while n:
                    n -= os.splice(pipe_out, dst.fileno(), n)
        except OSError:
            pass
        finally:
            os.close(pipe_out)
            os.close(pipe_in)
            cut = ((src, socket.SHUT_RDWR), (dst, socket.SHUT_RDWR))
            for sock, how in ((dst, socket.SHUT_WR),) if ended else cut:
                with contextlib.suppress(OSError):
                    sock.shutdown(how)

    def _spend(self, n: int) -> bool:
        with self._lock:
            self.moved += n
            over = self.moved > self.limits.bytes
        if over:
            self._problem(f"the attempt's {self.limits.bytes} bytes through the proxy were spent")
        return not over

    # --- bookkeeping ------------------------------------------------------------------

    def _note(self, refused: Refused) -> None:
        if refused.destination is None:
            self._problem(refused.why)
            return
        with self._lock:
            if len(self.refused) < MAX_KEPT:
                self.refused.setdefault(refused.destination, refused.why)

    def _problem(self, what: str) -> None:
        with self._lock:
            self.problems[what] = self.problems.get(what, 0) + 1

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._live.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._live.discard(sock)
        sock.close()


def _resolve(name: str, port: int) -> list[IPAddress]:
    """Every address ``name`` resolves to, once (the connection goes to one of these)."""
    try:
        found = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    addresses = (netpolicy.address_of(str(info[4][0])) for info in found)
    return list(dict.fromkeys(addr for addr in addresses if addr is not None))


def _listening(fd: int) -> socket.socket | None:
    """The listening TCP socket a bridge handed over as ``fd``; None (and ``fd`` closed)
    when it is anything else."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return None
    try:
        if (
            sock.type == socket.SOCK_STREAM
            and sock.family in (socket.AF_INET, socket.AF_INET6)
            and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        ):
            return sock
    except OSError:
        pass
    sock.close()
    return None

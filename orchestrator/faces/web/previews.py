"""The review page's doors to previews (``preview/``): a port of its own per preview, on
the address the review page listens on, answered only for a signed-in reviewer.

Why each wall (its own origin, the session checked on every request and its cookie taken
out, one request per connection, our ``Set-Cookie`` names dropped): docs/security.md and
docs/workspace.md ("preview"). The door checks the review page's sessions directly: it
runs in the same process.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .security import Sessions

HEAD_BYTES = 64 * 1024
HEAD_SECONDS = 10.0
CHUNK = 65536
#: Hop-by-hop headers a door writes itself, and the proxy's own.
DROPPED = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"te"}


@dataclass
class Door:
    server: asyncio.base_events.Server
    port: int
    socket: Path  # the preview daemon's


class Doors:
    """The open doors, by task id; ``sessions`` and ``cookie`` are the review page's."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.sessions: Sessions | None = None
        self.cookie = ""
        self.open: dict[str, Door] = {}
        self.review = "/"  # where to sign in: the review page's own URL, once it served one

    def port_of(self, task_id: str) -> int | None:
        door = self.open.get(task_id)
        return door.port if door is not None and door.socket.exists() else None

    async def opening(self, task_id: str, socket: Path) -> int:
        """The door to the preview serving at ``socket`` (opened if need be); its port."""
        door = self.open.get(task_id)
        if door is not None and door.socket == socket:
            return door.port
        await self.closing(task_id)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(task_id, socket, reader, writer)

        server = await asyncio.start_server(serve, self.host, 0, limit=HEAD_BYTES)
        port = server.sockets[0].getsockname()[1]
        self.open[task_id] = Door(server, port, socket)
        return port

    async def closing(self, task_id: str) -> None:
        door = self.open.pop(task_id, None)
        if door is not None:
            door.server.close()

    async def _serve(
        self, task_id: str, socket: Path, reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:  # fmt: skip
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            writer.close()
            return
        lines = head[:-4].split(b"\r\n")
        if self.sessions is None or self.sessions.get(_cookies(lines).get(self.cookie)) is None:
            await _answer(writer, 403, _sign_in(self.review, task_id))
            return
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(socket))
        except OSError:
            await _answer(writer, 502, "<p>This preview has stopped: start it again from its "
                          "task's page.</p>")  # fmt: skip
            await self.closing(task_id)
            return
        up_writer.write(self._request(lines))
        await _relay(reader, writer, up_reader, up_writer, self._response)

    def _request(self, lines: list[bytes]) -> bytes:
        """The request as the preview gets it: the review page's cookies out, one request
        per connection."""
        kept, upgrade = [lines[0]], False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            if key == b"upgrade":
                upgrade = True
            if key == b"cookie":
                value = b";".join(p for p in value.split(b";") if not _is_ours(p, self.cookie))
                if not value.strip():
                    continue
                line = b"Cookie:" + value
            if key not in DROPPED:
                kept.append(line)
        kept.append(b"Connection: upgrade" if upgrade else b"Connection: close")
        return b"\r\n".join(kept) + b"\r\n\r\n"

    def _response(self, head: bytes) -> bytes:
        """The preview's answer, without a ``Set-Cookie`` of the review page's names, and
        the last on its connection (a browser sends no second request past the check)."""
        lines = head[:-4].split(b"\r\n")
        kept, switching = [lines[0]], lines[0].split(b" ")[1:2] == [b"101"]
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            key = name.strip().lower()
            if key == b"set-cookie" and _is_ours(value, self.cookie):
                continue
            if key not in DROPPED or switching:
                kept.append(line)
        if not switching:
            kept.append(b"Connection: close")
        return b"\r\n".join(kept) + b"\r\n\r\n"


def _cookies(lines: list[bytes]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                found.setdefault(key, val)
    return found


def _is_ours(cookie: bytes, name: str) -> bool:
    """A cookie named like the review page's (any ``octopoid_`` one: every server's)."""
    own = cookie.strip().split(b"=", 1)[0].strip().decode("latin-1")
    return own.startswith("octopoid_") or own == name


def _sign_in(review: str, task_id: str) -> str:
    where = html.escape(f"{review.rstrip('/')}/login?next=/tasks/TASK-{task_id}")
    return (
        "<p>This preview is for a signed-in reviewer only: "
        f'<a href="{where}">sign in to the review page</a>, then open it again.</p>'
    )


async def _answer(writer: asyncio.StreamWriter, status: int, body: str) -> None:
    data = f"<!doctype html><title>octopoid preview</title>{body}\n".encode()
    reason = {403: "Forbidden", 502: "Bad Gateway"}[status]
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\nCache-Control: no-store\r\n"
        "\r\n".encode()
        + data
    )
    with contextlib.suppress(OSError):
        await writer.drain()
    writer.close()


async def _relay(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
    response: Callable[[bytes], bytes],
) -> None:  # fmt: skip
    """The request's body up, the answer down (its head through ``response``); once the
    answer has ended, both connections are closed."""

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, head: bool) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            if head:
                dst.write(response(await src.readuntil(b"\r\n\r\n")))
            while data := await src.read(CHUNK):
                dst.write(data)
                await dst.drain()

    up = asyncio.ensure_future(pump(reader, up_writer, False))
    try:
        await pump(up_reader, writer, True)
    finally:
        up.cancel()
        for end in (writer, up_writer):
            with contextlib.suppress(OSError):
                await end.drain()
            end.close()

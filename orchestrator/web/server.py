"""Start the review page: check where it may listen, print its URL, run uvicorn."""

from __future__ import annotations

import socket
from collections.abc import Callable

import uvicorn

from ..exceptions import InvalidInput
from .app import create_app
from .security import check_listen, new_token


def serve(host: str, port: int, token: str | None, announce: Callable[[str], None]) -> None:
    """Serve until interrupted. ``port`` 0 picks a free one; ``announce`` gets the URL (with
    its token) once the socket is bound, so the printed URL always works."""
    check_listen(host, token)
    token = token or new_token()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # port taken, an address this machine does not have, a bad name
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    announce(f"http://{shown}:{sock.getsockname()[1]}/?token={token}")
    server = uvicorn.Server(
        uvicorn.Config(create_app(token), log_level="warning", access_log=False, lifespan="off")
    )
    server.run(sockets=[sock])

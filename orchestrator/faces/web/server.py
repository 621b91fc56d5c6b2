"""Start the review page: find the access token, check where it may listen, print a one-time
sign-in link, run uvicorn."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path

import uvicorn

from ... import config
from ...base.fsutil import durable_rename, write_temp
from ...model.exceptions import InvalidInput
from .app import create_app
from .security import CODE_SECONDS, check_listen

TOKEN_ENV = "OCTOPOID_WEB_TOKEN"
TOKEN_FILE = "web-token"  # in .octopoid/runtime/: the token made when none was given


def chosen_token(option: str | None, path: Path | None) -> str | None:
    """The token the user chose: ``--token-file``, else ``--token``, else $OCTOPOID_WEB_TOKEN;
    None when none was (``serve`` then makes one)."""
    if option is not None and path is not None:
        raise InvalidInput("give --token-file or --token, not both")
    if path is not None:
        return read_token_file(path)
    return option if option is not None else os.environ.get(TOKEN_ENV) or None


def read_token_file(path: Path) -> str:
    """The file's token without its trailing newline; refused, as ssh refuses a key, when
    other users may read the file."""
    try:
        with open(path, encoding="utf-8") as file:
            mode = os.fstat(file.fileno()).st_mode
            if mode & 0o077:
                raise InvalidInput(
                    f"--token-file {path} is open to other users (mode {mode & 0o777:03o}): "
                    f"chmod 600 {path}"
                )
            return file.read().removesuffix("\n")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise InvalidInput(f"cannot read --token-file {path}: {why}") from None


def write_new_token(path: Path) -> str:
    """A new random token, in ``path`` (mode 600, replaced atomically) for the sign-in form."""
    token = secrets.token_urlsafe(24)
    path.parent.mkdir(parents=True, exist_ok=True)
    durable_rename(write_temp(path, f"{token}\n".encode(), mode=0o600), path)
    return token


def serve(host: str, port: int, chosen: str | None, announce: Callable[[str], None]) -> None:
    """Serve until interrupted. ``port`` 0 picks a free one; ``announce`` gets the sign-in
    link once the socket is bound, so the printed link always works. The token itself is
    never printed."""
    check_listen(host, chosen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # port taken, an address this machine does not have, a bad name
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    where = "your access token"
    if chosen is None:
        path = config.get_orchestrator_dir() / TOKEN_FILE
        chosen, where = write_new_token(path), f"the access token in {path}"
    gate = create_app(chosen, host)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    base = f"http://{shown}:{sock.getsockname()[1]}"
    announce(
        f"the link below signs you in once, within {CODE_SECONDS // 60} minutes; "
        f"after that, sign in at {base}/login with {where}"
    )
    announce(f"open {base}/login?code={gate.sessions.issue_code()}")
    server = uvicorn.Server(
        uvicorn.Config(gate, log_level="warning", access_log=False, lifespan="off")
    )
    server.run(sockets=[sock])

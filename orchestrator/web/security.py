"""Who may use the review page: the holder of the access token, and only through its pages.

As Jupyter does, ``octopoid web`` prints a URL with a random token. The first request
carrying it gets the token as an HttpOnly, SameSite=Strict cookie and is redirected to the
same URL without it (so it does not linger in history or a Referer); every later request
must carry the cookie, static files included. Every POST must also carry the CSRF token
the pages embed (derived from the access token, so a restart with the same token keeps
open pages working). A Content-Security-Policy that allows only the page's own scripts is
the second line against an agent's HTML in a diff or log, after escaping.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from ..exceptions import InvalidInput

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]

MIN_TOKEN_CHARS = 16
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


def new_token() -> str:
    return secrets.token_urlsafe(24)


def csrf_for(token: str) -> str:
    return hmac.new(token.encode(), b"octopoid-csrf", hashlib.sha256).hexdigest()


def cookie_name(token: str) -> str:
    """Per-token, so two servers on one host (cookies ignore ports) don't overwrite each other."""
    return "octopoid_" + hashlib.sha256(token.encode()).hexdigest()[:10]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(host: str, token: str | None) -> None:
    """Refuse to serve beyond this machine without a token the user chose and can share."""
    if not host.strip():  # '' binds every interface, and the URL printed would be http://:PORT/
        raise InvalidInput(
            "--host is empty: give an address (127.0.0.1 for this machine only, 0.0.0.0 "
            "with --token for every interface)"
        )
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise InvalidInput(f"--token must be at least {MIN_TOKEN_CHARS} characters")
    if token is None and not is_loopback(host):
        raise InvalidInput(
            f"refusing to listen on {host} without --token: anyone who can reach this "
            "machine could accept and reject tasks (set --token, or OCTOPOID_WEB_TOKEN)"
        )


def same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


def _cookies(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                found[key] = val
    return found


class TokenGate:
    """ASGI middleware: 403 without the token; the token in a query string becomes a cookie."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token, self.cookie = app, token, cookie_name(token)

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        given = dict(query).get("token")
        if given is not None and same(given, self.token) and scope["method"] == "GET":
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            path = "/" + (scope.get("root_path", "") + scope["path"]).lstrip("/")  # not //host
            where = path + (f"?{rest}" if rest else "")
            cookie = f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/"
            await _respond(send, 303, b"", [(b"location", where.encode()), _set(cookie)])
            return
        if not same(_cookies(scope).get(self.cookie), self.token):
            body = b"forbidden: open the URL that `octopoid web` printed (it holds the token)\n"
            await _respond(send, 403, body, [(b"content-type", b"text/plain; charset=utf-8")])
            return

        started = time.perf_counter()

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                took = f"app;dur={(time.perf_counter() - started) * 1000:.1f}".encode()
                extra = [*HEADERS, (b"server-timing", took)]  # what the board bench reads
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        await self.app(scope, receive, with_headers)


def _set(cookie: str) -> tuple[bytes, bytes]:
    return b"set-cookie", cookie.encode()


async def _respond(send: Callable, status: int, body: bytes, headers: list) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers + HEADERS})
    await send({"type": "http.response.body", "body": body})

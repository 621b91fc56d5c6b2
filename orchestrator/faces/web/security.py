"""Who may use the review page: a person who signed in, and only through its pages.

`octopoid web` prints a sign-in link holding a one-time code (good once, for CODE_SECONDS).
Opening it starts a session: a random id in an HttpOnly, SameSite=Strict cookie. After that
the access token signs in through the form at /login, as a password: it never travels in a
URL or a cookie, so it stays out of history, Referers and logs. Sessions live in this
process's memory: they end after SESSION_IDLE_SECONDS unused or SESSION_MAX_SECONDS after
sign-in, on Sign out, and when the server stops. Every POST needs a session and the CSRF
token the pages embed (``csrf_for``). A Content-Security-Policy that allows only the page's
own scripts is the second line against an agent's HTML in a diff or log, after escaping.

Its size: sign-in codes, sessions, CSRF and the security headers are one gate, reviewed
together.
"""

from __future__ import annotations

import collections
import getpass
import hashlib
import hmac
import html
import ipaddress
import re
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from ...model.exceptions import InvalidInput

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]
Clock = Callable[[], float]

MIN_TOKEN_CHARS = 16
#: A printed sign-in link is for the person at the terminal now, not for a later reader.
CODE_SECONDS = 10 * 60
#: A session unused this long (a desk left overnight) signs in again.
SESSION_IDLE_SECONDS = 8 * 3600
#: However busy, a session this old signs in again.
SESSION_MAX_SECONDS = 7 * 24 * 3600
#: Wrong tokens the form takes per window, from anyone: a 16-character token is out of reach
#: of 14,400 guesses a day; a flood locks the form (not sessions, not the link) a minute.
WRONG_TOKENS, WRONG_TOKEN_WINDOW = 10, 60.0
NAME_CHARS = 60  # a reviewer's name, as History shows it
FORM_BYTES = 4096  # the sign-in forms are a token and a name
REVIEWER = "octopoid.reviewer"  # the ASGI scope key the app reads the session's name from
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
SAFE_PATH_RE = re.compile(r"/(?![/\\])[!-~]*")  # this site's path: no //host, no \, no space


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
            "with --token-file for every interface)"
        )
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise InvalidInput(f"the access token must be at least {MIN_TOKEN_CHARS} characters")
    if token is not None and not token.isprintable():
        raise InvalidInput("the access token must be one line of printable characters")
    if token is None and not is_loopback(host):
        raise InvalidInput(
            f"refusing to listen on {host} without --token: anyone who can reach this "
            "machine could accept and reject tasks (set --token-file or OCTOPOID_WEB_TOKEN)"
        )


def same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


def clean_name(raw: str, fallback: str = "reviewer") -> str:
    """A reviewer's name as History will show it: one line of printable text, NAME_CHARS at
    most; ``fallback`` when nothing is left."""
    words = "".join(ch if ch.isprintable() else " " for ch in raw).split()
    return " ".join(words)[:NAME_CHARS].strip() or fallback


def safe_path(raw: str | None) -> str:
    """Where a sign-in may send the browser: a path of this site, else the board."""
    return raw if raw and SAFE_PATH_RE.fullmatch(raw) else "/"


def os_user() -> str:
    """Who started the server: a code sign-in's reviewer (the code was printed to them)."""
    try:
        return clean_name(getpass.getuser())
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (a bare container)
        return "reviewer"


@dataclass
class Session:
    name: str
    started: float
    seen: float


def _key(secret: str) -> str:
    """Codes and session ids are kept hashed: a lookup leaks no timing, a dump no cookie."""
    return hashlib.sha256(secret.encode()).hexdigest()


class Sessions:
    """One-time codes, sessions and the wrong-token count, in memory; ``clock`` is injected
    so tests can pass hours without waiting."""

    def __init__(self, owner: str | None = None, clock: Clock = time.monotonic) -> None:
        self.owner, self.clock = owner or os_user(), clock
        self.codes: dict[str, float] = {}  # hashed code: when it expires
        self.live: dict[str, Session] = {}  # hashed session id: its session
        self.wrong: collections.deque[float] = collections.deque()

    def issue_code(self) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[_key(code)] = self.clock() + CODE_SECONDS
        return code

    def redeem(self, code: str) -> str | None:
        """A new session's id for a code not used and not expired; the code is spent."""
        expires = self.codes.pop(_key(code), None)
        if expires is None or self.clock() >= expires:
            return None
        return self.start(self.owner)

    def start(self, name: str) -> str:
        now = self.clock()
        self.codes = {k: t for k, t in self.codes.items() if now < t}
        self.live = {k: s for k, s in self.live.items() if self._fresh(s, now)}
        session_id = secrets.token_urlsafe(32)
        self.live[_key(session_id)] = Session(clean_name(name, self.owner), now, now)
        return session_id

    def get(self, session_id: str | None) -> Session | None:
        """The live session this id names (and now it was used), or None."""
        key = _key(session_id or "")
        session, now = self.live.get(key), self.clock()
        if session is None or not self._fresh(session, now):
            self.live.pop(key, None)
            return None
        session.seen = now
        return session

    def end(self, session_id: str | None) -> None:
        self.live.pop(_key(session_id or ""), None)

    def may_try(self) -> bool:
        """False while the form has taken WRONG_TOKENS wrong tokens within the window."""
        while self.wrong and self.wrong[0] <= self.clock() - WRONG_TOKEN_WINDOW:
            self.wrong.popleft()
        return len(self.wrong) < WRONG_TOKENS

    def count_wrong(self) -> None:
        self.wrong.append(self.clock())

    @staticmethod
    def _fresh(session: Session, now: float) -> bool:
        return (
            now - session.seen < SESSION_IDLE_SECONDS
            and now - session.started < SESSION_MAX_SECONDS
        )


class TokenGate:
    """ASGI middleware: serves /login, /logout and /whoami itself; anything else needs a live
    session and gets its reviewer's name in ``scope[REVIEWER]``."""

    def __init__(self, app: ASGIApp, token: str, sessions: Sessions | None = None) -> None:
        self.app, self.token, self.cookie = app, token, cookie_name(token)
        self.csrf, self.sessions = csrf_for(token), sessions or Sessions()

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/login":
            await self._login(scope, receive, send)
            return
        session_id = _cookies(scope).get(self.cookie)
        session = self.sessions.get(session_id)
        if session is None:
            await self._refuse(scope, send, had_one=session_id is not None)
        elif scope["path"] in ("/logout", "/whoami"):
            await self._own(scope, receive, send, session_id, session)
        else:
            scope[REVIEWER] = session.name
            await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Callable, send: Callable) -> None:
        started = time.perf_counter()

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                took = f"app;dur={(time.perf_counter() - started) * 1000:.1f}".encode()
                extra = [*HEADERS, (b"server-timing", took)]  # what the board bench reads
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        await self.app(scope, receive, with_headers)

    async def _login(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["method"] != "POST":
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            code = query.get("code")
            if code is None:
                await _page(send, 200, sign_in_page("", safe_path(query.get("next"))))
            elif (session_id := self.sessions.redeem(code)) is not None:
                await self._signed_in(send, session_id, "/")
            else:
                said = "This sign-in link was used already, has expired, or is not this server's."
                await _page(send, 403, sign_in_page(said, "/"))
            return
        form = await _form(receive)
        typed, where = form.get("name", ""), safe_path(form.get("next"))
        if not _same_origin(scope):
            await _page(send, 403, sign_in_page("Sign-in from another site refused.", where))
        elif not self.sessions.may_try():
            said = "Too many wrong tokens: the form takes none for a minute."
            await _page(send, 429, sign_in_page(said, where, typed))
        elif not same(form.get("token"), self.token):
            self.sessions.count_wrong()
            await _page(send, 403, sign_in_page("Wrong access token.", where, typed))
        else:
            self.sessions.end(_cookies(scope).get(self.cookie))
            await self._signed_in(send, self.sessions.start(typed), where)

    async def _signed_in(self, send: Callable, session_id: str, where: str) -> None:
        cookie = f"{session_id}; Max-Age={SESSION_MAX_SECONDS}"
        await _redirect(send, where, self._cookie(cookie))

    def _cookie(self, value: str) -> tuple[bytes, bytes]:
        cookie = f"{self.cookie}={value}; HttpOnly; SameSite=Strict; Path=/"
        return b"set-cookie", cookie.encode()

    async def _refuse(self, scope: Scope, send: Callable, had_one: bool) -> None:
        """No session: the sign-in form (403). An ended one: GETs sign in again and come
        back; a POST's form is lost, so it says why (403)."""
        query = scope.get("query_string", b"").decode("latin-1")
        here = safe_path(scope["path"] + (f"?{query}" if query else ""))
        if had_one and scope["method"] == "GET":
            asked = dict(scope.get("headers", []))
            if b"hx-request" in asked:  # the board's poll: its whole page signs in again
                page = urlsplit(asked.get(b"hx-current-url", b"/").decode("latin-1")).path
                back = "/login?" + urlencode({"next": safe_path(page)})
                await _respond(send, 403, b"", [(b"hx-redirect", back.encode())])
            else:
                await _redirect(send, "/login?" + urlencode({"next": here}))
            return
        said = (
            "Your session has ended (signed out, expired, or the server restarted): "
            "sign in again, then repeat what you did."
            if had_one
            else "Sign in: open the link `octopoid web` printed, or give its access token."
        )
        await _page(send, 403, sign_in_page(said, here if scope["method"] == "GET" else "/"))

    async def _own(
        self, scope: Scope, receive: Callable, send: Callable, session_id: str | None,
        session: Session,
    ) -> None:  # fmt: skip
        """/whoami shows the session's name (and Sign out); its POSTs change the name and
        end the session, with the pages' CSRF token."""
        if scope["method"] != "POST":
            await _page(send, 200, whoami_page(session.name, self.csrf))
            return
        form = await _form(receive)
        if not same(form.get("csrf"), self.csrf):
            body = b"forbidden: bad or missing CSRF token; reload the page\n"
            await _respond(send, 403, body, [(b"content-type", b"text/plain; charset=utf-8")])
        elif scope["path"] == "/logout":
            self.sessions.end(session_id)
            await _redirect(send, "/login", self._cookie("; Max-Age=0"))
        else:
            session.name = clean_name(form.get("name", ""), session.name)
            await _redirect(send, "/whoami")


def _cookies(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                found[key] = val
    return found


def _same_origin(scope: Scope) -> bool:
    """A browser says where a form came from: Sec-Fetch-Site, and Origin unless the page's
    no-referrer policy made it "null". A form from another site may not sign in."""
    headers = dict(scope.get("headers", []))
    origin = headers.get(b"origin", b"null").decode("latin-1")
    host = headers.get(b"host", b"").decode("latin-1")
    return headers.get(b"sec-fetch-site", b"same-origin") in (b"same-origin", b"none") and (
        origin == "null" or urlsplit(origin).netloc == host
    )


async def _form(receive: Callable) -> dict[str, str]:
    """A small url-encoded form; a larger body is no form of ours (read as empty)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body") or len(body) > FORM_BYTES:
            break
    if len(body) > FORM_BYTES:
        return {}
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:26em;margin:3em auto;color:#1d1f23}"
    "label{display:block;margin:.6em 0}input{font:inherit;width:100%;box-sizing:border-box}"
    ".said{background:#fde8e8;border:1px solid #e0a0a0;padding:.4em .7em;border-radius:4px}"
    "button{font:inherit;padding:.3em 1em}"
)


def _shell(title: str, body: str) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{STYLE}</style></head><body><h1>{title}</h1>{body}</body></html>"
    )


def sign_in_page(said: str, where: str, name: str = "") -> str:
    """The sign-in form; ``said`` why it is shown. The token is never filled back in."""
    e = html.escape
    said_html = f'<p class="said">{e(said)}</p>' if said else ""
    return _shell(
        "octopoid: sign in",
        f'{said_html}<form method="post" action="/login">'
        f'<input type="hidden" name="next" value="{e(where)}">'
        '<label>Access token <input type="password" name="token" required '
        'autocomplete="current-password" autofocus></label>'
        f'<label>Your name (optional) <input name="name" maxlength="{NAME_CHARS}" '
        f'value="{e(name)}"></label><button>Sign in</button></form>'
        "<p>The access token is the one <code>octopoid web</code> was given (--token-file, "
        "OCTOPOID_WEB_TOKEN or --token), or the one it wrote to "
        "<code>.octopoid/runtime/web-token</code>.</p>",
    )


def whoami_page(name: str, csrf: str) -> str:
    e = html.escape
    hidden = f'<input type="hidden" name="csrf" value="{e(csrf)}">'
    return _shell(
        "octopoid: you",
        f"<p>Signed in as <strong>{e(name)}</strong>.</p>"
        f'<form method="post" action="/whoami">{hidden}<label>Your name '
        f'<input name="name" maxlength="{NAME_CHARS}" value="{e(name)}"></label>'
        "<button>Change</button></form>"
        f'<form method="post" action="/logout">{hidden}<p><button>Sign out</button></p></form>'
        '<p><a href="/">Back to the board</a></p>',
    )


async def _page(send: Callable, status: int, page: str) -> None:
    await _respond(send, status, page.encode(), [(b"content-type", b"text/html; charset=utf-8")])


async def _redirect(send: Callable, where: str, *headers: tuple[bytes, bytes]) -> None:
    await _respond(send, 303, b"", [(b"location", where.encode()), *headers])


async def _respond(send: Callable, status: int, body: bytes, headers: list) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers + HEADERS})
    await send({"type": "http.response.body", "body": body})

"""Signing in to the review page (#24): a one-time link, sessions, where the token comes from.

A real `octopoid web` process and urllib for what a person meets; the gate called in-process
with a clock the test turns for what takes minutes or days (codes and sessions expiring,
the wrong-token limit). Chromium's history is checked in tests/e2e/test_web_signin.py.
"""

from __future__ import annotations

import asyncio
import getpass
import html
import re
import subprocess
from pathlib import Path

import pytest

from orchestrator.faces.web import security
from orchestrator.faces.web.security import (
    CODE_SECONDS,
    REVIEWER,
    SESSION_IDLE_SECONDS,
    SESSION_MAX_SECONDS,
    WRONG_TOKEN_WINDOW,
    WRONG_TOKENS,
    Sessions,
    TokenGate,
    cookie_name,
)

from .support import OCTOPOID, child_env
from .web_server import Client, WebServer, start_web

TOKEN = "a-chosen-token-0123456789"


def path_of(url: str) -> str:
    return "/" + url.split("/", 3)[3]


def signed_in(client: Client) -> bool:
    return client.request("/")[0] == 200


def test_the_printed_link_signs_in_once(web) -> None:
    first, second = Client(web.base), Client(web.base)
    status, headers, _ = first.request(path_of(web.sign_in_url))
    assert status == 303 and headers["location"] == "/" and signed_in(first)
    status, _, page = second.request(path_of(web.sign_in_url))
    assert status == 403 and "used already" in page and 'name="token"' in page
    assert not signed_in(second)
    assert Client(web.base).request("/login?code=" + "x" * 32)[0] == 403


def test_a_wrong_token_gets_the_form_again_and_the_right_one_signs_in(web) -> None:
    client = Client(web.base)
    status, _, page = client.request("/login", {"token": web.token[:-1] + "?", "name": "Ada"})
    assert status == 403 and "Wrong access token" in page
    assert 'name="token" required' in page and 'value="Ada"' in page
    assert not signed_in(client)
    client.login(web.token)
    assert signed_in(client)


def test_a_form_from_another_site_cannot_sign_in(web) -> None:
    client = Client(web.base)
    form = {"token": web.token}
    for elsewhere in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        status, _, page = client.request("/login", form, elsewhere)
        assert status == 403 and "another site" in page and not signed_in(client)
    status, _, _ = client.request("/login", form, {"Origin": web.base})
    assert status == 303 and signed_in(client)


def test_the_token_is_in_no_url_cookie_header_or_page(web) -> None:
    """A whole visit: the link, pages, a wrong and a right sign-in, Sign out. The token never
    comes back from the server, and the old ``?token=`` URL signs no one in."""
    assert web.token not in web.sign_in_url and web.token not in web.printed
    client, seen = Client(web.base), []
    seen.append(client.request(path_of(web.sign_in_url)))
    for path in ("/", "/board", "/whoami", "/tasks/TASK-1", "/static/htmx.min.js", "/login"):
        seen.append(client.request(path))
    seen.append(client.request("/login", {"token": "wrong-" + web.token}))
    seen.append(client.request("/login", {"token": web.token, "next": "/board"}))
    seen.append(client.request("/logout", {"csrf": client.csrf()}))
    seen.append(client.request("/"))
    statuses = " ".join(str(status) for status, _, _ in seen)
    assert statuses == "303 200 200 200 404 200 200 403 303 303 403"
    for status, headers, body in seen:
        assert web.token not in str(headers) and web.token not in body, status
        assert "script-src 'self'" in headers["content-security-policy"]
    assert all(web.token not in (c.name + c.value) for c in client.jar)
    assert Client(web.base).request(f"/?token={web.token}")[0] == 403


def test_the_session_cookie_is_a_session_id_not_the_token(web) -> None:
    client = Client(web.base)
    _, headers, _ = client.request(path_of(web.sign_in_url))
    name, value = headers["set-cookie"].split(";", 1)[0].split("=", 1)
    assert name == cookie_name(web.token) and len(value) >= 40 and value != web.token
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]


def test_sign_out_ends_the_session_on_the_server(web) -> None:
    client = web.client()
    cookie = next(iter(client.jar))
    kept = {"Cookie": f"{cookie.name}={cookie.value}"}
    status, _, _ = client.request("/logout", {"csrf": "0" * 64})
    assert status == 403 and signed_in(client)  # no CSRF token: still signed in
    status, headers, _ = client.request("/logout", {"csrf": client.csrf()})
    assert status == 303 and headers["location"] == "/login"
    assert "Max-Age=0" in headers["set-cookie"] and not signed_in(client)
    replay = Client(web.base)  # the old cookie, sent again by hand
    status, headers, _ = replay.request("/tasks/TASK-1?tab=diff", headers=kept)
    assert status == 303 and headers["location"] == "/login?next=%2Ftasks%2FTASK-1%3Ftab%3Ddiff"
    status, _, page = replay.request("/enqueue", {"title": "x"}, headers=kept)
    assert status == 403 and "session has ended" in page


def test_the_reviewer_s_name_is_one_clean_line(web) -> None:
    client = Client(web.base)
    client.request(path_of(web.sign_in_url))
    assert f"Signed in as <strong>{getpass.getuser()}</strong>" in client.request("/whoami")[2]
    client = Client(web.base)
    client.login(web.token, name="Ada\n<b>Lovelace</b>\x1b[31m\u202e" + "x" * 100)
    name = re.search(r"Signed in as <strong>(.*?)</strong>", client.request("/whoami")[2])
    assert name and name.group(1).startswith("Ada &lt;b&gt;Lovelace&lt;/b&gt; [31m xxx")
    assert len(html.unescape(name.group(1))) == security.NAME_CHARS
    status, _, _ = client.request("/whoami", {"csrf": client.csrf(), "name": " Grace\tHopper "})
    assert status == 303 and "<strong>Grace Hopper</strong>" in client.request("/whoami")[2]
    assert client.request("/whoami", {"name": "Mallory"})[0] == 403  # no CSRF token


def test_a_token_file_others_can_read_is_refused(git_project: Path, tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    secret.chmod(0o644)
    for args, says in (
        (["--token-file", str(secret)], f"chmod 600 {secret}"),
        (["--token-file", str(tmp_path / "none")], "No such file"),
        (["--token-file", str(secret), "--token", TOKEN], "not both"),
    ):
        done = subprocess.run(
            [OCTOPOID, "web", "--port", "0", *args],
            env=child_env(git_project), capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert done.returncode == 2 and says in done.stderr, done
        assert done.stderr.count("\n") == 1 and done.stdout == ""
        assert TOKEN not in done.stderr


def cmdline(server: WebServer) -> bytes:
    return Path(f"/proc/{server.proc.pid}/cmdline").read_bytes()


@pytest.mark.parametrize("how", ["file", "environment", "option"])
def test_a_token_by_file_or_environment_is_not_in_ps(git_project: Path, how: str) -> None:
    secret = git_project / "token"
    secret.write_text(TOKEN + "\n")
    secret.chmod(0o600)
    server = start_web(
        git_project,
        *{"file": ["--token-file", "token"], "option": ["--token", TOKEN]}.get(how, []),
        env={"OCTOPOID_WEB_TOKEN": TOKEN} if how == "environment" else None,
    )
    try:
        assert server.token == TOKEN and signed_in(server.client())
        assert (TOKEN.encode() in cmdline(server)) is (how == "option")  # what ps shows
        assert not (git_project / ".octopoid/runtime/web-token").exists()
    finally:
        server.stop()


def test_without_a_token_it_writes_one_only_its_user_can_read(git_project: Path) -> None:
    server = start_web(git_project)
    try:
        path = git_project / ".octopoid/runtime/web-token"
        assert path.stat().st_mode & 0o777 == 0o600
        assert str(path) in server.printed and server.token not in server.printed
        assert path.read_text() == server.token + "\n" and len(server.token) >= 32
        assert server.token.encode() not in cmdline(server)
        assert signed_in(server.client())
    finally:
        server.stop()
    restarted = start_web(git_project)  # a new token each start: the old one signs no one in
    try:
        assert restarted.token != server.token
        assert Client(restarted.base).request("/login", {"token": server.token})[0] == 403
    finally:
        restarted.stop()


# --- in-process, with a clock the test turns ---------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def reviewer(scope, receive, send) -> None:
    """The app behind the gate: says whose session it runs for."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": scope[REVIEWER].encode()})


def call(gate: TokenGate, method: str, target: str, headers=(), form: str = ""):
    path, _, query = target.partition("?")
    scope = {
        "type": "http", "method": method, "path": path, "query_string": query.encode(),
        "headers": [(k.encode(), v.encode()) for k, v in headers], "root_path": "",
    }  # fmt: skip
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": form.encode(), "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(gate(scope, receive, send))
    body = b"".join(m.get("body", b"") for m in sent[1:]).decode()
    return sent[0]["status"], dict(sent[0]["headers"]), body


def session_of(headers: dict) -> tuple[str, str]:
    return ("cookie", headers[b"set-cookie"].decode().split(";", 1)[0])


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def gate(clock: Clock) -> TokenGate:
    return TokenGate(reviewer, TOKEN, Sessions("ada", clock))


def test_a_code_expires_unused(gate: TokenGate, clock: Clock) -> None:
    late, in_time = gate.sessions.issue_code(), gate.sessions.issue_code()
    clock.now += CODE_SECONDS - 1
    status, headers, _ = call(gate, "GET", f"/login?code={in_time}")
    assert status == 303 and call(gate, "GET", "/", [session_of(headers)])[2] == "ada"
    clock.now += 1
    status, _, page = call(gate, "GET", f"/login?code={late}")
    assert status == 403 and "has expired" in page


def test_an_idle_session_signs_in_again(gate: TokenGate, clock: Clock) -> None:
    _, headers, _ = call(gate, "POST", "/login", form=f"token={TOKEN}&name=Grace")
    cookie = session_of(headers)
    for _ in range(3):  # used within the idle limit: alive
        clock.now += SESSION_IDLE_SECONDS - 1
        assert call(gate, "GET", "/", [cookie])[::2] == (200, "Grace")
    clock.now += SESSION_IDLE_SECONDS
    status, headers, _ = call(gate, "GET", "/board", [cookie])
    assert status == 303 and headers[b"location"] == b"/login?next=%2Fboard"
    status, _, page = call(gate, "POST", "/tasks/TASK-1/accept", [cookie])
    assert status == 403 and "session has ended" in page


def test_a_busy_session_still_ends_after_its_days(gate: TokenGate, clock: Clock) -> None:
    _, headers, _ = call(gate, "POST", "/login", form=f"token={TOKEN}")
    cookie = session_of(headers)
    while clock.now + SESSION_IDLE_SECONDS / 2 < 1000 + SESSION_MAX_SECONDS:
        clock.now += SESSION_IDLE_SECONDS / 2
        assert call(gate, "GET", "/", [cookie])[0] == 200
    clock.now += SESSION_IDLE_SECONDS / 2
    assert call(gate, "GET", "/", [cookie])[0] == 303
    poll = [cookie, ("hx-request", "true"), ("hx-current-url", "http://h/tasks/TASK-2?tab=d")]
    status, headers, _ = call(gate, "GET", "/board", poll)  # the board's poll: whole page
    assert status == 403 and headers[b"hx-redirect"] == b"/login?next=%2Ftasks%2FTASK-2"


def test_wrong_tokens_lock_the_form_for_a_while(gate: TokenGate, clock: Clock) -> None:
    for _ in range(WRONG_TOKENS):
        assert call(gate, "POST", "/login", form="token=guess-0123456789abcdef")[0] == 403
    status, _, page = call(gate, "POST", "/login", form=f"token={TOKEN}")
    assert status == 429 and "Too many wrong tokens" in page
    clock.now += WRONG_TOKEN_WINDOW
    assert call(gate, "POST", "/login", form=f"token={TOKEN}")[0] == 303


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("  Ada   Lovelace ", "Ada Lovelace"),
        ("a\nb\r\nc\x00d", "a b c d"),
        ("\u202eevil\u200b", "evil"),
        ("é" * 80, "é" * 60),
        ("\n\t ", "reviewer"),
    ],
)
def test_clean_name(raw: str, clean: str) -> None:
    assert security.clean_name(raw) == clean

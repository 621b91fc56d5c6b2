"""`octopoid web` as a real subprocess, or its own ``serve`` on a thread of the test's process
(what the pages do, without a process's start-up), and a plain HTTP client that keeps its
cookie."""

from __future__ import annotations

import functools
import http.cookiejar
import itertools
import os
import re
import selectors
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from .support import OCTOPOID, child_env

URL_RE = re.compile(r"(http://\S+)/login\?code=(\S+)")


@dataclass
class WebServer:
    sign_in_url: str  # the printed link, with its one-time code
    base: str
    token: str  # the access token, for the sign-in form
    printed: str  # what it printed before its link
    stop: Callable[[], None]  # ends the process, or the thread and its server
    proc: subprocess.Popen | None = None  # the process (None: served by this one)

    def client(self) -> Client:
        """A new client signed in through the form (the printed link works only once)."""
        client = Client(self.base)
        client.login(self.token)
        return client


def start_web(
    root: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> WebServer:
    """Start `octopoid web --port 0` in ``root`` (``env`` added to its environment) and read
    the sign-in link it prints; ``token`` is the one given, or the one it wrote."""
    proc = subprocess.Popen(
        [OCTOPOID, "web", "--port", "0", *args],
        cwd=root,
        env={**child_env(root), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline, seen = time.monotonic() + timeout, b""
    while time.monotonic() < deadline:  # raw reads: a buffered readline hides a 2nd line
        match = URL_RE.search(seen[: seen.rfind(b"\n") + 1].decode())
        if match:
            token, printed = _token_of(root, args, env), seen.decode()
            stop = functools.partial(_end, proc)
            return WebServer(match.group(0), match.group(1), token, printed, stop, proc)
        if selector.select(timeout=0.2):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.kill()
    proc.wait()
    raise AssertionError(f"octopoid web did not print its URL:\n{seen.decode()}")


def _end(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve_here(root: Path, timeout: float = 30) -> WebServer:
    """`octopoid web --port 0`'s own ``serve`` (token written, link announced, uvicorn) on a
    thread of this process, for ``root`` (the test's OCTOPOID_ROOT and cwd): the pages as
    the command serves them, without its process's start-up (1.2-1.4 s under the suite,
    a hundred times over). What only a process shows (its argv, memory, signals, options)
    is proved through ``start_web``."""
    import uvicorn

    from orchestrator.faces.web import server as web

    made: list[uvicorn.Server] = []
    lines: list[str] = []
    failed: list[BaseException] = []
    ready = threading.Event()

    class Held(uvicorn.Server):
        """uvicorn's server, kept where the test can tell it to stop."""

        def __init__(self, config: uvicorn.Config) -> None:
            super().__init__(config)
            made.append(self)
            ready.set()

    def run() -> None:
        try:
            web.serve("127.0.0.1", 0, None, lambda line: lines.append(f"octopoid web: {line}\n"))
        except BaseException as exc:  # shown by the test, not lost on a thread
            failed.append(exc)
        finally:
            ready.set()

    real, web.uvicorn = web.uvicorn, SimpleNamespace(Server=Held, Config=uvicorn.Config)
    thread = threading.Thread(target=run, name="octopoid web", daemon=True)
    try:
        thread.start()
        ready.wait(timeout)
    finally:
        web.uvicorn = real
    assert made and not failed, f"octopoid web did not start: {failed or lines}"
    match = URL_RE.search("".join(lines))

    def stop() -> None:
        made[0].should_exit = True
        thread.join(10)
        made[0].force_exit = True  # a request still streaming, as terminate() would end it
        thread.join(30)
        assert not thread.is_alive(), "octopoid web's thread did not stop"

    token = _token_of(root, (), None)
    return WebServer(match.group(0), match.group(1), token, "".join(lines), stop)


def _token_of(root: Path, args: tuple[str, ...], env: dict[str, str] | None) -> str:
    """The token ``octopoid web`` was given by ``args`` or ``env``, or else wrote for itself."""
    given = dict(itertools.pairwise(args))
    if "--token-file" in given:
        return (root / given["--token-file"]).read_text().removesuffix("\n")
    if "--token" in given:
        return given["--token"]
    if env and env.get("OCTOPOID_WEB_TOKEN"):
        return env["OCTOPOID_WEB_TOKEN"]
    return (root / ".octopoid/runtime/web-token").read_text().strip()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # keep 303s visible to the test
        return None


class Client:
    """urllib with a cookie jar; ``follow`` False shows redirects as responses."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect()
        )

    def request(
        self, path: str, form: dict | list | None = None, headers: dict | None = None
    ) -> tuple[int, dict, str]:
        data = urllib.parse.urlencode(form, doseq=True).encode() if form is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(req, timeout=30) as resp:
                return resp.status, dict(resp.headers), resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read().decode()

    def login(self, token: str, name: str = "") -> None:
        """Sign in through the form, as a person does once the printed link is used."""
        status, _, page = self.request("/login", {"token": token, "name": name})
        assert status == 303, (status, page[:300])

    def csrf(self) -> str:
        _, _, page = self.request("/")
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert match, page[:500]
        return match.group(1)

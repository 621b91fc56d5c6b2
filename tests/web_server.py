"""`octopoid web` as a real subprocess, and a plain HTTP client that keeps its cookie."""

from __future__ import annotations

import http.cookiejar
import re
import selectors
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .conftest import child_env

OCTOPOID = shutil.which("octopoid") or "octopoid"
URL_RE = re.compile(r"(http://\S+/\?token=(\S+))")


@dataclass
class WebServer:
    proc: subprocess.Popen
    url: str  # with the token
    base: str
    token: str

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_web(root: Path, *args: str, timeout: float = 30) -> WebServer:
    """Start `octopoid web --port 0` in ``root`` and read the URL it prints."""
    proc = subprocess.Popen(
        [OCTOPOID, "web", "--port", "0", *args],
        cwd=root,
        env=child_env(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline, seen = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        if not selector.select(timeout=0.2):
            if proc.poll() is not None:
                break
            continue
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        match = URL_RE.search(line)
        if match:
            url, token = match.groups()
            base = url.split("/?", 1)[0]
            return WebServer(proc, url, base, token)
    proc.kill()
    raise AssertionError(f"octopoid web did not print its URL:\n{seen}{proc.stdout.read()}")


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

    def login(self, token: str) -> None:
        status, _, _ = self.request(f"/?token={token}")
        assert status == 303, status

    def csrf(self) -> str:
        _, _, page = self.request("/")
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert match, page[:500]
        return match.group(1)

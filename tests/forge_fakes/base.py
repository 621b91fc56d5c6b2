"""What the GitHub and GitLab fakes share: the HTTP thread, routing, tokens, ETags, faults,
the request log, pagination and the bare git repository the PRs live in.

A fake is a real HTTP server on 127.0.0.1 (a `ThreadingHTTPServer` in a daemon thread) so the
real client libraries talk to it over sockets, exactly as they talk to a forge. Its state sits
behind one lock, shared by request handlers and by the test-side methods that act as people
and CI.

Shared test-side API (on both servers):
- ``fail_next(n, status=502)``: the next n requests are answered with that status.
- ``rate_limit_next(n, retry_after=1)``: the next n requests are answered as the forge
  answers when rate-limited (each subclass says how).
- ``force_push(login, branch, files, message=..., parent=None)``: a person writes a commit
  (``files``: path -> text) on ``parent`` (default: the branch tip) and moves the ref.
- ``log`` (list of ``Logged(method, path, status, login)``) and ``not_modified`` (304 count).
- ``errors``: a route that raised is answered 500 and its traceback kept here (the fixtures
  fail a test that leaves any), so a bug in the fake is never mistaken for a forge's 5xx.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, Self
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from ..support import serve_in_thread

#: what closes an issue when a pull request that says it merges into the default branch
CLOSING_RE = re.compile(r"(?i)\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s+#(\d+)\b")
#: the one form of a time GitHub documents for its ``since`` parameters
SINCE_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def closes(description: str) -> set[int]:
    """The issue numbers a pull request's description closes on merge."""
    return {int(n) for n in CLOSING_RE.findall(description or "")}


def now_iso() -> str:
    """Seconds precision with a Z, as both forges write timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class LineNote:
    """A reviewer's line comment. ``side`` is GitHub's LEFT (old file) or RIGHT (new file);
    ``start_line`` makes it a range."""

    path: str
    line: int
    body: str
    side: str = "RIGHT"
    start_line: int | None = None


class Logged(NamedTuple):
    method: str
    path: str
    status: int
    login: str | None


@dataclass
class Request:
    method: str
    path: str  # still percent-encoded, so a GitLab project path "g%2Fp" stays one segment
    query: dict[str, str]
    body: Any
    headers: Any
    login: str | None
    base: str  # http://127.0.0.1:PORT, for absolute URLs in Link headers and redirects


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # JSON-able, or str for text/plain
    headers: dict[str, str] = field(default_factory=dict)


class HTTPError(Exception):
    """Raised by a route to answer with an error body in the forge's shape."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.reply = Reply(status, body, headers or {})


Route = tuple[str, str, Callable[..., Reply | Any]]


class BareRepo:
    """The remote octopoid pushes to: read refs, merge, and write a person's commits with git
    plumbing in the bare repository itself (no clone needed)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def git(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            check=False,
        )
        if check and done.returncode:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def sha(self, branch: str) -> str | None:
        return self.git("rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False) or None

    def resolve(self, ref: str) -> str | None:
        """A branch name or a (full) sha, as the forges accept for ``{ref}``."""
        return self.sha(ref) or (ref if re.fullmatch(r"[0-9a-f]{40}", ref) else None)

    def mergeable(self, base: str, head: str) -> bool:
        done = subprocess.run(
            ["git", "-C", str(self.path), "merge-tree", "--write-tree", base, head],
            capture_output=True,
            check=False,
        )
        return done.returncode == 0

    def merge(self, base: str, head_sha: str, message: str, login: str) -> str | None:
        """Merge ``head_sha`` into branch ``base`` with a merge commit (``--no-ff``); None on a
        conflict. ``update-ref`` with the old value refuses a base that moved meanwhile."""
        old = self.sha(base)
        tree = self.git("merge-tree", "--write-tree", old or "", head_sha, check=False)
        if not old or not re.fullmatch(r"[0-9a-f]{40}", tree):
            return None
        sha = self.git(
            "commit-tree", tree, "-p", old, "-p", head_sha, "-m", message, env=_as(login)
        )
        self.git("update-ref", f"refs/heads/{base}", sha, old)
        return sha

    def land(self, base: str, head_sha: str, method: str, message: str, login: str) -> str | None:
        """Merge ``head_sha`` into ``base`` as a forge's merge button does: ``merge`` (a merge
        commit), ``squash`` (one commit of the head's changes on the base) or ``rebase``
        (each commit replayed on the base, as ``login``); the new tip, None on a conflict."""
        if method == "merge":
            return self.merge(base, head_sha, message, login)
        old = self.sha(base)
        if not old:
            return None
        if method == "squash":
            tree = self.git("merge-tree", "--write-tree", old, head_sha, check=False)
            if not re.fullmatch(r"[0-9a-f]{40}", tree):
                return None
            tip = self.git("commit-tree", tree, "-p", old, "-m", message, env=_as(login))
        else:
            tip = self._replay(old, head_sha, login)
            if tip is None:
                return None
        self.git("update-ref", f"refs/heads/{base}", tip, old)
        return tip

    def _replay(self, onto: str, head_sha: str, login: str) -> str | None:
        """The commits of ``head_sha`` the base lacks, replayed on ``onto`` (their patches
        applied to a scratch index: a bare repository has no worktree to cherry-pick in)."""
        picks = self.git("rev-list", "--reverse", "--no-merges", f"{onto}..{head_sha}").split()
        tip = onto
        for pick in picks:
            patch = self.git("diff-tree", "-p", "--binary", f"{pick}^", pick)
            with tempfile.TemporaryDirectory() as tmp:
                env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
                self.git("read-tree", tip, env=env)
                applied = subprocess.run(
                    ["git", "-C", str(self.path), "apply", "--cached", "-"],
                    input=patch + "\n", text=True, capture_output=True,
                    env={**os.environ, **env}, check=False,
                )  # fmt: skip
                if applied.returncode:
                    return None
                tree = self.git("write-tree", env=env)
            author = self.git("log", "-1", "--format=%an%x00%ae%x00%aI%x00%B", pick).split("\0")
            who = {**_as(login), "GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1],
                   "GIT_AUTHOR_DATE": author[2]}  # fmt: skip
            tip = self.git("commit-tree", tree, "-p", tip, "-m", author[3].strip() or "-", env=who)
        return tip

    def commit(
        self, login: str, branch: str, files: dict[str, str], message: str, parent: str | None
    ) -> str:
        """Write ``files`` over ``parent``'s tree as ``login`` and point ``branch`` at it."""
        parent = parent or self.sha(branch)
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **_as(login)}
            if parent:
                self.git("read-tree", parent, env=env)
            for path, text in files.items():
                blob = self._blob(text)
                self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self.git("write-tree", env=env)
        sha = self.git(
            "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message, env=env
        )
        self.git("update-ref", f"refs/heads/{branch}", sha)
        return sha

    def _blob(self, text: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), "hash-object", "-w", "--stdin"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()


def _as(login: str) -> dict[str, str]:
    email = f"{login}@users.noreply.example"
    return {
        "GIT_AUTHOR_NAME": login,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": login,
        "GIT_COMMITTER_EMAIL": email,
    }


def etag_of(data: bytes) -> str:
    return '"' + hashlib.sha256(data).hexdigest()[:40] + '"'


class ForgeServer:
    """The HTTP mechanics. A subclass gives ``routes()`` (method, regex over the encoded path,
    handler(req, **groups)), ``login_of(headers)``, ``unauthorized()``, ``failure(status)``,
    ``rate_limited(retry_after)`` and ``default_per_page``; handlers return JSON-able data, a
    str (text/plain) or a ``Reply``, or raise ``HTTPError``."""

    default_per_page = 30
    gitlab_page_headers = False

    def __init__(self, bare: Path, users: dict[str, str]) -> None:
        self.remote = BareRepo(bare)
        self.users = dict(users)  # token -> login
        self.lock = threading.RLock()
        self.log: list[Logged] = []
        self.not_modified = 0
        self.errors: list[str] = []  # tracebacks of the fake's own bugs; fixtures assert none
        self._faults: deque[Callable[[], Reply]] = deque()
        self._routes = [(m, re.compile(p + r"/?"), h) for m, p, h in self.routes()]
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = serve_in_thread(self._httpd)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- test-side
    def fail_next(self, n: int, status: int = 502) -> None:
        with self.lock:
            self._faults.extend([lambda: self.failure(status)] * n)

    def rate_limit_next(self, n: int, retry_after: int = 1) -> None:
        with self.lock:
            self._faults.extend([lambda: self.rate_limited(retry_after)] * n)

    def force_push(
        self,
        login: str,
        branch: str,
        files: dict[str, str],
        message: str = "A person's change",
        parent: str | None = None,
    ) -> str:
        with self.lock:
            return self.remote.commit(login, branch, files, message, parent)

    # -- subclass hooks
    def routes(self) -> Iterable[Route]:
        raise NotImplementedError

    def login_of(self, headers: Any) -> str | None:
        raise NotImplementedError

    def unauthorized(self) -> Reply:
        raise NotImplementedError

    def failure(self, status: int) -> Reply:
        raise NotImplementedError

    def rate_limited(self, retry_after: int) -> Reply:
        raise NotImplementedError

    def common_headers(self) -> dict[str, str]:
        return {}

    # -- mechanics
    def paginate(self, req: Request, items: list[Any]) -> Reply:
        """``per_page``/``page`` with a ``Link`` header (both forges), and GitLab's ``x-*``."""
        per_page = min(int(req.query.get("per_page", self.default_per_page)), 100)
        page = max(int(req.query.get("page", 1)), 1)
        last = max((len(items) + per_page - 1) // per_page, 1)
        links = {"first": 1, "last": last}
        if page < last:
            links["next"] = page + 1
        if page > 1:
            links["prev"] = page - 1
        url = req.base + req.path
        link = ", ".join(
            f'<{url}?{urlencode({**req.query, "page": n, "per_page": per_page})}>; rel="{rel}"'
            for rel, n in links.items()
        )
        headers = {"Link": link}
        if self.gitlab_page_headers:
            headers |= {
                "x-page": str(page),
                "x-per-page": str(per_page),
                "x-total": str(len(items)),
                "x-total-pages": str(last),
                "x-next-page": str(page + 1) if page < last else "",
                "x-prev-page": str(page - 1) if page > 1 else "",
            }
        return Reply(200, items[(page - 1) * per_page : page * per_page], headers)

    def dispatch(self, method: str, raw: str, headers: Any, body: Any) -> Reply:
        parts = urlsplit(raw)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        with self.lock:
            login = self.login_of(headers)
            found = [
                (h, m) for v, p, h in self._routes if v == method and (m := p.fullmatch(parts.path))
            ]
            if not found:
                return Reply(404, {"message": "Not Found"})
            handler, match = found[0]
            public = getattr(handler, "public", False)
            if self._faults and not public:
                return self._faults.popleft()()
            if login is None and not public:
                return self.unauthorized()
            req = Request(method, parts.path, query, body, headers, login, _base(headers))
            args = {k: unquote(v) for k, v in match.groupdict().items()}
            try:
                out = handler(req, **args)
            except HTTPError as err:
                return err.reply
            except Exception as exc:  # a bug in the fake: a 500 the test can see, not a hang
                self.errors.append(f"{method} {raw}: {traceback.format_exc()}")
                return Reply(500, {"message": f"fake forge error: {exc!r}"})
        return out if isinstance(out, Reply) else Reply(201 if method == "POST" else 200, out)

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = dict(parse_qsl(raw.decode()))
        reply = self.dispatch(handler.command, handler.path, handler.headers, body)
        headers = {**self.common_headers(), **reply.headers}
        if isinstance(reply.body, str):
            data, kind = reply.body.encode(), "text/plain; charset=utf-8"
        elif reply.body is None:
            data, kind = b"", ""
        else:
            data, kind = json.dumps(reply.body).encode(), "application/json; charset=utf-8"
        status = reply.status
        if handler.command == "GET" and status == 200:
            headers["ETag"] = etag_of(data)
            wanted = handler.headers.get("If-None-Match", "")
            if headers["ETag"] in [t.strip().removeprefix("W/") for t in wanted.split(",")]:
                status, data = 304, b""
                with self.lock:
                    self.not_modified += 1
        with self.lock:
            self.log.append(
                Logged(handler.command, handler.path, status, self.login_of(handler.headers))
            )
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        if kind and status != 304:
            handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


def public(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a route that needs no token and takes no fault (a signed blob URL)."""
    handler.public = True  # type: ignore[attr-defined]
    return handler


def _base(headers: Any) -> str:
    return f"http://{headers.get('Host', '127.0.0.1')}"


def _handler_for(server: ForgeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the clients' connection pools expect
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed ACK

        def log_message(self, *args: Any) -> None:  # the request log is ``server.log``
            pass

        def _any(self) -> None:
            server.answer(self)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

    return Handler


def epoch_in(seconds: int) -> int:
    return int(time.time()) + seconds

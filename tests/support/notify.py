"""Where alerts land in a test: a webhook on 127.0.0.1 that apprise's JSON notifier posts to."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import serve_in_thread, wait_for


class Hook:
    """A webhook on 127.0.0.1 that records every POST; ``hold`` makes it stall first."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.hold = threading.Event()
        self.hold.set()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hook.hold.wait(120)  # a stalled endpoint: longer than any pass here takes
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.posts.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # read timeout (rto) past the stall: a slow pass on a loaded machine must not turn
        # the stalled endpoint into a failing one (apprise gives up after 4 s by default)
        self.url = f"json://127.0.0.1:{self.server.server_address[1]}/hook?rto=150"
        serve_in_thread(self.server)

    def wait_for(self, count: int, timeout: float = 20) -> list[dict]:
        wait_for(f"{count} posts", lambda: len(self.posts) >= count, timeout)
        return self.posts

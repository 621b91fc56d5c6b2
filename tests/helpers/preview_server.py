"""A dev server for previews: the working folder's files on $OCTOPOID_PORT, and at
/headers the request's own headers (what a preview's server is shown of the reviewer)."""

import http.server
import os


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/headers":
            super().do_GET()
            return
        body = str(self.headers).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Set-Cookie", "octopoid_0123456789=planted; Path=/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(
    ("127.0.0.1", int(os.environ["OCTOPOID_PORT"])), Handler
).serve_forever()

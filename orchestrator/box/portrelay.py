"""A preview box's end of its one way in (``preview/daemon.py``), run in the box before the
preview's server.

A preview box has a network namespace of its own (``preview.network``: none unless it
says), so nothing outside can connect to the server it starts on ``$OCTOPOID_PORT``. This
relay (the standard library only, on the runner's Python with ``-I -S``) connects out to
the preview's daemon over the Unix socket bound into the box, says ``ready`` once the
server accepts connections, and then takes the connections the daemon hands it
(``SCM_RIGHTS``: the review page's, after its sign-in) and carries each to the server on
the box's own loopback. It ends with the server, or when the daemon goes.

    python -I -S portrelay.py SOCKET PORT -- PROGRAM [ARG ...]
"""

import contextlib
import socket
import subprocess
import sys
import threading
import time

CHUNK = 65536
POLL_SECONDS = 0.1


def pump(src, dst):
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        with contextlib.suppress(OSError):
            sock.shutdown(how)


def carry(client, port):
    """One connection handed over, to the server and back, until both ends are done."""
    try:
        server = socket.create_connection(("127.0.0.1", port), 10)
    except OSError:
        client.close()
        return
    server.settimeout(None)
    back = threading.Thread(target=pump, args=(server, client), daemon=True)
    back.start()
    pump(client, server)
    back.join()
    client.close()
    server.close()


def announce_ready(daemon, port, program):
    """``ready`` to the daemon once the server accepts, unless it ended first."""
    while program.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
        except OSError:
            time.sleep(POLL_SECONDS)
            continue
        with contextlib.suppress(OSError):
            daemon.sendall(b"ready\n")
        return


def serve(daemon, port):
    """Take handed-over connections until the daemon closes its end."""
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(daemon, 16, 8)
        except OSError:
            return
        if not message and not fds:
            return
        for fd in fds:
            client = socket.socket(fileno=fd)
            threading.Thread(target=carry, args=(client, port), daemon=True).start()


def main(argv):
    try:
        split = argv.index("--")
        path, port, program = argv[1], int(argv[2]), argv[split + 1 :]
    except (ValueError, IndexError):
        program = []
    if not program:
        print("usage: portrelay.py SOCKET PORT -- PROGRAM [ARG ...]", file=sys.stderr)
        return 2
    daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        daemon.connect(path)
        server = subprocess.Popen(program, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"[octopoid] the preview cannot start: {exc}", file=sys.stderr)
        return 127
    threading.Thread(target=announce_ready, args=(daemon, port, server), daemon=True).start()
    served = threading.Thread(target=serve, args=(daemon, port), daemon=True)
    served.start()
    while server.poll() is None and served.is_alive():
        time.sleep(POLL_SECONDS)
    if server.poll() is None:  # the daemon went: so does the server
        server.terminate()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv))

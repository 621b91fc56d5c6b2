"""Try to reach a server from inside a box: ``net_probe.py HOST PORT`` straight, or
``net_probe.py - - 'REQUEST LINE'`` through the box's proxy, spoken to directly as an
attacker would (no client's NO_PROXY). Prints ``reached`` (exit 0) or ``refused (why)``
(exit 1)."""

import os
import socket
import sys


def fetch(host: str, port: int, line: str | None = None) -> None:
    """One request; raises unless it is answered 200."""
    if line is not None:
        host, port = "127.0.0.1", int(os.environ["HTTP_PROXY"].rsplit(":", 1)[1])
    with socket.create_connection((host, port), 5) as conn:
        conn.sendall(f"{line or 'GET / HTTP/1.0'}\r\nHost: x\r\n\r\n".encode())
        status = conn.recv(200).split(b"\r\n", 1)[0].decode()
    if " 200 " not in f"{status} ":
        raise PermissionError(status)


if __name__ == "__main__":
    host, port, *line = sys.argv[1:]
    try:
        fetch(host, 0 if port == "-" else int(port), line[0] if line else None)
    except Exception as exc:
        print(f"refused ({type(exc).__name__}: {exc})")
        sys.exit(1)
    print("reached")

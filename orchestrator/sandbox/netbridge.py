"""The box's end of its network (``network: allow``), run in the box before the program.

It runs on the runner's Python with ``-I -S`` and imports only what the interpreter has
built in (``_socket``, ``_struct``, ``os``): it is on the way of every start, and Python's
own start is most of its cost. It opens the box's listening sockets on the box's own
loopback: one for the proxy (its port goes into ``HTTP_PROXY`` and the like) and one per
loopback address and port the list names (``127.0.0.1:8123`` in the box is then this
machine's). It hands them to the runner's proxy over the Unix socket bound into the box
(``SCM_RIGHTS``, ``proxy.py``) and becomes the program (``exec``): nothing of it keeps
running in the box, and every connection made to those sockets is accepted and judged by
the runner. The connection to the runner is left open in the program, so the runner sees
when the last process of the box is gone and closes what it served for it.

    python -I -S netbridge.py SOCKET [FORWARD ...] -- PROGRAM [ARG ...]
"""

import _socket
import _struct
import os
import sys

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
#: The box's own loopback is its own (a test server the agent starts): no proxy for it.
LOCAL = "localhost,127.0.0.1,::1"


def listen(address: str) -> _socket.socket:
    """A listening socket on ``address`` (``127.0.0.1:0``, ``[::1]:8123``) in this box."""
    host, _, port = address.rpartition(":")
    family = _socket.AF_INET6 if host.startswith("[") else _socket.AF_INET
    sock = _socket.socket(family, _socket.SOCK_STREAM)
    sock.bind((host.strip("[]"), int(port)))
    sock.listen(128)
    return sock


def hand_over(path: str, sockets: list, forwards: list) -> _socket.socket:
    """Send the listening sockets to the runner, with what each is for (one line each)."""
    runner = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    runner.connect(path)
    fds = [sock.fileno() for sock in sockets]
    rights = _struct.pack(f"{len(fds)}i", *fds)
    lines = "".join(f"{what}\n" for what in ["proxy", *forwards]).encode()
    runner.sendmsg([lines], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    return runner


def main(argv: list) -> int:
    try:
        split = argv.index("--")
    except ValueError:
        print("usage: netbridge.py SOCKET [FORWARD ...] -- PROGRAM [ARG ...]", file=sys.stderr)
        return 2
    path, forwards, program = argv[1], argv[2:split], argv[split + 1 :]
    env = dict(os.environ)
    try:
        proxy = listen("127.0.0.1:0")
        sockets = [proxy, *(listen(address) for address in forwards)]
        runner = hand_over(path, sockets, forwards)
    except OSError as exc:  # the box runs on, with no way out at all
        print(f"[octopoid] the box has no network: {exc}", file=sys.stderr)
    else:
        os.set_inheritable(runner.fileno(), True)
        url = f"http://127.0.0.1:{proxy.getsockname()[1]}"
        env.update(dict.fromkeys(PROXY_VARS, url), NO_PROXY=LOCAL, no_proxy=LOCAL)
        env["NODE_USE_ENV_PROXY"] = "1"  # Node's own fetch ignores the variables without it
        for sock in sockets:
            sock.close()
    try:
        os.execvpe(program[0], program, env)
    except (OSError, IndexError) as exc:
        print(f"[octopoid] cannot run {program[:1]}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The box's end of its network (``network: allow``), run in the box before the program.

It runs on the runner's Python with ``-I -S`` and imports only two of the interpreter's own
C modules (``_socket``, ``posix``; not even ``os``): it is on the way of every start, and
Python's own start is most of its cost. What it does (opens the box's listening sockets,
hands them to the runner's proxy, becomes the program): docs/security.md, "The network".
The connection to the runner is left open in the program, so the runner sees when the
last process of the box is gone and closes what it served for it.

    python -I -S netbridge.py SOCKET [FORWARD ...] -- PROGRAM [ARG ...]
"""

import _socket
import posix
import sys

PROXY_VARS = (b"HTTP_PROXY", b"HTTPS_PROXY", b"ALL_PROXY", b"http_proxy", b"https_proxy",
              b"all_proxy")  # fmt: skip
#: The box's own loopback is its own (a test server the agent starts): no proxy for it.
LOCAL = b"localhost,127.0.0.1,::1"


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
    rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)  # C ints
    lines = "".join(f"{what}\n" for what in ["proxy", *forwards]).encode()
    runner.sendmsg([lines], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    return runner


def run(program: list, env: dict) -> None:
    """Become ``program``, found on the box's PATH as a shell would."""
    name = program[0]
    path = env.get(b"PATH", b"/usr/bin:/bin").decode(errors="surrogateescape")
    places = [name] if "/" in name else [f"{p or '.'}/{name}" for p in path.split(":")]
    error: OSError = FileNotFoundError(f"{name}: not found")
    for place in places:
        try:
            posix.execve(place, program, env)
        except FileNotFoundError:
            continue
        except OSError as exc:  # the first reason other than "not here" is the one to say
            error = exc if isinstance(error, FileNotFoundError) else error
    raise error


#: What the bridge says, and its exit status, when the program cannot be run at all: the
#: runner reads that as the box's own complaint, as it reads bwrap's (``backends.process``).
CANNOT_RUN_SAYS, CANNOT_RUN_STATUS = "[octopoid] cannot run ", 127


def main(argv: list) -> int:
    try:
        split = argv.index("--")
        path, forwards, program = argv[1], argv[2:split], argv[split + 1 :]
    except (ValueError, IndexError):
        split, program = 0, []
    if not program:
        print("usage: netbridge.py SOCKET [FORWARD ...] -- PROGRAM [ARG ...]", file=sys.stderr)
        return 2
    env = dict(posix.environ)
    try:
        proxy = listen("127.0.0.1:0")
        sockets = [proxy, *(listen(address) for address in forwards)]
        runner = hand_over(path, sockets, forwards)
    except OSError as exc:  # the program runs on, with no way out at all
        print(f"[octopoid] the box has no network: {exc}", file=sys.stderr)
    else:
        posix.set_inheritable(runner.fileno(), True)
        url = f"http://127.0.0.1:{proxy.getsockname()[1]}".encode()
        env.update(dict.fromkeys(PROXY_VARS, url))
        env.update({b"NO_PROXY": LOCAL, b"no_proxy": LOCAL})
        env[b"NODE_USE_ENV_PROXY"] = b"1"  # Node's own fetch ignores the variables without it
        for sock in sockets:
            sock.close()
    try:
        run(program, env)
    except OSError as exc:
        print(f"{CANNOT_RUN_SAYS}{program[0]}: {exc}", file=sys.stderr)
    return CANNOT_RUN_STATUS


if __name__ == "__main__":
    sys.exit(main(sys.argv))

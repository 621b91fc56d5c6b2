"""Each running attempt's own range of ports (``OCTOPOID_PORT``, ``OCTOPOID_PORTS``).

Two attempts that start the same dev server on ``$OCTOPOID_PORT`` never clash: a range is
held by an ``flock`` on a file named after its first port, in a folder this machine's
runners share, for as long as the process that reserved it lives (a runner, a preview),
and taken only where every port of it can be bound now (another user's server, or any
program's, is stepped around). With ``network: allow`` or ``none`` a box has a loopback
of its own, so its ports cannot clash with anyone's anyway; the range is still its own,
so ``$OCTOPOID_PORT`` means one thing in every mode, and a preview's relay reaches it.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path

from ..model import defaults
from ..model.exceptions import OctopoidError
from .locks import try_flock
from .processes import is_private

PORT_ENV, PORTS_ENV = "OCTOPOID_PORT", "OCTOPOID_PORTS"


@dataclass
class PortRange:
    first: int
    count: int
    _fd: int | None = None

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def env(self) -> dict[str, str]:
        return {PORT_ENV: str(self.first), PORTS_ENV: f"{self.first}-{self.last}"}

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the flock goes with it
            self._fd = None


def reserve(
    count: int, low: int = defaults.PORTS_LOW, high: int = defaults.PORTS_HIGH
) -> PortRange:
    """A range of ``count`` ports held for this process until ``release`` (or its exit);
    ``OctopoidError`` when every range is held or busy."""
    # one folder per user on this machine, whatever TMPDIR says: every runner of the
    # user's (any project) sees every range held
    folder = _private(Path(f"/tmp/octopoid-ports-{os.getuid()}"))
    slots = list(range(low, high - count + 2, count))
    start = random.randrange(len(slots))  # runners starting together try different slots
    for first in slots[start:] + slots[:start]:
        fd = try_flock(folder / f"{first}.lock")
        if fd is None:
            continue
        if all(_free(port) for port in range(first, first + count)):
            return PortRange(first, count, fd)
        os.close(fd)
    raise OctopoidError(f"no free range of {count} ports between {low} and {high}")


def _free(port: int) -> bool:
    """Whether a server could listen on ``port`` of this machine's loopback now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _private(folder: Path) -> Path:
    """``folder``, made if need be, and ``is_private``."""
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    if not is_private(folder):
        raise OctopoidError(f"{folder} is not a private folder of this user's: remove it")
    return folder

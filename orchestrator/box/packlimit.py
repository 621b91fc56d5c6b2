"""Relay a boxed ``git upload-pack`` to the fetch that reads a branch back, within bounds.

``python packlimit.py MAX_BYTES MAX_OBJECTS -- ARGV... REPO`` runs ARGV (the box and its
``git upload-pack``; git appends the repository) with the fetch's stdin, and copies its
output to the fetch until it has sent MAX_BYTES in all, or the pack it starts says it
holds more than MAX_OBJECTS objects (protocol v2: the pack header, in band 1 after the
``packfile`` line). Then it kills the box, says why on stderr (which the fetch passes on)
and exits 1, so the fetch stops before ``index-pack`` takes in the rest: a pack of
gigabytes of zeros, or of millions of objects, costs the host no more than the bounds.

Standard library only, run by path: the relay must start in milliseconds, and imports
nothing of octopoid.
"""

from __future__ import annotations

import os
import subprocess
import sys

REFUSED = "octopoid refused the read-back:"  # the first words of its line on stderr
PACK_HEADER = 12  # "PACK", version, number of objects (4 bytes each, big-endian)


class Relay:
    """What the relay has seen of upload-pack's output: bytes, pkt-lines, the pack header."""

    def __init__(self, max_bytes: int, max_objects: int) -> None:
        self.max_bytes, self.max_objects = max_bytes, max_objects
        self.sent = 0
        self.pending = b""  # an incomplete pkt-line
        self.in_pack = False
        self.header = b""
        self.parsing = True  # off once the stream is not pkt-lines (git will say so)

    def feed(self, chunk: bytes) -> str | None:
        """Take ``chunk``; why the read-back must stop, or None."""
        self.sent += len(chunk)
        if self.sent > self.max_bytes:
            return f"the branch sent over {self.max_bytes} bytes (sandbox.max_pack_bytes)"
        if not self.parsing:
            return None
        self.pending += chunk
        while len(self.pending) >= 4:
            try:
                size = int(self.pending[:4], 16)
            except ValueError:
                self.parsing = False
                return None
            if size < 4:  # flush (0000), delim (0001), response end (0002)
                self.pending = self.pending[4:]
                self.in_pack = self.in_pack and size != 0
                continue
            if len(self.pending) < size:
                return None
            line, self.pending = self.pending[4:size], self.pending[size:]
            if (why := self._line(line)) is not None:
                return why
        return None

    def _line(self, line: bytes) -> str | None:
        if not self.in_pack:
            self.in_pack = line == b"packfile\n"
            return None
        if line[:1] != b"\x01" or len(self.header) >= PACK_HEADER:
            return None
        self.header += line[1 : 1 + PACK_HEADER - len(self.header)]
        if len(self.header) < PACK_HEADER:
            return None
        count = int.from_bytes(self.header[8:12], "big")
        if count > self.max_objects:
            over = f"over {self.max_objects} (sandbox.max_objects)"
            return f"the branch holds {count} new objects, {over}"
        return None


def main(argv: list[str]) -> int:
    max_bytes, max_objects, dashes, *command = argv
    if dashes != "--" or not command:
        print("usage: packlimit.py MAX_BYTES MAX_OBJECTS -- ARGV...", file=sys.stderr)
        return 2
    relay = Relay(int(max_bytes), int(max_objects))
    child = subprocess.Popen(command, stdout=subprocess.PIPE)
    out = sys.stdout.buffer
    while chunk := os.read(child.stdout.fileno(), 1 << 16):  # type: ignore[union-attr]
        why = relay.feed(chunk)
        if why is not None:
            child.kill()
            child.wait()
            print(f"{REFUSED} {why}", file=sys.stderr, flush=True)
            return 1
        try:
            out.write(chunk)
            out.flush()
        except BrokenPipeError:  # the fetch gave up: so does the box
            child.kill()
            child.wait()
            return 1
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
